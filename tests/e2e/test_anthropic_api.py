"""The Anthropic Messages API (POST /v1/messages) of a real `deepinfer serve` on SmolLM2, driven by
the official anthropic Python SDK: messages, streaming through the SDK's event accumulator, stop
sequences, usage that agrees with count_tokens and with the OpenAI route, prompt-cache reads
reported as cache_read_input_tokens, and Anthropic-shaped errors."""

import anthropic
import httpx
import openai
import pytest

MODEL = "SmolLM2-135M-Instruct"
SYSTEM = "You are a terse assistant."
MESSAGES = [{"role": "user", "content": "Name three colors."}]
# The SDK no longer has sampling parameters; the server still reads temperature, top_p, top_k.
GREEDY = {"temperature": 0}


def client(server):
    return anthropic.Anthropic(base_url=server.base_url, api_key="unused", max_retries=0,
                               timeout=60)


def text_of(message):
    return "".join(b.text for b in message.content if b.type == "text")


def test_create_and_stream_give_the_same_greedy_answer(smollm):
    c = client(smollm)
    msg = c.messages.create(model=MODEL, max_tokens=24, extra_body=GREEDY, system=SYSTEM,
                            messages=MESSAGES)
    assert msg.type == "message" and msg.role == "assistant" and msg.model == MODEL
    assert msg.id.startswith("msg_")
    assert msg.stop_reason in ("end_turn", "max_tokens")
    assert msg.stop_sequence is None
    text = text_of(msg)
    assert text.strip()
    with c.messages.stream(model=MODEL, max_tokens=24, extra_body=GREEDY, system=SYSTEM,
                           messages=MESSAGES) as stream:
        streamed = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert streamed == text
    assert text_of(final) == text
    assert final.stop_reason == msg.stop_reason
    assert final.usage.output_tokens == msg.usage.output_tokens

    # The prompt is the one count_tokens and the OpenAI route see for the same conversation.
    count = c.messages.count_tokens(model=MODEL, system=SYSTEM, messages=MESSAGES)
    assert msg.usage.input_tokens + msg.usage.cache_read_input_tokens == count.input_tokens
    assert final.usage.input_tokens + final.usage.cache_read_input_tokens == count.input_tokens
    o = openai.OpenAI(base_url=smollm.base_url + "/v1", api_key="unused", max_retries=0)
    r = o.chat.completions.create(model=MODEL, max_tokens=24, temperature=0,
                                  messages=[{"role": "system", "content": SYSTEM}, *MESSAGES])
    assert r.usage.prompt_tokens == count.input_tokens
    assert r.choices[0].message.content == text
    assert r.usage.completion_tokens == msg.usage.output_tokens


def test_repeated_long_prompt_is_read_from_the_prefix_cache(smollm):
    c = client(smollm)
    system = "You answer questions about the solar system. " * 40
    kwargs = dict(model=MODEL, max_tokens=4, extra_body=GREEDY, system=system,
                  messages=[{"role": "user", "content": "Which planet is largest?"}])
    first = c.messages.create(**kwargs)
    second = c.messages.create(**kwargs)
    total = first.usage.input_tokens + first.usage.cache_read_input_tokens
    assert total > 300
    assert second.usage.cache_read_input_tokens >= 256
    assert second.usage.input_tokens + second.usage.cache_read_input_tokens == total
    assert second.usage.cache_creation_input_tokens == 0


def test_stop_sequence_ends_the_answer_before_it(smollm):
    c = client(smollm)
    full = text_of(c.messages.create(model=MODEL, max_tokens=24, extra_body=GREEDY,
                                     system=SYSTEM, messages=MESSAGES))
    words = full.split()
    assert len(words) >= 3, full
    stop = words[2]
    cut = c.messages.create(model=MODEL, max_tokens=24, extra_body=GREEDY, system=SYSTEM,
                            messages=MESSAGES, stop_sequences=[stop])
    assert cut.stop_reason == "stop_sequence"
    assert cut.stop_sequence == stop
    assert text_of(cut) == full[:full.index(stop)]
    with c.messages.stream(model=MODEL, max_tokens=24, extra_body=GREEDY, system=SYSTEM,
                           messages=MESSAGES, stop_sequences=[stop]) as stream:
        streamed = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert streamed == text_of(cut)
    assert final.stop_reason == "stop_sequence" and final.stop_sequence == stop
    short = c.messages.create(model=MODEL, max_tokens=2, messages=MESSAGES)
    assert short.stop_reason == "max_tokens" and short.usage.output_tokens == 2


