"""Processes for the gateway e2e tests: `deepinfer gateway`, a misbehaving harness backend,
redis-server and Caddy. Everything binds 127.0.0.1 on free ports and lives in a temp folder.

Run as a script, this file is the harness backend itself:
    python gateway_fixtures.py --harness PORT NAME
It speaks just enough OpenAI for the gateway (POST /v1/chat/completions and any /v1/* path,
GET /v1/models, GET /health) and misbehaves on request, chosen by the header X-Harness:
    (none)   a small chat completion at once
    echo     a JSON report of what it received (headers, body digest, target)
    slow     a non-streamed answer after `delay` seconds
    hang     never answers
    stream   `n` SSE events, `gap` seconds apart
Parameters come in X-Harness-Args ("n=10,gap=0.1,delay=0.5"). Every request that ends because
the gateway closed the connection is recorded with its x-request-id and the CLOCK_MONOTONIC time
it was seen (time.monotonic() is comparable across processes on Linux), in GET /harness/stats.
"""

import hashlib
import json
import os
import pathlib
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from conftest import STORIES, Server, binary, free_port  # noqa: E402


def wait_for(predicate, timeout_s: float, what: str, interval_s: float = 0.02):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if predicate():
                return
        except (httpx.HTTPError, OSError):
            pass
        time.sleep(interval_s)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")


# ------------------------------------------------------------------------------------------------
# The harness backend (runs in its own process).


class _Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.active = 0
        self.max_active = 0
        self.requests = 0
        self.closes = []  # {"request_id", "mode", "t"}
        self.health_status = 200


class _HarnessHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    stats = _Stats()
    name = "harness"

    def log_message(self, *args):
        pass

    def _send_json(self, status, obj, extra=()):
        body = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for k, v in extra:
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def _client_closed(self, wait_s: float) -> bool:
        """Waits up to wait_s; True as soon as the peer closed the connection."""
        deadline = time.monotonic() + wait_s
        sock = self.connection
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            r, _, _ = select.select([sock], [], [], min(left, 0.002))
            if r:
                try:
                    if sock.recv(1, socket.MSG_PEEK) == b"":
                        return True
                except OSError:
                    return True
                # Pipelined bytes (not expected): treat as not closed, avoid a busy loop.
                time.sleep(0.002)

    def _record_close(self, mode):
        t = time.monotonic()
        with self.stats.lock:
            self.stats.closes.append(
                {"request_id": self.headers.get("x-request-id", ""), "mode": mode, "t": t})
        self.close_connection = True

    def do_GET(self):
        if self.path == "/health":
            status = self.stats.health_status
            return self._send_json(status, {"status": "ok" if status == 200 else "bad"})
        if self.path == "/harness/stats":
            with self.stats.lock:
                return self._send_json(200, {"active": self.stats.active,
                                             "max_active": self.stats.max_active,
                                             "requests": self.stats.requests,
                                             "closes": list(self.stats.closes)})
        if self.path.startswith("/harness/health/"):
            self.stats.health_status = int(self.path.rsplit("/", 1)[1])
            return self._send_json(200, {})
        if self.path == "/v1/models":
            return self._send_json(200, {"object": "list", "data": [
                {"id": "harness", "object": "model", "owned_by": self.name}]})
        return self._send_json(404, {"error": {"message": "no route", "code": "not_found"}})

    def do_POST(self):
        length = int(self.headers.get("content-length", "0"))
        body = self.rfile.read(length) if length else b""
        mode = self.headers.get("x-harness", "")
        args = {}
        for part in self.headers.get("x-harness-args", "").split(","):
            if "=" in part:
                k, v = part.split("=", 1)
                args[k.strip()] = float(v)
        with self.stats.lock:
            self.stats.requests += 1
            self.stats.active += 1
            self.stats.max_active = max(self.stats.max_active, self.stats.active)
        try:
            self._serve(mode, args, body)
        except (BrokenPipeError, ConnectionResetError):
            self._record_close(mode)
        finally:
            with self.stats.lock:
                self.stats.active -= 1

    def _serve(self, mode, args, body):
        if mode == "echo":
            return self._send_json(200, {
                "backend": self.name,
                "target": self.path,
                "headers": {k.lower(): v for k, v in self.headers.items()},
                "body_sha256": hashlib.sha256(body).hexdigest(),
            }, [("x-request-id", self.headers.get("x-request-id", ""))])
        if mode == "hang":
            if self._client_closed(3600):
                return self._record_close(mode)
            return None
        if mode == "slow":
            if self._client_closed(args.get("delay", 1.0)):
                return self._record_close(mode)
            return self._send_json(200, _completion(self.name))
        if mode == "stream":
            n, gap = int(args.get("n", 5)), args.get("gap", 0.05)
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for i in range(n):
                if i and self._client_closed(gap):
                    return self._record_close(mode)
                chunk = _chunk(self.name, i)
                self.wfile.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
                self.wfile.flush()
            done = b"data: [DONE]\n\n"
            self.wfile.write(f"{len(done):x}\r\n".encode() + done + b"\r\n0\r\n\r\n")
            self.wfile.flush()
            return None
        return self._send_json(200, _completion(self.name))


