"""`deepinfer generate` on real model files: it answers, and bad input gets one line, exit 2."""

import json
import pathlib
import shutil
import subprocess

import pytest

from conftest import STORIES, binary, smollm_path


def run(*args, timeout=120):
    return subprocess.run([str(binary()), "generate", *args], capture_output=True, text=True,
                          timeout=timeout)


def need(path: pathlib.Path):
    if not path.exists():
        pytest.skip(f"model not found: {path}")


def test_stories_greedy_matches_llama2c_reference_text():
    need(STORIES)
    r = run("--model", str(STORIES), "--prompt", "Once upon a time", "--max-tokens", "40",
            "--temperature", "0", "--threads", "2")
    assert r.returncode == 0, r.stderr
    # The reference C implementation's greedy story (golden_greedy.json stdout_text).
    assert r.stdout.startswith("Once upon a time, there was a little girl named Lily.")
    assert "tokens/s" in r.stderr


def test_smollm_answers_and_reports_speed_as_json():
    need(smollm_path())
    r = run("--model", str(smollm_path()), "--prompt", "The capital of France is",
            "--max-tokens", "8", "--temperature", "0", "--json", "--threads", "2")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert "Paris" in out["text"]
    assert out["prefill_tokens_per_s"] > 0 and out["decode_tokens_per_s"] > 0


def test_seeded_sampling_is_reproducible():
    need(STORIES)
    args = ("--model", str(STORIES), "--prompt", "Tom", "--max-tokens", "30", "--temperature",
            "0.9", "--top-p", "0.9", "--seed", "42", "--json")
    a, b = run(*args), run(*args)
    assert a.returncode == 0 and b.returncode == 0
    text_a = json.loads(a.stdout.strip().splitlines()[-1])["text"]
    text_b = json.loads(b.stdout.strip().splitlines()[-1])["text"]
    assert text_a == text_b and len(text_a) > 0


@pytest.mark.parametrize("content,code", [
    (None, "file_not_found"),
    (b"NOTAGGUF" + b"\0" * 64, "bad_magic"),
    (b"GGUF\x03\x00\x00\x00" + b"\xff" * 8, "truncated_file"),
])
def test_bad_model_files_give_one_line_and_exit_2(tmp_path, content, code):
    path = tmp_path / "model.gguf"
    if content is not None:
        path.write_bytes(content)
    r = run("--model", str(path), "--prompt", "hi")
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and code in lines[0], r.stderr


def test_truncated_real_gguf_is_refused_without_crashing(tmp_path):
    need(smollm_path())
    data = smollm_path().read_bytes()
    path = tmp_path / "cut.gguf"
    path.write_bytes(data[: len(data) // 2])
    r = run("--model", str(path), "--prompt", "hi")
    assert r.returncode == 2
    assert "truncated_file" in r.stderr or "out_of_bounds" in r.stderr, r.stderr


def test_llama2c_with_wrong_tokenizer_is_a_vocab_mismatch(tmp_path):
    need(STORIES)
    shutil.copy(STORIES, tmp_path / "stories260K.bin")
    # A tokenizer file with too few records for the checkpoint's 512-token vocabulary.
    tok = (STORIES.parent / "tok512.bin").read_bytes()
    (tmp_path / "tok512.bin").write_bytes(tok[: len(tok) // 2])
    r = run("--model", str(tmp_path / "stories260K.bin"), "--prompt", "hi")
    assert r.returncode == 2
    assert "vocab_mismatch" in r.stderr or "truncated_file" in r.stderr, r.stderr
