#!/usr/bin/env python3
"""Resident memory of DeepSeek-V4- and V4.1-shaped checkpoints at 512 and 65,536 tokens of
context, next to the bytes on disk and llama.cpp's on the same V4 checkpoint (issue 38, item 4):
are the weights only mapped, or copied beyond the mapped files, and does the rest grow by the KV
bytes per token?

Checkpoints: bench/deepseek_v4_speed.py's V4-shaped one (made on first use under --v4-models)
and bench/deepseek_v41_speed.py's V4.1-shaped one (under --v41-models). The V4 recipe's config
says max_position_embeddings 32,768 and `generate` sizes its KV cache to the model's context, so
the V4 runs use a view of the same files (a sibling folder, `v4-1m`, of symlinks to them with
max_position_embeddings 1,048,576 in its config.json, as in V4-Flash's release and in the V4.1
recipe; YaRN's original_max_position_embeddings stays 65,536, so the numerics are unchanged).

Measured, one process at a time, for each engine, model and context C:
  deepinfer  `deepinfer generate --model M --random-prompt-tokens C --max-tokens 8 --ignore-eos
             --threads T --json` (a prefill of C tokens in chunks of 512, then 8 generated).
  llama.cpp  `llama-bench -m GGUF -t T --repack 0 -r 1 --no-warmup -p 0 -n 8 -d C -o json -v`
             (a prefill of C tokens, then 8 decoded; -v for its buffer sizes), V4 only: its
             llama.cpp (llama-cpp-python 0.3.36's vendored tree, bench/build_llama_server.sh)
             does not run V4.1's attention.
             The GGUF is the V4 checkpoint (its original config) converted by that tree's
             convert_hf_to_gguf.py (FP8 -> Q8_0, FP4 -> MXFP4); weight repacking is off, as in
             bench/deepseek_v4_speed.py (with it this build aborts on this model). llama-bench
             times only the 8 decoded tokens (no prefill speed), and after the depth prefill it
             saves the sequence's state to a host buffer (llama_state_seq_get_data, to reuse it
             in later repeats): an anonymous copy of its cache that llama-server would not make.
             --llama-limit-s stops a llama-bench run that is still going (its peaks until then;
             llama.cpp allocates its caches and compute buffer when the context is made).
  /proc/PID/status of the running process every --interval s (0.2): the peaks of VmHWM (the
             kernel's own high-water mark of RSS), RssAnon (anonymous memory: KV cache,
             scratch, and any copy of the weights) and RssFile (file-backed: the mmapped weights,
             plus the binary and its shared libraries, some MiB). RssAnon and RssFile peak at
             their own moments, so their peaks need not add up to VmHWM.
  KV bytes per token: `deepinfer serve --max-num-seqs 1 --max-model-len 1048576
             --kv-cache-tokens 1048576 --prefill-budget 512` (generate's cache and prefill
             chunk), started once per model until ready: its start-up lines give the KV cache's
             bytes per token and the window cache (`generate` prints neither). "Expected growth"
             = (65,536 - 512) x bytes per token: what RssAnon should add from 512 to 65,536
             tokens when nothing else grows with the context (the window cache has a fixed size
             and is in the 512 run already).
  Bytes on disk: the sum of the checkpoint's *.safetensors (the GGUF's size for llama.cpp).
  Prefill and decode tokens/s are what each tool reported, a by-product (this machine's 2 cores
  are shared, so they are noisy); they are not this script's subject.

Each finished run is written to --json at once, and --resume skips the runs already in it, so
the long ones can be run one at a time (`--only`).

Usage: .venv/bin/python bench/kv_memory.py [--deepinfer build/deepinfer]
           [--llama-bin DIR --llama-gguf /tmp/ds4-bench/v4.gguf] [--contexts 512,65536]
           [--only deepinfer:v4:512,...] [--resume] --json bench/results/kv_memory.json
           > bench/results/kv_memory.md
       .venv/bin/python bench/kv_memory.py --report bench/results/kv_memory.json  (the table only)
"""

import argparse
import datetime
import json
import pathlib
import re
import subprocess
import sys
import time

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO / "tests" / "reference"))
import deepseek_v41_speed as v41  # noqa: E402
import deepseek_v4_speed as v4  # noqa: E402
from runtime_vs_llamacpp import load_average  # noqa: E402
from serve_vs_llamacpp import Engine, StatusSampler, free_port  # noqa: E402

FIELDS = ("VmHWM", "VmRSS", "RssAnon", "RssFile", "RssShmem")
LONG_CONTEXT_MAX_POS = 1048576


