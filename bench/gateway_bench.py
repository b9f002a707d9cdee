#!/usr/bin/env python3
"""What `deepinfer gateway` adds, next to nginx and Caddy as plain reverse proxies.

    DEEPINFER_BIN=build/deepinfer .venv/bin/python bench/gateway_bench.py [--parts ...]

Every proxy forwards to the same mock backend, a separate single-threaded epoll process
(bench/gateway_loadgen.cc `serve`, compiled on the fly), and every load comes from the same
generator (gateway_loadgen, one epoll thread), so the rows differ only in the proxy. Added
latency = proxy - direct, same run.

Parts (each prints a Markdown table; paste into docs/gateway.md / docs/benchmarks.md):
  wrk       1 KB JSON POSTs, closed loop with wrk at fixed concurrency (throughput and latency).
  rate      1 KB JSON POSTs, open loop at fixed request rates: latency counts from when each
            request was due, so a proxy that falls behind shows it (no coordinated omission).
  sse       SSE streams: per-event delivery time (arrival minus the backend's send stamp, one
            host clock), through each proxy and direct; plus time to the first event.
  cancel    cancel-to-upstream-close latency, p50/p99, in the three backend phases (waiting for
            headers, non-streamed answer, mid-stream), measured by the harness backend of the
            e2e tests (tests/e2e/gateway_fixtures.py) on CLOCK_MONOTONIC.
  memory    RSS per open stream: 1,000 SSE streams held open through each proxy; (RSS while
            held - RSS before) / streams.
  leaks     100,000 requests (plain, delayed, streamed) from 64 connections, 30 % abandoned at
            random points, through a gateway with small caps (so some wait in its queue);
            slots acquired == released and nothing in flight afterwards.

Needs: a C++17 compiler (c++), and for the comparison rows nginx and caddy (Debian packages
nginx-light, caddy) and for `wrk` wrk (Debian package wrk). A missing proxy drops its rows;
`make test` needs none of this. Everything binds loopback.
"""

import argparse
import json
import os
import pathlib
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "e2e"))

from gateway_fixtures import Gateway, Harness, free_port, metric, wait_for  # noqa: E402

LOADGEN_SRC = REPO / "bench" / "gateway_loadgen.cc"
PATH = "/v1/chat/completions"


def need(tool, what):
    if shutil.which(tool) is None:
        print(f"({what}: {tool} not installed, rows skipped)")
        return False
    return True


def build_loadgen(workdir):
    exe = pathlib.Path(workdir) / "gateway_loadgen"
    cxx = os.environ.get("CXX", "c++")
    if shutil.which(cxx) is None:
        sys.exit(f"gateway_bench: needs a C++ compiler ({cxx}) for {LOADGEN_SRC.name}")
    subprocess.run([cxx, "-O2", "-std=c++17", "-o", str(exe), str(LOADGEN_SRC)], check=True)
    return str(exe)


def start(cmd, **kw):
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, **kw)


def wait_port(port):
    import socket

    def up():
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    wait_for(up, 20, f"port {port}")


def rss_kib(pid):
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


