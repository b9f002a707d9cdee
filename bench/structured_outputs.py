#!/usr/bin/env python3
"""Structured outputs: output tokens/s at 1 and 16 streams with and without a JSON-schema
constraint, the compile cost of a 50-property schema (first and cached), and the mask cost per
token, on one `deepinfer serve` (default model), and with --llama-bin the same loads on llama.cpp's
`llama-server --parallel <most streams>` (GBNF from its own JSON-schema converter), the two
servers taking turns within each repeat (bench/build_llama_server.sh builds it).

Both kinds of request generate exactly --output-len tokens: the free ones with ignore_eos, the
constrained ones under a schema that cannot close before then (an array of at least 100
integers: three tokens or more each; llama-server's grammar parser refuses a bound of 10,000),
so they differ only in the constraint. The two kinds alternate within each repeat.
Compile cost: TTFT of a one-token request with a new 50-property schema, then the same schema
again (cached), less the TTFT of the same request unconstrained (medians of 5 schemas). Mask cost: the TPOT difference
at 1 stream. Medians of --repeats, load average recorded.

Usage: python3 bench/structured_outputs.py [--deepinfer build/deepinfer] [--llama-bin DIR]
       [--json out.json] > out.md
"""

import argparse
import json
import os
import pathlib
import statistics
import sys
import threading
import time

import httpx

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import data_parallel  # noqa: E402
from runtime_vs_llamacpp import load_average  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[1]
CACHE = pathlib.Path(os.environ.get("DEEPINFER_CACHE", pathlib.Path.home() / ".cache/deepinfer"))
ARRAY = {"type": "array", "items": {"type": "integer"}, "minItems": 100}


def stream(base: str, body: dict) -> dict:
    """One streamed chat request: TTFT, TPOT and completion tokens."""
    start = time.monotonic()
    first = last = None
    usage = None
    chunks = 0
    with httpx.stream("POST", base + "/v1/chat/completions", timeout=900, json={
            **body, "stream": True, "stream_options": {"include_usage": True}}) as r:
        if r.status_code != 200:
            sys.exit(f"HTTP {r.status_code}: {r.read()[:300]}")
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            event = json.loads(line[6:])
            if event.get("choices"):
                chunks += 1
                now = time.monotonic()
                first = first or now
                last = now
            if event.get("usage"):
                usage = event["usage"]
    # llama-server sends usage only in newer builds: one content chunk is one token there.
    n = usage["completion_tokens"] if usage else chunks
    return {"ttft": first - start, "tpot": (last - first) / max(1, n - 1), "tokens": n,
            "end": last - start}


def body(i: int, args, constrained: bool) -> dict:
    b = {"messages": [{"role": "user", "content": f"List numbers, part {i}."}],
         "max_tokens": args.output_len, "temperature": 0}
    if constrained:
        b["response_format"] = {"type": "json_schema",
                                "json_schema": {"name": "numbers", "schema": ARRAY}}
    else:
        b["ignore_eos"] = True
    return b


