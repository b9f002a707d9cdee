"""Fixtures that start real `deepinfer serve` processes for the e2e suite.

The binary comes from $DEEPINFER_BIN (default build/deepinfer). Each server runs on a free port
and is ready when GET /health answers 200. Tests that need a model file skip when it is absent.
"""

import os
import pathlib
import socket
import subprocess
import tempfile
import time

import httpx
import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
SHARED_MODELS = REPO.parent / "shared" / "models"
STORIES = SHARED_MODELS / "stories260K" / "stories260K.bin"


def smollm_path() -> pathlib.Path:
    cache = os.environ.get("DEEPINFER_CACHE") or os.path.join(os.path.expanduser("~"), ".cache",
                                                              "deepinfer")
    return pathlib.Path(cache) / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"


def binary() -> pathlib.Path:
    path = pathlib.Path(os.environ.get("DEEPINFER_BIN", "build/deepinfer"))
    if not path.is_absolute():
        path = REPO / path
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(base_url: str, proc: subprocess.Popen, timeout_s: float, what: str, logs,
                 path: str = "/health"):
    """Polls GET base_url + path until it answers 200; fails the test (with `logs()`, the
    server's log tail) when `proc` exits first or `timeout_s` passes."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"{what} exited with {proc.returncode}:\n{logs()}")
        try:
            if httpx.get(base_url + path, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    pytest.fail(f"{what} was not ready within {timeout_s}s:\n{logs()}")


def eventually(check, timeout_s=5.0):
    """Polls `check` until it is true or timeout_s passes; returns whether it became true. For
    what a server publishes a little after it answers: its stats after the step that finished a
    request, the start-up lines it logs after /health turns 200 (its main loop notices the ready
    engine within 20 ms, then logs)."""
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


class Server:
    """A running `deepinfer serve` process."""

    def __init__(self, model: pathlib.Path, name: str, extra_args=(), env=None, launcher=()):
        """`env`: variables set for the process on top of this one's environment (None: this
        one's as it is). `launcher`: a command the server runs under (mpirun and its flags)."""
        exe = binary()
        if not exe.exists():
            pytest.fail(f"deepinfer binary not found at {exe} (build it or set DEEPINFER_BIN)")
        self.port = free_port()
        self.name = name
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.log = tempfile.NamedTemporaryFile(prefix="deepinfer-serve-", suffix=".log",
                                               delete=False)
        self.args = [*launcher, str(exe), "serve", "--model", str(model), "--host", "127.0.0.1", "--port",
                     str(self.port), "--served-model-name", name, *extra_args]
        self.proc = subprocess.Popen(self.args, stdout=self.log, stderr=subprocess.STDOUT,
                                     env=None if env is None else {**os.environ, **env})
        self._wait_ready(timeout_s=120)

    def _wait_ready(self, timeout_s: float):
        try:
            wait_healthy(self.base_url, self.proc, timeout_s, "deepinfer serve", self.logs)
        except BaseException:
            self.stop()
            raise

    def logs(self) -> str:
        self.log.flush()
        return pathlib.Path(self.log.name).read_text(errors="replace")[-4000:]

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        pathlib.Path(self.log.name).unlink(missing_ok=True)  # stop() may be called twice


@pytest.fixture(scope="session")
def stories():
    """stories260K (llama2.c, 512-token window, plain chat template)."""
    if not STORIES.exists():
        pytest.skip(f"stories260K not found at {STORIES}")
    server = Server(STORIES, "stories260K")
    yield server
    assert server.alive(), "the server died during the tests:\n" + server.logs()
    server.stop()


@pytest.fixture(scope="session")
def smollm():
    """SmolLM2-135M-Instruct Q4_1 (GGUF, ChatML)."""
    path = smollm_path()
    if not path.exists():
        pytest.skip(f"SmolLM2 not found at {path} (run `make setup`)")
    server = Server(path, "SmolLM2-135M-Instruct", ["--max-model-len", "2048"])
    yield server
    assert server.alive(), "the server died during the tests:\n" + server.logs()
    server.stop()


@pytest.fixture()
def client(stories):
    openai = pytest.importorskip("openai")
    return openai.OpenAI(base_url=stories.base_url + "/v1", api_key="unused", max_retries=0,
                         timeout=60)
