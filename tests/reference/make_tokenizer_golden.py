#!/usr/bin/env python3
"""Makes the byte-level BPE tokenizer golden for src/tokenizer from llama.cpp.

Run with the reference venv (llama-cpp-python):
  /tmp/refvenv/bin/python tests/reference/make_tokenizer_golden.py [--model PATH]

Tokenizes every document of corpus.build_corpus() with llama.cpp's own tokenizer on
SmolLM2-135M-Instruct.Q4_1.gguf (`Llama(vocab_only=True).tokenize(bytes, add_bos=False,
special=False)`, and special=True as well for documents flagged `special`) and writes
tests/golden/tokenizer/smollm2_corpus.json.gz:

  {"model": file name, "model_sha256": ..., "llama_cpp_python": version, "seed": corpus seed,
   "docs": [{"name": ..., "text": str | "text_b64": base64 (when not valid UTF-8),
             "ids": [...], "ids_special": [...] (only for special documents)}]}

The C++ test (src/tokenizer/bpe_tokenizer_test.cc) reads this file with zlib and needs no
Python. The corpus is stored in the golden, so regenerating it is only needed when corpus.py or
the reference changes.
"""

import argparse
import base64
import gzip
import hashlib
import json
import os
import pathlib
import sys

import llama_cpp

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import corpus  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "golden" / "tokenizer" / "smollm2_corpus.json.gz"


def default_model():
    cache = os.environ.get("DEEPINFER_CACHE", os.path.expanduser("~/.cache/deepinfer"))
    return os.path.join(cache, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default=default_model())
    parser.add_argument("--out", default=str(OUT))
    args = parser.parse_args()

    llm = llama_cpp.Llama(args.model, vocab_only=True, verbose=False)
    docs = corpus.build_corpus()
    out_docs = []
    total_ids = 0
    for d in docs:
        text = d["text"]
        entry = {"name": d["name"]}
        try:
            entry["text"] = text.decode("utf-8")
        except UnicodeDecodeError:
            entry["text_b64"] = base64.b64encode(text).decode("ascii")
        entry["ids"] = llm.tokenize(text, add_bos=False, special=False) if text else []
        total_ids += len(entry["ids"])
        if d["special"]:
            entry["ids_special"] = llm.tokenize(text, add_bos=False, special=True) if text else []
            total_ids += len(entry["ids_special"])
        out_docs.append(entry)
    golden = {
        "model": os.path.basename(args.model),
        "model_sha256": sha256_file(args.model),
        "llama_cpp_python": llama_cpp.__version__,
        "seed": corpus.SEED,
        "docs": out_docs,
    }
    data = json.dumps(golden, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    out = pathlib.Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    # mtime=0 keeps the file byte-identical across runs.
    with open(out, "wb") as f:
        with gzip.GzipFile(filename="", mode="wb", fileobj=f, compresslevel=9, mtime=0) as gz:
            gz.write(data)
    print(f"{out}: {len(out_docs)} documents, {sum(len(d['text']) for d in docs)} bytes of text, "
          f"{total_ids} ids, {out.stat().st_size} bytes gzip'd")


if __name__ == "__main__":
    main()