def run_sampled(cmd: list, interval: float, limit_s=None) -> dict:
    """Runs cmd (its stdout and stderr kept) while sampling its /proc/PID/status; exits on
    failure. With limit_s, a run still going after limit_s seconds is stopped (SIGTERM) and
    marked "stopped" (its peaks are those until then). Returns stdout, the end of stderr, the
    peaks in MiB, when they were reached and the wall time."""
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            errors="replace")  # llama.cpp -v prints raw vocabulary bytes
    stopped = False
    with StatusSampler(proc.pid, FIELDS, interval) as s:
        # communicate() reads both pipes while the sampler runs beside it
        try:
            out, err = proc.communicate(timeout=limit_s)
        except subprocess.TimeoutExpired:
            stopped = True
            proc.terminate()
            out, err = proc.communicate()
    wall = time.monotonic() - t0
    if proc.returncode != 0 and not stopped:
        sys.exit(f"failed ({proc.returncode}): {' '.join(cmd)}\n{err[-3000:]}")
    return {"stdout": out, "stderr_all": err, "stderr_tail": err[-4000:], "wall_s": wall,
            "samples": s.samples,
            "stopped": stopped, "peak_mib": {k: v / 1024 for k, v in s.peaks_kib.items()},
            "peak_at_s": s.peak_at_s}


def long_context_view(model: pathlib.Path, max_pos: int) -> pathlib.Path:
    """A sibling folder of symlinks to `model`'s files whose config.json says max_position_
    embeddings = max_pos (the weights are the same files)."""
    view = model.parent / f"{model.name}-{max_pos // 1048576}m"
    view.mkdir(exist_ok=True)
    for f in model.iterdir():
        target = view / f.name
        if f.name == "config.json" or target.exists():
            continue
        target.symlink_to(f.resolve())
    config = json.loads((model / "config.json").read_text())
    config["max_position_embeddings"] = max_pos
    (view / "config.json").write_text(json.dumps(config, indent=1))
    return view


def safetensors_bytes(model: pathlib.Path) -> int:
    return sum(f.resolve().stat().st_size for f in model.glob("*.safetensors"))


def kv_per_token(args, model: pathlib.Path) -> dict:
    """serve's start-up lines on the cache, one sequence, the context generate uses."""
    port = free_port()
    engine = Engine("deepinfer", [args.deepinfer, "serve", "--model", str(model), "--threads",
                                  str(args.threads), "--host", "127.0.0.1", "--port", str(port),
                                  "--served-model-name", "ds", "--max-num-seqs", "1",
                                  "--prefill-budget", "512",
                                  "--max-model-len", str(LONG_CONTEXT_MAX_POS),
                                  "--kv-cache-tokens", str(LONG_CONTEXT_MAX_POS)], port,
                    "/health")
    try:
        lines = [line for line in engine.log_text().splitlines()
                 if "KV cache:" in line or "window cache:" in line]
    finally:
        engine.stop()
    out = v41.engine_kv(lines)
    out["startup_log"] = lines
    return out


def deepinfer_run(args, model: pathlib.Path, context: int) -> dict:
    r = run_sampled([args.deepinfer, "generate", "--model", str(model), "--random-prompt-tokens",
                     str(context), "--max-tokens", str(args.gen_tokens), "--ignore-eos",
                     "--threads", str(args.threads), "--json"], args.interval)
    del r["stderr_all"]
    stats = json.loads(r.pop("stdout").strip().splitlines()[-1])
    r["stats"] = stats
    r["prefill_tok_s"], r["decode_tok_s"] = (stats["prefill_tokens_per_s"],
                                             stats["decode_tokens_per_s"])
    return r


def llama_run(args, context: int) -> dict:
    r = run_sampled([str(pathlib.Path(args.llama_bin) / "llama-bench"), "-m", args.llama_gguf,
                     "-t", str(args.threads), "--repack", "0", "-r", "1", "--no-warmup", "-p",
                     "0", "-n", str(args.gen_tokens), "-d", str(context), "-o", "json", "-v"],
                    args.interval, args.llama_limit_s)
    out = r.pop("stdout")
    # -v: llama.cpp's lines on its buffers (model, KV cache, compute)
    r["buffer_log"] = [line for line in r.pop("stderr_all").splitlines()
                       if re.search(r"buffer size|kv_cache|KV self size|KV buffer", line)]
    r["stats"] = json.loads(out)[0] if not r["stopped"] else None
    r["prefill_tok_s"] = None  # llama-bench times the decode only (-n) after the -d prefill
    r["decode_tok_s"] = r["stats"]["avg_ts"] if r["stats"] else None
    return r


