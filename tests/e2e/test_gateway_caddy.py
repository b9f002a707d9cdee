"""Real Caddy (deploy/Caddyfile.example) in front of the gateway: both entrance names reach it,
its private endpoints stay private, and SSE arrives event by event."""

import time

import httpx
import pytest

from gateway_fixtures import Caddy, gateways, harnesses  # noqa: F401


@pytest.fixture()
def caddy_gw(harnesses, gateways):
    gw = gateways([h.url for h in harnesses])
    caddy = Caddy(gw.port)
    yield caddy, gw
    caddy.stop()


def test_both_entrance_names_reach_the_gateway(caddy_gw):
    caddy, gw = caddy_gw
    for name in caddy.names:
        host = f"{name}:{caddy.port}"
        r = httpx.post(caddy.url + "/v1/chat/completions", timeout=10,
                       headers=gw.headers(Host=host),
                       json={"model": "harness", "messages": [{"role": "user", "content": "hi"}]})
        assert r.status_code == 200, (name, r.status_code, r.text, caddy.logs())
        assert r.json()["choices"][0]["message"]["content"].startswith("hello from")
        unauthorized = httpx.post(caddy.url + "/v1/chat/completions", headers={"Host": host},
                                  json={}, timeout=10)
        assert unauthorized.status_code == 401
        for private in ("/metrics", "/gateway/status", "/health"):
            assert httpx.get(caddy.url + private, headers={"Host": host}).status_code == 404
    # An unknown name never reaches the gateway (Caddy answers an empty 200 itself).
    other = httpx.get(caddy.url + "/v1/models", headers=gw.headers(Host="other.localhost"))
    assert "x-request-id" not in other.headers and other.content == b""
    # No access log: neither the key nor a body ever reaches Caddy's output.
    assert gw.key not in caddy.logs()


def test_sse_through_caddy_arrives_event_by_event(caddy_gw):
    caddy, gw = caddy_gw
    gap = 0.2
    arrivals = []
    with httpx.stream("POST", caddy.url + "/v1/chat/completions", timeout=30,
                      headers=gw.headers(Host=f"{caddy.names[0]}:{caddy.port}",
                                         **{"X-Harness": "stream",
                                            "X-Harness-Args": f"n=6,gap={gap}"}),
                      json={"model": "harness", "stream": True, "messages": []}) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        for line in r.iter_lines():
            if line.startswith("data: "):
                arrivals.append((time.monotonic(), line))
    assert arrivals[-1][1] == "data: [DONE]"
    events = [t for t, line in arrivals if line != "data: [DONE]"]
    assert len(events) == 6
    # Each event arrived about when it was sent, not bunched at the end. Measured from the first
    # event, so that one event delayed by a loaded machine (and the next one, which then follows
    # it closely) does not read as buffering.
    since_first = [t - events[0] for t in events]
    assert all(s >= k * gap * 0.5 for k, s in enumerate(since_first)), since_first
    assert events[-1] - events[0] > 4 * gap, since_first
