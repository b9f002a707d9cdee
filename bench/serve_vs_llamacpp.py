#!/usr/bin/env python3
"""Serving speed: `deepinfer serve` vs llama.cpp's `llama-server`, both driven by `deepinfer bench`.

The peer is llama.cpp's own server with parallel slots and continuous batching, built from the
llama-cpp-python 0.3.36 sdist by bench/build_llama_server.sh, on the same GGUF:
  llama-server -m MODEL -t T --parallel C -c (C x N_CTX)     (one slot of N_CTX tokens per stream)
  deepinfer serve --model MODEL --threads T --max-model-len N_CTX
Each concurrency level C gets fresh servers (llama-server's slot count is a start-up flag; deepinfer
is restarted too, so both start cold), the engines run back to back at each level and their order
alternates between repeats. Per level and engine:
  * random prompts of --input-len tokens (exact, counted by each server's own tokenizer endpoint:
    deepinfer's POST /tokenize {prompt}, llama-server's POST /tokenize {content}),
    --output-len output tokens with EOS ignored (`ignore_eos`, which both servers honor), greedy,
    streamed; max(8, K x C) requests with at most C in flight (K = --requests-per-stream):
    output tokens/s, TTFT / TPOT / ITL p50 and p99, and the server's peak RSS while the level ran
    (VmRSS sampled every 100 ms);
  * on the one-stream servers, a shared prefix of --prefix-len tokens: a cold request, then a hot
    one with the same prefix and different 32 words, --prefix-pairs pairs: TTFT p50 cold vs hot.
Medians over --repeats are printed as Markdown on stdout, with the load average before and after
every measurement; per-repeat lines go to stderr; raw bench JSON and summary.json go to --out-dir.

Flash attention: llama-server runs with its default `-fa auto` (or --llama-flash-attn); a short
probe start with `-lv 4` reads what auto resolved to, and the output says it. deepinfer has no
switch: its attention is always the block-wise online-softmax kernel (flash-attention style,
src/kernels/cpu/attention.h), i.e. the counterpart of `-fa on`; its KV cache is f32 by default,
llama-server's is f16; the engine `deepinfer-f16` is deepinfer with `--kv-cache-dtype f16`.
--plot PNG draws output tokens/s against streams for every engine (bench/plots.py).

The same probe checks that llama-server survives its warm-up with the default extra buffer types:
on a CPU with AMX, ggml 0.25.3's AMX matmul for this model's Q4_1/Q8_0 weights dies with SIGILL /
SIGSEGV (seen on this project's machine), and the run falls back to `--no-repack` (no AMX or
repacked weights: the AVX-512 path) and says so (--llama-repack forces either way).

llama-cpp-python's one-request-at-a-time server (the peer of earlier runs) is still available:
--engines deepinfer,llama-server,llama-cpp-python (needs --python with llama_cpp.server); its
rows are printed as a footnote table.

Usage (from the repo root; bench/run_all.sh does this):
  python3 bench/serve_vs_llamacpp.py --deepinfer build/deepinfer \
      --llama-bin "$(bench/build_llama_server.sh)" --out-dir bench/results/serve \
      > bench/results/serve.md
"""

import argparse
import json
import os
import pathlib
import re
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
CACHE = pathlib.Path(os.environ.get("DEEPINFER_CACHE", pathlib.Path.home() / ".cache/deepinfer"))
ENGINES = ("deepinfer", "deepinfer-f16", "llama-server", "llama-cpp-python")


def load_average() -> str:
    return " ".join(pathlib.Path("/proc/loadavg").read_text().split()[:3])


def load1() -> float:
    return float(pathlib.Path("/proc/loadavg").read_text().split()[0])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class StatusSampler:
    """Peaks (KiB) of `fields` of /proc/PID/status, read every `interval` s while the process
    lives, and when each was first reached (s after the start); `samples` counts the reads."""

    def __init__(self, pid: int, fields=("VmRSS",), interval: float = 0.1):
        self.pid, self.interval, self.t0 = pid, interval, time.monotonic()
        self.peaks_kib = {f: 0 for f in fields}
        self.peak_at_s = {f: 0.0 for f in fields}
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        path = pathlib.Path(f"/proc/{self.pid}/status")
        while not self._stop.is_set():
            try:
                text = path.read_text()
            except OSError:
                return
            for line in text.splitlines():
                key, _, value = line.partition(":")
                if key in self.peaks_kib and int(value.split()[0]) > self.peaks_kib[key]:
                    self.peaks_kib[key] = int(value.split()[0])
                    self.peak_at_s[key] = time.monotonic() - self.t0
            self.samples += 1
            self._stop.wait(self.interval)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