def _completion(name):
    return {"id": "chatcmpl-harness", "object": "chat.completion", "created": 0, "model": "harness",
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": f"hello from {name}"}}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 3, "total_tokens": 4}}


def _chunk(name, i):
    obj = {"id": "chatcmpl-harness", "object": "chat.completion.chunk", "model": "harness",
           "backend": name, "choices": [{"index": 0, "delta": {"content": f"t{i} "}}]}
    return f"data: {json.dumps(obj)}\n\n".encode()


def _run_harness(port: int, name: str):
    _HarnessHandler.name = name
    server = ThreadingHTTPServer(("127.0.0.1", port), _HarnessHandler)
    server.daemon_threads = True
    server.serve_forever(poll_interval=0.05)


# ------------------------------------------------------------------------------------------------
# Process wrappers used by the tests.


class Harness:
    """A harness backend process."""

    def __init__(self, name: str):
        self.name = name
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen([sys.executable, __file__, "--harness", str(self.port), name],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for(lambda: httpx.get(self.url + "/health", timeout=1).status_code == 200, 10,
                 f"harness {name}")

    def stats(self) -> dict:
        return httpx.get(self.url + "/harness/stats", timeout=5).json()

    def set_health(self, status: int):
        httpx.get(f"{self.url}/harness/health/{status}", timeout=5)

    def kill(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.kill()


class Redis:
    """A private redis-server (no persistence)."""

    def __init__(self):
        exe = shutil.which("redis-server")
        if exe is None:
            pytest.skip("redis-server not installed (Debian package redis-server)")
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}"
        self.dir = tempfile.mkdtemp(prefix="gw-redis-")
        self.proc = subprocess.Popen(
            [exe, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly",
             "no", "--dir", self.dir, "--loglevel", "warning"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

        def ready():
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as s:
                s.sendall(b"PING\r\n")
                return s.recv(16).startswith(b"+PONG")

        wait_for(ready, 10, "redis-server")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=10)
        shutil.rmtree(self.dir, ignore_errors=True)


class Caddy:
    """Caddy running deploy/Caddyfile.example with two http:// entrance names on a free port."""

    CADDYFILE = HERE.parents[1] / "deploy" / "Caddyfile.example"

    def __init__(self, gateway_port: int):
        exe = shutil.which("caddy")
        if exe is None:
            pytest.skip("caddy not installed (Debian package caddy)")
        self.port = free_port()
        self.dir = tempfile.mkdtemp(prefix="gw-caddy-")
        self.names = ("a.localhost", "b.localhost")
        env = dict(os.environ, HOME=self.dir, XDG_DATA_HOME=self.dir, XDG_CONFIG_HOME=self.dir,
                   CADDY_ADMIN="off", CADDY_STORAGE=self.dir + "/storage",
                   ENTRANCE_A=f"http://{self.names[0]}:{self.port}",
                   ENTRANCE_B=f"http://{self.names[1]}:{self.port}",
                   GATEWAY=f"127.0.0.1:{gateway_port}")
        self.log = open(self.dir + "/caddy.log", "w+b")
        self.proc = subprocess.Popen([exe, "run", "--config", str(self.CADDYFILE), "--adapter",
                                      "caddyfile"], env=env, cwd=self.dir, stdout=self.log,
                                     stderr=subprocess.STDOUT)
        self.url = f"http://127.0.0.1:{self.port}"

        def up():
            if self.proc.poll() is not None:
                raise AssertionError("caddy exited:\n" + self.logs())
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                return True
        wait_for(up, 20, "caddy")

    def logs(self) -> str:
        self.log.flush()
        return pathlib.Path(self.dir + "/caddy.log").read_text(errors="replace")[-4000:]

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


class Gateway:
    """A `deepinfer gateway` process with its own key store, admission file and state files."""

    def __init__(self, backends, *, extra_args=(), admit=None, keys_dir=None, state=None,
                 bindings_file=None, wrapper=(), exe=None):
        self.dir = pathlib.Path(tempfile.mkdtemp(prefix="gw-e2e-"))
        self.keys_dir = pathlib.Path(keys_dir) if keys_dir else self.dir
        self.key_store = self.keys_dir / "keys.json"
        if not self.key_store.exists():
            self.key = add_key(self.key_store, "tester")
            self.admin_key = add_key(self.key_store, "ops", "--admin")
            (self.keys_dir / "keys.secret").write_text(json.dumps([self.key, self.admin_key]))
        else:
            self.key, self.admin_key = json.loads((self.keys_dir / "keys.secret").read_text())
        self.backends = list(backends)
        self.control = self.dir / "admission.json"
        self.write_admission(self.backends if admit is None else admit)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = open(self.dir / "gateway.log", "w+b")
        # wrapper: a command the gateway runs under (e.g. prlimit for a descriptor limit);
        # exe: another deepinfer binary (the benchmark's A/B rows).
        args = [*wrapper, str(exe or binary()), "gateway", "--listen", "127.0.0.1", "--port", str(self.port),
                "--key-store", str(self.key_store), "--control-file", str(self.control),
                "--bindings-file", str(bindings_file or self.dir / "bindings.json"),
                "--backend-state", str(self.dir / "backend-state.json")]
        if "--health-interval-ms" not in extra_args:
            args += ["--health-interval-ms", "100"]
        for b in self.backends:
            args += ["--backend", b]
        if state:
            args += ["--state", state]
        args += list(extra_args)
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT)
        try:
            wait_for(lambda: httpx.get(self.url + "/health", timeout=1).status_code == 200, 20,
                     "gateway /health")
        except AssertionError:
            self.stop()
            raise AssertionError("gateway did not start:\n" + self.logs())

    def headers(self, key=None, **extra):
        h = {"Authorization": f"Bearer {key or self.key}"}
        h.update(extra)
        return h

    def write_admission(self, backends=None, raw=None):
        text = raw if raw is not None else json.dumps({"admit": list(backends)})
        tmp = self.control.with_suffix(".tmp")
        tmp.write_text(text)
        os.replace(tmp, self.control)

    def metrics(self) -> str:
        return httpx.get(self.url + "/metrics", timeout=5).text

    def status(self) -> dict:
        r = httpx.get(self.url + "/gateway/status", headers=self.headers(self.admin_key),
                      timeout=5)
        assert r.status_code == 200, r.text
        return r.json()

    def wait_idle(self, timeout_s=5.0):
        """Waits until no slot is held; returns the final metrics text."""
        text = ""

        def idle():
            nonlocal text
            text = self.metrics()
            return metric(text, "deepinfer_gateway_inflight") == 0 and \
                metric(text, "deepinfer_gateway_queue_depth") == 0
        wait_for(idle, timeout_s, "gateway idle")
        return text

    def logs(self) -> str:
        self.log.flush()
        return (self.dir / "gateway.log").read_text(errors="replace")[-4000:]

    def alive(self) -> bool:
        return self.proc.poll() is None

    def terminate(self):
        """SIGTERM and wait: the gateway drains and writes its state files."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def stop(self):
        self.terminate()
        if not self.log.closed:
            self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def add_key(store: pathlib.Path, key_id: str, *extra) -> str:
    r = subprocess.run([str(binary()), "gateway", "add-key", "--key-store", str(store), "--id",
                        key_id, *extra], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    key = r.stdout.strip()
    assert key.startswith("sk-di-") and "\n" not in key, r.stdout
    return key


def metric(text: str, name: str, labels: str = "") -> float:
    """Sum of the samples of `name` whose label set contains `labels` (0 when none)."""
    total = 0.0
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        series, _, value = line.rpartition(" ")
        if series.split("{", 1)[0] == name and labels in series:
            total += float(value)
    return total


def assert_no_leaked_slots(gw: Gateway):
    text = gw.wait_idle()
    assert metric(text, "deepinfer_gateway_slots_acquired_total") == \
        metric(text, "deepinfer_gateway_slots_released_total"), text
    assert metric(text, "deepinfer_gateway_backend_inflight") == 0


# ------------------------------------------------------------------------------------------------
# Fixtures.


@pytest.fixture(scope="session")
def serve_pool():
    """Three real `deepinfer serve` backends on stories260K."""
    if not STORIES.exists():
        pytest.skip(f"stories260K not found at {STORIES}")
    servers = []
    try:
        for i in range(3):
            servers.append(Server(STORIES, "stories260K", ["--threads", "1"]))
        yield servers
    finally:
        for s in servers:
            s.stop()


@pytest.fixture()
def harnesses():
    """Three harness backends, fresh for each test."""
    started = []
    try:
        for i in range(3):
            started.append(Harness(f"h{i}"))
        yield started
    finally:
        for h in started:
            h.stop()


@pytest.fixture()
def redis_server():
    server = Redis()
    yield server
    server.stop()


@pytest.fixture()
def gateways():
    """Starts gateways on demand (gateways(backends, ...)) and stops them after the test. The
    gateways of one test share one key store (keys in .key / .admin_key)."""
    started = []
    keys_dir = tempfile.mkdtemp(prefix="gw-keys-")

    def start(backends, **kw):
        kw.setdefault("keys_dir", keys_dir)
        gw = Gateway(backends, **kw)
        started.append(gw)
        return gw

    start.keys_dir = keys_dir
    yield start
    failures = []
    for gw in started:
        if gw.proc.returncode is None and not gw.alive():
            failures.append(gw.logs())
        gw.stop()
    shutil.rmtree(keys_dir, ignore_errors=True)
    assert not failures, "a gateway died during the test:\n" + "\n".join(failures)


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--harness":
        _run_harness(int(sys.argv[2]), sys.argv[3])
    else:
        print(__doc__)
        sys.exit(2)
