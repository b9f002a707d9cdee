"""Two gateways sharing one Redis keep one global per-backend cap and one set of session
bindings."""

import concurrent.futures
import itertools

import httpx

from gateway_fixtures import gateways, harnesses, metric, redis_server  # noqa: F401


def test_two_gateways_share_one_per_backend_cap(harnesses, gateways, redis_server):
    urls = [h.url for h in harnesses]
    args = ["--max-active-per-backend", "1", "--max-waiting", "32", "--queue-timeout", "10"]
    a = gateways(urls, state=redis_server.url, extra_args=args)
    b = gateways(urls, state=redis_server.url, extra_args=args)
    targets = itertools.cycle([a, b])

    def one(gw):
        return httpx.post(gw.url + "/v1/chat/completions", timeout=30,
                          headers=gw.headers(**{"X-Harness": "slow", "X-Harness-Args": "delay=0.3"}),
                          json={"model": "harness", "messages": []}).status_code

    with concurrent.futures.ThreadPoolExecutor(12) as pool:
        codes = list(pool.map(one, [next(targets) for _ in range(12)]))
    assert codes == [200] * 12
    # 12 requests through two gateways, yet never two at once on any backend.
    for h in harnesses:
        assert h.stats()["max_active"] == 1, (h.name, h.stats())
    assert sum(h.stats()["requests"] for h in harnesses) == 12
    status = a.status()
    assert status["state"] == "redis"
    assert all(bk["inflight_all_instances"] == 0 for bk in status["backends"]), status
    for gw in (a, b):
        text = gw.wait_idle()
        assert metric(text, "deepinfer_gateway_slots_acquired_total") == \
            metric(text, "deepinfer_gateway_slots_released_total")


def test_two_gateways_share_session_bindings(harnesses, gateways, redis_server):
    urls = [h.url for h in harnesses]
    a = gateways(urls, state=redis_server.url)
    b = gateways(urls, state=redis_server.url)

    def backend(gw, session):
        r = httpx.post(gw.url + "/v1/chat/completions", timeout=10,
                       headers=gw.headers(**{"X-Harness": "echo", "X-Session-Id": session}),
                       json={"model": "harness", "messages": []})
        assert r.status_code == 200
        return r.json()["backend"]

    homes = {f"s{i}": backend(a, f"s{i}") for i in range(12)}
    assert len(set(homes.values())) == 3
    for session, home in homes.items():
        assert backend(b, session) == home
        assert backend(a, session) == home
    assert metric(b.metrics(), "deepinfer_gateway_affinity_total", 'result="hit"') == 12


def test_per_key_limit_holds_across_gateways(harnesses, gateways, redis_server):
    from gateway_fixtures import add_key
    urls = [h.url for h in harnesses]
    a = gateways(urls, state=redis_server.url)
    b = gateways(urls, state=redis_server.url)
    limited = add_key(a.key_store, "solo", "--max-concurrent", "1")  # one store for both
    body = {"model": "harness", "messages": []}

    def post(gw, **headers):
        return httpx.post(gw.url + "/v1/chat/completions", json=body, timeout=10,
                          headers=gw.headers(limited, **headers))

    import time
    deadline = time.monotonic() + 3
    while post(a).status_code != 200 or post(b).status_code != 200:
        assert time.monotonic() < deadline, "the new key was not loaded"
        time.sleep(0.05)
    import threading
    held = threading.Thread(target=post, args=(a,), kwargs={"X-Harness": "slow",
                                                           "X-Harness-Args": "delay=1.0"})
    held.start()
    time.sleep(0.3)
    r = post(b)
    assert r.status_code == 429 and r.json()["error"]["code"] == "key_concurrency_exceeded"
    held.join()
    assert post(b).status_code == 200