class RssSampler(StatusSampler):
    """Highest VmRSS of a process while active."""

    def __init__(self, pid: int):
        super().__init__(pid)

    @property
    def peak_kib(self) -> int:
        return self.peaks_kib["VmRSS"]


class EngineDied(Exception):
    def __init__(self, name, returncode, log):
        super().__init__(f"{name} exited with {returncode}")
        self.name, self.returncode, self.log = name, returncode, log


class Engine:
    def __init__(self, name: str, cmd: list, port: int, ready_path: str, env=None):
        self.name, self.port, self.cmd = name, port, cmd
        self.base = f"http://127.0.0.1:{port}"
        self.log = tempfile.NamedTemporaryFile(prefix=f"serve-{name}-", suffix=".log",
                                               delete=False)
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                log = self.log_text()
                self.stop()
                raise EngineDied(name, self.proc.returncode, log)
            try:
                with urllib.request.urlopen(self.base + ready_path, timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.2)
        self.stop()
        sys.exit(f"{name} was not ready in 180 s: {' '.join(cmd)}")

    def log_text(self) -> str:
        return pathlib.Path(self.log.name).read_text(errors="replace")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        if os.path.exists(self.log.name):
            os.unlink(self.log.name)


def llama_server_cmd(args, parallel: int, port: int, extra=()) -> list:
    cmd = [str(pathlib.Path(args.llama_bin) / "llama-server"), "-m", args.model,
           "-a", "smollm2", "-t", str(args.threads), "--parallel", str(parallel),
           "-c", str(parallel * args.n_ctx), "-fa", args.llama_flash_attn,
           "--host", "127.0.0.1", "--port", str(port)]
    if args.no_repack:
        cmd.append("--no-repack")
    return cmd + args.llama_args.split() + list(extra)


def probe_llama_server(args) -> dict:
    """Starts llama-server once with -lv 4: does the warm-up survive with the default extra
    buffer types, and what does `-fa auto` resolve to? Sets args.no_repack."""
    notes = {}
    modes = {"auto": [False, True], "on": [False], "off": [True]}[args.llama_repack]
    for no_repack in modes:
        args.no_repack = no_repack
        port = free_port()
        try:
            e = Engine("llama-server", llama_server_cmd(args, 1, port, ["-lv", "4"]), port,
                       "/health")
        except EngineDied as died:
            sig = -died.returncode if died.returncode < 0 else 0
            why = (f"signal {signal.Signals(sig).name}" if sig else f"exit {died.returncode}")
            if "AMX model buffer size" in died.log:
                why += ", in a run with weights in AMX buffers"
            notes["default_crash"] = why
            retry = "; retrying with --no-repack" if not no_repack and len(modes) > 1 else ""
            print(f"llama-server died during its warm-up ({why}) with the default extra buffer "
                  f"types{retry}\n{died.log[-600:]}", file=sys.stderr)
            continue
        log = e.log_text()
        e.stop()
        fa = re.search(r"resolve_fused_ops: Flash Attention (\w+)|flash_attn\s*=\s*(\w+)", log)
        notes["flash_attn"] = args.llama_flash_attn
        if "Flash Attention enabled" in log:
            notes["flash_attn_resolved"] = "enabled"
        elif "Flash Attention not supported" in log:
            notes["flash_attn_resolved"] = "disabled (not supported)"
        elif fa:
            notes["flash_attn_resolved"] = fa.group(1) or fa.group(2)
        else:
            notes["flash_attn_resolved"] = "unknown"
        kv = re.search(r"llama_kv_cache: .*K \((\w+)\).*V \((\w+)\)", log)
        notes["kv_cache_type"] = f"K {kv.group(1)}, V {kv.group(2)}" if kv else "f16 (default)"
        # Weights in extra buffer types (AMX, CPU_REPACK) rather than the mapped file.
        notes["extra_buffers"] = {b: float(mib) for b, mib in re.findall(
            r"(\S+) model buffer size\s*=\s*([\d.]+) MiB", log) if b not in ("CPU_Mapped", "CPU")}
        notes["no_repack"] = no_repack
        return notes
    sys.exit("llama-server does not start on this machine; see the log above")


