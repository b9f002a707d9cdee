"""OpenAI-compatible routes against stories260K (tiny and fast; plain chat template)."""

import concurrent.futures
import json
import time

import httpx
import pytest

from helpers import chunks, post_stream, sse_events

PROMPT = "Once upon a time, there was a little"


def greedy_completion(client, model, prompt, max_tokens=24, **kw):
    r = client.completions.create(model=model, prompt=prompt, max_tokens=max_tokens,
                                  temperature=0, **kw)
    return r.choices[0].text, r


def test_models_lists_the_served_model(client, stories):
    models = client.models.list()
    assert [m.id for m in models.data] == [stories.name]
    assert models.data[0].owned_by == "deepinfer"
    raw = httpx.get(stories.base_url + "/v1/models").json()
    assert raw["data"][0]["max_model_len"] == 512


def test_chat_completion_non_streaming(client, stories):
    r = client.chat.completions.create(model=stories.name, max_tokens=20, temperature=0,
                                       messages=[{"role": "user", "content": PROMPT}])
    assert r.id.startswith("chatcmpl-")
    assert r.object == "chat.completion"
    assert r.model == stories.name
    assert len(r.choices) == 1
    choice = r.choices[0]
    assert choice.index == 0
    assert choice.message.role == "assistant"
    assert isinstance(choice.message.content, str) and choice.message.content
    assert choice.finish_reason in ("stop", "length")
    assert r.usage.prompt_tokens > 0
    assert 0 < r.usage.completion_tokens <= 20
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
    assert r.usage.prompt_tokens_details.cached_tokens is not None
    assert r.usage.prompt_tokens_details.cached_tokens >= 0


def test_chat_content_parts_are_joined(client, stories):
    a = client.chat.completions.create(model=stories.name, max_tokens=8, temperature=0,
                                       messages=[{"role": "user", "content": PROMPT}])
    b = client.chat.completions.create(
        model=stories.name, max_tokens=8, temperature=0,
        messages=[{"role": "user", "content": [{"type": "text", "text": PROMPT[:10]},
                                               {"type": "text", "text": PROMPT[10:]}]}])
    assert a.choices[0].message.content == b.choices[0].message.content


def test_chat_streaming_matches_non_streaming(client, stories):
    messages = [{"role": "user", "content": PROMPT}]
    full = client.chat.completions.create(model=stories.name, max_tokens=20, temperature=0,
                                          messages=messages)
    stream = client.chat.completions.create(model=stories.name, max_tokens=20, temperature=0,
                                            messages=messages, stream=True,
                                            stream_options={"include_usage": True})
    text, finish, usage_chunks, ids = "", None, [], set()
    for chunk in stream:
        ids.add(chunk.id)
        assert chunk.object == "chat.completion.chunk"
        if not chunk.choices:
            usage_chunks.append(chunk)
            continue
        assert chunk.usage is None
        delta = chunk.choices[0].delta
        text += delta.content or ""
        if chunk.choices[0].finish_reason:
            finish = chunk.choices[0].finish_reason
    assert text == full.choices[0].message.content
    assert finish == full.choices[0].finish_reason
    assert len(ids) == 1 and next(iter(ids)).startswith("chatcmpl-")
    assert len(usage_chunks) == 1, "exactly one usage chunk, the last one"
    usage = usage_chunks[0].usage
    assert usage.completion_tokens == full.usage.completion_tokens
    assert usage.prompt_tokens == full.usage.prompt_tokens
    assert usage.prompt_tokens_details.cached_tokens >= 0


def test_stream_without_include_usage_has_no_usage_chunk(stories):
    events = post_stream(stories.base_url, "/v1/chat/completions", {
        "model": stories.name, "max_tokens": 8, "stream": True,
        "messages": [{"role": "user", "content": PROMPT}]})
    for c in chunks(events):
        assert "usage" not in c
        assert len(c["choices"]) == 1
    first = json.loads(events[0])["choices"][0]
    assert first["delta"]["role"] == "assistant"


def test_completions_non_streaming_and_streaming_agree(client, stories):
    text, full = greedy_completion(client, stories.name, PROMPT)
    assert full.id.startswith("cmpl-")
    assert full.object == "text_completion"
    assert text
    streamed = ""
    usage = None
    for chunk in client.completions.create(model=stories.name, prompt=PROMPT, max_tokens=24,
                                           temperature=0, stream=True,
                                           stream_options={"include_usage": True}):
        if chunk.choices:
            streamed += chunk.choices[0].text
        else:
            usage = chunk.usage
    assert streamed == text
    assert usage is not None and usage.completion_tokens == full.usage.completion_tokens
    assert usage.prompt_tokens_details.cached_tokens >= 0


