"""Tiny DeepSeek-V4.1 checkpoints from ../shared/goldens/deepseek_v41 (weights written at test
time from their recipes) run by `deepinfer generate` and `deepinfer serve`: transformers' greedy
tokens through the engine's scheduler and cache (the Engram cases with the token classes built
from the toy tokenizer beside them), the openai SDK against the deepseek-v4.1 encoder, and an
Engram checkpoint without its tokenizer refused in one line. Skips when ../shared is absent (a
user's clone)."""

import json
import shutil
import subprocess

import openai
import pytest

from conftest import REPO, Server, binary
from test_deepseek import synthetic_checkpoint

GOLDENS = REPO.parent / "shared" / "goldens" / "deepseek_v41"

pytestmark = pytest.mark.skipif(not GOLDENS.is_dir(),
                                reason="../shared/goldens/deepseek_v41 is absent (a user's "
                                       "clone has none)")


def make(case, tmp_path_factory, with_tokenizer=True):
    d = tmp_path_factory.mktemp(case)
    files = ["config.json", "weights.json"]
    if with_tokenizer and (GOLDENS / case / "tokenizer.json").exists():
        files.append("tokenizer.json")
    for f in files:
        shutil.copy(GOLDENS / case / f, d / f)
    synthetic_checkpoint(d, d)
    return d


@pytest.fixture(scope="module")
def noengram(tmp_path_factory):
    return make("v41_noengram_noqat", tmp_path_factory)


def generate(*args):
    return subprocess.run([str(binary()), "generate", *args], capture_output=True, text=True,
                          timeout=120)


def greedy(case):
    g = json.loads((GOLDENS / case / "greedy.json").read_text())
    return g["prompt"], g["tokens"]


@pytest.mark.parametrize("case,numerics", [("v41_noengram_noqat", None),
                                           ("v41_noengram_noqat", "fast"),
                                           ("v41_full", None), ("v41_full_fp8", None)])
def test_greedy_tokens_equal_transformers(case, numerics, tmp_path_factory):
    """Prefill of the 64-token prompt, then 16 decode steps: transformers' greedy tokens exactly.
    The no-Engram case's dimensions are not multiples of the QAT blocks, so the reference skips
    every fake-quant there and the default numerics (deepseek-qat) and fast agree; the full cases
    run Engram (classes from their toy tokenizer.json) and every fake-quant."""
    d = make(case, tmp_path_factory)
    prompt, tokens = greedy(case)
    extra = ["--numerics", numerics] if numerics else []
    r = generate("--model", str(d), "--prompt-ids", ",".join(map(str, prompt)),
                 "--max-tokens", str(len(tokens)), "--ignore-eos", "--threads", "2",
                 "--print-ids", *extra)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == ",".join(map(str, tokens)), r.stderr


def test_engram_checkpoint_without_its_tokenizer_is_refused_in_one_line(tmp_path_factory):
    """Engram hashes token classes derived from the tokenizer: without tokenizer.json, a clear
    unsupported_config (exit 2), never a crash or wrong output."""
    d = make("v41_full", tmp_path_factory, with_tokenizer=False)
    prompt, _ = greedy("v41_full")
    r = generate("--model", str(d), "--prompt-ids", ",".join(map(str, prompt[:8])),
                 "--max-tokens", "2", "--threads", "2")
    assert r.returncode == 2, r.stdout + r.stderr
    errors = [l for l in r.stderr.strip().splitlines() if "no tokenizer" not in l]
    assert len(errors) == 1 and "unsupported_config" in errors[0], r.stderr
    assert "engram" in errors[0].lower(), r.stderr


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = Server(make("v41_full", tmp_path_factory), "tiny-v41", ["--threads", "2"])
    yield s
    s.stop()


def test_served_with_engram_through_the_openai_sdk(server):
    """Streaming equals non-streaming, and a repeated prompt is served from the prefix cache
    with the same text (the Engram look-back lives in the cached slots)."""
    c = openai.OpenAI(base_url=server.base_url + "/v1", api_key="unused", max_retries=0)
    messages = [{"role": "user", "content": "Count to five, please."}]
    kw = dict(model="tiny-v41", messages=messages, max_tokens=16, temperature=0)
    full = c.chat.completions.create(**kw)
    assert full.usage.completion_tokens == 16
    text = "".join(ch.choices[0].delta.content or ""
                   for ch in c.chat.completions.create(**kw, stream=True) if ch.choices)
    assert text == full.choices[0].message.content
    again = c.chat.completions.create(**kw)
    assert again.choices[0].message.content == full.choices[0].message.content
    assert again.usage.prompt_tokens_details.cached_tokens > 0
