#!/usr/bin/env python3
"""What `deepinfer gateway` adds, next to nginx and Caddy as plain reverse proxies.

    DEEPINFER_BIN=build/deepinfer .venv/bin/python bench/gateway_bench.py [--seconds 10]

Parts (each prints a Markdown table; paste into docs/benchmarks.md):
  latency   small JSON POSTs through each proxy to one fast mock backend (nginx `return 200`),
            closed loop with wrk at fixed concurrency, same run; added = proxy - direct.
  cancel    cancel-to-upstream-close latency, p50/p99, in the three backend phases (waiting for
            headers, non-streamed answer, mid-stream), measured by the harness backend of the
            e2e tests (tests/e2e/gateway_fixtures.py) on CLOCK_MONOTONIC.
  leaks     many requests with 30 % aborted at random points; slots acquired == released after.

Needs nginx, wrk and caddy (Debian packages nginx-light, wrk, caddy). Everything binds loopback.
"""

import argparse
import json
import os
import pathlib
import random
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "e2e"))


from gateway_fixtures import Gateway, Harness, free_port, metric, wait_for  # noqa: E402

BODY = json.dumps({"model": "m", "max_tokens": 16,
                   "messages": [{"role": "user", "content": "x" * 900}]})
ANSWER = json.dumps({"id": "cmpl", "object": "chat.completion", "choices": [
    {"index": 0, "message": {"role": "assistant", "content": "y" * 900}}]})


def start(cmd, **kw):
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, **kw)


def wait_port(port):
    def up():
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    wait_for(up, 20, f"port {port}")


def nginx_conf(workdir, mock_port, proxy_port):
    answer = ANSWER.replace("'", "")
    return f"""
worker_processes 1;
daemon off;
pid {workdir}/nginx.pid;
error_log {workdir}/nginx-error.log warn;
events {{ worker_connections 4096; }}
http {{
  access_log off;
  client_body_temp_path {workdir}/body;
  proxy_temp_path {workdir}/proxy;
  fastcgi_temp_path {workdir}/fcgi; uwsgi_temp_path {workdir}/uwsgi; scgi_temp_path {workdir}/scgi;
  upstream mock {{ server 127.0.0.1:{mock_port}; keepalive 64; }}
  server {{  # the mock backend
    listen 127.0.0.1:{mock_port};
    client_body_buffer_size 64k;
    location = /health {{ return 200 '{{"status":"ok"}}'; }}
    location / {{ default_type application/json; return 200 '{answer}'; }}
  }}
  server {{  # nginx as a plain reverse proxy
    listen 127.0.0.1:{proxy_port};
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
"""


def wrk(url, seconds, connections, headers):
    script = tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False)
    script.write('wrk.method = "POST"\n')
    script.write(f"wrk.body = {json.dumps(BODY)}\n")
    script.write('wrk.headers["Content-Type"] = "application/json"\n')
    for k, v in headers.items():
        script.write(f'wrk.headers["{k}"] = "{v}"\n')
    script.close()
    out = subprocess.run(["wrk", "-t1", f"-c{connections}", f"-d{seconds}s", "--latency", "-s",
                          script.name, url + "/v1/chat/completions"],
                         capture_output=True, text=True).stdout
    os.unlink(script.name)

    def ms(label):
        m = re.search(rf"^\s*{label}%\s+([\d.]+)(us|ms|s)\s*$", out, re.M)
        value, unit = float(m.group(1)), m.group(2)
        return value / 1000 if unit == "us" else value * 1000 if unit == "s" else value
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    assert non2xx is None, out
    return {"p50": ms("50"), "p90": ms("90"), "p99": ms("99"), "rps": rps}


