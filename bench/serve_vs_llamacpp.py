#!/usr/bin/env python3
"""Serving speed: `deepinfer serve` vs llama-cpp-python's server, both driven by `deepinfer bench`.

For each engine (started fresh for every repeat, engines alternating):
  * random prompts of --input-len tokens (exact, counted by the server's tokenizer), --output-len
    output tokens with EOS ignored, at each --concurrency level (max(8, K x C) requests per
    level, K = --requests-per-stream): TTFT p50/p99, TPOT p50, aggregate output tokens/s, and the
    server's peak RSS while the level ran (sampled from /proc every 100 ms);
  * a shared prefix of --prefix-len tokens: cold request, then hot request with the same prefix
    and a different 32-word suffix, 5 pairs at concurrency 1: TTFT p50 cold vs hot.
Medians over --repeats are reported as Markdown tables on stdout; raw bench JSON files are kept
in --out-dir.

llama-cpp-python's server runs one request at a time (a global lock around its single llama.cpp
context); it is started with --interrupt_requests False so that a new request waits instead of
cutting off the running stream (its default).

Usage (from the repo root):
  /tmp/refvenv/bin/python bench/serve_vs_llamacpp.py --deepinfer build/deepinfer \
      --out-dir bench/results/serve > bench/results/serve.md
"""

import argparse
import json
import os
import pathlib
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

REPO = pathlib.Path(__file__).resolve().parents[1]


def load_average() -> str:
    return " ".join(pathlib.Path("/proc/loadavg").read_text().split()[:3])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RssSampler:
    """Highest VmRSS of a process while active."""

    def __init__(self, pid: int):
        self.pid, self.peak_kib, self._stop = pid, 0, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            try:
                for line in pathlib.Path(f"/proc/{self.pid}/status").read_text().splitlines():
                    if line.startswith("VmRSS:"):
                        self.peak_kib = max(self.peak_kib, int(line.split()[1]))
            except OSError:
                return
            self._stop.wait(0.1)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


