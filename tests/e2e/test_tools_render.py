"""`deepinfer render`: the rendered script passes bash -n and shellcheck, its read-only preflight
refuses every failed check, and on a good machine it starts a real server that passes smoke.
An expert-parallel script (two ranks on this machine, mpirun) serves a tiny DeepSeek-V4 chat and
stops cleanly; its per-host checks name the host that fails; P/D and prefix-checkpoint folders
are checked.

Uses stories260K (skips when absent) and a copy of the binary as the pinned runtime.
"""

import copy
import hashlib
import json
import os
import pathlib
import platform
import shutil
import signal
import socket
import subprocess
import time

import httpx
import pytest

from conftest import STORIES, binary, free_port
from test_expert_parallel import MPI_ENV, chat_v4, v4  # noqa: F401 (fixtures)

_counter = [0]


def sha256_of(path: pathlib.Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def run(args, **kw):
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=120,
                          **kw)


@pytest.fixture(scope="session")
def runtime_dir(tmp_path_factory):
    """A runtime folder holding a copy of the binary under test, as a release would."""
    if not STORIES.exists():
        pytest.skip(f"stories260K not found at {STORIES}")
    exe = binary()
    if not exe.exists():
        pytest.fail(f"deepinfer binary not found at {exe}")
    root = tmp_path_factory.mktemp("runtime")
    (root / "bin").mkdir()
    shutil.copy2(exe, root / "bin" / "deepinfer")
    return root