def test_usage_always_reports_cached_tokens_in_json(stories):
    body = httpx.post(stories.base_url + "/v1/completions", timeout=60, json={
        "model": stories.name, "prompt": "A cat sat", "max_tokens": 2}).json()
    assert isinstance(body["usage"]["prompt_tokens_details"]["cached_tokens"], int)


def test_repeated_long_prefix_reports_cached_tokens(client, stories):
    prefix = ("Tom and Sue went to the park to play with a big red ball. " * 8)
    first = client.completions.create(model=stories.name, prompt=prefix + "Then Tom said",
                                      max_tokens=4, temperature=0)
    second = client.completions.create(model=stories.name, prompt=prefix + "Then Sue said",
                                       max_tokens=4, temperature=0)
    assert first.usage.prompt_tokens > 64
    assert second.usage.prompt_tokens_details.cached_tokens > 0
    assert second.usage.prompt_tokens_details.cached_tokens <= second.usage.prompt_tokens


def test_stop_string_cuts_text_before_it(client, stories):
    text, _ = greedy_completion(client, stories.name, PROMPT, max_tokens=40)
    words = text.split()
    assert len(words) > 6, text
    stop = " " + words[4]
    expected = text[:text.index(stop)]
    r = client.completions.create(model=stories.name, prompt=PROMPT, max_tokens=40,
                                  temperature=0, stop=[stop, "@@@"])
    assert r.choices[0].text == expected
    assert stop not in r.choices[0].text
    assert r.choices[0].finish_reason == "stop"
    streamed, finish = "", None
    for chunk in client.completions.create(model=stories.name, prompt=PROMPT, max_tokens=40,
                                           temperature=0, stop=stop, stream=True):
        if chunk.choices:
            streamed += chunk.choices[0].text
            finish = chunk.choices[0].finish_reason or finish
    assert streamed == expected
    assert finish == "stop"


def test_chat_stop_string(client, stories):
    messages = [{"role": "user", "content": PROMPT}]
    full = client.chat.completions.create(model=stories.name, max_tokens=40, temperature=0,
                                          messages=messages).choices[0].message.content
    stop = full.split()[3]
    r = client.chat.completions.create(model=stories.name, max_tokens=40, temperature=0,
                                       messages=messages, stop=stop)
    assert stop not in r.choices[0].message.content
    assert r.choices[0].message.content == full[:full.index(stop)]
    assert r.choices[0].finish_reason == "stop"


def test_n_choices(client, stories):
    r = client.chat.completions.create(model=stories.name, max_tokens=12, temperature=1.0,
                                       seed=3, n=2,
                                       messages=[{"role": "user", "content": PROMPT}])
    assert sorted(c.index for c in r.choices) == [0, 1]
    assert r.usage.completion_tokens >= 2  # summed over both choices
    streamed = {0: "", 1: ""}
    for chunk in client.chat.completions.create(model=stories.name, max_tokens=12, temperature=1.0,
                                                seed=3, n=2, stream=True,
                                                messages=[{"role": "user", "content": PROMPT}]):
        for c in chunk.choices:
            streamed[c.index] += c.delta.content or ""
    # Same seeds, same choices.
    assert streamed[0] == r.choices[0].message.content
    assert streamed[1] == r.choices[1].message.content


def test_chat_logprobs(client, stories):
    r = client.chat.completions.create(model=stories.name, max_tokens=6, temperature=0,
                                       logprobs=True, top_logprobs=3,
                                       messages=[{"role": "user", "content": PROMPT}])
    content = r.choices[0].logprobs.content
    assert len(content) == r.usage.completion_tokens
    for entry in content:
        assert entry.logprob <= 0
        assert isinstance(entry.token, str)
        assert entry.bytes is not None
        assert len(entry.top_logprobs) == 3
        # Greedy: the chosen token is the most likely one.
        assert entry.top_logprobs[0].logprob == pytest.approx(entry.logprob, abs=1e-4)
    if r.choices[0].finish_reason == "length":
        joined = "".join(e.token for e in content)
        assert joined.strip() == r.choices[0].message.content.strip()


