"""The default model (SmolLM2-135M-Instruct, GGUF, ChatML template)."""

import httpx
import pytest

MESSAGES = [{"role": "user", "content": "What is the capital of France? Answer in one word."}]


@pytest.fixture()
def sclient(smollm):
    openai = pytest.importorskip("openai")
    return openai.OpenAI(base_url=smollm.base_url + "/v1", api_key="unused", max_retries=0,
                         timeout=120)


def test_chat_answers_and_streams_the_same_text(sclient, smollm):
    full = sclient.chat.completions.create(model=smollm.name, messages=MESSAGES, max_tokens=16,
                                           temperature=0)
    text = full.choices[0].message.content
    assert text.strip()
    assert "<|im_end|>" not in text and "<|im_start|>" not in text
    streamed, usage = "", None
    for chunk in sclient.chat.completions.create(model=smollm.name, messages=MESSAGES,
                                                 max_tokens=16, temperature=0, stream=True,
                                                 stream_options={"include_usage": True}):
        if chunk.choices:
            streamed += chunk.choices[0].delta.content or ""
        else:
            usage = chunk.usage
    assert streamed == text
    assert usage.prompt_tokens == full.usage.prompt_tokens
    assert usage.prompt_tokens_details.cached_tokens >= 0


def test_repeated_conversation_hits_the_prefix_cache(sclient, smollm):
    system = {"role": "system", "content": "You are a helpful assistant. " * 12}
    for question in ["Name a color.", "Name a fruit."]:
        r = sclient.chat.completions.create(model=smollm.name, max_tokens=4, temperature=0,
                                            messages=[system, {"role": "user",
                                                               "content": question}])
    assert r.usage.prompt_tokens_details.cached_tokens > 0


def test_tokenize_counts_match_chat_usage(sclient, smollm):
    t = httpx.post(smollm.base_url + "/tokenize", json={"model": smollm.name,
                                                         "messages": MESSAGES}).json()
    r = sclient.chat.completions.create(model=smollm.name, messages=MESSAGES, max_tokens=1)
    assert t["count"] == r.usage.prompt_tokens


def test_stop_string_with_bpe_model(sclient, smollm):
    full = sclient.chat.completions.create(model=smollm.name, messages=MESSAGES, max_tokens=24,
                                           temperature=0).choices[0].message.content
    if len(full) < 4:
        pytest.skip(f"answer too short to cut: {full!r}")
    stop = full[2:4]
    r = sclient.chat.completions.create(model=smollm.name, messages=MESSAGES, max_tokens=24,
                                        temperature=0, stop=[stop])
    assert r.choices[0].message.content == full[:full.index(stop)]
    assert r.choices[0].finish_reason == "stop"