class Deployment:
    """A recipe and host file for stories260K in a private artifacts folder."""

    def __init__(self, tmp: pathlib.Path, runtime: pathlib.Path):
        _counter[0] += 1
        self.tmp = tmp
        self.name = f"e2e{os.getpid()}-{_counter[0]}"
        self.artifacts = tmp / "artifacts"
        self.artifacts.mkdir()
        self.port = free_port()
        self.runtime = runtime
        self.recipe = {
            "format": "deepinfer-recipe/1",
            "name": "stories260k-test",
            "architecture": platform.machine(),
            "model": {"id": "stories260K", "revision": "llama2.c", "file": STORIES.name,
                      "tokenizer": "tok512.bin"},
            "deepinfer": {"version": "0.1.0",
                          "sha256": sha256_of(runtime / "bin" / "deepinfer"),
                          "docker_image": "debian@sha256:" + "0" * 64},
            "serve": {"served_model_name": "stories260K", "max_model_len": 512,
                      "kv_cache_memory": "16MiB", "kv_cache_dtype": "f16", "threads": 1,
                      "max_num_seqs": 4},
        }
        self.host = {
            "format": "deepinfer-host/1",
            "instance": self.name,
            "port": self.port,
            "paths": {"model": str(STORIES.parent), "runtime": str(runtime),
                      "artifacts": str(self.artifacts)},
            # This shared test machine is never quiet; idleness has its own tests.
            "devices": {"kind": "cpu", "max_load": 1000},
        }

    def render(self, recipe=None, host=None, launcher="plain", output=None, instance_file=None):
        _counter[0] += 1
        n = _counter[0]
        recipe_path = self.tmp / f"recipe{n}.json"
        host_path = self.tmp / f"host{n}.json"
        recipe_path.write_text(json.dumps(recipe or self.recipe))
        host_path.write_text(json.dumps(host or self.host))
        output = output or self.tmp / f"run{n}.sh"
        args = [binary(), "render", "--recipe", recipe_path, "--host", host_path, "--output",
                output, "--launcher", launcher]
        if instance_file:
            args += ["--instance-file", instance_file]
        return run(args), output

    def start(self, script: pathlib.Path) -> subprocess.Popen:
        log = open(self.tmp / "launch.log", "ab")
        return subprocess.Popen(["bash", str(script), "start"], stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)

    def wait_healthy(self, proc=None, timeout_s=60):
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if proc is not None and proc.poll() is not None:
                raise AssertionError("launch script exited: " + self.logs())
            try:
                if httpx.get(f"http://127.0.0.1:{self.port}/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        raise AssertionError("instance not healthy: " + self.logs())

    def server_pid(self, timeout_s=10) -> int:
        # The script records the pid right after starting the server, but a loaded machine can
        # run the server to health before the script gets to write it.
        path = self.artifacts / "serve.pid"
        deadline = time.monotonic() + timeout_s
        while not path.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        return int(path.read_text())

    def logs(self) -> str:
        out = ""
        for name in ("launch.log",):
            p = self.tmp / name
            if p.exists():
                out += p.read_text(errors="replace")[-2000:]
        p = self.artifacts / "serve.log"
        if p.exists():
            out += p.read_text(errors="replace")[-2000:]
        return out


@pytest.fixture()
def deployment(tmp_path, runtime_dir):
    d = Deployment(tmp_path, runtime_dir)
    yield d
    # Whatever a test started goes away with it.
    pid_file = d.artifacts / "serve.pid"
    if pid_file.exists():
        try:
            os.kill(int(pid_file.read_text()), signal.SIGKILL)
        except (ProcessLookupError, ValueError):
            pass


def preflight(script: pathlib.Path, env=None):
    return run(["bash", script, "preflight"], env=env)


def failed_checks(result) -> dict:
    out = {}
    for line in result.stdout.splitlines():
        parts = line.split(None, 2)
        if len(parts) == 3 and parts[0] == "FAIL":
            out[parts[1]] = parts[2]
    return out


def test_rendered_script_passes_bash_n_and_shellcheck(deployment):
    for launcher in ("plain", "docker"):
        result, script = deployment.render(launcher=launcher)
        assert result.returncode == 0, result.stderr
        assert run(["bash", "-n", script]).returncode == 0
        if shutil.which("shellcheck"):
            check = run(["shellcheck", script])
            assert check.returncode == 0, check.stdout
    text = script.read_text()
    for needle in ("--restart no", "--init", "dst=/model,readonly", "127.0.0.1:$PORT:$PORT"):
        assert needle in text


def test_render_never_overwrites(deployment):
    target = deployment.tmp / "existing.sh"
    target.write_text("keep me\n")
    result, _ = deployment.render(output=target)
    assert result.returncode == 2
    assert "refusing to overwrite" in result.stderr
    assert target.read_text() == "keep me\n"


def test_render_rejects_bad_recipes_before_writing(deployment):
    recipe = copy.deepcopy(deployment.recipe)
    recipe["serve"]["host"] = "0.0.0.0"
    result, script = deployment.render(recipe=recipe)
    assert result.returncode == 2 and "bad_recipe" in result.stderr
    assert not script.exists()


def test_good_machine_passes_preflight_and_the_script_serves_a_passing_smoke(deployment):
    # The host's warmup file reaches serve as --warmup-file: it runs before /health is 200.
    warmup = deployment.tmp / "warmup.jsonl"
    warmup.write_text('{"prompt": "Once upon a time", "max_tokens": 8}\n'
                      '{"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4}\n')
    deployment.host["warmup"] = str(warmup)
    result, script = deployment.render()
    assert result.returncode == 0, result.stderr
    check = preflight(script)
    assert check.returncode == 0, check.stdout + check.stderr
    assert "preflight: all checks passed" in check.stdout
    # Preflight is read-only: nothing was written into the artifacts folder.
    assert list(deployment.artifacts.iterdir()) == []

    proc = deployment.start(script)
    try:
        deployment.wait_healthy(proc)
        log = (deployment.artifacts / "serve.log").read_text()
        assert f"warm-up: 2 request(s) from {warmup}" in log and "warm-up: done" in log, log
        smoke = run([binary(), "smoke", "--base", f"http://127.0.0.1:{deployment.port}/v1"])
        assert smoke.returncode == 0, smoke.stdout + smoke.stderr
        # The server listens on loopback only, under the instance's process name.
        argv0 = pathlib.Path(f"/proc/{deployment.server_pid()}/cmdline").read_bytes().split(b"\0")[0]
        assert argv0.decode() == f"deepinfer-serve@{deployment.name}"
        # A second start of the same instance is refused: its name and port are taken.
        again = preflight(script)
        assert again.returncode == 1
        failed = failed_checks(again)
        assert "instance" in failed and "port" in failed, again.stdout
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    last = dict(l.split("=", 1) for l in (deployment.artifacts / "last-exit").read_text().split())
    assert last["reason"] == "stopped", last
    assert not (deployment.artifacts / "serve.pid").exists()


def fake_nvidia_smi(directory: pathlib.Path) -> pathlib.Path:
    """An nvidia-smi that answers like the real one, per $FAKE_SMI_MODE."""
    directory.mkdir(exist_ok=True)
    smi = directory / "nvidia-smi"
    smi.write_text(r"""#!/bin/bash
mode="${FAKE_SMI_MODE:-idle}"
if [[ "$mode" == broken ]]; then echo "NVIDIA-SMI has failed" >&2; exit 9; fi
if [[ "$*" == *query-compute-apps* ]]; then
  if [[ "$mode" == busy_apps ]]; then echo "GPU-aaaa-0000, 4242"; fi
  exit 0
fi
case "$mode" in
  idle|busy_apps) echo "0, GPU-aaaa-0000, 0, 3"; echo "1, GPU-bbbb-1111, 0, 3" ;;
  busy_util) echo "0, GPU-aaaa-0000, 97, 70000"; echo "1, GPU-bbbb-1111, 0, 3" ;;
  unknown) echo "0, GPU-aaaa-0000, [N/A], [N/A]"; echo "1, GPU-bbbb-1111, 0, 3" ;;
  one_gpu) echo "1, GPU-bbbb-1111, 0, 3" ;;
esac
""")
    smi.chmod(0o755)
    return directory


def test_preflight_refuses_every_failed_check(deployment, tmp_path):
    base_recipe, base_host = deployment.recipe, deployment.host
    other_arch = "aarch64" if platform.machine() != "aarch64" else "x86_64"
    nested = deployment.runtime / "artifacts-inside"
    busy_name = deployment.tmp / "busy-name"

    def with_recipe(**changes):
        r = copy.deepcopy(base_recipe)
        for path, value in changes.items():
            section, _, key = path.partition("__")
            (r[section] if key else r).__setitem__(key or section, value)
        return r

    def with_host(**changes):
        h = copy.deepcopy(base_host)
        for path, value in changes.items():
            section, _, key = path.partition("__")
            (h[section] if key else h).__setitem__(key or section, value)
        return h

    fake_bin = fake_nvidia_smi(tmp_path / "fakebin")
    path_with_smi = {**os.environ, "PATH": f"{fake_bin}:{os.environ['PATH']}"}
    nvidia = {"kind": "nvidia", "ids": [0]}
    cases = [
        # (name, recipe, host, env, failed check, words in its line)
        ("architecture", with_recipe(architecture=other_arch), base_host, None, "architecture",
         other_arch),
        ("unknown device kind", base_recipe, with_host(devices={"kind": "tpu"}), None, "devices",
         "unknown device kind"),
        ("no nvidia-smi", base_recipe, with_host(devices=nvidia),
         {**os.environ, "PATH": "/usr/bin:/bin"}, "devices", "nvidia-smi not found"),
        ("nvidia-smi fails", base_recipe, with_host(devices=nvidia),
         {**path_with_smi, "FAKE_SMI_MODE": "broken"}, "devices", "nvidia-smi failed"),
        ("gpu not visible", base_recipe, with_host(devices={"kind": "nvidia", "ids": [0, 1]}),
         {**path_with_smi, "FAKE_SMI_MODE": "one_gpu"}, "devices", "GPU 0 not visible"),
        ("gpu unknown state", base_recipe, with_host(devices=nvidia),
         {**path_with_smi, "FAKE_SMI_MODE": "unknown"}, "devices", "unknown"),
        ("gpu busy", base_recipe, with_host(devices=nvidia),
         {**path_with_smi, "FAKE_SMI_MODE": "busy_util"}, "devices", "busy"),
        ("gpu has processes", base_recipe, with_host(devices=nvidia),
         {**path_with_smi, "FAKE_SMI_MODE": "busy_apps"}, "devices", "compute processes"),
        ("model missing", with_recipe(model__file="missing.bin"), base_host, None, "paths",
         "missing.bin"),
        ("runtime missing", base_recipe,
         with_host(paths={**base_host["paths"], "runtime": str(tmp_path / "nope")}), None,
         "paths", "runtime folder"),
        ("nested folders", base_recipe,
         with_host(paths={**base_host["paths"], "artifacts": str(nested)}), None, "nesting",
         "lies in the runtime folder"),
        ("binary identity", with_recipe(deepinfer__sha256="1" * 64), base_host, None, "binary",
         "the recipe pins"),
    ]
    nested.mkdir()
    try:
        for name, recipe, host, env, check, words in cases:
            result, script = deployment.render(recipe=recipe, host=host)
            assert result.returncode == 0, (name, result.stderr)
            refused = preflight(script, env=env)
            failed = failed_checks(refused)
            assert refused.returncode == 1, (name, refused.stdout, refused.stderr)
            assert check in failed, (name, refused.stdout)
            assert words in failed[check], (name, failed[check])
            assert "not starting" in refused.stdout
            # `start` refuses the same way and starts nothing.
            started = run(["bash", script, "start"], env=env)
            assert started.returncode == 1 and not (deployment.artifacts / "serve.pid").exists()
        # An idle fake GPU passes the device probe.
        result, script = deployment.render(host=with_host(devices=nvidia))
        ok = preflight(script, env={**path_with_smi, "FAKE_SMI_MODE": "idle"})
        assert ok.returncode == 0, ok.stdout
    finally:
        nested.rmdir()

    # A port somebody listens on.
    result, script = deployment.render()
    with socket.socket() as s:
        s.bind(("127.0.0.1", deployment.port))
        s.listen()
        taken = preflight(script)
    assert taken.returncode == 1 and "port" in failed_checks(taken), taken.stdout

    # An instance name in use by a running process.
    holder = subprocess.Popen(["bash", "-c", f"exec -a deepinfer-serve@{deployment.name} sleep 30"])
    try:
        # Wait for the exec to rename the process (a fixed sleep lost that race on a loaded
        # machine).
        cmdline = pathlib.Path(f"/proc/{holder.pid}/cmdline")
        deadline = time.monotonic() + 10
        while not cmdline.read_bytes().startswith(f"deepinfer-serve@{deployment.name}\0".encode()):
            assert time.monotonic() < deadline, "the holder did not exec"
            time.sleep(0.02)
        used = preflight(script)
        assert used.returncode == 1 and "instance" in failed_checks(used), used.stdout
    finally:
        holder.kill()
        holder.wait()

    # A busy CPU (this test machine's load average is rarely exactly zero).
    load = float(pathlib.Path("/proc/loadavg").read_text().split()[0])
    if load > 0:
        result, script = deployment.render(host=with_host(devices={"kind": "cpu", "max_load": 0}))
        busy = preflight(script)
        assert busy.returncode == 1 and "busy" in failed_checks(busy).get("devices", ""), busy.stdout

    if os.geteuid() != 0:
        # Permission checks cannot fail for root, who reads and writes everything.
        artifacts = pathlib.Path(base_host["paths"]["artifacts"])
        artifacts.chmod(0o500)
        try:
            result, script = deployment.render()
            assert "artifacts" in failed_checks(preflight(script))
        finally:
            artifacts.chmod(0o755)


def ep_deployment(d: Deployment, model: pathlib.Path, hosts):
    """Turns a stories260K deployment into an expert-parallel one of the tiny V4 chat model."""
    d.recipe["model"] = {"id": "deepseek-v4-tiny", "revision": "synthetic", "file": "."}
    d.recipe["serve"] = {"served_model_name": "ep", "max_model_len": 1024, "threads": 1,
                         "max_num_seqs": 4, "expert_parallel_timeout": 10}
    d.host["paths"]["model"] = str(model)
    d.host["expert_parallel"] = {"hosts": hosts}


def test_expert_parallel_script_serves_from_two_ranks_and_stops_cleanly(tmp_path, runtime_dir,
                                                                        chat_v4):  # noqa: F811
    if shutil.which("mpirun") is None:
        pytest.fail("mpirun not found: install openmpi-bin (scripts/setup.sh does)")
    d = Deployment(tmp_path, runtime_dir)
    ep_deployment(d, chat_v4, [{"name": "here", "address": "localhost", "slots": 2}])
    result, script = d.render()
    assert result.returncode == 0, result.stderr
    text = script.read_text()
    assert "--host 'localhost:2'" in text and "--expert-parallel" in text, text
    if shutil.which("shellcheck"):
        check = run(["shellcheck", script])
        assert check.returncode == 0, check.stdout
    check = preflight(script, env=MPI_ENV)
    assert check.returncode == 0, check.stdout + check.stderr
    lines = check.stdout.splitlines()
    assert any(l.startswith("ok") and "ep_launch" in l for l in lines), check.stdout
    host_line = next(l for l in lines if "ep_host" in l)
    assert host_line.startswith("ok") and "here (localhost): 2 rank(s)" in host_line, check.stdout
    assert list(d.artifacts.iterdir()) == []

    log = open(tmp_path / "launch.log", "ab")
    proc = subprocess.Popen(["bash", str(script), "start"], stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True, env=MPI_ENV)
    try:
        d.wait_healthy(proc, timeout_s=120)
        # mpirun runs under the instance's name; its two children are the ranks.
        launcher = d.server_pid()
        argv0 = pathlib.Path(f"/proc/{launcher}/cmdline").read_bytes().split(b"\0")[0]
        assert argv0.decode() == f"deepinfer-serve@{d.name}"
        ranks = subprocess.run(["pgrep", "-P", str(launcher)], capture_output=True, text=True)
        assert len(ranks.stdout.split()) == 2, ranks.stdout
        reply = httpx.post(f"http://127.0.0.1:{d.port}/v1/chat/completions", timeout=120,
                           json={"model": "ep", "max_tokens": 8, "temperature": 0,
                                 "messages": [{"role": "user", "content": "Say hello."}]})
        assert reply.status_code == 200, reply.text
        assert reply.json()["choices"][0]["message"]["content"], reply.text
        assert reply.json()["usage"]["completion_tokens"] > 0
    finally:
        # The script sends SIGTERM to rank 0, which stops rank 1; every process exits 0.
        proc.send_signal(signal.SIGTERM)
        status = proc.wait(timeout=60)
    assert status == 0, d.logs()
    last = dict(l.split("=", 1) for l in (d.artifacts / "last-exit").read_text().split())
    assert last["status"] == "0" and last["reason"] == "stopped", last
    assert "rank 1 done (rank 0 stopped)" in (d.artifacts / "serve.log").read_text(), d.logs()
    assert not (d.artifacts / "serve.pid").exists()


def test_expert_parallel_preflight_names_the_host_that_fails(tmp_path, runtime_dir, chat_v4):  # noqa: F811,E501
    d = Deployment(tmp_path, runtime_dir)
    # A second host that cannot be reached (.invalid never resolves).
    ep_deployment(d, chat_v4, [{"name": "here", "address": "localhost", "slots": 1},
                               {"name": "gone", "address": "node.invalid", "slots": 1}])
    result, script = d.render()
    assert result.returncode == 0, result.stderr
    text = script.read_text()
    assert "--host 'localhost:1,node.invalid:1'" in text, text
    refused = preflight(script, env=MPI_ENV)
    assert refused.returncode == 1, refused.stdout
    fails = [l for l in refused.stdout.splitlines() if l.startswith("FAIL")]
    assert len(fails) == 1 and "ep_host" in fails[0], refused.stdout
    assert "gone (node.invalid): not reachable over ssh" in fails[0], fails
    assert "ok    ep_host       here (localhost)" in refused.stdout, refused.stdout

    # The first host must be this machine: rank 0 serves here.
    ep_deployment(d, chat_v4, [{"name": "far", "address": "192.0.2.1", "slots": 2}])
    result, script = d.render()
    assert result.returncode == 0, result.stderr
    refused = preflight(script, env=MPI_ENV)
    assert "is not this machine" in failed_checks(refused).get("ep_launch", ""), refused.stdout

    # The rank's memory need is counted from the safetensors headers: too little fails.
    ep_deployment(d, chat_v4, [{"name": "here", "address": "localhost", "slots": 2}])
    result, script = d.render()
    fake = tmp_path / "fake-meminfo-bin"
    fake.mkdir()
    (fake / "awk").write_text('#!/bin/bash\nif [[ "$*" == *MemAvailable* ]]; then echo 1024; '
                              'exit 0; fi\nexec /usr/bin/awk "$@"\n')
    (fake / "awk").chmod(0o755)
    short = preflight(script, env={**MPI_ENV, "PATH": f"{fake}:{os.environ['PATH']}"})
    assert short.returncode == 1
    assert "MiB available" in failed_checks(short).get("ep_host", ""), short.stdout


def test_checkpoint_folders_are_checked_and_rendered(deployment, tmp_path):
    prefix = tmp_path / "prefix"
    deployment.host["paths"]["prefix_checkpoints"] = str(prefix)
    deployment.recipe["serve"]["checkpoint_min_tokens"] = 16
    result, script = deployment.render()
    assert result.returncode == 0, result.stderr
    text = script.read_text()
    assert f"--prefix-checkpoint-dir '{prefix}'" in text and "--model-revision 'llama2.c'" in text
    missing = preflight(script)
    assert "missing" in failed_checks(missing).get("checkpoints", ""), missing.stdout
    prefix.mkdir()
    assert preflight(script).returncode == 0

    # The prefill side of a P/D pair: its shared folder and its key file.
    del deployment.host["paths"]["prefix_checkpoints"]
    shared, key = tmp_path / "pd", tmp_path / "pd.key"
    deployment.host["pd"] = {"role": "prefill", "checkpoint_dir": str(shared),
                             "api_key_file": str(key)}
    result, script = deployment.render()
    assert result.returncode == 0, result.stderr
    assert "--pd-role 'prefill'" in script.read_text()
    failed = failed_checks(preflight(script)).get("checkpoints", "")
    assert "P/D folder" in failed and "key file" in failed, failed
    shared.mkdir()
    key.write_text("not a valid key\n")
    assert "visible ASCII" in failed_checks(preflight(script)).get("checkpoints", "")
    key.write_text("s3cret-key\n")
    ok = preflight(script)
    assert ok.returncode == 0, ok.stdout
    assert "s3cret" not in ok.stdout and "s3cret" not in script.read_text()
