"""Bad input gets OpenAI-shaped errors with the right status, and the server stays healthy."""

import socket

import httpx
import pytest


def error_of(response: httpx.Response) -> dict:
    body = response.json()
    assert set(body) == {"error"}, body
    error = body["error"]
    for key in ("message", "type", "param", "code"):
        assert key in error, error
    return error


def post(stories, path, **kw):
    return httpx.post(stories.base_url + path, timeout=60, **kw)


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/completions"])
def test_invalid_json_is_400(stories, path):
    r = post(stories, path, content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 400
    error = error_of(r)
    assert error["type"] == "invalid_request_error"
    assert error["code"] == "invalid_json"


@pytest.mark.parametrize("field,value,param", [
    ("temperature", "hot", "temperature"),
    ("temperature", 2.5, "temperature"),
    ("top_p", 0, "top_p"),
    ("n", 0, "n"),
    ("n", 17, "n"),
    ("max_tokens", 0, "max_tokens"),
    ("stop", [1, 2], "stop"),
    ("stop", [str(i) for i in range(17)], "stop"),
    ("top_logprobs", 30, "top_logprobs"),
    ("logit_bias", {"x": 1}, "logit_bias"),
    ("messages", "hello", "messages"),
    ("messages", [{"role": "wizard", "content": "x"}], "messages[0].role"),
    ("messages", [], "messages"),
])
def test_wrong_types_and_ranges_are_400_with_param(stories, field, value, param):
    body = {"model": stories.name, "messages": [{"role": "user", "content": "hi"}]}
    body[field] = value
    if field == "top_logprobs":
        body["logprobs"] = True
    r = post(stories, "/v1/chat/completions", json=body)
    assert r.status_code == 400, r.text
    assert error_of(r)["param"] == param


def test_missing_messages_is_400(stories):
    r = post(stories, "/v1/chat/completions", json={"model": stories.name})
    assert r.status_code == 400
    assert error_of(r)["param"] == "messages"


def test_completion_logprobs_out_of_range_is_400(stories):
    r = post(stories, "/v1/completions", json={"model": stories.name, "prompt": "x",
                                               "logprobs": 6})
    assert r.status_code == 400
    assert error_of(r)["param"] == "logprobs"


def test_unknown_model_is_404(client, stories):
    openai = pytest.importorskip("openai")
    with pytest.raises(openai.NotFoundError) as info:
        client.chat.completions.create(model="gpt-4o", messages=[{"role": "user",
                                                                  "content": "hi"}])
    assert info.value.body["code"] == "model_not_found"


def test_unknown_route_is_404_and_wrong_method_405(stories):
    r = httpx.get(stories.base_url + "/v1/nothing-here")
    assert r.status_code == 404
    assert error_of(r)["code"] == "not_found"
    r = httpx.get(stories.base_url + "/v1/chat/completions")
    assert r.status_code == 405
    assert error_of(r)["code"] == "method_not_allowed"


def test_too_large_body_is_413(stories):
    body = b'{"prompt": "' + b"x" * (33 << 20) + b'"}'
    r = post(stories, "/v1/completions", content=body,
             headers={"content-type": "application/json"})
    assert r.status_code == 413
    assert error_of(r)["code"] == "request_too_large"


def test_garbage_bytes_do_not_hurt_the_server(stories):
    for payload in [b"\x00\xff\xfe garbage\r\n\r\n", b"GET / HTTP/9.9\r\n\r\n",
                    b"POST /v1/completions HTTP/1.1\r\nContent-Length: -5\r\n\r\n",
                    b"POST /v1/completions HTTP/1.1\r\nContent-Length: 10\r\n\r\nabc"]:
        with socket.create_connection(("127.0.0.1", stories.port), timeout=5) as s:
            s.sendall(payload)
            s.shutdown(socket.SHUT_WR)
            try:
                s.recv(65536)
            except OSError:
                pass
    for body in [b'{"prompt": "\xff\xfe"}', b'{"messages": [[[[[[]]]]]]}', b"[" * 100000,
                 b'{"prompt": [1, 2, 99999999999]}', b'{"prompt": [-1]}']:
        r = post(stories, "/v1/completions", content=body,
                 headers={"content-type": "application/json"})
        assert r.status_code == 400, (body[:40], r.text)


def test_server_is_healthy_after_bad_input(client, stories):
    assert httpx.get(stories.base_url + "/health").status_code == 200
    r = client.completions.create(model=stories.name, prompt="The dog", max_tokens=4)
    assert r.choices[0].text is not None
    assert stories.alive()
