"""Writes a golden of conversation cases: a JSON object with header fields and "cases", one case
per line (which keeps the file small and its diffs readable)."""

import json
import os
import pathlib


def default_model() -> str:
    """The SmolLM2 GGUF that scripts/fetch_model.sh caches (the chat goldens' tokenizer)."""
    cache = os.environ.get("DEEPINFER_CACHE", os.path.expanduser("~/.cache/deepinfer"))
    return os.path.join(cache, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")


def m(role, content) -> dict:
    """One chat message."""
    return {"role": role, "content": content}


def write_cases(out, header: dict, cases: list) -> pathlib.Path:
    lines = ["{"]
    lines += [f" {json.dumps(k)}: {json.dumps(v, ensure_ascii=False)}," for k, v in header.items()]
    lines += [' "cases": [',
              ",\n".join("  " + json.dumps(c, ensure_ascii=False) for c in cases),
              " ]",
              "}"]
    out = pathlib.Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    json.loads(out.read_text(encoding="utf-8"))
    return out