def test_completion_logprobs(client, stories):
    r = client.completions.create(model=stories.name, prompt=PROMPT, max_tokens=5, temperature=0,
                                  logprobs=2)
    lp = r.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == 5
    assert all(len(t) >= 1 for t in lp.top_logprobs)
    assert all(v <= 0 for v in lp.token_logprobs)


def test_concurrent_streams_match_their_solo_greedy_outputs(client, stories):
    prompts = [f"{name} went to the {place}" for name, place in [
        ("Lily", "park"), ("Tom", "store"), ("Ben", "beach"), ("Sue", "forest"),
        ("Max", "zoo"), ("Amy", "garden"), ("Sam", "lake"), ("Tim", "farm")]]
    solo = [greedy_completion(client, stories.name, p, max_tokens=24)[0] for p in prompts]

    def stream_one(prompt):
        out = ""
        for chunk in client.completions.create(model=stories.name, prompt=prompt, max_tokens=24,
                                               temperature=0, stream=True):
            if chunk.choices:
                out += chunk.choices[0].text
        return out

    with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
        together = list(pool.map(stream_one, prompts))
    assert together == solo


def test_cancel_mid_stream_then_new_request_succeeds(client, stories):
    body = {"model": stories.name, "prompt": PROMPT, "max_tokens": 400, "stream": True,
            "ignore_eos": True}
    with httpx.stream("POST", stories.base_url + "/v1/completions", json=body, timeout=60) as r:
        assert r.status_code == 200
        lines = r.iter_lines()
        for _ in range(3):
            next(lines)
    # The connection is closed; the engine drops the request within a step or so.
    text, _ = greedy_completion(client, stories.name, PROMPT, max_tokens=8)
    assert text
    deadline = time.monotonic() + 10
    running = None
    while time.monotonic() < deadline:
        metrics = httpx.get(stories.base_url + "/metrics").text
        running = [l for l in metrics.splitlines()
                   if l.startswith("vllm:num_requests_running{")][0]
        if running.endswith(" 0"):
            break
        time.sleep(0.05)
    assert running.endswith(" 0"), running


def test_context_overflow_is_400_before_any_stream_byte(stories):
    body = {"model": stories.name, "stream": True, "max_tokens": 16,
            "messages": [{"role": "user", "content": "once upon a time " * 400}]}
    with httpx.stream("POST", stories.base_url + "/v1/chat/completions", json=body,
                      timeout=60) as r:
        assert r.status_code == 400
        assert r.headers["content-type"].startswith("application/json")
        error = json.loads(r.read())["error"]
    assert error["code"] == "context_length_exceeded"
    assert error["type"] == "invalid_request_error"
    assert error["param"] == "messages"
    assert error["n_ctx"] == 512
    assert error["n_prompt_tokens"] > 512
    # A prompt that fits, with too many output tokens, names max_tokens.
    r = httpx.post(stories.base_url + "/v1/completions", timeout=60,
                   json={"model": stories.name, "prompt": PROMPT, "max_tokens": 600,
                         "stream": True})
    assert r.status_code == 400
    assert r.json()["error"]["param"] == "max_tokens"


def test_openai_sdk_raises_bad_request_on_overflow(client, stories):
    openai = pytest.importorskip("openai")
    with pytest.raises(openai.BadRequestError) as info:
        client.completions.create(model=stories.name, prompt="the end " * 400, max_tokens=8)
    assert info.value.body["code"] == "context_length_exceeded"


def test_tokenize_and_detokenize(stories):
    t = httpx.post(stories.base_url + "/tokenize", json={"model": stories.name,
                                                          "prompt": "Once upon a time"}).json()
    assert t["count"] == len(t["tokens"]) > 0
    assert t["max_model_len"] == 512
    d = httpx.post(stories.base_url + "/detokenize", json={"model": stories.name,
                                                            "tokens": t["tokens"]}).json()
    assert d["prompt"].strip() == "Once upon a time"
    m = httpx.post(stories.base_url + "/tokenize", json={
        "model": stories.name, "messages": [{"role": "user", "content": "Hi there"}]}).json()
    assert m["count"] == len(m["tokens"]) > 0


def test_ignore_eos_generates_max_tokens(client, stories):
    r = client.completions.create(model=stories.name, prompt=PROMPT, max_tokens=300,
                                  temperature=0, extra_body={"ignore_eos": True})
    assert r.usage.completion_tokens == 300
    assert r.choices[0].finish_reason == "length"
