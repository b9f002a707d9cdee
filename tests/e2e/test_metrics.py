"""GET /metrics: Prometheus text that promtool accepts, with vLLM names that move."""

import shutil
import subprocess

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
