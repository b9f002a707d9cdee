"""Writes a golden of conversation cases: a JSON object with header fields and "cases", one case
per line (which keeps the file small and its diffs readable)."""

import json
import pathlib


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
