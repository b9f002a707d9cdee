"""`deepinfer watch` against a real rendered instance of stories260K: it restarts a crashed
instance only after continuous idleness, never one an operator stopped, and notifies once per
change. Time is a test clock (--clock-file) except in the daemon test."""

import json
import os
import pathlib
import signal
import subprocess
import time

import httpx
import pytest

from conftest import binary
from test_tools_render import Deployment, run, runtime_dir  # noqa: F401 (fixture)


class Watched:
    """A rendered instance with its watch binding, a test clock and a notes file."""

    def __init__(self, tmp: pathlib.Path, runtime: pathlib.Path):
        self.d = Deployment(tmp, runtime)
        self.instance = tmp / "instance.json"
        result, self.script = self.d.render(instance_file=self.instance)
        assert result.returncode == 0, result.stderr
        self.clock = tmp / "clock"
        self.now = 1.9e9
        self.clock.write_text(str(self.now))
        self.notes = tmp / "notes"

    def start(self):
        proc = subprocess.Popen(["bash", str(self.script), "start"], stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, start_new_session=True)
        self.d.wait_healthy(proc)
        return proc

    def watch_once(self, advance_s=0.0, *extra):
        self.now += advance_s
        self.clock.write_text(str(self.now))
        result = run([binary(), "watch", "--instance", self.instance, "--clock-file", self.clock,
                      "--idle-hours", "0.5", "--interval-s", "900", "--once", "--json",
                      "--notify", f'echo "$DEEPINFER_WATCH_EVENT" >> {self.notes}', *extra])
        assert result.returncode in (0, 1), result.stderr
        return json.loads(result.stdout)

    def notes_of(self, event: str) -> int:
        if not self.notes.exists():
            return 0
        return self.notes.read_text().split().count(event)

    def wait_exit_recorded(self, proc):
        proc.wait(timeout=30)
        return dict(l.split("=", 1) for l in (self.d.artifacts / "last-exit").read_text().split())

    def healthy(self) -> bool:
        try:
            return httpx.get(f"http://127.0.0.1:{self.d.port}/health", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False


@pytest.fixture()
def watched(tmp_path, runtime_dir):  # noqa: F811
    w = Watched(tmp_path, runtime_dir)
    yield w
    pid_file = w.d.artifacts / "serve.pid"
    if pid_file.exists():
        try:
            os.kill(int(pid_file.read_text()), signal.SIGKILL)
        except (ProcessLookupError, ValueError):
            pass


def test_crash_is_restarted_only_after_continuous_idleness(watched):
    proc = watched.start()
    assert watched.watch_once()["state"] == "running"
    os.kill(watched.d.server_pid(), signal.SIGSEGV)
    last = watched.wait_exit_recorded(proc)
    assert last["reason"] == "crashed" and last["signal"] == "SEGV", last

    assert watched.watch_once(900)["state"] == "crashed_waiting"  # idle from here
    sample = watched.watch_once(900)
    assert sample["state"] == "crashed_waiting" and not sample["restarted"]
    assert not watched.healthy()
    sample = watched.watch_once(900)  # half an hour of idle samples
    assert sample["state"] == "restarted", sample
    deadline = time.monotonic() + 60
    while not watched.healthy():
        assert time.monotonic() < deadline, watched.d.logs()
        time.sleep(0.05)
    assert watched.watch_once(900)["state"] == "running"
    smoke = run([binary(), "smoke", "--base", f"http://127.0.0.1:{watched.d.port}/v1"])
    assert smoke.returncode == 0, smoke.stdout
    assert watched.notes_of("crashed_waiting") == 1
    assert watched.notes_of("restarted") == 1
    assert watched.notes_of("running") == 1  # back up after the restart

    # Killed by an operator: stays down however long the machine is idle.
    os.kill(watched.d.server_pid(), signal.SIGKILL)
    deadline = time.monotonic() + 30
    while (watched.d.artifacts / "serve.pid").exists():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    for _ in range(6):
        sample = watched.watch_once(900)
        assert sample["state"] == "stopped" and not sample["restarted"], sample
    assert not watched.healthy()
    assert watched.notes_of("stopped") == 1


def test_busy_machine_and_watch_stop_prevent_restarts(watched):
    proc = watched.start()
    os.kill(watched.d.server_pid(), signal.SIGABRT)
    assert watched.wait_exit_recorded(proc)["reason"] == "crashed"
    busy = ["--idle-probe", "exit 1"]
    for _ in range(4):
        sample = watched.watch_once(900, *busy)
        assert sample["state"] == "crashed_waiting" and not sample["idle"], sample
    assert not watched.healthy()

    # The operator starts it by hand, then stops it with watch stop; a later crash record
    # (for example from a forced kill) does not bring it back.
    proc = watched.start()
    stopped = run([binary(), "watch", "stop", "--instance", watched.instance])
    assert stopped.returncode == 0, stopped.stderr
    proc.wait(timeout=30)
    assert not watched.healthy()
    for _ in range(4):
        assert watched.watch_once(900)["state"] == "stopped_by_operator"
    resumed = run([binary(), "watch", "resume", "--instance", watched.instance])
    assert resumed.returncode == 0 and "armed" in resumed.stdout


def test_daemon_restarts_after_real_idle_time_and_exits_on_sigterm(watched):
    proc = watched.start()
    os.kill(watched.d.server_pid(), signal.SIGSEGV)
    watched.wait_exit_recorded(proc)
    daemon = subprocess.Popen(
        [str(binary()), "watch", "--instance", str(watched.instance), "--interval-s", "0.5",
         "--jitter", "0.2", "--idle-hours", str(2.0 / 3600), "--notify",
         f'echo "$DEEPINFER_WATCH_EVENT" >> {watched.notes}'],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not watched.healthy():
            assert time.monotonic() < deadline and daemon.poll() is None, watched.d.logs()
            time.sleep(0.05)
    finally:
        daemon.send_signal(signal.SIGTERM)
        out, err = daemon.communicate(timeout=30)
    assert daemon.returncode == 0, err
    lines = out.splitlines()
    assert any("restarted" in l for l in lines), out
    assert sum("crashed_waiting" in l for l in lines) >= 3, out  # several samples, 1 note
    assert watched.notes_of("crashed_waiting") == 1
