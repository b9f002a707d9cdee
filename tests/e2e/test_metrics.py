"""GET /metrics: Prometheus text that promtool accepts, with vLLM names that move; and the
request and stats log lines on stderr."""

import pathlib
import shutil
import subprocess
import time

import httpx
import pytest

from helpers import metric_value

# promtool lints names with ':' ("metric names should not contain ':'"), but those are exactly
# vLLM's names, which dashboards and benchmark tools key on. Every other finding fails the test.
COLON_LINT = "metric names should not contain ':'"


def promtool_problems(text: str) -> list:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not installed (Debian package prometheus)")
    r = subprocess.run([promtool, "check", "metrics"], input=text.encode(), capture_output=True)
    out = (r.stdout + r.stderr).decode()
    if r.returncode == 0:
        return []
    assert r.returncode == 3, f"promtool could not parse the exposition (rc {r.returncode}):\n{out}"
    problems = [line for line in out.splitlines() if line.strip()]
    return [p for p in problems if not (p.startswith("vllm:") and p.endswith(COLON_LINT))]


def test_metrics_pass_promtool(stories):
    httpx.post(stories.base_url + "/v1/completions", timeout=60,
               json={"model": stories.name, "prompt": "Hi", "max_tokens": 2})
    r = httpx.get(stories.base_url + "/metrics")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/plain; version=0.0.4")
    assert promtool_problems(r.text) == []
    # The deepinfer_* series alone are fully lint-clean.
    ours = "\n".join(l for l in r.text.splitlines() if "vllm:" not in l) + "\n"
    assert promtool_problems(ours) == []


def test_metrics_names_and_labels(stories):
    text = httpx.get(stories.base_url + "/metrics").text
    label = f'model_name="{stories.name}"'
    for name in ["vllm:num_requests_running", "vllm:num_requests_waiting",
                 "vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc",
                 "vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total",
                 "vllm:prompt_tokens_total", "vllm:generation_tokens_total",
                 "vllm:num_preemptions_total", "vllm:time_to_first_token_seconds_count",
                 "vllm:time_per_output_token_seconds_count",
                 "vllm:e2e_request_latency_seconds_count",
                 "vllm:request_queue_time_seconds_count"]:
        metric_value(text, name, label)
    for reason in ["stop", "length", "abort"]:
        metric_value(text, "vllm:request_success_total", f'finished_reason="{reason}"')


def test_counters_move(stories):
    before = httpx.get(stories.base_url + "/metrics").text
    r = httpx.post(stories.base_url + "/v1/completions", timeout=60,
                   json={"model": stories.name, "prompt": "The little bird", "max_tokens": 5,
                         "temperature": 0, "extra": 1})
    assert r.status_code == 200
    after = httpx.get(stories.base_url + "/metrics").text
    assert metric_value(after, "vllm:prompt_tokens_total") >= metric_value(
        before, "vllm:prompt_tokens_total") + r.json()["usage"]["prompt_tokens"]
    assert metric_value(after, "vllm:generation_tokens_total") >= metric_value(
        before, "vllm:generation_tokens_total") + 5
    assert metric_value(after, "vllm:e2e_request_latency_seconds_count") > metric_value(
        before, "vllm:e2e_request_latency_seconds_count")
    http_label = 'route="/v1/completions",method="POST",status="200"'
    assert metric_value(after, "deepinfer_http_requests_total", http_label) == metric_value(
        before, "deepinfer_http_requests_total", http_label) + 1


def test_request_log_lines_and_stats_lines(tmp_path):
    """Each answered request is one stderr line with its route, status, id, token counts and
    timings (never the text); while busy, an engine stats line comes every interval."""
    from conftest import STORIES, Server

    if not STORIES.exists():
        pytest.skip(f"stories260K not found at {STORIES}")
    server = Server(STORIES, "stories260K", ["--log-stats-interval", "1"])
    try:
        r = httpx.post(server.base_url + "/v1/chat/completions", timeout=60,
                       headers={"x-request-id": "e2e-log-1"},
                       json={"model": "stories260K", "max_tokens": 200, "temperature": 0,
                             "messages": [{"role": "user", "content": "Once upon a time"}]})
        assert r.status_code == 200
        body = r.json()
        httpx.get(server.base_url + "/health", timeout=10)
        httpx.post(server.base_url + "/v1/chat/completions", json={"messages": 3}, timeout=10)
        def full_log():
            server.log.flush()
            return pathlib.Path(server.log.name).read_text(errors="replace")
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and "stats running=" not in full_log():
            httpx.post(server.base_url + "/v1/completions", timeout=60,
                       json={"prompt": "Once", "max_tokens": 100, "ignore_eos": True})
        logs = full_log()
        line = next(l for l in logs.splitlines() if "x_request_id=e2e-log-1" in l)
        assert " info request POST /v1/chat/completions 200 " in line
        assert f"id={body['id']}" in line
        assert f"completion_tokens={body['usage']['completion_tokens']}" in line
        assert f"prompt_tokens={body['usage']['prompt_tokens']}" in line
        assert "ttft_ms=" in line and "end=" in line
        assert body["choices"][0]["message"]["content"][:20] not in line
        assert "request POST /v1/chat/completions 400 " in logs
        assert "GET /health" not in logs
        assert "stats running=" in logs and "generation_tok_s=" in logs
    finally:
        server.stop()