def part_latency(seconds, concurrencies):
    for tool in ("nginx", "wrk", "caddy"):
        if shutil.which(tool) is None:
            print(f"latency: skipped ({tool} not installed)")
            return
    work = tempfile.mkdtemp(prefix="gw-bench-")
    mock_port, nginx_port, caddy_port = free_port(), free_port(), free_port()
    conf = pathlib.Path(work) / "nginx.conf"
    conf.write_text(nginx_conf(work, mock_port, nginx_port))
    procs = [start(["nginx", "-c", str(conf), "-p", work])]
    caddyfile = pathlib.Path(work) / "Caddyfile"
    caddyfile.write_text(f"""{{
  admin off
  auto_https off
  storage file_system {work}/caddy
}}
http://127.0.0.1:{caddy_port} {{
  bind 127.0.0.1
  reverse_proxy 127.0.0.1:{mock_port} {{
    flush_interval -1
  }}
}}
""")
    env = dict(os.environ, HOME=work, XDG_DATA_HOME=work, XDG_CONFIG_HOME=work, GOMAXPROCS="1")
    procs.append(start(["caddy", "run", "--config", str(caddyfile), "--adapter", "caddyfile"],
                       env=env))
    for p in (mock_port, nginx_port, caddy_port):
        wait_port(p)
    gw = Gateway([f"http://127.0.0.1:{mock_port}"],
                 extra_args=["--max-active-per-backend", "1024", "--max-waiting", "1024"])
    targets = [("direct", f"http://127.0.0.1:{mock_port}", {}),
               ("nginx", f"http://127.0.0.1:{nginx_port}", {}),
               ("caddy", f"http://127.0.0.1:{caddy_port}", {}),
               ("deepinfer gateway", gw.url, {"Authorization": f"Bearer {gw.key}"})]
    try:
        print("\n### Added latency, 1 KB JSON request and answer, closed loop "
              f"({seconds} s per cell, {os.cpu_count()} cores shared by all processes)\n")
        print("| proxy | connections | req/s | p50 ms | p90 ms | p99 ms | added p50 ms | "
              "added p99 ms |")
        print("|---|---|---|---|---|---|---|---|")
        for c in concurrencies:
            direct = None
            for name, url, headers in targets:
                wrk(url, 1, c, headers)  # warm-up
                r = wrk(url, seconds, c, headers)
                direct = direct or r
                added = "" if name == "direct" else \
                    f"{r['p50'] - direct['p50']:.3f} | {r['p99'] - direct['p99']:.3f}"
                print(f"| {name} | {c} | {r['rps']:.0f} | {r['p50']:.3f} | {r['p90']:.3f} | "
                      f"{r['p99']:.3f} | {added or '- | -'} |")
        text = gw.wait_idle()
        assert metric(text, "deepinfer_gateway_slots_acquired_total") == \
            metric(text, "deepinfer_gateway_slots_released_total")
    finally:
        gw.stop()
        for p in procs:
            p.terminate()
            p.wait(timeout=10)
        shutil.rmtree(work, ignore_errors=True)


def raw_request(gw, mode, args, stream=False):
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
                  f"{percentile(latencies, 0.99):.2f} | {max(latencies):.2f} |")
        print("\n(the harness checks its socket every 2 ms and mid-stream only between events, "
              "every 5 ms: both bound what can be measured)")
    finally:
        gw.stop()
        harness.stop()


def part_leaks(total, aborted_fraction):
    harnesses = [Harness(f"l{i}") for i in range(3)]
    gw = Gateway([h.url for h in harnesses],
                 extra_args=["--max-active-per-backend", "4", "--max-waiting", "64",
                             "--queue-timeout", "5"])
    rng = random.Random(7)
    counts = {"done": 0, "aborted": 0, "rejected": 0}
    lock = threading.Lock()

    def worker(n):
        for _ in range(n):
            abort = rng.random() < aborted_fraction
            mode, args, stream = rng.choice([("", "", False), ("slow", "delay=0.01", False),
                                             ("stream", "n=5,gap=0.002", True)])
            sock = raw_request(gw, mode or "plain", args, stream)
            if abort:
                time.sleep(rng.random() * 0.01)
                sock.close()
                key = "aborted"
            else:
                data = b""
                sock.settimeout(10)
                while not (data.endswith(b"0\r\n\r\n") or data.endswith(b"}")):
                    chunk = sock.recv(65536)
                    if not chunk:
                        break
                    data += chunk
                sock.close()
                key = "done" if b" 200 " in data[:16] else "rejected"
            with lock:
                counts[key] += 1

    try:
        start_t = time.monotonic()
        threads = [threading.Thread(target=worker, args=(total // 16,)) for _ in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        text = gw.wait_idle(30)
        acquired = metric(text, "deepinfer_gateway_slots_acquired_total")
        released = metric(text, "deepinfer_gateway_slots_released_total")
        print(f"\n### Slot accounting after {sum(counts.values())} requests, "
              f"{aborted_fraction:.0%} aborted ({time.monotonic() - start_t:.0f} s)\n")
        print("| answered | aborted | rejected | slots acquired | slots released | in flight |")
        print("|---|---|---|---|---|---|")
        print(f"| {counts['done']} | {counts['aborted']} | {counts['rejected']} | {acquired:.0f} | "
              f"{released:.0f} | {metric(text, 'deepinfer_gateway_inflight'):.0f} |")
        assert acquired == released
    finally:
        gw.stop()
        for h in harnesses:
            h.stop()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--concurrency", default="1,16")
    parser.add_argument("--cancel-samples", type=int, default=200)
    parser.add_argument("--requests", type=int, default=4000)
    parser.add_argument("--parts", default="latency,cancel,leaks")
    args = parser.parse_args()
    parts = args.parts.split(",")
    if "latency" in parts:
        part_latency(args.seconds, [int(c) for c in args.concurrency.split(",")])
    if "cancel" in parts:
        part_cancel(args.cancel_samples)
    if "leaks" in parts:
        part_leaks(args.requests, 0.3)


if __name__ == "__main__":
    main()
