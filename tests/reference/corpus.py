#!/usr/bin/env python3
"""Builds the deterministic tokenizer test corpus (no downloads, fixed seed).

build_corpus() returns a list of documents, each a dict:
  name     a short label ("code-python-3", "edge-contractions", ...)
  text     the document as bytes (a few are deliberately not valid UTF-8)
  special  whether the document is also tokenized with special-token parsing on

The corpus covers source code in several languages, prose in Latin, Cyrillic, Greek, CJK,
Hangul, Arabic, Hebrew, Devanagari, Thai and Vietnamese, accents and combining marks, emoji with
ZWJ sequences, skin tones and flags, whitespace runs (spaces, tabs, newlines, CR LF, Unicode
spaces), digits and long numbers, chat special-token strings embedded in text, random code
points from every plane (including characters new in Unicode 15 and 15.1, private use and
unassigned ones) and invalid UTF-8. Its total size is at least 1 MB.

Run `python3 tests/reference/corpus.py` to print a summary.
"""

import random

SEED = 20241129
TARGET_BYTES = 1_050_000

# ---------------------------------------------------------------------------------------------
# Word lists (written for this corpus).

ENGLISH = (
    "the of and to in is that it was for on are as with his they at be this from have or by "
    "one had not but what all were when we there can an your which their said if do will each "
    "about how up out them then she many some so these would other into has more her two like "
    "him see time could no make than first been its who now people my made over did down only "
    "way find use may water long little very after words called just where most know get "
    "through back much before go good new write our used me man too any day same right look "
    "think also around another came come work three word must because does part even place well "
    "tokenizer server request latency throughput cache prefix decode prefill batch kernel model "
    "weights quantized matrix vector attention rotary embedding softmax sampler temperature"
).split()
ENGLISH_CAPS = ["The", "A", "In", "It", "We", "They", "I", "You", "She", "He", "This", "When",
                "Why", "How", "OpenAI", "DeepSeek", "SmolLM", "HTTP", "JSON", "GPU", "CPU", "NASA",
                "McDonald", "iPhone", "eBay", "LLaMA", "O'Reilly", "ALL-CAPS", "CamelCase"]