def load(base: str, args, streams: int, constrained: bool, seed: int) -> dict:
    rows = []
    lock = threading.Lock()
    n = max(2, 2 * streams)
    counter = iter(range(n))

    def worker():
        while True:
            with lock:
                i = next(counter, None)
            if i is None:
                return
            r = stream(base, body(seed * 1000 + i, args, constrained))
            with lock:
                rows.append(r)

    start = time.monotonic()
    threads = [threading.Thread(target=worker) for _ in range(streams)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.monotonic() - start
    return {"tput": sum(r["tokens"] for r in rows) / wall,
            "tpot": statistics.median(r["tpot"] for r in rows),
            "ttft": statistics.median(r["ttft"] for r in rows)}


def compile_cost(base: str, seed: int, samples: int = 5) -> dict:
    """TTFT of a one-token request under a 50-property schema never seen before, and under the
    same schema again, less the TTFT of the request unconstrained: medians of `samples` fresh
    schemas (single differences are within TTFT noise)."""
    first, cached = [], []
    b = {"messages": [{"role": "user", "content": "Fill the form."}], "max_tokens": 1,
         "temperature": 0}
    for j in range(samples):
        tag = f"{seed}_{j}"
        schema = {"type": "object", "additionalProperties": False,
                  "required": [f"field_{tag}_{k}" for k in range(50)],
                  "properties": {f"field_{tag}_{k}": [{"type": "string"}, {"type": "integer"},
                                                      {"type": "boolean"},
                                                      {"type": "array", "items": {"type": "number"}},
                                                      {"type": "string", "enum": ["a", "b", "c"]}][k % 5]
                                 for k in range(50)}}
        constrained = {**b, "response_format": {"type": "json_schema",
                                                "json_schema": {"name": "form", "schema": schema}}}
        free = stream(base, b)["ttft"]
        first.append(stream(base, constrained)["ttft"] - free)
        cached.append(stream(base, constrained)["ttft"] - free)
    return {"first_ms": 1e3 * statistics.median(first), "cached_ms": 1e3 * statistics.median(cached)}


def mask_metrics(base: str) -> dict:
    """deepinfer's structured-output mask counters from /metrics."""
    values = {}
    for line in httpx.get(base + "/metrics", timeout=10).text.splitlines():
        for key, name in (("masks", "deepinfer_structured_output_masks_total"),
                          ("seconds", "deepinfer_structured_output_mask_seconds_total")):
            if line.startswith(name + "{") or line.startswith(name + " "):
                values[key] = values.get(key, 0.0) + float(line.rsplit(" ", 1)[1])
    return values


def start_llama_server(args, parallel: int):
    """llama-server with one slot of 2,048 tokens per stream (as bench/serve_vs_llamacpp.py)."""
    from serve_vs_llamacpp import Engine, free_port  # noqa: E402 (only with --llama-bin)
    port = free_port()
    cmd = [str(pathlib.Path(args.llama_bin) / "llama-server"), "-m", args.model, "-a", "m",
           "-t", str(args.threads), "--parallel", str(parallel), "-c", str(parallel * 2048),
           "--host", "127.0.0.1", "--port", str(port)]
    return Engine("llama-server", cmd, port, "/health")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--deepinfer", default=str(REPO / "build" / "deepinfer"))
    ap.add_argument("--model", default=str(CACHE / "models/SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--output-len", type=int, default=128)
    ap.add_argument("--streams", default="1,16")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--llama-bin", help="folder with llama-server: measure it too, in turns")
    ap.add_argument("--json")
    args = ap.parse_args()
    levels = [int(x) for x in args.streams.split(",")]
    engines = ["deepinfer"] + (["llama-server"] if args.llama_bin else [])
    rows = {(e, c, k): [] for e in engines for c in levels for k in (False, True)}
    compiles = {e: [] for e in engines}
    loads = [load_average()]
    servers = {}
    try:
        servers["deepinfer"] = data_parallel.Serve(
            args, ["--max-model-len", "2048", "--served-model-name", "m", "--max-num-seqs", "32"])
        if args.llama_bin:
            servers["llama-server"] = start_llama_server(args, max(levels))
        for rep in range(args.repeats):
            for e in (engines if rep % 2 == 0 else engines[::-1]):
                for c in levels:
                    for constrained in ((False, True) if rep % 2 == 0 else (True, False)):
                        rows[(e, c, constrained)].append(
                            load(servers[e].base, args, c, constrained, rep))
                compiles[e].append(compile_cost(servers[e].base, rep))
            loads.append(load_average())
            print(f"[{rep + 1}/{args.repeats}] load {loads[-1]}", file=sys.stderr)
        masks = mask_metrics(servers["deepinfer"].base)
    finally:
        for server in servers.values():
            server.stop()

    def med(rs, key):
        return statistics.median(r[key] for r in rs)

    print(f"Model `{pathlib.Path(args.model).name}`, --threads {args.threads}, {args.output_len} "
          f"tokens out per request, median of {args.repeats}; load average at start and after "
          f"each repeat: {' | '.join(loads)}.\n")
    print("| engine | streams | output | out tok/s | TPOT p50 ms | TTFT p50 ms | "
          "constrained / free tok/s |")
    print("|---|---:|---|---:|---:|---:|---:|")
    for e in engines:
        for c in levels:
            free, con = rows[(e, c, False)], rows[(e, c, True)]
            for name, rs in (("free", free), ("JSON schema", con)):
                ratio = f"{med(con, 'tput') / med(free, 'tput'):.3f}" if rs is con else ""
                print(f"| {e} | {c} | {name} | {med(rs, 'tput'):.1f} | "
                      f"{1e3 * med(rs, 'tpot'):.2f} | {1e3 * med(rs, 'ttft'):.0f} | {ratio} |")
    if args.llama_bin:
        print("\nJSON-schema output tok/s, deepinfer / llama-server: " + ", ".join(
            f"{c} stream{'s' if c > 1 else ''} "
            f"{med(rows[('deepinfer', c, True)], 'tput') / med(rows[('llama-server', c, True)], 'tput'):.2f}"
            for c in levels) + ".")
    for e in engines:
        one_free, one_con = rows[(e, levels[0], False)], rows[(e, levels[0], True)]
        print(f"\n{e}: mask cost per token ({levels[0]} stream: TPOT constrained - free) "
              f"{1e3 * (med(one_con, 'tpot') - med(one_free, 'tpot')):.3f} ms; 50-property "
              f"schema, TTFT over an unconstrained request: first "
              f"{statistics.median(r['first_ms'] for r in compiles[e]):.1f} ms, again "
              f"{statistics.median(r['cached_ms'] for r in compiles[e]):.1f} ms.")
    print(f"\ndeepinfer's own count (/metrics, every constrained token of the run): "
          f"{masks['masks']:.0f} masks, {1e6 * masks['seconds'] / max(1, masks['masks']):.1f} us "
          f"per token on the engine thread.")
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(
            {"loads": loads, "compiles": compiles, "masks": masks,
             "rows": {f"{e}-{c}-{'json' if k else 'free'}": v
                      for (e, c, k), v in rows.items()}}, indent=1) + "\n")


if __name__ == "__main__":
    main()
