"""`deepinfer bench` against a real `deepinfer serve` on stories260K: the JSON result is complete,
the numbers are sane, and exit codes mean what they say."""

import json
import math
import subprocess

import pytest

from conftest import STORIES, Server, binary, free_port

PERCENTILES = ["p50", "p90", "p99"]
DISTRIBUTION_KEYS = {"count", "mean", "std", "min", "max", *PERCENTILES}
METRIC_KEYS = {
    "num_requests", "completed", "failed", "duration_s", "total_input_tokens",
    "total_output_tokens", "total_cached_tokens", "request_throughput", "output_throughput",
    "total_token_throughput", "peak_output_throughput", "mean_concurrency", "token_counts_from",
    "ttft_ms", "tpot_ms", "itl_ms", "e2el_ms",
}


@pytest.fixture(scope="module")
def server():
    """A server of its own, so the bench's load and prefix-cache traffic stay out of other
    tests' counters."""
    if not STORIES.exists():
        pytest.skip(f"stories260K not found at {STORIES}")
    s = Server(STORIES, "stories260K", ["--threads", "1"])
    yield s
    assert s.alive(), "the server died during the bench:\n" + s.logs()
    s.stop()


def bench(*args, timeout=300):
    return subprocess.run([str(binary()), "bench", "--no-progress", *args], capture_output=True,
                          text=True, timeout=timeout)


def check_distribution(d: dict, count: int):
    assert DISTRIBUTION_KEYS <= d.keys(), d
    assert d["count"] == count
    if count == 0:
        return
    assert 0 <= d["min"] <= d["p50"] <= d["p90"] <= d["p99"] <= d["max"], d
    assert d["min"] <= d["mean"] <= d["max"]
    assert d["std"] >= 0


def test_random_dataset_sweep_gives_complete_sane_json(server, tmp_path):
    out = tmp_path / "random.json"
    r = bench("--base", server.base_url + "/v1", "--model", "stories260K", "--input-len", "64",
              "--output-len", "16", "--concurrency", "1,4", "--num-prompts", "8", "--json",
              str(out), "--label", "e2e")
    assert r.returncode == 0, r.stderr
    # The summary table: a header, a separator and one row per level.
    rows = [line for line in r.stdout.splitlines() if line.startswith("|")]
    assert len(rows) == 4 and "TTFT p50 ms" in rows[0]

    result = json.loads(out.read_text())
    assert result["tool"] == "deepinfer bench" and result["ok"] is True
    assert result["label"] == "e2e"
    assert result["server"] == {"kind": "deepinfer", "model": "stories260K",
                                "max_model_len": 512, "tokenizer": "vllm"}
    config = result["config"]
    assert config["dataset"] == "random" and config["concurrency"] == [1, 4]
    assert config["exact_input_lengths"] is True and config["request_rate"] == "inf"
    assert result["errors"] == []
    assert [run["concurrency"] for run in result["runs"]] == [1, 4]
    for run in result["runs"]:
        m = run["metrics"]
        assert METRIC_KEYS <= m.keys(), m.keys()
        assert m["num_requests"] == 8 and m["completed"] == 8 and m["failed"] == 0
        # Exact lengths: the server's own usage says 64 prompt tokens and (EOS ignored) 16 out.
        assert m["token_counts_from"] == "usage"
        assert m["total_input_tokens"] == 8 * 64
        assert m["total_output_tokens"] == 8 * 16
        assert m["duration_s"] > 0
        assert math.isclose(m["output_throughput"], m["total_output_tokens"] / m["duration_s"],
                            rel_tol=1e-9)
        assert math.isclose(m["request_throughput"], 8 / m["duration_s"], rel_tol=1e-9)
        assert math.isclose(m["total_token_throughput"], (8 * 64 + 8 * 16) / m["duration_s"],
                            rel_tol=1e-9)
        assert 0 < m["mean_concurrency"] <= run["concurrency"] + 1e-6
        check_distribution(m["ttft_ms"], 8)
        check_distribution(m["tpot_ms"], 8)
        check_distribution(m["e2el_ms"], 8)
        assert m["itl_ms"]["count"] > 0
        check_distribution(m["itl_ms"], m["itl_ms"]["count"])
        assert m["ttft_ms"]["p50"] > 0 and m["tpot_ms"]["p50"] > 0
        assert m["e2el_ms"]["min"] >= m["ttft_ms"]["min"]
        # Nothing takes a minute on a 260K-parameter model.
        assert m["e2el_ms"]["max"] < 60_000
        # Random prompts share no prefix blocks with each other.
        assert m["total_cached_tokens"] < 8 * 16


