"""What `deepinfer serve` prints and does at start: without --model it serves the default model
from the cache (as `make serve` does) or says how to get it; every line it prints, start-up and
request lines alike, starts with the same UTC timestamp and level."""

import os
import re
import signal
import subprocess
import time

import httpx
import pytest

from conftest import Server, binary, free_port, smollm_path, wait_healthy

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


def test_kv_cache_dtype_f16_halves_bytes_per_token_and_serves():
    """--kv-cache-dtype f16 stores half the bytes per token (so the same --kv-cache-memory holds
    twice the tokens), says so at start, and answers; a numerics whose attention reads f32 only
    is refused at start with one line."""
    if not smollm_path().exists():
        pytest.skip(f"SmolLM2 not found at {smollm_path()}")
    sizes = {}
    for dtype in ("f32", "f16"):
        server = Server(smollm_path(), "smol", ("--threads", "2", "--kv-cache-memory", "64MiB",
                                                "--kv-cache-dtype", dtype))
        try:
            r = httpx.post(server.base_url + "/v1/chat/completions", timeout=60,
                           json={"max_tokens": 8, "temperature": 0,
                                 "messages": [{"role": "user", "content": "Hi"}]})
            assert r.status_code == 200, r.text
            assert r.json()["usage"]["completion_tokens"] >= 1
            m = re.search(r"KV cache: (\d+) tokens, (\d+) bytes per token \([\d.]+ KiB, (\w+)\)",
                          server.logs())
            assert m, server.logs()
            assert m.group(3) == dtype
            sizes[dtype] = (int(m.group(1)), int(m.group(2)))
        finally:
            server.stop()
    # SmolLM2-135M: 30 layers x K and V x 3 KV heads x 64 dims.
    assert sizes["f32"][1] == 30 * 2 * 3 * 64 * 4 and sizes["f16"][1] == sizes["f32"][1] // 2
    assert sizes["f16"][0] == 2 * sizes["f32"][0]
    bad = subprocess.run([str(binary()), "serve", "--model", str(smollm_path()), "--port", "0",
                          "--numerics", "ggml", "--kv-cache-dtype", "bf16"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2, bad.stderr
    errors = [l for l in bad.stderr.splitlines() if " error " in l]
    assert len(errors) == 1 and "unsupported_kv_cache_dtype" in errors[0], bad.stderr
    assert "--kv-cache-dtype bf16" in errors[0]


def serve_args(port, *extra):
    return [str(binary()), "serve", "--model", str(smollm_path()), "--host", "127.0.0.1",
            "--port", str(port), "--threads", "2", *extra]


def test_warmup_file_runs_before_health_turns_200(tmp_path):
    """--warmup-file: /health is 503 warming_up while the requests run (the API answers
    meanwhile), 200 after; the log says how many ran and when they finished."""
    if not smollm_path().exists():
        pytest.skip(f"SmolLM2 not found at {smollm_path()}")
    warmup = tmp_path / "warmup.jsonl"
    # Long enough (a few seconds) that the poll below sees the warming_up state.
    warmup.write_text(
        '{"messages": [{"role": "user", "content": "Tell me a story."}], "max_tokens": 300, '
        '"ignore_eos": true, "stream": true}\n\n'
        '{"prompt": "Once upon a time", "max_tokens": 100, "ignore_eos": true}\n')
    port = free_port()
    log_path = tmp_path / "serve.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(serve_args(port, "--warmup-file", str(warmup)), stdout=log,
                                stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    seen = []
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            assert proc.poll() is None, log_path.read_text()
            try:
                r = httpx.get(base + "/health", timeout=2)
            except httpx.HTTPError:
                time.sleep(0.02)
                continue
            code = r.json().get("error", {}).get("code") if r.status_code != 200 else "ok"
            if not seen or seen[-1] != code:
                seen.append(code)
            if r.status_code == 200:
                break
            if code == "warming_up":
                # The routes answer while warming up: the warm-up requests use them.
                m = httpx.get(base + "/v1/models", timeout=10)
                assert m.status_code == 200, m.text
            time.sleep(0.02)
        assert seen[-1] == "ok", seen
        assert "warming_up" in seen, seen
        assert seen.index("warming_up") < seen.index("ok")
        assert set(seen) <= {"model_loading", "warming_up", "ok"}, seen
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)
    text = log_path.read_text()
    assert f"warm-up: 2 request(s) from {warmup}" in text, text
    assert re.search(r"warm-up: done in [\d.]+ s", text), text
    assert text.index("warm-up: done") < text.index("(ready)")
    # Both warm-up requests went through the routes (and their log lines).
    assert " info request POST /v1/chat/completions 200 " in text
    assert " info request POST /v1/completions 200 " in text


@pytest.mark.parametrize("content,expect", [
    ('{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}\n{"prompt": ',
     "line 2: not JSON"),
    ('{"model": "x"}\n', "line 1: a body needs"),
])
def test_malformed_warmup_file_exits_2_before_loading(tmp_path, content, expect):
    warmup = tmp_path / "warmup.jsonl"
    warmup.write_text(content)
    r = subprocess.run(serve_args(0, "--warmup-file", str(warmup)), capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert "bad_warmup" in lines[0] and expect in lines[0], lines[0]
    assert "loading" not in r.stderr  # refused before the model load


def test_failing_warmup_request_stops_the_start_with_exit_2(tmp_path):
    if not smollm_path().exists():
        pytest.skip(f"SmolLM2 not found at {smollm_path()}")
    warmup = tmp_path / "warmup.jsonl"
    warmup.write_text('{"prompt": "ok", "max_tokens": 2}\n'
                      '{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 0}\n')
    r = subprocess.run(serve_args(free_port(), "--warmup-file", str(warmup)),
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stderr
    errors = [l for l in r.stderr.splitlines() if " error " in l]
    assert len(errors) == 1, r.stderr
    assert "warm-up failed: bad_warmup" in errors[0]
    assert "request 2 of 2 (line 2, POST /v1/chat/completions)" in errors[0]
    assert "HTTP 400" in errors[0]
    assert "(ready)" not in r.stderr


@pytest.mark.parametrize("flags,expect", [
    (["--allowed-local-media-path", "/nonexistent/images"], "bad_option"),
    (["--limit-images-per-request", "1000"], "--limit-images-per-request"),
    (["--max-image-bytes", "lots"], "--max-image-bytes"),
])
def test_bad_image_flags_exit_2_before_loading(flags, expect):
    """Image input settings (docs/api.md "Images") are checked before the model loads."""
    r = subprocess.run(serve_args(0, *flags), capture_output=True, text=True, timeout=60)
    assert r.returncode == 2, r.stderr
    assert expect in r.stderr, r.stderr
    assert "loading" not in r.stderr
