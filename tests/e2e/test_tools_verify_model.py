"""`deepinfer verify-model` catches a flipped byte, a missing file and an extra file."""

import json
import shutil
import subprocess

import pytest

from conftest import STORIES, binary


def verify(*args):
    return subprocess.run([str(binary()), "verify-model", *map(str, args)], capture_output=True,
                          text=True, timeout=120)


@pytest.fixture()
def model_copy(tmp_path):
    if not STORIES.exists():
        pytest.skip(f"stories260K not found at {STORIES}")
    root = tmp_path / "stories260K"
    shutil.copytree(STORIES.parent, root)
    manifest = tmp_path / "manifest.json"
    made = verify("--root", root, "--write-manifest", manifest, "--model-id", "stories260K",
                  "--revision", "r1")
    assert made.returncode == 0, made.stderr
    return root, manifest


def test_trusted_copy_verifies_fast_and_full(model_copy):
    root, manifest = model_copy
    assert json.loads(manifest.read_text())["revision"] == "r1"
    for mode in ([], ["--full"]):
        result = verify("--root", root, "--manifest", manifest, "--json", *mode)
        assert result.returncode == 0, result.stdout
        report = json.loads(result.stdout)
        assert report["ok"] and report["num_files"] == 4


def test_flipped_byte_is_caught_by_full_mode_only(model_copy):
    root, manifest = model_copy
    target = root / "stories260K.bin"
    data = bytearray(target.read_bytes())
    data[len(data) // 2] ^= 0x40
    target.write_bytes(bytes(data))
    assert verify("--root", root, "--manifest", manifest).returncode == 0
    result = verify("--root", root, "--manifest", manifest, "--full", "--progress")
    assert result.returncode == 1
    assert "hash_mismatch" in result.stdout and "stories260K.bin" in result.stdout
    assert "ETA" in result.stderr and "/s" in result.stderr  # the progress bar


def test_missing_and_extra_files_are_reported(model_copy):
    root, manifest = model_copy
    (root / "tok512.bin").unlink()
    (root / "notes.txt").write_text("x")
    result = verify("--root", root, "--manifest", manifest, "--json")
    assert result.returncode == 1
    kinds = {(f["kind"], f["path"]) for f in json.loads(result.stdout)["findings"]}
    assert kinds == {("missing", "tok512.bin"), ("extra", "notes.txt")}


def test_bad_input_exits_2_and_manifests_are_never_overwritten(model_copy, tmp_path):
    root, manifest = model_copy
    before = manifest.read_text()
    again = verify("--root", root, "--write-manifest", manifest)
    assert again.returncode == 2 and manifest.read_text() == before
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "deepinfer-manifest/1", "files": [{"path": "../etc/passwd", '
                   '"size": 1, "sha256": "' + "0" * 64 + '"}]}')
    result = verify("--root", root, "--manifest", bad)
    assert result.returncode == 2 and "bad_manifest" in result.stderr
    assert verify("--root", tmp_path / "nope", "--manifest", manifest).returncode == 2