def test_shared_prefix_hot_requests_hit_the_cache(server, tmp_path):
    out = tmp_path / "prefix.json"
    r = bench("--base", server.base_url, "--prefix-len", "256", "--suffix-len", "8",
              "--output-len", "4", "--num-prompts", "3", "--json", str(out))
    assert r.returncode == 0, r.stderr
    result = json.loads(out.read_text())
    assert result["config"]["dataset"] == "shared-prefix"
    (run,) = result["runs"]
    assert run["pairs"] == 3
    assert run["cold"]["completed"] == 3 and run["hot"]["completed"] == 3
    # The hot request reuses the whole-block part of the 256-token prefix.
    assert run["hot_cached_tokens_mean"] >= 240
    assert run["ttft_p50_cold_ms"] > 0 and run["ttft_p50_hot_ms"] > 0
    assert run["ttft_speedup_p50"] == pytest.approx(
        run["ttft_p50_cold_ms"] / run["ttft_p50_hot_ms"])
    check_distribution(run["cold"]["ttft_ms"], 3)
    check_distribution(run["hot"]["ttft_ms"], 3)


def test_needle_mode_reports_every_case(server, tmp_path):
    out = tmp_path / "needle.json"
    r = bench("--base", server.base_url, "--needle", "--needle-output-len", "16", "--json",
              str(out))
    # A 260K-parameter story model retrieves no secret codes: failures, reported as such.
    assert r.returncode in (0, 1), r.stderr
    result = json.loads(out.read_text())
    needle = result["needle"]
    names = [c["name"] for c in needle["cases"]]
    assert names == ["four-needles", "streaming", "multi-turn", "prefix-repeat"]
    assert needle["passed"] + needle["failed"] == 4
    assert r.returncode == (0 if needle["failed"] == 0 else 1)
    assert result["ok"] == (needle["failed"] == 0)
    for case in needle["cases"]:
        assert isinstance(case["pass"], bool)
        assert case["checks"], case
        assert all(len(c["code"]) == 5 and c["needle"] in "ABCD" for c in case["checks"])
        # The haystack fills most of the window but never overflows it.
        assert 200 < case["prompt_tokens"] <= 512
        assert all(t > 0 for t in case["ttft_ms"])
    multi = needle["cases"][2]
    assert len(multi["answers"]) == 3 and {c["needle"] for c in multi["checks"]} == set("ABCD")
    repeat = needle["cases"][3]
    assert len(repeat["cached_tokens"]) == 2 and repeat["cached_tokens"][1] > 0
    assert "needle:" in r.stdout


@pytest.mark.parametrize("args", [
    ["--concurrency", "0"],
    ["--concurrency", "1,x"],
    ["--dataset", "sharegpt"],
    ["--percentiles", "50,101"],
    ["--request-rate", "-1"],
    ["--base", "https://127.0.0.1:1"],
    ["--no-such-flag"],
])
def test_bad_flags_exit_2(server, args):
    base = [] if "--base" in args else ["--base", server.base_url]
    r = bench(*base, *args)
    assert r.returncode == 2, (r.stdout, r.stderr)


def test_unknown_model_exits_2(server):
    r = bench("--base", server.base_url, "--model", "no-such-model")
    assert r.returncode == 2
    assert "model_not_found" in r.stderr


def test_window_overflow_is_refused_before_sending(server):
    r = bench("--base", server.base_url, "--input-len", "500", "--output-len", "64")
    assert r.returncode == 2
    assert "window" in r.stderr


def test_unreachable_server_exits_1():
    r = bench("--base", f"http://127.0.0.1:{free_port()}", "--timeout", "5")
    assert r.returncode == 1
    assert "connect" in r.stderr
