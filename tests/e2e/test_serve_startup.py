"""What `deepinfer serve` prints and does at start: without --model it serves the default model
from the cache (as `make serve` does) or says how to get it; every line it prints, start-up and
request lines alike, starts with the same UTC timestamp and level."""

import os
import re
import signal
import subprocess

import httpx
import pytest

from conftest import binary, free_port, smollm_path, wait_healthy

# The request log's format (util/log.h): "2026-11-29T16:55:01.123Z info ...".
LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z (info|warning|error) \S")


def test_no_model_and_an_empty_cache_says_how_to_get_it_and_exits_2(tmp_path):
    env = dict(os.environ, DEEPINFER_CACHE=str(tmp_path))
    r = subprocess.run([str(binary()), "serve", "--port", "0"], env=env, capture_output=True,
                       text=True, timeout=30)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    line = lines[0]
    assert LOG_LINE.match(line), line
    assert " error " in line and "no_model" in line
    assert f"not in {tmp_path}/models" in line
    assert "SmolLM2-135M-Instruct.Q4_1.gguf" in line
    assert "make serve" in line and "scripts/fetch_model.sh" in line and "--model PATH" in line
    assert "required" not in line  # not CLI11's "--model is required"


def test_no_model_serves_the_cached_default_and_every_line_is_timestamped(tmp_path):
    if not smollm_path().exists():
        pytest.skip(f"SmolLM2 not found at {smollm_path()}")
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / smollm_path().name).symlink_to(smollm_path())
    port = free_port()
    log_path = tmp_path / "serve.log"
    env = dict(os.environ, DEEPINFER_CACHE=str(tmp_path))
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([str(binary()), "serve", "--host", "127.0.0.1", "--port",
                                 str(port), "--threads", "2"], env=env, stdout=log,
                                stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(base, proc, 120, "deepinfer serve", log_path.read_text)
        models = httpx.get(base + "/v1/models", timeout=10).json()
        assert [m["id"] for m in models["data"]] == ["SmolLM2-135M-Instruct.Q4_1"]
        r = httpx.post(base + "/v1/chat/completions", timeout=60,
                       json={"max_tokens": 4, "messages": [{"role": "user", "content": "Hi"}]})
        assert r.status_code == 200, r.text
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            rc = proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise
    assert rc == 0
    lines = log_path.read_text().splitlines()
    assert lines, "serve printed nothing"
    for line in lines:
        assert LOG_LINE.match(line), f"line without the log timestamp: {line!r}"
    text = "\n".join(lines)
    assert f"serving the default model {tmp_path}/models/{smollm_path().name}" in text
    assert "listening on http://127.0.0.1:" in text
    assert "serving SmolLM2-135M-Instruct.Q4_1 on http://127.0.0.1:" in text and "(ready)" in text
    assert " try: curl " in text
    assert " info request POST /v1/chat/completions 200 " in text
    assert "shutting down" in text