def start_engine(name: str, args, parallel: int) -> Engine:
    port = free_port()
    if name.startswith("deepinfer"):
        cmd = [args.deepinfer, "serve", "--model", args.model, "--threads", str(args.threads),
               "--host", "127.0.0.1", "--port", str(port), "--served-model-name", "smollm2",
               "--max-model-len", str(args.n_ctx), *args.deepinfer_args.split()]
        if name == "deepinfer-f16":
            cmd += ["--kv-cache-dtype", "f16"]
        return Engine(name, cmd, port, "/health")
    if name == "llama-server":
        return Engine(name, llama_server_cmd(args, parallel, port), port, "/health")
    cmd = [args.python, "-m", "llama_cpp.server", "--model", args.model, "--model_alias",
           "smollm2", "--n_threads", str(args.threads), "--n_threads_batch", str(args.threads),
           "--n_ctx", str(args.n_ctx), "--n_batch", "512", "--host", "127.0.0.1", "--port",
           str(port), "--interrupt_requests", "False"]
    return Engine(name, cmd, port, "/v1/models")


def run_bench(args, engine: Engine, extra: list, out: pathlib.Path) -> dict:
    cmd = [args.deepinfer, "bench", "--base", engine.base, "--model", "smollm2",
           "--max-model-len", str(args.n_ctx), "--no-progress", "--json", str(out),
           "--label", engine.name, *extra]
    if out.exists():
        out.unlink()
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0 or not out.exists():
        print(f"bench failed ({p.returncode}): {' '.join(cmd)}\n{p.stderr[-2000:]}",
              file=sys.stderr)
    return json.loads(out.read_text()) if out.exists() else {}


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else float("nan")


def fmt(v, digits=0):
    if v != v:  # nan
        return "n/a"
    return f"{v:,.{digits}f}"