def test_errors_are_anthropic_shaped(smollm):
    c = client(smollm)
    with pytest.raises(anthropic.NotFoundError) as e:
        c.messages.create(model="claude-unknown", max_tokens=8, messages=MESSAGES)
    assert e.value.body["type"] == "not_found_error" or e.value.body["error"]["type"] == \
        "not_found_error"
    with pytest.raises(anthropic.BadRequestError) as e:
        c.messages.create(model=MODEL, max_tokens=10_000_000, messages=MESSAGES)
    assert "context" in str(e.value).lower() or "max_tokens" in str(e.value)
    with pytest.raises(anthropic.BadRequestError):
        with c.messages.stream(model=MODEL, max_tokens=10_000_000, messages=MESSAGES) as s:
            s.get_final_message()
    r = httpx.post(smollm.base_url + "/v1/messages", json={"messages": MESSAGES}, timeout=30)
    assert r.status_code == 400
    body = r.json()
    assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
    assert "max_tokens" in body["error"]["message"]
    # The server still answers afterwards.
    assert text_of(c.messages.create(model=MODEL, max_tokens=4, messages=MESSAGES))


def test_a_final_assistant_message_is_continued_as_a_prefill(smollm):
    # As the Anthropic API does: the answer continues the assistant's text, not a new turn.
    c = client(smollm)
    messages = [{"role": "user", "content": "What is the capital of France?"},
                {"role": "assistant", "content": "The capital of France is"}]
    msg = c.messages.create(model=MODEL, max_tokens=12, extra_body=GREEDY, messages=messages)
    assert text_of(msg) == " Paris."
    with c.messages.stream(model=MODEL, max_tokens=12, extra_body=GREEDY,
                           messages=messages) as stream:
        assert "".join(stream.text_stream) == " Paris."
    # count_tokens counts the same open prompt, which is shorter than the closed one.
    count = c.messages.count_tokens(model=MODEL, messages=messages)
    assert msg.usage.input_tokens + msg.usage.cache_read_input_tokens == count.input_tokens
    o = openai.OpenAI(base_url=smollm.base_url + "/v1", api_key="unused", max_retries=0)
    r = o.chat.completions.create(model=MODEL, max_tokens=12, temperature=0, messages=messages,
                                  extra_body={"continue_final_message": True,
                                              "add_generation_prompt": False})
    assert r.choices[0].message.content == " Paris."
    assert r.usage.prompt_tokens == count.input_tokens
    closed = o.chat.completions.create(model=MODEL, max_tokens=1, messages=messages)
    assert closed.usage.prompt_tokens > count.input_tokens  # the end of turn + a new turn
    # An assistant turn that calls a tool is finished: it is not continued.
    tool_turn = [{"role": "user", "content": "Weather?"},
                 {"role": "assistant", "content": [
                     {"type": "tool_use", "id": "t1", "name": "w", "input": {}}]}]
    tools = [{"name": "w", "input_schema": {"type": "object"}}]
    assert c.messages.count_tokens(model=MODEL, messages=tool_turn, tools=tools).input_tokens > 0


def test_continue_final_message_with_the_generation_prompt_is_a_400(smollm):
    o = openai.OpenAI(base_url=smollm.base_url + "/v1", api_key="unused", max_retries=0)
    with pytest.raises(openai.BadRequestError) as e:
        o.chat.completions.create(model=MODEL, max_tokens=4, messages=MESSAGES,
                                  extra_body={"continue_final_message": True})
    assert e.value.body["param"] == "continue_final_message"
    assert e.value.body["code"] == "invalid_value"
