"""`deepinfer smoke` passes on good servers and fails with one clear line on broken ones."""

import json
import subprocess

import pytest

from conftest import STORIES, Server, binary


def smoke(base_url: str, *extra):
    result = subprocess.run([str(binary()), "smoke", "--base", base_url + "/v1", *extra],
                            capture_output=True, text=True, timeout=300)
    return result


def test_smoke_passes_on_stories(stories):
    result = smoke(stories.base_url, "--json", "--dp-rank", "0")
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert report["ok"] and report["window"] == 512 and report["model"] == "stories260K"
    assert [c["name"] for c in report["checks"]] == [
        "health", "models", "chat", "image", "stream", "prefix_cache", "over_window", "cancel"]
    image = report["checks"][3]
    assert "text only" in image["detail"], image  # stories260K refuses images
    assert stories.alive()


def test_smoke_passes_on_smollm(smollm):
    result = smoke(smollm.base_url, "--expect-window", "2048")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "PASS: all 8 checks passed" in result.stdout


@pytest.fixture(scope="module")
def no_prefix_cache():
    if not STORIES.exists():
        pytest.skip(f"stories260K not found at {STORIES}")
    server = Server(STORIES, "stories260K", ["--no-prefix-caching"])
    yield server
    server.stop()


def test_smoke_fails_clearly_without_prefix_caching(no_prefix_cache):
    result = smoke(no_prefix_cache.base_url)
    assert result.returncode == 1, result.stdout
    failed = [l for l in result.stdout.splitlines() if " FAIL " in l]
    assert len(failed) == 1, result.stdout
    assert failed[0].startswith("prefix_cache") and "cached_tokens=0" in failed[0]
    assert "FAIL: 1 of 8 checks failed" in result.stdout


def test_smoke_fails_clearly_on_a_too_small_window(stories):
    # The server is fine; the deployment expected a bigger window than it was started with.
    result = smoke(stories.base_url, "--expect-window", "4096")
    assert result.returncode == 1
    failed = [l for l in result.stdout.splitlines() if " FAIL " in l]
    assert len(failed) == 1 and failed[0].startswith("models"), result.stdout
    assert "window of 512 tokens, expected 4096" in failed[0]


def test_smoke_rejects_a_bad_url():
    result = subprocess.run([str(binary()), "smoke", "--base", "ftp://x"], capture_output=True,
                            text=True, timeout=30)
    assert result.returncode == 2 and "bad_url" in result.stderr