CONTRACTIONS = ["I'm", "you're", "they'll", "we've", "he'd", "it's", "don't", "can't", "won't",
                "isn't", "I'M", "YOU'RE", "IT'S", "she'S", "we'Ve", "y'all", "'tis", "rock'n'roll",
                "o'clock", "Ma'am", "'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "''", "'''"]
FRENCH = ("été déjà où garçon français naïve cœur œuvre Noël hôpital forêt île château "
          "crème brûlée à très bientôt élève Québec ça s'il vous plaît l'école qu'il").split()
GERMAN = ("Straße Größe Übung Äpfel Öl schön müssen Fußgängerübergang Donaudampfschifffahrt "
          "über Mädchen weiß Käse Bücher").split()
SPANISH = ("niño año mañana señor corazón canción ¿Qué tal? ¡Hola! pingüino acción "
           "él está aquí").split()
NORDIC = "smørrebrød Ærø Åland fjörður þorn ðæt Øresund kærlighed".split()
POLISH_CZECH = "zażółć gęślą jaźń Łódź Žluťoučký kůň úpěl ďábelské ódy Dvořák".split()
TURKISH = "İstanbul ılık ışık Iğdır şeker çiçek öğretmen ğ İ ı".split()
VIETNAMESE = "Tiếng Việt người phở Hà Nội cảm ơn nhiều Đà Nẵng thương yêu".split()
RUSSIAN = ("привет мир съешь же ещё этих мягких французских булок да выпей чаю Москва "
           "Ёлка ЪЬ программирование токенизатор").split()
UKRAINIAN = "Ґанок їжак європейський Київ дякую".split()
GREEK = ("Γειά σου κόσμε ξεσκεπάζω την ψυχοφθόρα βδελυγμία αλφάβητο Ελλάδα ΑΘΗΝΑ "
         "ς σ Σ ΐ ΰ").split()
ARMENIAN_GEORGIAN = "Բարեւ Հայաստան გამარჯობა საქართველო".split()
CHINESE = ("我们 你好 世界 今天 天气 很好 学习 中文 人工智能 机器学习 自然语言处理 分词器 "
           "模型 推理 服务器 北京 上海 長城 漢字 繁體字 简体字 一二三 龍 㐀 𠀀 𪚥").split()
JAPANESE = ("こんにちは 世界 ありがとう ございます カタカナ ひらがな 日本語 東京 "
            "ｶﾀｶﾅ トークナイザー ラーメン を ゐ ゑ ー 〜 。、").split()
KOREAN = "안녕하세요 세계 감사합니다 한국어 서울 토크나이저 ㄱㄴㄷ 가나다라 똠방각하".split()
ARABIC = ("مرحبا بالعالم السلام عليكم اللغة العربية كتاب مدرسة شكرا جزيلا "
          "١٢٣٤٥ ٦٧٨٩٠ القرآن ـــ").split()
PERSIAN_URDU = "سلام دنیا فارسی ۱۲۳۴ اردو پاکستان".split()
HEBREW = "שלום עולם עברית תודה רבה ירושלים סֵפֶר בְּרֵאשִׁית".split()
HINDI = ("नमस्ते दुनिया हिन्दी भाषा धन्यवाद भारत क्षत्रिय ज्ञान श्री "
         "०१२३४५६७८९ संस्कृतम्").split()
BENGALI_TAMIL = "বাংলা ভাষা ১২৩ தமிழ் வணக்கம் ௧௨௩ తెలుగు ಕನ್ನಡ".split()
THAI = "สวัสดี ภาษาไทย ขอบคุณ กรุงเทพมหานคร ๑๒๓".split()
MISC_SCRIPTS = "ᚠᚢᚦᚨᚱ ⴰⵣⵓⵍ ᐊᐃᑦ ꦗꦮ 𓀀𓁐 𐌰𐌱𐌲 ܐܒܓ ދިވެހި ᠮᠣᠩᠭᠣᠯ ཀཁག ሰላም ᏣᎳᎩ".split()
MATH = "∀x∈ℝ: x²≥0 ∑ᵢ aᵢ ∫₀^∞ e^(−x²) dx = √π/2 ≠ ≤ ≥ ∞ ∂ ∇ ⊗ ⊕ ℵ₀ ½ ¾ ⅓ Ⅻ ⅷ ① ⑳ 𝔸 𝕏 𝟘𝟙".split()
SYMBOLS = "© ® ™ § ¶ † ‡ • … ‰ ′ ″ ‹ › « » “ ” ‘ ’ „ ‚ — – ¿ ¡ € £ ¥ ₹ ₩ ₿ ¢ ¤ ° ± × ÷".split()
EMOJI = ["😀", "😂", "🥲", "❤️", "👍", "👍🏻", "👍🏽", "👍🏿", "🙏🏾", "👋🏼", "🔥", "✨", "🎉",
         "🚀", "🤖", "🧠", "💡", "⭐", "☕", "🍕", "🐍", "🦀", "🐧", "🌍", "🌏", "⚡", "✅", "❌",
         "⚠️", "‼️", "#️⃣", "1️⃣", "©️", "👨‍👩‍👧‍👦", "👩‍💻", "🧑🏽‍🚀", "👨🏿‍🦰", "🏳️‍🌈", "🏴‍☠️",
         "❤️‍🔥", "🫱🏻‍🫲🏿", "👁️‍🗨️", "🇺🇸", "🇯🇵", "🇩🇪", "🇮🇳", "🇧🇷", "🏴󠁧󠁢󠁳󠁣󠁴󠁿", "🫠", "🪿",
         "🫎", "🩷", "🐦‍🔥", "🍋‍🟩", "🙂‍↔️"]
SPECIAL_STRINGS = ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<repo_name>", "<reponame>",
                   "<file_sep>", "<filename>", "<gh_stars>", "<issue_start>", "<issue_comment>",
                   "<issue_closed>", "<jupyter_start>", "<jupyter_text>", "<jupyter_code>",
                   "<jupyter_output>", "<jupyter_script>", "<empty_output>", "<|im_start",
                   "im_end|>", "<|", "|>", "<s>", "</s>", "<unk>", "[INST]", "<<SYS>>",
                   "<|eot_id|>", "<｜begin▁of▁sentence｜>", "<｜User｜>"]
UNICODE_SPACES = ["\u00a0", "\u1680", "\u2000", "\u2002", "\u2003", "\u2009", "\u200a",
                  "\u202f", "\u205f", "\u3000", "\u2028", "\u2029", "\u0085", "\u180e",
                  "\u200b", "\u200c", "\u200d", "\u2060", "\ufeff", "\x0b", "\x0c", "\x1c",
                  "\x1d", "\x1e", "\x1f"]
SCRIPT_WORDS = [FRENCH, GERMAN, SPANISH, NORDIC, POLISH_CZECH, TURKISH, VIETNAMESE, RUSSIAN,
                UKRAINIAN, GREEK, ARMENIAN_GEORGIAN, CHINESE, JAPANESE, KOREAN, ARABIC,
                PERSIAN_URDU, HEBREW, HINDI, BENGALI_TAMIL, THAI, MISC_SCRIPTS, MATH, SYMBOLS]


# ---------------------------------------------------------------------------------------------
# Generators. Each takes the shared Random and returns text of roughly `size` characters.


def ident(rng):
    parts = [rng.choice(ENGLISH) for _ in range(rng.randint(1, 3))]
    style = rng.randrange(4)
    if style == 0:
        return "_".join(parts)
    if style == 1:
        return parts[0] + "".join(p.capitalize() for p in parts[1:])
    if style == 2:
        return "".join(p.capitalize() for p in parts)
    return "_".join(parts).upper()


def number(rng):
    kind = rng.randrange(10)
    if kind == 0:
        return str(rng.randint(0, 9))
    if kind == 1:
        return str(rng.randint(10, 99999))
    if kind == 2:
        return str(rng.getrandbits(rng.randint(40, 200)))
    if kind == 3:
        return f"{rng.uniform(-1e6, 1e6):.{rng.randint(1, 9)}f}"
    if kind == 4:
        return f"{rng.random():.3e}"
    if kind == 5:
        return f"0x{rng.getrandbits(32):08X}"
    if kind == 6:
        return f"{rng.randint(1, 999)},{rng.randint(0, 999):03d},{rng.randint(0, 999):03d}"
    if kind == 7:
        return f"{rng.randint(1900, 2100)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
    if kind == 8:
        return f"+1 ({rng.randint(200, 999)}) {rng.randint(100, 999)}-{rng.randint(0, 9999):04d}"
    return "".join(rng.choice("0123456789") for _ in range(rng.randint(20, 80)))


def code_python(rng):
    name = ident(rng).lower()
    lines = [f"def {name}({ident(rng).lower()}, {ident(rng).lower()}=None):",
             f'    """{rng.choice(ENGLISH_CAPS)} {" ".join(rng.choices(ENGLISH, k=8))}."""']
    for _ in range(rng.randint(3, 12)):
        indent = "    " * rng.randint(1, 3)
        choice = rng.randrange(6)
        if choice == 0:
            lines.append(f"{indent}{ident(rng).lower()} = {number(rng)}")
        elif choice == 1:
            lines.append(f"{indent}if {ident(rng).lower()} >= {number(rng)}:")
        elif choice == 2:
            lines.append(f"{indent}for i, x in enumerate({ident(rng).lower()}[1:-1]):")
        elif choice == 3:
            lines.append(f"{indent}print(f\"{{x!r}}: {rng.choice(ENGLISH)} {{i:>4d}}\")")
        elif choice == 4:
            lines.append(f"{indent}return {{'{ident(rng)}': [{number(rng)}, None, True]}}")
        else:
            lines.append(f"{indent}# {' '.join(rng.choices(ENGLISH, k=6))}")
    return "\n".join(lines) + "\n\n"


def code_cpp(rng):
    cls = ident(rng).replace("_", "").capitalize() or "Foo"
    out = [f"#include <{rng.choice(['vector', 'string', 'memory', 'cstdint', 'algorithm'])}>",
           f"namespace {ident(rng).lower()} {{", f"class {cls} final {{", " public:",
           f"  explicit {cls}(int32_t n) : n_(n) {{}}",
           f"  std::vector<float> {ident(rng)}(const std::string& s) const {{",
           "    std::vector<float> out;",
           f"    for (size_t i = 0; i < s.size(); ++i) out.push_back(s[i] * {number(rng)}f);",
           "    return out;  // NOLINT", "  }", " private:", "  int32_t n_ = 0;", "};",
           f"}}  // namespace\n"]
    if rng.random() < 0.5:
        out.append(f"template <typename T>\nT* Get(T** p) {{ return p && *p ? *p : nullptr; }}\n")
    return "\n".join(out)


def code_rust(rng):
    return (f"fn {ident(rng).lower()}(v: &[u8]) -> Result<Vec<u32>, String> {{\n"
            f"    let mut out = Vec::with_capacity(v.len());\n"
            f"    for (i, &b) in v.iter().enumerate() {{\n"
            f"        if b > {rng.randint(0, 255)} {{ return Err(format!(\"bad byte {{b:#x}} at {{i}}\")); }}\n"
            f"        out.push(u32::from(b) << {rng.randint(1, 24)});\n"
            f"    }}\n    Ok(out)\n}}\n\n")


def code_js(rng):
    return (f"const {ident(rng)} = async ({ident(rng).lower()}) => {{\n"
            f"  const res = await fetch(`/api/v1/${{id}}?q=${{encodeURIComponent('{rng.choice(ENGLISH)}')}}`);\n"
            f"  if (!res.ok) throw new Error(\"HTTP \" + res.status);\n"
            f"  return (await res.json()).items?.map((x) => x.{ident(rng).lower()} ?? {number(rng)});\n"
            f"}};\n\n")


def code_go(rng):
    return (f"func {ident(rng).replace('_', '').capitalize()}(ctx context.Context, n int) (map[string]int, error) {{\n"
            f"\tm := make(map[string]int, n)\n\tfor i := 0; i < n; i++ {{\n"
            f"\t\tm[fmt.Sprintf(\"%s-%d\", \"{rng.choice(ENGLISH)}\", i)] = i * {rng.randint(2, 99)}\n"
            f"\t}}\n\treturn m, nil\n}}\n\n")


def code_java(rng):
    return (f"public class {ident(rng).replace('_', '').capitalize()} {{\n"
            f"    private static final long SERIAL = {rng.getrandbits(60)}L;\n"
            f"    @Override public String toString() {{ return \"{rng.choice(ENGLISH_CAPS)}{{\" + SERIAL + \"}}\"; }}\n"
            f"}}\n\n")


def code_sql(rng):
    return (f"SELECT u.id, u.{ident(rng).lower()}, COUNT(*) AS n\nFROM users u\n"
            f"LEFT JOIN orders o ON o.user_id = u.id\nWHERE u.created_at > '{number(rng)}'\n"
            f"  AND u.name LIKE '%{rng.choice(ENGLISH)}%'\nGROUP BY 1, 2 HAVING n >= {rng.randint(1, 50)};\n\n")


def code_html(rng):
    return (f"<div class=\"{ident(rng).lower()}\" data-id='{rng.randint(1, 10**6)}'>\n"
            f"  <p>{' '.join(rng.choices(ENGLISH, k=10))} &amp; &lt;tag&gt; &#x1F600;</p>\n"
            f"  <a href=\"https://example.com/{ident(rng).lower()}?a=1&b=2#top\">link</a>\n</div>\n"
            f"<!-- {rng.choice(ENGLISH)} -->\n<style>.x{{margin:0 auto;color:#{rng.getrandbits(24):06x}}}</style>\n\n")


def code_shell(rng):
    return (f"#!/usr/bin/env bash\nset -euo pipefail\nfor f in ./*.{rng.choice(['txt', 'log', 'json'])}; do\n"
            f"  grep -E '^[0-9]{{3}}\\s+' \"$f\" | awk -F'\\t' '{{print $2}}' >> /tmp/{ident(rng).lower()}.out 2>&1 || true\n"
            f"done\necho \"done: $?\" && exit 0\n\n")


def code_json(rng):
    items = ", ".join(f'"{ident(rng)}": {rng.choice([number(rng), "null", "true", chr(34) + rng.choice(ENGLISH) + chr(34)])}'
                      for _ in range(rng.randint(2, 6)))
    return f'{{"id": {rng.randint(1, 10**9)}, "tags": ["a", "b\\n", "\\u00e9"], {items}}}\n'


def code_markdown(rng):
    return (f"# {rng.choice(ENGLISH_CAPS)} {rng.choice(ENGLISH)}\n\n"
            f"- **{rng.choice(ENGLISH)}**: `{ident(rng)}()` returns _{rng.choice(ENGLISH)}_\n"
            f"- [ ] todo {number(rng)}\n\n| a | b |\n|---|---:|\n| {number(rng)} | {number(rng)} |\n\n"
            f"```python\nprint({number(rng)})\n```\n\n> {' '.join(rng.choices(ENGLISH, k=7))}\n\n")


CODE_GENERATORS = [code_python, code_cpp, code_rust, code_js, code_go, code_java, code_sql,
                   code_html, code_shell, code_json, code_markdown]


def gen_code(rng, size):
    out = []
    n = 0
    while n < size:
        s = rng.choice(CODE_GENERATORS)(rng)
        if rng.random() < 0.1:
            s = s.replace("    ", "\t")
        if rng.random() < 0.1:
            s = s.replace("\n", "\r\n")
        out.append(s)
        n += len(s)
    return "".join(out)


def sentence(rng):
    words = [rng.choice(ENGLISH_CAPS)]
    for _ in range(rng.randint(4, 18)):
        r = rng.random()
        if r < 0.7:
            words.append(rng.choice(ENGLISH))
        elif r < 0.8:
            words.append(rng.choice(CONTRACTIONS))
        elif r < 0.9:
            words.append(number(rng))
        else:
            words.append(rng.choice(rng.choice(SCRIPT_WORDS)))
    return " ".join(words) + rng.choice([".", "!", "?", "...", ";", ":", " —", ",", "?!"])


def gen_english(rng, size):
    out = []
    n = 0
    while n < size:
        para = " ".join(sentence(rng) for _ in range(rng.randint(2, 7)))
        sep = rng.choice(["\n\n", "\n", " ", "\r\n", "\n\n\n", "  \n"])
        out.append(para + sep)
        n += len(para) + len(sep)
    return "".join(out)


def gen_script(rng, size, words):
    out = []
    n = 0
    no_space = words in (CHINESE, JAPANESE, THAI)
    while n < size:
        w = rng.choice(words)
        r = rng.random()
        if r < 0.05:
            w += rng.choice(["。", "，", "、", "！", "？", ".", ",", "!", "؟", "،", "।", "॥"])
        elif r < 0.08:
            w = number(rng)
        elif r < 0.1:
            w = rng.choice(ENGLISH)
        sep = "" if no_space and rng.random() < 0.7 else rng.choice([" ", " ", " ", "\n", "  "])
        out.append(w + sep)
        n += len(w) + len(sep)
    return "".join(out)


def gen_mixed_scripts(rng, size):
    out = []
    n = 0
    while n < size:
        words = rng.choice(SCRIPT_WORDS + [ENGLISH, EMOJI, CONTRACTIONS])
        w = rng.choice(words)
        if rng.random() < 0.2:  # glue words of different scripts together
            w += rng.choice(rng.choice(SCRIPT_WORDS))
        sep = rng.choice([" ", " ", "", "\t", "\n", "-", "_", "/", "'", ".", rng.choice(UNICODE_SPACES)])
        out.append(w + sep)
        n += len(w) + len(sep)
    return "".join(out)


def gen_emoji(rng, size):
    out = []
    n = 0
    while n < size:
        k = rng.randrange(5)
        if k == 0:
            s = "".join(rng.choices(EMOJI, k=rng.randint(1, 6)))
        elif k == 1:
            s = rng.choice(ENGLISH) + rng.choice(EMOJI)
        elif k == 2:  # build a ZWJ family with random skin tones
            people = ["👨", "👩", "🧑", "👧", "👦"]
            tones = ["", "\U0001F3FB", "\U0001F3FC", "\U0001F3FD", "\U0001F3FE", "\U0001F3FF"]
            s = "\u200d".join(rng.choice(people) + rng.choice(tones) for _ in range(rng.randint(2, 4)))
        elif k == 3:  # regional indicator pairs, some unpaired
            s = "".join(chr(0x1F1E6 + rng.randrange(26)) for _ in range(rng.randint(1, 5)))
        else:
            s = rng.choice(EMOJI) + rng.choice(["\ufe0f", "\ufe0e", "\u20e3", "\u200d", ""])
        sep = rng.choice([" ", "", "\n", " ", "!"])
        out.append(s + sep)
        n += len(s) + len(sep)
    return "".join(out)


def gen_whitespace(rng, size):
    out = []
    n = 0
    pieces = [" ", "\t", "\n", "\r\n", "\r", "\x0b", "\x0c"] + UNICODE_SPACES
    while n < size:
        k = rng.randrange(6)
        if k == 0:
            s = " " * rng.randint(1, 70)
        elif k == 1:
            s = "".join(rng.choices(pieces, k=rng.randint(1, 12)))
        elif k == 2:
            s = "\t" * rng.randint(1, 8)
        elif k == 3:
            s = "\n" * rng.randint(1, 6)
        elif k == 4:
            s = "\r\n" * rng.randint(1, 4)
        else:
            s = " " * rng.randint(1, 4) + "\n" + " " * rng.randint(0, 8)
        w = rng.choice([rng.choice(ENGLISH), number(rng), rng.choice(CONTRACTIONS), "", "x",
                        rng.choice(rng.choice(SCRIPT_WORDS)), "'s", "!!", "#"])
        out.append(s + w)
        n += len(s) + len(w)
    return "".join(out)


def gen_numbers(rng, size):
    out = []
    n = 0
    while n < size:
        s = number(rng)
        if rng.random() < 0.2:
            s = rng.choice(["$", "€", "£", "#", "v", "x", "-", "+", "(", "≈", "№"]) + s
        if rng.random() < 0.1:  # non-ASCII digits
            base = rng.choice([0x660, 0x6F0, 0x966, 0x9E6, 0xE50, 0xFF10, 0x1D7CE, 0x2460])
            s += "".join(chr(base + rng.randrange(10)) for _ in range(rng.randint(1, 8)))
        sep = rng.choice([" ", ", ", "\n", "", "x", "%", " and ", "."])
        out.append(s + sep)
        n += len(s) + len(sep)
    return "".join(out)


def random_code_point(rng):
    r = rng.random()
    if r < 0.3:
        cp = rng.randrange(0x20, 0x3000)
    elif r < 0.5:
        cp = rng.randrange(0x3000, 0x10000)
    elif r < 0.7:
        cp = rng.randrange(0x10000, 0x32000)  # SMP and CJK extensions (incl. Unicode 15.x)
    elif r < 0.8:
        cp = rng.choice([rng.randrange(0x2EBF0, 0x2EE5E), rng.randrange(0x31350, 0x323B0),
                         rng.randrange(0x11F00, 0x11F5A), rng.randrange(0x1E4D0, 0x1E4FA),
                         rng.randrange(0x1E030, 0x1E08F), 0x2FFC, 0x2FFD, 0x2FFE, 0x2FFF, 0x31EF,
                         0xCF3, 0xECE, 0x10EFD, 0x10EFE, 0x10EFF])  # new in 15.0 / 15.1
    elif r < 0.9:
        cp = rng.randrange(0xE000, 0xF900) if rng.random() < 0.5 else rng.randrange(0xF0000, 0x110000)
    else:
        cp = rng.randrange(0, 0x110000)
    if 0xD800 <= cp <= 0xDFFF:
        cp = 0xFFFD
    return chr(cp)


def gen_random_unicode(rng, size):
    out = []
    n = 0
    while n < size:
        k = rng.randrange(4)
        if k == 0:
            s = "".join(random_code_point(rng) for _ in range(rng.randint(1, 12)))
        elif k == 1:
            s = rng.choice(ENGLISH) + random_code_point(rng) + rng.choice(ENGLISH)
        elif k == 2:
            s = random_code_point(rng) + "".join(chr(rng.randrange(0x300, 0x370)) for _ in range(rng.randint(1, 4)))
        else:
            s = "".join(chr(rng.randrange(0x20, 0x7F)) for _ in range(rng.randint(1, 10)))
        sep = rng.choice([" ", "", "\n", "  ", "\t"])
        out.append(s + sep)
        n += len(s) + len(sep)
    return "".join(out)


def gen_specials(rng, size):
    """Chat transcripts and special-token strings inside text."""
    out = []
    n = 0
    while n < size:
        k = rng.randrange(4)
        if k == 0:
            role = rng.choice(["system", "user", "assistant", "tool"])
            s = f"<|im_start|>{role}\n{sentence(rng)}<|im_end|>\n"
        elif k == 1:
            s = rng.choice(SPECIAL_STRINGS) + rng.choice(["", " ", "\n", "x"]) + rng.choice(SPECIAL_STRINGS)
        elif k == 2:
            s = f"{rng.choice(ENGLISH)}{rng.choice(SPECIAL_STRINGS)}{rng.choice(ENGLISH)} "
        else:
            s = f"<{rng.choice(SPECIAL_STRINGS)}>" + "".join(rng.choices(SPECIAL_STRINGS, k=rng.randint(1, 4)))
        out.append(s)
        n += len(s)
    return "".join(out)


def gen_invalid_utf8(rng, size_bytes):
    """Valid text with invalid UTF-8 sequences spliced in. Sequences that llama.cpp would decode
    to code points above U+10FFFF (where it aborts) are avoided."""
    bad = [b"\x80", b"\xbf", b"\xc0\x80", b"\xc1\xbf", b"\xc3", b"\xe2\x82", b"\xed\xa0\x80",
           b"\xed\xbf\xbf", b"\xf0\x9f", b"\xf0\x9f\x98", b"\xf8\x88\x80\x80\x80", b"\xfe", b"\xff",
           b"\xe0\x80\x80", b"\xf0\x80\x80\x80", b"\xc3\x28", b"\xa0\xa1", b"\xe2\x28\xa1"]
    out = bytearray()
    while len(out) < size_bytes:
        k = rng.randrange(3)
        if k == 0:
            out += rng.choice(bad)
        elif k == 1:
            out += rng.choice(rng.choice(SCRIPT_WORDS + [ENGLISH, EMOJI])).encode()
        else:  # random bytes, with 4-byte leads F4..F7 dropped
            out += bytes(b for b in (rng.randrange(256) for _ in range(rng.randint(1, 6)))
                         if b < 0xF4 or b > 0xF7)
        out += rng.choice([b" ", b"", b"\n"])
    return bytes(out)


EDGE_CASES = [
    ("empty", ""),
    ("space", " "),
    ("two-spaces", "  "),
    ("newline", "\n"),
    ("crlf", "\r\n"),
    ("tab", "\t"),
    ("spaces-then-word", "     hello"),
    ("word-then-spaces", "hello     "),
    ("spaces-newline-spaces", "   \n   \n\n   x"),
    ("contractions", "I'm you're they'll we've he'd it's 's 't 're 've 'm 'll 'd 'S 'T 'RE 'Ll"),
    ("apostrophes", "''''' ' ' x' 'x ''s '''s"),
    ("digits", "0 1 12 123 1234 12345 123456 1234567 12345678901234567890"),
    ("digits-mixed", "a1b22c333d4444 3.14159 1,000,000 1e-9 0xFF ²³¹ ¼ ½ ١٢٣ ४५६ ⅷ"),
    ("long-word", "a" * 3000),
    ("long-number", "9" * 2000),
    ("long-punct", "!?" * 1000),
    ("long-spaces", " " * 5000 + "end"),
    ("long-newlines", "\n" * 2000),
    ("long-cjk", "漢" * 2000),
    ("long-emoji", "😀" * 1000),
    ("im-start-plain", "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n"),
    ("specials-adjacent", "<|im_end|><|im_end|><|im_start|><|im_start|>"),
    ("specials-nested", "<<|im_end|>> <|<|im_start|>|> <|im_start|im_end|>"),
    ("specials-partial", "<|im_start <|im_end| im_start|> <|endoftext"),
    ("special-only", "<|endoftext|>"),
    ("unicode-spaces", "a\u00a0b\u2000c\u3000d\u2028e\u0085f\u180eg\u200bh\ufeffi\x1cj"),
    ("combining", "e\u0301 n\u0303 a\u0308\u0301 \u0301\u0302 ज़ क़ Z\u0351\u0360\u036f"),
    ("zwj-emoji", "👨‍👩‍👧‍👦 👩🏽‍💻 🏳️‍🌈 🧑‍🤝‍🧑 ❤️‍🔥 🫱🏻‍🫲🏿"),
    ("rtl", "مرحبا Hello שלום 123 عربي\u200f\u200e\u202b\u202c"),
    ("control-chars", "".join(chr(c) for c in range(0, 32)) + "\x7f\x80\x9f"),
    ("private-use", "\ue000\uf8ff\U000f0000\U0010fffd"),
    ("unassigned", "\u0378\u0379\U000e0080\U0010fffe\U0010ffff\ufffe\uffff"),
    ("unicode-15", "\U0002ebf0\U00031350\U00011f00\U0001e4d0\u2ffc\u31ef\u0cf3\u0ece\U00010efd"),
]


def _add(docs, name, text, special=False):
    if isinstance(text, str):
        text = text.encode("utf-8")
    docs.append({"name": name, "text": text, "special": special})


def build_corpus(seed=SEED, target_bytes=TARGET_BYTES):
    rng = random.Random(seed)
    docs = []
    for name, text in EDGE_CASES:
        _add(docs, f"edge-{name}", text, special=("<|" in text or "<<" in text))
    sections = [
        ("code", lambda r: gen_code(r, rng.randint(8000, 14000)), 0.20, False),
        ("english", lambda r: gen_english(r, rng.randint(8000, 14000)), 0.14, False),
        ("mixed", lambda r: gen_mixed_scripts(r, rng.randint(4000, 8000)), 0.12, False),
        ("emoji", lambda r: gen_emoji(r, rng.randint(3000, 6000)), 0.07, False),
        ("whitespace", lambda r: gen_whitespace(r, rng.randint(4000, 8000)), 0.08, False),
        ("numbers", lambda r: gen_numbers(r, rng.randint(4000, 8000)), 0.07, False),
        ("random-unicode", lambda r: gen_random_unicode(r, rng.randint(2000, 4000)), 0.08, False),
        ("specials", lambda r: gen_specials(r, rng.randint(3000, 6000)), 0.06, True),
        ("invalid-utf8", lambda r: gen_invalid_utf8(r, rng.randint(1000, 3000)), 0.02, False),
    ]
    for words, name in [(CHINESE, "zh"), (JAPANESE, "ja"), (KOREAN, "ko"), (ARABIC, "ar"),
                        (HEBREW, "he"), (HINDI, "hi"), (RUSSIAN, "ru"), (GREEK, "el"),
                        (THAI, "th"), (VIETNAMESE, "vi"), (FRENCH + GERMAN + SPANISH, "latin")]:
        sections.append((f"script-{name}", lambda r, w=words: gen_script(r, rng.randint(3000, 6000), w),
                         0.16 / 11, False))
    total_weight = sum(s[2] for s in sections)
    for name, gen, weight, special in sections:
        budget = int(target_bytes * weight / total_weight)
        made = 0
        index = 0
        while made < budget:
            text = gen(rng)
            _add(docs, f"{name}-{index}", text, special=special)
            made += len(docs[-1]["text"])
            index += 1
    return docs


def main():
    docs = build_corpus()
    total = sum(len(d["text"]) for d in docs)
    print(f"{len(docs)} documents, {total} bytes")
    invalid = 0
    for d in docs:
        try:
            d["text"].decode("utf-8")
        except UnicodeDecodeError:
            invalid += 1
    print(f"{invalid} documents are not valid UTF-8; "
          f"{sum(d['special'] for d in docs)} are also tokenized with special parsing")


if __name__ == "__main__":
    main()
