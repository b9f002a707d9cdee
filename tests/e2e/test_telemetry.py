"""Batch telemetry of `deepinfer serve` (DEEPINFER_BATCH_TELEMETRY_DIR / _RUN_ID): one JSON-lines
file per rank that bench/telemetry_report.py reads back, every request with its whole
lifecycle; nothing written when it is off; a missing folder or a reused run id stops the start."""

import concurrent.futures
import os
import signal
import subprocess
import sys

import httpx
import pytest

from conftest import REPO, STORIES, binary, free_port, wait_healthy


def start(tmp_path, env_extra, *args):
    port = free_port()
    env = dict(os.environ, **env_extra)
    log = open(tmp_path / f"serve-{port}.log", "wb")
    proc = subprocess.Popen([str(binary()), "serve", "--model", str(STORIES), "--port",
                             str(port), "--threads", "2", "--kv-cache-memory", "64MiB", *args],
                            env=env, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    wait_healthy(base, proc, 60, "deepinfer serve",
                 lambda: (tmp_path / f"serve-{port}.log").read_text())
    return proc, base


def stop(proc):
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=30) == 0


def send(base, n):
    def one(i):
        r = httpx.post(base + "/v1/completions", timeout=60,
                       json={"prompt": f"Once upon a time {i}", "max_tokens": 12,
                             "ignore_eos": True})
        assert r.status_code == 200, r.text

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        list(pool.map(one, range(n)))


@pytest.fixture(autouse=True)
def need_stories():
    if not STORIES.exists():
        pytest.skip(f"stories260K not found at {STORIES}")


def test_two_ranks_write_files_the_report_reads_with_every_lifecycle(tmp_path):
    tdir = tmp_path / "telemetry"
    tdir.mkdir()
    env = {"DEEPINFER_BATCH_TELEMETRY_DIR": str(tdir), "DEEPINFER_BATCH_TELEMETRY_RUN_ID": "r1"}
    proc, base = start(tmp_path, env, "--data-parallel-size", "2")
    send(base, 16)
    stop(proc)
    assert sorted(p.name for p in tdir.iterdir()) == ["r1.rank0.jsonl", "r1.rank1.jsonl"]
    png = tmp_path / "telemetry.png"
    report = subprocess.run([sys.executable, str(REPO / "bench" / "telemetry_report.py"),
                             str(tdir), "r1", "--plot", str(png), "--json",
                             str(tmp_path / "t.json")], capture_output=True, text=True)
    assert report.returncode == 0, report.stdout + report.stderr
    import json
    summary = json.loads((tmp_path / "t.json").read_text())
    assert sum(r["requests"] for r in summary.values()) == 16
    assert all(r["complete"] == r["requests"] and r["dropped"] == 0 for r in summary.values())
    assert all(r["steps"] > 0 for r in summary.values())
    assert png.stat().st_size > 1000
    # The run id names one run: starting again with it is refused before anything loads.
    again = subprocess.run([str(binary()), "serve", "--model", str(STORIES), "--port", "0"],
                           env=dict(os.environ, **env), capture_output=True, text=True,
                           timeout=60)
    assert again.returncode == 2, again.stderr
    errors = [l for l in again.stderr.splitlines() if " error " in l]
    assert len(errors) == 1 and "bad_telemetry" in errors[0] and "r1" in errors[0], again.stderr


def test_telemetry_off_writes_nothing(tmp_path):
    tdir = tmp_path / "telemetry"
    tdir.mkdir()
    env = {"DEEPINFER_BATCH_TELEMETRY_RUN_ID": "ignored"}  # no DIR: off
    proc, base = start(tmp_path, env)
    send(base, 4)
    stop(proc)
    assert list(tdir.iterdir()) == []
    assert not list(tmp_path.glob("**/*.jsonl"))


@pytest.mark.parametrize("env,needle", [
    ({"DEEPINFER_BATCH_TELEMETRY_DIR": "/nonexistent/deepinfer-telemetry",
      "DEEPINFER_BATCH_TELEMETRY_RUN_ID": "x"}, "not an existing folder"),
    ({"DEEPINFER_BATCH_TELEMETRY_DIR": "/tmp"}, "RUN_ID must be set"),
])
def test_bad_settings_exit_2_with_one_line(env, needle):
    clean = {k: v for k, v in os.environ.items() if not k.startswith("DEEPINFER_BATCH_TELEMETRY")}
    r = subprocess.run([str(binary()), "serve", "--model", str(STORIES), "--port", "0"],
                       env=dict(clean, **env), capture_output=True, text=True, timeout=60)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "bad_telemetry" in lines[0] and needle in lines[0], r.stderr
