"""`deepinfer serve --prefix-checkpoint-dir` as real processes: a long prompt's prefix is saved
after its prefill; a server restarted on the same folder answers the same request hot
(cached_tokens = the prefix) with the same tokens; a corrupt file is rejected, counted and
recomputed without harming the server; a folder that does not exist stops the start."""

import pathlib
import re
import subprocess
import time

import httpx
import pytest

from conftest import Server, binary, smollm_path

ARGS = ["--threads", "2", "--kv-cache-memory", "256MiB", "--max-model-len", "4096",
        "--checkpoint-min-tokens", "256"]


def metric(base: str, name: str, labels: str = "") -> float:
    text = httpx.get(base + "/metrics", timeout=10).text
    pattern = rf"^{re.escape(name)}{re.escape('{' + labels + '}') if labels else ''} (\S+)$"
    m = re.search(pattern, text, re.MULTILINE)
    assert m, f"no {name}{labels}:\n{text[-3000:]}"
    return float(m.group(1))


def long_chat(base: str):
    system = "You answer briefly. " + " ".join(f"fact {i}: item {i * 7 % 13} is blue." for i in range(60))
    return httpx.post(base + "/v1/chat/completions", timeout=300, json={
        "messages": [{"role": "system", "content": system},
                     {"role": "user", "content": "Which items are blue?"}],
        "max_tokens": 16, "temperature": 0})


def files(folder: pathlib.Path):
    return sorted(p for p in folder.iterdir() if p.name.endswith(".dipc"))


def wait_for(check, timeout_s=20.0):
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


@pytest.fixture()
def folder(tmp_path):
    if not smollm_path().exists():
        pytest.skip(f"SmolLM2 not found at {smollm_path()}")
    return tmp_path


def test_a_restarted_server_answers_the_long_prefix_hot_with_the_same_tokens(folder):
    first = Server(smollm_path(), "smol", ARGS + ["--prefix-checkpoint-dir", str(folder)])
    try:
        r = long_chat(first.base_url)
        assert r.status_code == 200, r.text
        cold = r.json()
        assert cold["usage"]["prompt_tokens"] > 600
        wait_for(lambda: metric(first.base_url, "deepinfer_prefix_checkpoint_saved_total") == 1)
        assert len(files(folder)) == 1
        assert metric(first.base_url, "deepinfer_prefix_checkpoint_bytes") > 0
    finally:
        first.stop()

    second = Server(smollm_path(), "smol", ARGS + ["--prefix-checkpoint-dir", str(folder)])
    try:
        assert "prefix checkpoints in" in second.logs()
        r = long_chat(second.base_url)
        assert r.status_code == 200, r.text
        hot = r.json()
        assert hot["choices"][0]["message"]["content"] == cold["choices"][0]["message"]["content"]
        cached = hot["usage"]["prompt_tokens_details"]["cached_tokens"]
        prompt = hot["usage"]["prompt_tokens"]
        assert cached == (prompt - 1) // 16 * 16 or cached == prompt // 16 * 16, hot["usage"]
        assert cached >= 600
        assert metric(second.base_url, "deepinfer_prefix_checkpoint_restored_total") == 1
        assert metric(second.base_url, "deepinfer_prefix_checkpoint_restored_tokens_total") == cached
        assert len(files(folder)) == 1  # nothing written twice
    finally:
        second.stop()


def test_a_corrupt_checkpoint_is_rejected_counted_and_recomputed(folder):
    first = Server(smollm_path(), "smol", ARGS + ["--prefix-checkpoint-dir", str(folder)])
    try:
        cold = long_chat(first.base_url).json()
        wait_for(lambda: metric(first.base_url, "deepinfer_prefix_checkpoint_saved_total") == 1)
    finally:
        first.stop()
    (path,) = files(folder)
    data = bytearray(path.read_bytes())
    data[-100] ^= 0x40
    path.write_bytes(bytes(data))

    second = Server(smollm_path(), "smol", ARGS + ["--prefix-checkpoint-dir", str(folder)])
    try:
        r = long_chat(second.base_url)
        assert r.status_code == 200, r.text
        assert r.json()["choices"][0]["message"]["content"] == \
            cold["choices"][0]["message"]["content"]
        assert r.json()["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
        assert metric(second.base_url, "deepinfer_prefix_checkpoint_rejected_total",
                      'reason="corrupt"') == 1
        assert metric(second.base_url, "deepinfer_prefix_checkpoint_restored_total") == 0
        assert "prefix checkpoint" in second.logs() and "corrupt" in second.logs()
        assert httpx.get(second.base_url + "/health", timeout=10).status_code == 200
        assert second.alive()
    finally:
        second.stop()


def test_a_missing_folder_stops_the_start_with_exit_status_2(tmp_path):
    if not smollm_path().exists():
        pytest.skip(f"SmolLM2 not found at {smollm_path()}")
    proc = subprocess.run([str(binary()), "serve", "--model", str(smollm_path()), "--port", "0",
                           "--prefix-checkpoint-dir", str(tmp_path / "absent")],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert "bad --prefix-checkpoint-dir" in proc.stderr and "bad_option" in proc.stderr