def ratio(a, b):
    return f"{a / b:.2f}x" if a == a and b == b and b > 0 else "n/a"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--deepinfer", default=str(REPO / "build" / "deepinfer"))
    ap.add_argument("--llama-bin", default=os.environ.get("LLAMA_BIN",
                                                          str(CACHE / "llama.cpp/build/bin")),
                    help="folder with llama-server (bench/build_llama_server.sh prints it)")
    ap.add_argument("--python", default=sys.executable,
                    help="interpreter with llama_cpp.server (engine llama-cpp-python only)")
    ap.add_argument("--model", default=str(CACHE / "models/SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--n-ctx", type=int, default=4096,
                    help="context per stream: deepinfer --max-model-len, llama-server slot size")
    ap.add_argument("--input-len", type=int, default=256)
    ap.add_argument("--output-len", type=int, default=128)
    ap.add_argument("--concurrency", default="1,4,8,16")
    ap.add_argument("--requests-per-stream", type=int, default=2)
    ap.add_argument("--prefix-len", type=int, default=2000)
    ap.add_argument("--prefix-pairs", type=int, default=5, help="0: no shared-prefix test")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--engines", default="deepinfer,llama-server",
                    help=f"comma-separated, from {', '.join(ENGINES)}")
    ap.add_argument("--llama-flash-attn", default="auto", choices=["auto", "on", "off"])
    ap.add_argument("--llama-repack", default="auto", choices=["auto", "on", "off"],
                    help="auto: default extra buffers (AMX, repacked weights) unless the probe "
                         "start crashes, then --no-repack")
    ap.add_argument("--llama-args", default="", help="more llama-server flags, space-separated")
    ap.add_argument("--deepinfer-args", default="",
                    help="more `deepinfer serve` flags, space-separated")
    ap.add_argument("--out-dir", default=str(pathlib.Path(tempfile.gettempdir()) / "serve-bench"))
    ap.add_argument("--plot", help="write a PNG of throughput against streams here")
    args = ap.parse_args()
    engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    for e in engines:
        if e not in ENGINES:
            sys.exit(f"unknown engine {e!r}: use {', '.join(ENGINES)}")
    levels = [int(c) for c in args.concurrency.split(",")]
    out_dir = pathlib.Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    # Raw files of an earlier run would read as this one's (the names are the same).
    for old in [*out_dir.glob("*-c*-r*.json"), *out_dir.glob("*-prefix-r*.json")]:
        old.unlink()

    llama_notes = {}
    args.no_repack = False
    if "llama-server" in engines:
        if not (pathlib.Path(args.llama_bin) / "llama-server").exists():
            sys.exit(f"no llama-server in {args.llama_bin}: run bench/build_llama_server.sh")
        llama_notes = probe_llama_server(args)
        print(f"llama-server: -fa {args.llama_flash_attn} -> {llama_notes['flash_attn_resolved']}"
              f", KV {llama_notes['kv_cache_type']}"
              f"{', --no-repack' if args.no_repack else ''}", file=sys.stderr)

    started = time.time()
    loads = {"start": load_average(), "repeats": []}
    # results[engine][level] = list over repeats of dicts (metrics, rss, loads)
    results = {e: {c: [] for c in levels} for e in engines}
    prefix = {e: [] for e in engines}
    prefix_level = 1 if args.prefix_pairs > 0 else None
    for rep in range(args.repeats):
        order = engines if rep % 2 == 0 else engines[::-1]
        todo = list(levels) + ([1] if prefix_level and 1 not in levels else [])
        for c in todo:
            for name in order:
                try:
                    engine = start_engine(name, args, c)
                except EngineDied as died:
                    sys.exit(f"{name} exited with {died.returncode} at start-up (C={c}):\n"
                             f"{died.log[-3000:]}")
                try:
                    if c in levels:
                        n = max(8, args.requests_per_stream * c)
                        out = out_dir / f"{name}-c{c}-r{rep}.json"
                        before = load_average()
                        with RssSampler(engine.proc.pid) as rss:
                            j = run_bench(args, engine, [
                                "--input-len", str(args.input_len), "--output-len",
                                str(args.output_len), "--concurrency", str(c), "--num-prompts",
                                str(n), "--seed", str(1000 * rep + c)], out)
                        after = load_average()
                        metrics = j["runs"][0]["metrics"] if j.get("runs") else None
                        results[name][c].append({"metrics": metrics,
                                                 "rss_mib": rss.peak_kib / 1024.0,
                                                 "load_before": before, "load_after": after})
                        if metrics:
                            print(f"[{rep + 1}/{args.repeats}] {name} c={c}: "
                                  f"{metrics['output_throughput']:.1f} tok/s, TTFT p50 "
                                  f"{metrics['ttft_ms']['p50']:.0f} ms, TPOT p50 "
                                  f"{metrics['tpot_ms']['p50']:.1f} ms, rss "
                                  f"{rss.peak_kib / 1024:.0f} MiB, load {before} -> {after}",
                                  file=sys.stderr)
                    if c == prefix_level:
                        out = out_dir / f"{name}-prefix-r{rep}.json"
                        j = run_bench(args, engine, [
                            "--prefix-len", str(args.prefix_len), "--suffix-len", "32",
                            "--output-len", "16", "--concurrency", "1", "--num-prompts",
                            str(args.prefix_pairs), "--seed", str(77 + rep)], out)
                        if j.get("runs"):
                            prefix[name].append(j["runs"][0])
                            print(f"[{rep + 1}/{args.repeats}] {name} prefix: cold "
                                  f"{j['runs'][0]['ttft_p50_cold_ms']:.0f} ms, hot "
                                  f"{j['runs'][0]['ttft_p50_hot_ms']:.0f} ms", file=sys.stderr)
                finally:
                    engine.stop()
        loads["repeats"].append(load_average())
    elapsed = time.time() - started

    def agg(name, c, key):
        """Median over the repeats of one number of a level: tput, rss, failed, or a latency
        percentile such as ttft50 / tpot99 / itl50."""
        vals = []
        for r in results[name][c]:
            m = r["metrics"]
            if m is None:
                continue
            if key == "rss":
                vals.append(r["rss_mib"])
            elif key == "tput":
                vals.append(m["output_throughput"])
            elif key == "failed":
                vals.append(m["failed"])
            else:
                vals.append(m[f"{key[:-2]}_ms"][f"p{key[-2:]}"])
        return median(vals)

    during = [float(r[k].split()[0]) for e in engines for c in levels for r in results[e][c]
              for k in ("load_before", "load_after")]
    main_engines = [e for e in engines if e != "llama-cpp-python"]
    print(f"Model `{pathlib.Path(args.model).name}`, {args.threads} threads per server, prompts "
          f"of {args.input_len} tokens, {args.output_len} output tokens (EOS ignored), greedy, "
          f"streamed; max(8, {args.requests_per_stream} x C) requests per level, at most C in "
          f"flight; median of {args.repeats} repeats (fresh servers for every level, engines "
          f"back to back, order alternating between repeats). {elapsed / 60:.1f} minutes.\n")
    print("Servers:\n")
    extra = f" {args.deepinfer_args.strip()}" if args.deepinfer_args.strip() else ""
    print(f"- deepinfer: `deepinfer serve --threads {args.threads} --max-model-len {args.n_ctx}"
          f"{extra}` (KV cache f32 by default; attention is always the block-wise online-softmax "
          f"kernel, the counterpart of llama.cpp's `-fa on`; it has no switch)"
          + ("; deepinfer-f16: the same with `--kv-cache-dtype f16`" if "deepinfer-f16" in engines
             else ""))
    if "llama-server" in engines:
        shown = llama_server_cmd(args, 1, 0)[1:]
        shown[shown.index("--parallel") + 1] = "C"
        shown[shown.index("-c") + 1] = f"C*{args.n_ctx}"
        shown[shown.index("-m") + 1] = pathlib.Path(args.model).name
        net = ("--host", "--port")
        cmd = " ".join(a for i, a in enumerate(shown) if a not in net and shown[i - 1] not in net)
        print(f"- llama-server (llama.cpp from the llama-cpp-python 0.3.36 sdist, "
              f"bench/build_llama_server.sh): `llama-server {cmd}`; flash attention "
              f"`-fa {args.llama_flash_attn}` resolved to "
              f"**{llama_notes['flash_attn_resolved']}** (its start-up log), KV cache "
              f"{llama_notes['kv_cache_type']}, continuous batching on, prompt cache on "
              f"(default `--cache-ram` 8192 MiB, counted in its RSS)")
        if args.no_repack:
            why = llama_notes.get("default_crash")
            print("  - `--no-repack`: " + (
                f"with the default extra buffer types llama-server died in its warm-up ({why}; "
                f"on this project's machine gdb puts it in ggml's AMX matmul kernels), so it ran "
                f"without AMX or repacked weights (the AVX-512 path)" if why
                else "forced by --llama-repack off"))
        elif llama_notes.get("extra_buffers"):
            print("  - weights in extra buffer types: " + ", ".join(
                f"{b} {mib:.0f} MiB" for b, mib in llama_notes["extra_buffers"].items()))
    if "llama-cpp-python" in engines:
        print("- llama-cpp-python (footnote): `python -m llama_cpp.server --n_threads "
              f"{args.threads} --n_ctx {args.n_ctx} --n_batch 512 --interrupt_requests False`, "
              "one request at a time")
    print(f"\nLoad average (1/5/15 min) at start: {loads['start']}; after each repeat: "
          f"{' | '.join(loads['repeats'])}; 1-minute value around the measurements: min "
          f"{fmt(min(during, default=float('nan')), 2)}, median {fmt(median(during), 2)}, max "
          f"{fmt(max(during, default=float('nan')), 2)}"
          + (" (**not a quiet machine**: other processes shared the cores; one server and "
             "the load generator alone keep it near 2)"
             if float(loads["start"].split()[0]) > 1.0 or (during and median(during) > 3.0)
             else "") + ".\n")

    def table(names):
        print("| streams | engine | out tok/s | TTFT p50 ms | TTFT p99 ms | TPOT p50 ms | "
              "TPOT p99 ms | ITL p50 ms | ITL p99 ms | peak RSS MiB | failed |")
        print("|---|---|---|---|---|---|---|---|---|---|---|")
        for c in levels:
            for name in names:
                print(f"| {c} | {name} | {fmt(agg(name, c, 'tput'), 1)} | "
                      f"{fmt(agg(name, c, 'ttft50'))} | {fmt(agg(name, c, 'ttft99'))} | "
                      f"{fmt(agg(name, c, 'tpot50'), 1)} | {fmt(agg(name, c, 'tpot99'), 1)} | "
                      f"{fmt(agg(name, c, 'itl50'), 1)} | {fmt(agg(name, c, 'itl99'), 1)} | "
                      f"{fmt(agg(name, c, 'rss'))} | {fmt(agg(name, c, 'failed'))} |")

    table(main_engines)
    for ours in [e for e in engines if e.startswith("deepinfer")]:
        if "llama-server" not in engines:
            break
        peer = "llama-server"
        print(f"\n| streams | throughput {ours} / {peer} | TTFT p50 {peer} / {ours} | "
              f"TPOT p50 {peer} / {ours} | per-repeat out tok/s {ours} "
              f"| per-repeat out tok/s {peer} |")
        print("|---|---|---|---|---|---|")
        for c in levels:
            per = {n: " / ".join(fmt(r["metrics"]["output_throughput"], 1) if r["metrics"]
                                 else "failed" for r in results[n][c])
                   for n in (ours, peer)}
            print(f"| {c} | **{ratio(agg(ours, c, 'tput'), agg(peer, c, 'tput'))}** | "
                  f"{ratio(agg(peer, c, 'ttft50'), agg(ours, c, 'ttft50'))} | "
                  f"{ratio(agg(peer, c, 'tpot50'), agg(ours, c, 'tpot50'))} | "
                  f"{per[ours]} | {per[peer]} |")
    if "llama-server" in engines and any(e.startswith("deepinfer") for e in engines):
        print("\nRatios above 1 favour deepinfer (more tokens/s; first token or next token "
              "sooner).")
    if "llama-cpp-python" in engines:
        print("\nFootnote: llama-cpp-python's server (one request at a time behind a global "
              "lock), same workload:\n")
        table(["llama-cpp-python"])
    # `ignore_eos` is what makes every answer --output-len long; a server that ignored it would
    # be measured on shorter answers, so the totals are checked against the request.
    short = [f"{name} c={c} repeat {i + 1}: {r['metrics']['total_output_tokens']} of "
             f"{r['metrics']['completed'] * args.output_len}"
             for name in engines for c in levels for i, r in enumerate(results[name][c])
             if r["metrics"] and r["metrics"]["total_output_tokens"]
             != r["metrics"]["completed"] * args.output_len]
    counted = sorted({r["metrics"]["token_counts_from"] for name in engines for c in levels
                      for r in results[name][c] if r["metrics"]})
    print("\nOutput lengths: " + (
        f"**short of {args.output_len} tokens per request** ({'; '.join(short)} output tokens): "
        f"those servers stopped at EOS despite `ignore_eos`" if short else
        f"every completed request gave exactly {args.output_len} tokens (counted from "
        f"{' and '.join(counted) or 'nothing'})") + ".")
    print("\nTTFT = send to first streamed text; TPOT = (E2E - TTFT) / (output tokens - 1) per "
          "request; ITL = every gap between streamed chunks, pooled (vLLM's definitions, "
          "`deepinfer bench`). Peak RSS = highest VmRSS of the server process during the "
          "level.")
    if prefix_level and any(prefix.values()):
        print(f"\nShared prefix of {args.prefix_len} tokens + 32 words, {args.prefix_pairs} "
              f"cold/hot pairs at concurrency 1 (one-stream servers):\n")
        print("| engine | cold TTFT p50 ms | hot TTFT p50 ms | hot / cold speedup | "
              "hot cached tokens |")
        print("|---|---|---|---|---|")
        for name in engines:
            runs = prefix[name]
            cold = median([r["ttft_p50_cold_ms"] for r in runs])
            hot = median([r["ttft_p50_hot_ms"] for r in runs])
            cached = median([r["hot_cached_tokens_mean"] for r in runs])
            print(f"| {name} | {fmt(cold)} | {fmt(hot)} | {ratio(cold, hot)} | {fmt(cached)} |")
    (out_dir / "summary.json").write_text(json.dumps(
        {"args": {k: v for k, v in vars(args).items()}, "llama_server": llama_notes,
         "loads": loads, "levels": levels, "elapsed_s": elapsed,
         "results": {n: {str(c): results[n][c] for c in levels} for n in engines},
         "prefix": prefix}, indent=1) + "\n")
    if args.plot:
        from plots import serve_throughput

        serve_throughput(json.loads((out_dir / "summary.json").read_text()),
                         pathlib.Path(args.plot))


if __name__ == "__main__":
    main()
