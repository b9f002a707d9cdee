#!/usr/bin/env python3
"""Fails when a file under src/ includes a header of a layer above its own.

The layers and what each may include follow ../shared/DESIGN.md ("Source layout", "Rules of the
house"): dependencies point downwards only; the protocol layer (protocol/) sits below the server
(api/) and knows no engine and no HTTP server; the gateway and the tools share only util/, http/
and protocol/ with serve; outside engine/ and cli/ the engine is reached only through
engine/engine.h. Tests (*_test.cc) follow the
same rules as the code beside them. Run by ctest (test `layering`); prints one line per upward
include and exits 1 when there is any.
Usage: scripts/check_layering.py [SRC_DIR]
"""
import pathlib
import re
import sys

# Layer -> the project layers it may include (besides itself). Third-party headers (absl, fmt,
# boost, ...) are not checked here; CMake's declared dependencies govern them.
ALLOWED = {
    "util": set(),
    "tensor": set(),
    "image": {"util"},
    "model": {"util", "tensor"},
    "kernels": {"util", "tensor"},
    "arch": {"util", "tensor", "model", "kernels"},
    "tokenizer": {"util", "tensor", "model"},
    "constraint": {"util", "tensor", "model", "tokenizer"},
    "engine": {"util", "tensor", "model", "kernels", "arch", "constraint"},
    "http": {"util"},
    "protocol": {"util", "http", "tokenizer", "constraint"},
    "api": {"util", "http", "tensor", "image", "model", "tokenizer", "constraint", "engine",
            "protocol"},
    "gateway": {"util", "http", "protocol"},
    "tools": {"util", "http", "tensor", "image", "model", "tokenizer", "protocol"},
    "cli": {"util", "tensor", "image", "model", "kernels", "arch", "tokenizer", "constraint",
            "engine", "http", "protocol", "api", "gateway", "tools"},
}

# Headers of a lower layer that only some layers may see: the server (api/) talks to the engine
# through its one public header, not its internals (scheduler, block manager, executor, sampler);
# the protocol layer uses the HTTP layer's error bodies and SSE framing, never its server.
RESTRICTED = {
    ("api", "engine"): {"engine/engine.h"},
    ("protocol", "http"): {"http/errors.h", "http/sse.h"},
}

# Upward includes that exist today and are being removed (each names the step that removes it).
# The check fails on any other; an entry that no longer matches also fails, so the list only
# shrinks.
KNOWN = set()  # none left: add an entry only with the step that removes it

# CMake dependencies that exist today and are being removed, as (layer, library).
KNOWN_LINKS = set()

INCLUDE = re.compile(r'^\s*#\s*include\s+"([a-z_0-9]+)/([^"]+)"', re.M)


def known(path, header, used):
    layer = path.split("/", 1)[0]
    for src, dst in KNOWN:
        src_ok = src == path or (src.endswith("/*") and src[:-2] == layer)
        dst_ok = dst == header or (dst.endswith("/*") and header.startswith(dst[:-1]))
        if src_ok and dst_ok:
            used.add((src, dst))
            return True
    return False


LIBRARY = re.compile(r"di_cc_library\(\s*NAME\s+(\w+)")
LINKED = re.compile(r"\bdi::(\w+)")


def check_links(src, problems):
    """Every di:: library a folder's CMakeLists.txt links must belong to a layer it may use."""
    lists = sorted(src.glob("*/CMakeLists.txt")) + sorted(src.glob("*/*/CMakeLists.txt"))
    owner = {}
    for f in lists:
        layer = f.relative_to(src).parts[0]
        for name in LIBRARY.findall(f.read_text()):
            owner[name] = layer
    used = set()
    for f in lists:
        layer = f.relative_to(src).parts[0]
        if layer not in ALLOWED:
            continue
        text = re.sub(r"#.*", "", f.read_text())
        for name in sorted(set(LINKED.findall(text))):
            to_layer = owner.get(name)
            if to_layer is None or to_layer == layer or to_layer in ALLOWED[layer]:
                continue
            if (layer, to_layer) in KNOWN_LINKS:
                used.add((layer, to_layer))
                continue
            problems.append(f"{f.relative_to(src)}: links di::{name} of layer '{to_layer}', "
                            f"above or beside layer '{layer}'")
    for entry in sorted(KNOWN_LINKS - used):
        problems.append(f"scripts/check_layering.py: KNOWN_LINKS entry {entry} no longer occurs; "
                        "remove it")


def main():
    src = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "src")
    problems = []
    check_links(src, problems)
    used = set()
    for f in sorted(src.rglob("*")):
        if f.suffix not in (".h", ".cc", ".cu", ".inc"):
            continue
        rel = f.relative_to(src).as_posix()
        layer = rel.split("/", 1)[0]
        if layer not in ALLOWED:
            if "/" in rel:
                problems.append(f"{rel}: layer '{layer}' is not in scripts/check_layering.py")
            continue
        for m in INCLUDE.finditer(f.read_text(errors="replace")):
            to_layer, header = m.group(1), f"{m.group(1)}/{m.group(2)}"
            if to_layer not in ALLOWED or to_layer == layer:
                continue  # a third-party header, or the file's own layer
            ok = to_layer in ALLOWED[layer]
            only = RESTRICTED.get((layer, to_layer))
            if ok and only is not None and header not in only:
                ok = False
            if not ok and not known(rel, header, used):
                problems.append(f"{rel}: includes {header}, above or beside layer '{layer}'")
    for entry in sorted(KNOWN - used):
        problems.append(f"scripts/check_layering.py: KNOWN entry {entry} no longer occurs; remove it")
    for p in problems:
        print(p)
    if problems:
        print(f"layering: {len(problems)} problem(s); see ../shared/DESIGN.md, Source layout")
        return 1
    print("layering: every include and library link points down")
    return 0


if __name__ == "__main__":
    sys.exit(main())