class Pool:
    """The mock backend plus every proxy in front of it."""

    def __init__(self, loadgen, workdir, gateway_args=(), proxies=("nginx", "caddy"),
                 compare=()):
        self.loadgen = loadgen
        self.work = pathlib.Path(workdir)
        self.mock_port = free_port()
        self.procs = [start([loadgen, "serve", str(self.mock_port)])]
        wait_port(self.mock_port)
        mock = f"http://127.0.0.1:{self.mock_port}"
        self.targets = [("direct", mock, [], self.procs[0].pid)]
        if "nginx" in proxies and shutil.which("nginx"):
            port = free_port()
            conf = self.work / "nginx.conf"
            conf.write_text(f"""
worker_processes 1;
master_process off;
daemon off;
worker_rlimit_nofile 16384;
pid {self.work}/nginx.pid;
error_log {self.work}/nginx-error.log warn;
events {{ worker_connections 8192; }}
http {{
  access_log off;
  client_body_temp_path {self.work}/body;
  proxy_temp_path {self.work}/proxy;
  fastcgi_temp_path {self.work}/fcgi; uwsgi_temp_path {self.work}/uwsgi;
  scgi_temp_path {self.work}/scgi;
  upstream mock {{ server 127.0.0.1:{self.mock_port}; keepalive 64; }}
  server {{
    listen 127.0.0.1:{port};
    location / {{
      proxy_pass http://mock;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
      proxy_request_buffering off;
      proxy_read_timeout 3600s;
    }}
  }}
}}
""")
            p = start(["nginx", "-c", str(conf), "-p", str(self.work)])
            self.procs.append(p)
            wait_port(port)
            self.targets.append(("nginx", f"http://127.0.0.1:{port}", [], p.pid))
        if "caddy" in proxies and shutil.which("caddy"):
            port = free_port()
            caddyfile = self.work / "Caddyfile"
            caddyfile.write_text(f"""{{
  admin off
  auto_https off
  storage file_system {self.work}/caddy
}}
http://127.0.0.1:{port} {{
  bind 127.0.0.1
  reverse_proxy 127.0.0.1:{self.mock_port} {{
    flush_interval -1
  }}
}}
""")
            env = dict(os.environ, HOME=str(self.work), XDG_DATA_HOME=str(self.work),
                       XDG_CONFIG_HOME=str(self.work), GOMAXPROCS="1")
            p = start(["caddy", "run", "--config", str(caddyfile), "--adapter", "caddyfile"],
                      env=env)
            self.procs.append(p)
            wait_port(port)
            self.targets.append(("caddy", f"http://127.0.0.1:{port}", [], p.pid))
        gw_args = ["--max-active-per-backend", "4096", "--max-waiting", "1024",
                   "--health-interval-ms", "1000", *gateway_args]
        self.gw = Gateway([mock], extra_args=gw_args)
        self.targets.append(("deepinfer gateway", self.gw.url,
                             ["-H", f"Authorization: Bearer {self.gw.key}"], self.gw.proc.pid))
        # A/B rows: the same gateway flags on other deepinfer binaries, in the same rounds.
        self.others = []
        for exe in compare:
            gw = Gateway([mock], extra_args=gw_args, exe=exe)
            self.others.append(gw)
            self.targets.append((f"gateway {exe}", gw.url,
                                 ["-H", f"Authorization: Bearer {gw.key}"], gw.proc.pid))

    def check_no_leaks(self):
        text = self.gw.wait_idle(30)
        assert metric(text, "deepinfer_gateway_slots_acquired_total") == \
            metric(text, "deepinfer_gateway_slots_released_total"), "slot leak"

    def stop(self):
        for gw in [self.gw, *self.others]:
            gw.stop()
        for p in self.procs:
            p.terminate()
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()