def fmt(v, spec=",.0f"):
    return "-" if v is None else format(v, spec)


def report(results: dict, contexts: list) -> None:
    meta = results["meta"]
    print(f"Resident memory of DeepSeek-V4- and V4.1-shaped random checkpoints (released FP8 / FP4"
          f" formats) by context length, {meta['threads']} threads, {meta['gen_tokens']} tokens "
          f"generated after the context. {meta['date']}; CPU: {meta['cpu']}. Load average "
          f"before: {meta['load_before']}; after: {results.get('load_after', '-')}. The 2 cores "
          "are shared with other work, so the tokens/s columns (what the tools reported, a "
          "by-product) are noisy; the memory columns are the subject. Peaks of /proc/PID/status"
          f" sampled every {meta['interval']} s (RssAnon and RssFile peak at their own moments)."
          "\n")
    print("| engine | model | context | bytes on disk MiB | KV bytes per token | peak VmHWM MiB "
          "| peak RssAnon MiB | peak RssFile MiB | prefill tok/s | decode tok/s | wall s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for key, r in results["runs"].items():
        engine, model, context = key.split(":")
        p = r["peak_mib"]
        at = r.get("peak_at_s", {}).get("RssAnon")
        at = f" (at {at:,.0f} s)" if at is not None else ""
        print(f"| {engine} | {model} | {int(context):,} | {r['disk_bytes'] / 2**20:,.0f} | "
              f"{fmt(r.get('kv_bytes_per_token'))} | {p['VmHWM']:,.0f} | {p['RssAnon']:,.0f}"
              f"{at} | {p['RssFile']:,.0f} | "
              f"{fmt(r['prefill_tok_s'], '.1f')} | {fmt(r['decode_tok_s'], '.2f')} | "
              f"{r['wall_s']:,.0f}{' (stopped)' if r.get('stopped') else ''} |")
    print()
    short, long_ = min(contexts), max(contexts)
    for name, kv in results.get("kv", {}).items():
        a, b = (results["runs"].get(f"deepinfer:{name}:{c}") for c in (short, long_))
        window = (f", window cache {kv['window_mib']:.1f} MiB (last {kv['window_positions']} "
                  "positions)" if kv.get("window_mib") is not None else "")
        line = (f"- deepinfer {name}: KV {kv['bytes_per_token']:,} bytes per token{window} "
                f"(serve's start-up lines, one sequence)")
        if a and b:
            grow = b["peak_mib"]["RssAnon"] - a["peak_mib"]["RssAnon"]
            expect = (long_ - short) * kv["bytes_per_token"] / 2**20
            rss_file = max(a["peak_mib"]["RssFile"], b["peak_mib"]["RssFile"])
            line += (f"; RssAnon {a['peak_mib']['RssAnon']:,.0f} -> "
                     f"{b['peak_mib']['RssAnon']:,.0f} MiB from {short:,} to {long_:,} tokens: "
                     f"+{grow:,.0f} MiB, against ({long_:,} - {short:,}) x "
                     f"{kv['bytes_per_token']:,} = {expect:,.0f} MiB expected "
                     f"({grow / expect:.2f}x); RssFile peak {rss_file:,.0f} MiB vs "
                     f"{a['disk_bytes'] / 2**20:,.0f} MiB on disk")
        print(line + ".")
    la, lb = (results["runs"].get(f"llama.cpp:v4:{c}") for c in (short, long_))
    for c, r in ((short, la), (long_, lb)):
        if r:
            kv = "; ".join(" ".join(line.split()) for line in r.get("buffer_log", [])
                           if "buffer size" in line and "~" not in line)
            print(f"- llama.cpp v4 at {c:,} tokens: {r['llama_bin']}, {r['llama_gguf']}; its "
                  f"buffers: {kv or '-'}"
                  f"{'; stopped before the end' if r.get('stopped') else ''}.")
    if la and lb:
        grow = lb["peak_mib"]["RssAnon"] - la["peak_mib"]["RssAnon"]
        print(f"- llama.cpp v4: RssAnon {la['peak_mib']['RssAnon']:,.0f} -> "
              f"{lb['peak_mib']['RssAnon']:,.0f} MiB (+{grow:,.0f} MiB, "
              f"{grow * 2**20 / (long_ - short):,.0f} bytes per token of context); RssFile peak "
              f"{max(la['peak_mib']['RssFile'], lb['peak_mib']['RssFile']):,.0f} MiB vs "
              f"{la['disk_bytes'] / 2**20:,.0f} MiB GGUF"
              + (" (the long run stopped before its end: a lower bound)." if lb.get("stopped")
                 else "."))


def cpu_model() -> str:
    out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    fields = dict(line.split(":", 1) for line in out.splitlines() if ":" in line)
    return (f"{fields.get('Model name', '?').strip()}, {fields.get('CPU(s)', '?').strip()} "
            "vCPUs")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--deepinfer", default=str(REPO / "build" / "deepinfer"))
    ap.add_argument("--v4-models", default="/tmp/ds4-bench")
    ap.add_argument("--v41-models", default="/tmp/ds41-bench")
    ap.add_argument("--llama-bin", help="llama.cpp's build/bin (llama-bench)")
    ap.add_argument("--llama-gguf", help="the V4 checkpoint converted to GGUF by llama.cpp")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--gen-tokens", type=int, default=8)
    ap.add_argument("--contexts", default="512,65536")
    ap.add_argument("--interval", type=float, default=0.2, help="seconds between samples")
    ap.add_argument("--llama-limit-s", type=float,
                    help="stop a llama-bench run after this many seconds (its peaks until then)")
    ap.add_argument("--only", help="comma-separated ENGINE:MODEL:CONTEXT keys to run")
    ap.add_argument("--resume", action="store_true", help="keep and skip the runs in --json")
    ap.add_argument("--json", help="write raw results here (after every run)")
    ap.add_argument("--report", help="print the table of this JSON and exit")
    args = ap.parse_args()
    contexts = [int(c) for c in args.contexts.split(",")]
    if args.report:
        report(json.loads(pathlib.Path(args.report).read_text()), contexts)
        return

    plan = [("deepinfer", m, c) for m in ("v4", "v41") for c in contexts]
    if args.llama_gguf:
        plan += [("llama.cpp", "v4", c) for c in contexts]
    if args.only:
        keep = set(args.only.split(","))
        plan = [p for p in plan if ":".join(map(str, p)) in keep]
    tool = pathlib.Path(args.deepinfer).parent / "synthetic_checkpoint"
    models = {}  # the checkpoints the plan's deepinfer runs need (made on first use)
    if any(e == "deepinfer" and m == "v4" for e, m, _ in plan):
        models["v4"] = long_context_view(
            v4.ensure_checkpoint(pathlib.Path(args.v4_models), tool), LONG_CONTEXT_MAX_POS)
    if any(m == "v41" for _, m, _ in plan):
        models["v41"] = v41.ensure_checkpoint(pathlib.Path(args.v41_models), tool)

    results = {}
    if args.resume and args.json and pathlib.Path(args.json).exists():
        results = json.loads(pathlib.Path(args.json).read_text())
    results.setdefault("meta", {}).update(
        date=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        cpu=cpu_model(), threads=args.threads, gen_tokens=args.gen_tokens,
        interval=args.interval, deepinfer=args.deepinfer)
    results["meta"].setdefault("models", {}).update({k: str(v) for k, v in models.items()})
    results["meta"].setdefault("load_before", load_average())
    results.setdefault("runs", {})
    results.setdefault("kv", {})

    def save():
        if args.json:
            pathlib.Path(args.json).write_text(json.dumps(results, indent=1) + "\n")

    for engine, model, context in plan:
        key = f"{engine}:{model}:{context}"
        if engine == "deepinfer" and model not in results["kv"]:
            results["kv"][model] = kv_per_token(args, models[model])
            save()
        if key in results["runs"]:
            continue
        print(f"{key}: running (load {load_average()})", file=sys.stderr, flush=True)
        load = load_average()
        if engine == "deepinfer":
            r = deepinfer_run(args, models[model], context)
            r["disk_bytes"] = safetensors_bytes(models[model])
            r["kv_bytes_per_token"] = results["kv"][model]["bytes_per_token"]
        else:
            r = llama_run(args, context)
            r["disk_bytes"] = pathlib.Path(args.llama_gguf).stat().st_size
            r["llama_bin"], r["llama_gguf"] = args.llama_bin, args.llama_gguf
        r["load_before"], r["load_after"] = load, load_average()
        results["runs"][key] = r
        print(f"{key}: {r['wall_s']:.0f} s, peaks MiB "
              + ", ".join(f"{k} {v:,.0f}" for k, v in r["peak_mib"].items()),
              file=sys.stderr, flush=True)
        save()
    results["load_after"] = load_average()
    save()
    report(results, contexts)


if __name__ == "__main__":
    main()
