"""Small helpers shared by the e2e tests."""

import concurrent.futures
import json

import httpx


def sse_events(response: httpx.Response) -> list:
    """Payloads of the `data:` events of a streamed response, "[DONE]" included."""
    events = []
    for line in response.iter_lines():
        if line.startswith("data: "):
            events.append(line[len("data: "):])
        else:
            assert line == "", f"unexpected SSE line {line!r}"
    return events


def post_stream(base_url: str, path: str, body: dict, timeout: float = 60) -> list:
    with httpx.stream("POST", base_url + path, json=body, timeout=timeout) as r:
        assert r.status_code == 200, r.read()
        assert r.headers["content-type"].startswith("text/event-stream")
        return sse_events(r)


def chunks(events: list) -> list:
    assert events and events[-1] == "[DONE]", events[-3:]
    return [json.loads(e) for e in events[:-1]]


def metric_value(text: str, name: str, labels: str = "") -> float:
    """Sum of the samples of `name` whose label set contains `labels`."""
    total = 0.0
    found = False
    for line in text.splitlines():
        if line.startswith("#") or not line.startswith(name):
            continue
        series, value = line.rsplit(" ", 1)
        metric = series.split("{", 1)[0]
        if metric != name or labels not in series:
            continue
        total += float(value)
        found = True
    assert found, f"no sample of {name} {labels}"
    return total


def concurrently(fn, count: int) -> list:
    """[fn(0), ..., fn(count - 1)], all called at once from `count` threads (so that the
    server batches them); an exception in any call is raised here."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=count) as pool:
        return list(pool.map(fn, range(count)))