class Engine:
    def __init__(self, name: str, cmd: list, port: int, ready_path: str):
        self.name, self.port = name, port
        self.base = f"http://127.0.0.1:{port}"
        self.log = tempfile.NamedTemporaryFile(prefix=f"serve-{name}-", suffix=".log",
                                               delete=False)
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                sys.exit(f"{name} exited: {pathlib.Path(self.log.name).read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(self.base + ready_path, timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.2)
        self.stop()
        sys.exit(f"{name} was not ready in 180 s")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        os.unlink(self.log.name)


def start_engine(name: str, args) -> Engine:
    port = free_port()
    if name == "deepinfer":
        cmd = [args.deepinfer, "serve", "--model", args.model, "--threads", str(args.threads),
               "--host", "127.0.0.1", "--port", str(port), "--served-model-name", "smollm2",
               "--max-model-len", str(args.n_ctx)]
        return Engine(name, cmd, port, "/health")
    cmd = [args.python, "-m", "llama_cpp.server", "--model", args.model, "--model_alias",
           "smollm2", "--n_threads", str(args.threads), "--n_threads_batch", str(args.threads),
           "--n_ctx", str(args.n_ctx), "--n_batch", "512", "--host", "127.0.0.1", "--port",
           str(port), "--interrupt_requests", "False"]
    return Engine(name, cmd, port, "/v1/models")


def run_bench(args, engine: Engine, extra: list, out: pathlib.Path) -> dict:
    cmd = [args.deepinfer, "bench", "--base", engine.base, "--model", "smollm2",
           "--max-model-len", str(args.n_ctx), "--no-progress", "--json", str(out),
           "--label", engine.name, *extra]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0 or not out.exists():
        print(f"bench failed ({p.returncode}): {' '.join(cmd)}\n{p.stderr[-2000:]}",
              file=sys.stderr)
    return json.loads(out.read_text()) if out.exists() else {}


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--deepinfer", default=str(REPO / "build" / "deepinfer"))
    ap.add_argument("--python", default=sys.executable, help="interpreter with llama_cpp.server")
    ap.add_argument("--model", default=os.path.expanduser(
        "~/.cache/deepinfer/models/SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--n-ctx", type=int, default=4096)
    ap.add_argument("--input-len", type=int, default=256)
    ap.add_argument("--output-len", type=int, default=128)
    ap.add_argument("--concurrency", default="1,4,8,16")
    ap.add_argument("--requests-per-stream", type=int, default=2)
    ap.add_argument("--prefix-len", type=int, default=2000)
    ap.add_argument("--prefix-pairs", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--engines", default="deepinfer,llama.cpp")
    ap.add_argument("--out-dir", default=str(pathlib.Path(tempfile.gettempdir()) / "serve-bench"))
    args = ap.parse_args()
    out_dir = pathlib.Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    levels = [int(c) for c in args.concurrency.split(",")]
    engines = args.engines.split(",")

    loads = [load_average()]
    # results[engine][level] = list over repeats of (metrics dict, peak rss MiB)
    results = {e: {c: [] for c in levels} for e in engines}
    prefix = {e: [] for e in engines}
    for rep in range(args.repeats):
        for name in engines:
            engine = start_engine(name, args)
            try:
                for c in levels:
                    n = max(8, args.requests_per_stream * c)
                    out = out_dir / f"{name}-c{c}-r{rep}.json"
                    with RssSampler(engine.proc.pid) as rss:
                        j = run_bench(args, engine, [
                            "--input-len", str(args.input_len), "--output-len",
                            str(args.output_len), "--concurrency", str(c), "--num-prompts",
                            str(n), "--seed", str(1000 * rep + c)], out)
                    metrics = j["runs"][0]["metrics"] if j.get("runs") else None
                    results[name][c].append((metrics, rss.peak_kib / 1024.0))
                    if metrics:
                        print(f"[{rep + 1}/{args.repeats}] {name} c={c}: "
                              f"{metrics['output_throughput']:.1f} tok/s, TTFT p50 "
                              f"{metrics['ttft_ms']['p50']:.0f} ms, rss {rss.peak_kib / 1024:.0f} "
                              f"MiB, load {load_average()}", file=sys.stderr)
                out = out_dir / f"{name}-prefix-r{rep}.json"
                j = run_bench(args, engine, [
                    "--prefix-len", str(args.prefix_len), "--suffix-len", "32", "--output-len",
                    "16", "--concurrency", "1", "--num-prompts", str(args.prefix_pairs),
                    "--seed", str(77 + rep)], out)
                if j.get("runs"):
                    prefix[name].append(j["runs"][0])
                    print(f"[{rep + 1}/{args.repeats}] {name} prefix: cold "
                          f"{j['runs'][0]['ttft_p50_cold_ms']:.0f} ms, hot "
                          f"{j['runs'][0]['ttft_p50_hot_ms']:.0f} ms", file=sys.stderr)
            finally:
                engine.stop()
        loads.append(load_average())

    def agg(name, c, key):
        vals = []
        for metrics, rss in results[name][c]:
            if metrics is None:
                continue
            vals.append({"ttft50": metrics["ttft_ms"]["p50"], "ttft99": metrics["ttft_ms"]["p99"],
                         "tpot50": metrics["tpot_ms"]["p50"],
                         "tput": metrics["output_throughput"],
                         "failed": metrics["failed"], "rss": rss}[key])
        return median(vals)

    print(f"Model `{pathlib.Path(args.model).name}`, {args.threads} threads per server, prompts "
          f"of {args.input_len} tokens, {args.output_len} output tokens (EOS ignored), "
          f"max(8, {args.requests_per_stream} x C) requests per level; median of {args.repeats} "
          f"repeats (servers "
          f"restarted and alternated each repeat). Load average at start and after each repeat: "
          f"{' | '.join(loads)}.\n")
    header = "| C |"
    sep = "|---|"
    for name in engines:
        header += (f" {name} TTFT p50 ms | {name} TTFT p99 ms | {name} TPOT p50 ms | "
                   f"{name} out tok/s | {name} RSS MiB |")
        sep += "---|" * 5
    if len(engines) == 2:
        header += " throughput ratio | TTFT p50 ratio |"
        sep += "---|---|"
    print(header)
    print(sep)
    for c in levels:
        row = f"| {c} |"
        for name in engines:
            row += (f" {agg(name, c, 'ttft50'):.0f} | {agg(name, c, 'ttft99'):.0f} | "
                    f"{agg(name, c, 'tpot50'):.1f} | {agg(name, c, 'tput'):.1f} | "
                    f"{agg(name, c, 'rss'):.0f} |")
        if len(engines) == 2:
            a, b = engines
            row += (f" {agg(a, c, 'tput') / agg(b, c, 'tput'):.2f}x | "
                    f"{agg(b, c, 'ttft50') / agg(a, c, 'ttft50'):.2f}x |")
        print(row)
    failed = {n: sum(agg(n, c, "failed") for c in levels) for n in engines}
    print(f"\nFailed requests (median per level, summed): {failed}. Throughput ratio = "
          f"{engines[0]} / {engines[-1]}; TTFT p50 ratio = {engines[-1]} / {engines[0]} (above 1: "
          f"{engines[0]} answers first tokens sooner).\n")
    print(f"Shared prefix of {args.prefix_len} tokens + 32 words, {args.prefix_pairs} cold/hot "
          f"pairs at concurrency 1:\n")
    print("| engine | cold TTFT p50 ms | hot TTFT p50 ms | hot / cold speedup | "
          "hot cached tokens |")
    print("|---|---|---|---|---|")
    for name in engines:
        runs = prefix[name]
        cold = median([r["ttft_p50_cold_ms"] for r in runs])
        hot = median([r["ttft_p50_hot_ms"] for r in runs])
        cached = median([r["hot_cached_tokens_mean"] for r in runs])
        print(f"| {name} | {cold:.0f} | {hot:.0f} | {cold / hot:.1f}x | "
              f"{'n/a' if cached != cached else f'{cached:.0f}'} |")
    (out_dir / "summary.json").write_text(json.dumps(
        {"loads": loads, "levels": levels,
         "results": {n: {str(c): results[n][c] for c in levels} for n in engines},
         "prefix": prefix}, indent=1) + "\n")


if __name__ == "__main__":
    main()