def run_loadgen(loadgen, args):
    out = subprocess.run([loadgen, *args], capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise RuntimeError(f"gateway_loadgen {' '.join(args)} failed: {out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def added(row, direct, key):
    return "-" if row is direct else f"{row[key] - direct[key]:.3f}"


def median(values):
    values = sorted(values)
    n = len(values)
    return values[n // 2] if n % 2 else (values[n // 2 - 1] + values[n // 2]) / 2


def cpu_seconds(pid):
    """CPU time of every live thread of `pid` (schedstat: nanoseconds, unlike the 10 ms ticks
    of /proc/PID/stat), plus what its exited threads used (from its stat). Units: seconds."""
    total = 0
    for task in pathlib.Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (FileNotFoundError, ProcessLookupError):
            pass  # the thread just exited
    fields = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    # cutime/cstime are children; threads that exited are in utime/stime only, so take the
    # schedstat sum unless the ticks say more ran (threads that left between two reads).
    ticks = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return max(total / 1e9, ticks)


def rounds_table(pool, label, rounds, measure, keys):
    """Runs `measure(url, headers, pid)` for every target, `rounds` times interleaved (so that a load
    change on the shared machine hits every proxy alike), and prints one row per target: the
    median over rounds of each key, the median added p50 / p99 (proxy minus direct in the same
    round) and the range of the added p50 over the rounds."""
    results = {name: [] for name, *_ in pool.targets}
    for _ in range(rounds):
        for name, url, headers, pid in pool.targets:
            results[name].append(measure(url, headers, pid))
    direct = results[pool.targets[0][0]]
    for name, *_ in pool.targets:
        rs = results[name]
        cells = [f"{median([r[k] for r in rs]):.3f}" if k not in ("rps", "cpu_us") else
                 f"{median([r[k] for r in rs]):.0f}" if k == "rps" else
                 f"{median([r[k] for r in rs]):.1f}" for k in keys]
        if rs is direct:
            extra = ["-", "-", "-"]
        else:
            a50 = [r["p50"] - d["p50"] for r, d in zip(rs, direct)]
            a99 = [r["p99"] - d["p99"] for r, d in zip(rs, direct)]
            extra = [f"{median(a50):.3f}", f"{median(a99):.3f}",
                     f"{min(a50):.3f} to {max(a50):.3f}"]
        print(f"| {name} | {label} | " + " | ".join(cells + extra) + " |", flush=True)


def part_rate(pool, rates, seconds, rounds):
    print(f"\n### Added latency at fixed request rates, 1 KB JSON request and answer "
          f"(open loop, 16 connections, {rounds} interleaved rounds of {seconds} s per cell, "
          f"medians over rounds, {os.cpu_count()} cores shared by all processes)\n")
    print("CPU us/req: CPU time of the proxy's process (for direct: the mock backend's) per "
          "request, all threads, user and system.\n")
    print("| proxy | req/s | p50 ms | p90 ms | p99 ms | p99.9 ms | CPU us/req | added p50 ms | "
          "added p99 ms | added p50 range ms |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for rate in rates:
        def measure(url, headers, pid):
            common = [url + PATH, "--connections", "16", *headers]
            run_loadgen(pool.loadgen, ["rate", *common, "--rate", str(rate), "--seconds", "1"])
            cpu = cpu_seconds(pid)
            r = run_loadgen(pool.loadgen, ["rate", *common, "--rate", str(rate), "--seconds",
                                           str(seconds)])
            cpu = cpu_seconds(pid) - cpu
            assert r["errors"] == 0, r
            return dict(r["latency"], cpu_us=cpu * 1e6 / max(r["latency"]["n"], 1))
        rounds_table(pool, str(rate), rounds, measure, ["p50", "p90", "p99", "p999", "cpu_us"])


def part_sse(pool, streams, events, gap_ms, connections):
    print(f"\n### SSE: time for each event to reach the client ({streams} streams of {events} "
          f"events {gap_ms} ms apart, {connections} at a time)\n")
    print("| proxy | events | p50 ms | p90 ms | p99 ms | added p50 ms | added p99 ms | "
          "first event p50 ms | first event p99 ms |")
    print("|---|---|---|---|---|---|---|---|---|")
    direct = None
    for name, url, headers, _ in pool.targets:
        args = ["sse", url + PATH, *headers, "--streams", str(streams), "--events", str(events),
                "--gap-ms", str(gap_ms), "--connections", str(connections)]
        run_loadgen(pool.loadgen, ["sse", url + PATH, *headers, "--streams", str(connections),
                                   "--events", "5", "--gap-ms", "1", "--connections",
                                   str(connections)])  # warm-up
        r = run_loadgen(pool.loadgen, args)
        assert r["errors"] == 0 and r["streams"] == streams, r
        lat, first = r["latency"], r["first_event"]
        direct = direct or lat
        print(f"| {name} | {lat['n']} | {lat['p50']:.3f} | {lat['p90']:.3f} | {lat['p99']:.3f} | "
              f"{added(lat, direct, 'p50')} | {added(lat, direct, 'p99')} | {first['p50']:.3f} | "
              f"{first['p99']:.3f} |", flush=True)


def part_memory(pool, streams):
    print(f"\n### Memory per open stream ({streams} SSE streams held open through each proxy)\n")
    print("| proxy | RSS before MiB | RSS with streams MiB | KiB per stream |")
    print("|---|---|---|---|")
    for name, url, headers, pid in pool.targets:
        if name == "direct":
            continue
        before = rss_kib(pid)
        holder = subprocess.Popen([pool.loadgen, "hold", url + PATH, *headers, "--streams",
                                   str(streams)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  text=True)
        line = json.loads(holder.stdout.readline())
        time.sleep(1.0)
        during = rss_kib(pid)
        holder.stdin.close()
        holder.wait(timeout=60)
        assert line["ready"] == streams, line
        print(f"| {name} | {before / 1024:.1f} | {during / 1024:.1f} | "
              f"{(during - before) / streams:.1f} |", flush=True)
        time.sleep(0.5)
    pool.check_no_leaks()


def part_wrk(pool, seconds, concurrencies, rounds):
    if not need("wrk", "wrk"):
        return
    body = json.dumps({"model": "m", "max_tokens": 16,
                       "messages": [{"role": "user", "content": "x" * 900}]})
    print(f"\n### 1 KB JSON request and answer, closed loop (wrk, {rounds} interleaved rounds of "
          f"{seconds} s per cell, medians over rounds)\n")
    print("| proxy | connections | req/s | p50 ms | p90 ms | p99 ms | added p50 ms | "
          "added p99 ms | added p50 range ms |")
    print("|---|---|---|---|---|---|---|---|---|")
    for c in concurrencies:
        def measure(url, headers, _pid):
            script = tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False)
            script.write('wrk.method = "POST"\n')
            script.write(f"wrk.body = {json.dumps(body)}\n")
            script.write('wrk.headers["Content-Type"] = "application/json"\n')
            for h in headers[1::2]:
                k, v = h.split(": ", 1)
                script.write(f'wrk.headers["{k}"] = "{v}"\n')
            script.close()

            def run(d):
                return subprocess.run(["wrk", "-t1", f"-c{c}", f"-d{d}s", "--latency", "-s",
                                       script.name, url + PATH],
                                      capture_output=True, text=True).stdout
            run(1)
            out = run(seconds)
            os.unlink(script.name)

            def ms(label):
                m = re.search(rf"^\s*{label}%\s+([\d.]+)(us|ms|s)\s*$", out, re.M)
                value, unit = float(m.group(1)), m.group(2)
                return value / 1000 if unit == "us" else value * 1000 if unit == "s" else value
            assert "Non-2xx" not in out, out
            return {"p50": ms("50"), "p90": ms("90"), "p99": ms("99"),
                    "rps": float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))}
        rounds_table(pool, str(c), rounds, measure, ["rps", "p50", "p90", "p99"])


def raw_request(gw, mode, args, stream=False):
    import socket
    payload = json.dumps({"model": "harness", "stream": stream, "messages": []}).encode()
    head = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer {gw.key}\r\n"
            f"X-Harness: {mode}\r\nX-Harness-Args: {args}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(payload)}\r\n\r\n")
    sock = socket.create_connection(("127.0.0.1", gw.port))
    sock.sendall(head.encode() + payload)
    return sock


def percentile(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


def part_cancel(samples):
    harness = Harness("bench")
    gw = Gateway([harness.url])
    try:
        print(f"\n### Cancel-to-upstream-close latency ({samples} samples per phase)\n")
        print("| phase | p50 ms | p99 ms | max ms |")
        print("|---|---|---|---|")
        for phase, mode, args, stream in [("waiting for headers", "hang", "", False),
                                          ("non-streamed answer", "slow", "delay=30", False),
                                          ("mid-stream", "stream", "n=100000,gap=0.005", True)]:
            latencies = []
            for _ in range(samples):
                before = len(harness.stats()["closes"])
                sock = raw_request(gw, mode, args, stream)
                if stream:
                    got = b""
                    while b"data: " not in got:
                        got += sock.recv(65536)
                else:
                    wait_for(lambda: harness.stats()["active"] == 1, 5, "request at the backend",
                             interval_s=0.002)
                left = time.monotonic()
                sock.close()
                wait_for(lambda: len(harness.stats()["closes"]) > before, 5, "close",
                         interval_s=0.002)
                latencies.append((harness.stats()["closes"][-1]["t"] - left) * 1000)
                wait_for(lambda: harness.stats()["active"] == 0, 5, "idle", interval_s=0.002)
            print(f"| {phase} | {percentile(latencies, 0.5):.2f} | "
                  f"{percentile(latencies, 0.99):.2f} | {max(latencies):.2f} |", flush=True)
        print("\n(the harness checks its socket every 2 ms and mid-stream only between events, "
              "every 5 ms: both bound what can be measured)")
    finally:
        gw.stop()
        harness.stop()


def part_leaks(loadgen, total, aborted_fraction):
    mocks = []
    for _ in range(3):
        port = free_port()
        mocks.append((start([loadgen, "serve", str(port)]), port))
    for _, port in mocks:
        wait_port(port)
    gw = Gateway([f"http://127.0.0.1:{port}" for _, port in mocks],
                 extra_args=["--max-active-per-backend", "16", "--max-waiting", "1024",
                             "--queue-timeout", "30", "--health-interval-ms", "1000"])
    try:
        r = run_loadgen(loadgen, ["abort", gw.url + PATH, "-H", f"Authorization: Bearer {gw.key}",
                                  "--requests", str(total), "--connections", "64",
                                  "--abort-fraction", str(aborted_fraction)])
        text = gw.wait_idle(60)
        acquired = metric(text, "deepinfer_gateway_slots_acquired_total")
        released = metric(text, "deepinfer_gateway_slots_released_total")
        phases = {p: metric(text, "deepinfer_gateway_cancellations_total", f'phase="{p}"')
                  for p in ("queued", "waiting_headers", "body", "streaming")}
        print(f"\n### Slot accounting after {r['requests']:,} requests, "
              f"{r['aborted'] / max(r['requests'], 1):.0%} abandoned ({r['seconds']:.0f} s, "
              f"64 connections, 3 backends x 16 slots)\n")
        print("| answered | abandoned | rejected | errors | gateway saw cancelled (queued / "
              "waiting headers / body / streaming) | slots acquired | slots released | "
              "in flight |")
        print("|---|---|---|---|---|---|---|---|")
        print(f"| {r['completed']} | {r['aborted']} | {r['rejected']} | {r['errors']} | "
              f"{phases['queued']:.0f} / {phases['waiting_headers']:.0f} / "
              f"{phases['body']:.0f} / {phases['streaming']:.0f} | {acquired:.0f} | "
              f"{released:.0f} | {metric(text, 'deepinfer_gateway_inflight'):.0f} |", flush=True)
        assert acquired == released and metric(text, "deepinfer_gateway_inflight") == 0
    finally:
        gw.stop()
        for p, _ in mocks:
            p.terminate()
            p.wait(timeout=10)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=int, default=5, help="per cell and round")
    parser.add_argument("--rounds", type=int, default=3,
                        help="rate, wrk: interleaved rounds per cell (medians reported)")
    parser.add_argument("--concurrency", default="1,16", help="wrk connections")
    parser.add_argument("--rates", default="1000,5000", help="open-loop request rates")
    parser.add_argument("--sse-streams", type=int, default=96)
    parser.add_argument("--sse-events", type=int, default=100)
    parser.add_argument("--sse-gap-ms", type=int, default=10)
    parser.add_argument("--sse-connections", type=int, default=32)
    parser.add_argument("--memory-streams", type=int, default=1000)
    parser.add_argument("--cancel-samples", type=int, default=200)
    parser.add_argument("--requests", type=int, default=100000, help="leaks: total requests")
    parser.add_argument("--parts", default="rate,sse,wrk,memory,cancel,leaks")
    parser.add_argument("--proxies", default="nginx,caddy",
                        help="peer proxies in the rate, sse, wrk and memory parts")
    parser.add_argument("--compare-bin", action="append", default=[], metavar="PATH",
                        help="another deepinfer binary whose gateway gets its own rows in the "
                             "same rounds (an A/B); repeatable")
    args = parser.parse_args()
    parts = args.parts.split(",")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 16384)), hard))
    need("nginx", "nginx rows")
    need("caddy", "Caddy rows")
    print(f"{os.cpu_count()} cores; load average before: {os.getloadavg()[0]:.2f}")
    work = tempfile.mkdtemp(prefix="gw-bench-")
    try:
        loadgen = build_loadgen(work)
        if any(p in parts for p in ("rate", "sse", "wrk", "memory")):
            pool = Pool(loadgen, work, proxies=args.proxies.split(","),
                        compare=args.compare_bin)
            try:
                if "rate" in parts:
                    part_rate(pool, [int(r) for r in args.rates.split(",")], args.seconds,
                              args.rounds)
                if "sse" in parts:
                    part_sse(pool, args.sse_streams, args.sse_events, args.sse_gap_ms,
                             args.sse_connections)
                if "wrk" in parts:
                    part_wrk(pool, args.seconds, [int(c) for c in args.concurrency.split(",")],
                             args.rounds)
                if "memory" in parts:
                    part_memory(pool, args.memory_streams)
                pool.check_no_leaks()
            finally:
                pool.stop()
        if "cancel" in parts:
            part_cancel(args.cancel_samples)
        if "leaks" in parts:
            part_leaks(loadgen, args.requests, 0.3)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"\nload average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
