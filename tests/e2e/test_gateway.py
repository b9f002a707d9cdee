"""`deepinfer gateway` in front of three real `deepinfer serve` backends (stories260K): auth,
session affinity with prefix-cache hits, context pre-check, image requests (passed through; over
the body limit a 413 before any backend), /v1/models, metrics, and client cancellation reaching
a real backend."""

import concurrent.futures
import json
import shutil
import socket
import subprocess
import time

import httpx
import pytest

from gateway_fixtures import (assert_no_leaked_slots, gateways, metric, serve_pool,  # noqa: F401
                              wait_for)
from helpers import sse_events


@pytest.fixture()
def gw(serve_pool, gateways):
    return gateways([s.base_url for s in serve_pool])


def error_of(r: httpx.Response) -> dict:
    body = r.json()
    assert set(body) == {"error"}, body
    for field in ("message", "type", "param", "code"):
        assert field in body["error"], body
    return body["error"]


def chat(gw, messages, headers=None, **kw):
    body = {"model": "stories260K", "messages": messages, "max_tokens": 8, "temperature": 0}
    body.update(kw)
    return httpx.post(gw.url + "/v1/chat/completions", json=body,
                      headers=headers if headers is not None else gw.headers(), timeout=60)


def test_auth_cases(gw):
    msgs = [{"role": "user", "content": "Once upon a time"}]
    r = chat(gw, msgs, headers={})
    assert r.status_code == 401
    assert r.headers["www-authenticate"] == "Bearer"
    assert error_of(r)["code"] == "missing_api_key"
    assert error_of(r)["type"] == "authentication_error"
    r = chat(gw, msgs, headers={"Authorization": "Bearer sk-di-wrong"})
    assert r.status_code == 401 and error_of(r)["code"] == "invalid_api_key"
    r = chat(gw, msgs, headers={"Authorization": "Basic " + gw.key})
    assert r.status_code == 401
    assert chat(gw, msgs).status_code == 200
    # Anthropic SDKs send the key as x-api-key.
    assert chat(gw, msgs, headers={"x-api-key": gw.key}).status_code == 200
    # The official SDK sees a normal API and a normal AuthenticationError.
    openai = pytest.importorskip("openai")
    ok = openai.OpenAI(base_url=gw.url + "/v1", api_key=gw.key, max_retries=0)
    out = ok.chat.completions.create(model="stories260K", messages=msgs, max_tokens=4)
    assert out.choices[0].message.content
    bad = openai.OpenAI(base_url=gw.url + "/v1", api_key="sk-di-nope", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        bad.chat.completions.create(model="stories260K", messages=msgs, max_tokens=4)
    # Keys never reach logs or metrics; key ids do.
    text = gw.metrics()
    assert gw.key not in text and gw.key not in gw.logs()
    assert 'deepinfer_gateway_key_requests_total{key_id="tester"}' in text
    assert metric(text, "deepinfer_gateway_rejections_total", 'reason="unauthorized"') >= 4


def test_expired_key_is_rejected(gw):
    from gateway_fixtures import add_key
    short = add_key(gw.key_store, "short-lived", "--expires-in-days", "0.00006")  # ~5.2 s
    msgs = [{"role": "user", "content": "Once"}]
    wait_for(lambda: chat(gw, msgs, headers=gw.headers(short)).status_code == 200, 4,
             "the reloaded key store")
    wait_for(lambda: chat(gw, msgs, headers=gw.headers(short)).status_code == 401, 8,
             "the key to expire", interval_s=0.25)
    r = chat(gw, msgs, headers=gw.headers(short))
    assert r.status_code == 401 and error_of(r)["code"] == "expired_api_key"


def test_affinity_100_sessions_5_turns_with_rising_cached_tokens(gw, serve_pool):
    # Half of the sessions name themselves in X-Session-Id; the other half are recognized by the
    # opening of their conversation.
    def run_session(i):
        msgs = [{"role": "user",
                 "content": f"Session {i}: once upon a time a little girl named Lily had {i} toys"}]
        headers = gw.headers(**({"X-Session-Id": f"session-{i}"} if i % 2 == 0 else {}))
        cached = []
        for turn in range(5):
            r = chat(gw, msgs, headers=headers)
            assert r.status_code == 200, r.text
            body = r.json()
            cached.append(body["usage"]["prompt_tokens_details"]["cached_tokens"])
            msgs = msgs + [{"role": "assistant", "content": body["choices"][0]["message"]["content"]},
                           {"role": "user",
                            "content": f"Then in session {i} the dog ran to the big park {turn}"}]
        return cached

    before = gw.metrics()
    with concurrent.futures.ThreadPoolExecutor(12) as pool:
        results = list(pool.map(run_session, range(100)))
    for i, cached in enumerate(results):
        assert all(b > a for a, b in zip(cached, cached[1:])), (i, cached)
    text = gw.metrics()

    def delta(result):
        return metric(text, "deepinfer_gateway_affinity_total", f'result="{result}"') - \
            metric(before, "deepinfer_gateway_affinity_total", f'result="{result}"')
    assert delta("new") == 100
    assert delta("hit") == 400
    assert delta("rebind") == 0 and delta("spill") == 0
    # New sessions spread over all three backends.
    status = gw.status()
    assert all(b["bindings"] > 10 for b in status["backends"]), status["backends"]
    assert_no_leaked_slots(gw)


def test_adding_a_backend_moves_no_session(serve_pool, gateways):
    bindings = f"{gateways.keys_dir}/bindings.json"
    urls = [s.base_url for s in serve_pool]
    first = gateways(urls[:2], bindings_file=bindings)
    sessions = [{"X-Session-Id": f"s{i}"} for i in range(20)]
    convo = {}
    for i, h in enumerate(sessions):
        msgs = [{"role": "user", "content": f"Story {i}: once upon a time there was a cat named Tom"}]
        r = chat(first, msgs, headers=first.headers(**h))
        assert r.status_code == 200
        convo[i] = msgs + [{"role": "assistant", "content": r.json()["choices"][0]["message"]["content"]},
                           {"role": "user", "content": "Then the cat went to the big park to play"}]
    first.terminate()  # writes the bindings file
    second = gateways(urls, bindings_file=bindings)  # one more backend
    for i, h in enumerate(sessions):
        r = chat(second, convo[i], headers=second.headers(**h))
        assert r.status_code == 200
        # Still on the backend that holds its prefix.
        assert r.json()["usage"]["prompt_tokens_details"]["cached_tokens"] > 0, i
    text = second.metrics()
    assert metric(text, "deepinfer_gateway_affinity_total", 'result="hit"') == 20
    assert metric(text, "deepinfer_gateway_affinity_total", 'result="new"') == 0
    # New sessions do use the new backend.
    for i in range(6):
        chat(second, [{"role": "user", "content": "Once"}],
             headers=second.headers(**{"X-Session-Id": f"new-{i}"}))
    assert second.status()["backends"][2]["bindings"] >= 1


def test_context_limit_precheck_is_400_before_any_backend(serve_pool, gateways):
    gw = gateways([s.base_url for s in serve_pool], extra_args=["--model-context-limit", "512"])
    before = [httpx.get(s.base_url + "/metrics").text for s in serve_pool]
    r = chat(gw, [{"role": "user", "content": "hi"}], max_tokens=100000)
    assert r.status_code == 400
    assert error_of(r)["code"] == "context_length_exceeded"
    assert error_of(r)["param"] == "max_tokens"
    assert r.headers["x-should-retry"] == "false"
    r = chat(gw, [{"role": "user", "content": "a" * 40000}], max_tokens=10)
    assert r.status_code == 400 and error_of(r)["param"] == "messages"
    after = [httpx.get(s.base_url + "/metrics").text for s in serve_pool]
    route = 'route="/v1/chat/completions"'
    for b, a in zip(before, after):
        assert metric(a, "deepinfer_http_requests_total", route) == \
            metric(b, "deepinfer_http_requests_total", route)


def test_image_requests_pass_through_and_oversized_ones_are_413_before_any_backend(
        serve_pool, gateways):
    """Image parts of every API reach the backend unchanged (stories260K has no vision tower, so
    its own 400 unsupported_content comes back); a body over --max-request-mib (a 2 MiB data:
    URI) is a 413 from the gateway that no backend sees."""
    gw = gateways([s.base_url for s in serve_pool], extra_args=["--max-request-mib", "1"])
    png = ("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5"
           "ErkJggg==")
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64," + png}}
    r = chat(gw, [{"role": "user", "content": [{"type": "text", "text": "What is it?"}, image]}])
    assert r.status_code == 400 and error_of(r)["code"] == "unsupported_content", r.text
    assert error_of(r)["param"] == "messages[0].content[1]"
    r = httpx.post(gw.url + "/v1/messages", headers=gw.headers(), timeout=60, json={
        "model": "stories260K", "max_tokens": 8, "messages": [{"role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                         "data": png}}]}]})
    assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error", r.text
    before = [httpx.get(s.base_url + "/metrics").text for s in serve_pool]
    big = "data:image/png;base64," + "A" * (2 << 20)
    r = chat(gw, [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": big}}]}])
    assert r.status_code == 413 and error_of(r)["code"] == "request_too_large", r.text
    after = [httpx.get(s.base_url + "/metrics").text for s in serve_pool]
    route = 'route="/v1/chat/completions"'
    for b, a in zip(before, after):
        assert metric(a, "deepinfer_http_requests_total", route) == \
            metric(b, "deepinfer_http_requests_total", route)


def test_an_unreadable_max_tokens_gets_the_backends_own_answer(serve_pool, gateways):
    # 10^19 does not fit in int64: serve says invalid_type, and so must the gateway (it used to
    # answer context_length_exceeded for 9223372036854775807 tokens).
    gw = gateways([s.base_url for s in serve_pool], extra_args=["--model-context-limit", "512"])
    for field, value in [("max_tokens", 10000000000000000000), ("max_tokens", 4294967296),
                         ("max_completion_tokens", 10000000000000000000)]:
        body = ('{"model": "stories260K", "messages": [{"role": "user", "content": "hi"}], '
                f'"{field}": {value}}}')
        answers = [httpx.post(base + "/v1/chat/completions", content=body, headers=headers,
                              timeout=30)
                   for base, headers in [(gw.url, {**gw.headers(), "Content-Type": "application/json"}),
                                         (serve_pool[0].base_url, {"Content-Type": "application/json"})]]
        assert [a.status_code for a in answers] == [400, 400], [a.text for a in answers]
        via_gateway, direct = (error_of(a) for a in answers)
        assert via_gateway == direct, (field, value)


def test_models_lists_the_pool(gw):
    r = httpx.get(gw.url + "/v1/models", headers=gw.headers(), timeout=10)
    assert r.status_code == 200
    assert [m["id"] for m in r.json()["data"]] == ["stories260K"]
    assert httpx.get(gw.url + "/v1/models", timeout=10).status_code == 401


def test_streaming_passes_through(gw):
    with httpx.stream("POST", gw.url + "/v1/chat/completions", headers=gw.headers(), timeout=60,
                      json={"model": "stories260K", "stream": True, "max_tokens": 16,
                            "messages": [{"role": "user", "content": "Once upon a time"}]}) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        assert r.headers["x-accel-buffering"] == "no"
        events = sse_events(r)
    assert events[-1] == "[DONE]"
    assert len(events) >= 3
    assert_no_leaked_slots(gw)


def test_anthropic_sdk_through_the_gateway(gw):
    """The anthropic SDK sends its key as x-api-key; the gateway authenticates it, never forwards
    it, and answers its own errors on /v1/messages in Anthropic's shape."""
    anthropic = pytest.importorskip("anthropic")
    a = anthropic.Anthropic(base_url=gw.url, api_key=gw.key, max_retries=0, timeout=60)
    kwargs = dict(model="stories260K", max_tokens=8, extra_body={"temperature": 0},
                  messages=[{"role": "user", "content": "Once upon a time"}])
    msg = a.messages.create(**kwargs)
    assert msg.type == "message" and msg.content[0].type == "text"
    with a.messages.stream(**kwargs) as stream:
        assert "".join(stream.text_stream) == msg.content[0].text
    with pytest.raises(anthropic.AuthenticationError):
        anthropic.Anthropic(base_url=gw.url, api_key="wrong", max_retries=0).messages.create(
            **kwargs)
    r = httpx.post(gw.url + "/v1/messages", json={"max_tokens": 8, "messages": []}, timeout=10)
    assert r.status_code == 401
    assert r.json()["type"] == "error"
    assert r.json()["error"]["type"] == "authentication_error"
    assert_no_leaked_slots(gw)


def test_request_log_lines(serve_pool, gateways):
    """--log-requests: one line per proxied request with the key id, backend, affinity and the
    request id; the key itself never appears."""
    gw = gateways([s.base_url for s in serve_pool], extra_args=["--log-requests"])
    r = chat(gw, [{"role": "user", "content": "Once upon a time"}],
             headers=gw.headers(**{"x-request-id": "gw-log-1", "X-Session-Id": "s1"}))
    assert r.status_code == 200
    bad = chat(gw, [{"role": "user", "content": "x"}], headers=gw.headers(key="nope"))
    assert bad.status_code == 401
    wait_for(lambda: "x_request_id=gw-log-1" in gw.logs(), 5, "the log line")
    logs = gw.logs()
    line = next(l for l in logs.splitlines() if "x_request_id=gw-log-1" in l)
    assert " info request POST /v1/chat/completions 200 " in line
    assert "key=tester" in line and "affinity=new" in line
    assert any(f"backend={s.base_url}" in line for s in serve_pool)
    assert "request POST /v1/chat/completions 401 " in logs and "key=- " in logs
    assert gw.key not in logs and "nope" not in logs


def test_metrics_pass_promtool(gw):
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not installed (Debian package prometheus)")
    chat(gw, [{"role": "user", "content": "Once"}])
    chat(gw, [{"role": "user", "content": "Once"}], headers={})
    text = gw.metrics()
    r = subprocess.run([promtool, "check", "metrics"], input=text.encode(), capture_output=True)
    assert r.returncode == 0, (r.stdout + r.stderr).decode()
    for name in ("deepinfer_gateway_requests_total", "deepinfer_gateway_backend_inflight",
                 "deepinfer_gateway_queue_depth", "deepinfer_gateway_queue_wait_seconds_bucket",
                 "deepinfer_gateway_rejections_total", "deepinfer_gateway_cancellations_total",
                 "deepinfer_gateway_affinity_total", "deepinfer_gateway_overhead_seconds_count"):
        assert name in text, name


def aborted(server) -> float:
    text = httpx.get(server.base_url + "/metrics", timeout=5).text
    return metric(text, "vllm:request_success_total", 'finished_reason="abort"')


def test_client_cancel_reaches_a_real_backend(gw, serve_pool):
    """A client that leaves mid-stream or before a non-streamed answer aborts the generation."""
    body = {"model": "stories260K", "prompt": "Once", "max_tokens": 500, "ignore_eos": True,
            "temperature": 0}
    for stream in (True, False):
        before = sum(aborted(s) for s in serve_pool)
        payload = json.dumps(dict(body, stream=stream)).encode()
        head = (f"POST /v1/completions HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer {gw.key}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n\r\n")
        sock = socket.create_connection(("127.0.0.1", gw.port))
        sock.sendall(head.encode() + payload)
        if stream:
            received = b""
            while b"data: " not in received:  # the stream started
                received += sock.recv(4096)
        else:
            time.sleep(0.03)  # the generation is running (it takes about 0.3 s)
        sock.close()
        wait_for(lambda: sum(aborted(s) for s in serve_pool) > before, 5,
                 f"the backend to abort (stream={stream})")
    assert_no_leaked_slots(gw)
    text = gw.metrics()
    assert metric(text, "deepinfer_gateway_cancellations_total", 'phase="streaming"') >= 1
    assert metric(text, "deepinfer_gateway_cancellations_total", 'phase="waiting_headers"') >= 1
