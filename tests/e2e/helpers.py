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


# Structured outputs of every kind the drafters must respect (issue 38: constrained requests take
# speculative drafts too), as `extra_body` of a completions request.
CONSTRAINTS = [
    {"guided_json": {"type": "object", "properties": {"name": {"type": "string"},
                                                      "n": {"type": "integer"}},
                     "required": ["name", "n"]}},
    {"guided_regex": r"[a-z ]{4,30}\."},
    {"guided_choice": ["alpha", "beta", "gamma delta"]},
    {"response_format": {"type": "json_object"}},
]


def check_constrained_drafts(drafted, plain, model: str, prompts: list) -> int:
    """Every CONSTRAINTS kind, greedy, alone and then eight at once beside free requests: the
    server with a drafter gives the text and finish reason of the server without one, and
    verified drafts for the constrained requests (`drafted` and `plain` are conftest.Server).
    Returns the drafts accepted for the constrained requests alone."""
    import openai

    def ask(server, i, constrained=True):
        c = openai.OpenAI(base_url=server.base_url + "/v1", api_key="unused", max_retries=0,
                          timeout=120)
        extra = CONSTRAINTS[i % len(CONSTRAINTS)] if constrained else {}
        return c.completions.create(model=model, prompt=prompts[i % len(prompts)], max_tokens=40,
                                    temperature=0, extra_body=extra)

    def drafts(r, key="draft_tokens"):
        return r.model_dump()["usage"].get("speculative", {}).get(key, 0)

    want = [ask(plain, i) for i in range(len(CONSTRAINTS))]
    got = [ask(drafted, i) for i in range(len(CONSTRAINTS))]
    for i, (w, g) in enumerate(zip(want, got)):
        assert g.choices[0].text == w.choices[0].text, CONSTRAINTS[i]
        assert g.choices[0].finish_reason == w.choices[0].finish_reason, CONSTRAINTS[i]
    assert sum(drafts(g) for g in got) > 0, [g.usage for g in got]
    # Eight at once: constrained (even) and free (odd) requests in the same steps.
    want = [ask(plain, i, constrained=i % 2 == 0).choices[0].text for i in range(8)]
    together = concurrently(lambda i: ask(drafted, i, constrained=i % 2 == 0), 8)
    assert [r.choices[0].text for r in together] == want
    accepted = sum(drafts(g, "accepted_tokens") for g in got)
    print(f"constrained drafts: {sum(drafts(g) for g in got)} drafted, {accepted} accepted")
    return accepted
