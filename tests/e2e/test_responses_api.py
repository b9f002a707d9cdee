"""The OpenAI Responses API (POST /v1/responses) of a real `deepinfer serve` on SmolLM2, driven by
the official openai SDK: create, the SDK's stream helper, incomplete answers, usage that agrees
with the chat route, multi-turn input items, and errors."""

import openai
import pytest

MODEL = "SmolLM2-135M-Instruct"
INSTRUCTIONS = "You are a terse assistant."


def client(server):
    return openai.OpenAI(base_url=server.base_url + "/v1", api_key="unused", max_retries=0,
                         timeout=60)


def test_create_stream_and_chat_agree(smollm):
    c = client(smollm)
    # Long enough to finish: the SDK's stream helper returns a final response only for
    # response.completed (a cut answer ends with response.incomplete, as OpenAI's does).
    kwargs = dict(model=MODEL, instructions=INSTRUCTIONS, input="Name three colors.",
                  max_output_tokens=200, temperature=0)
    r = c.responses.create(**kwargs)
    assert r.object == "response" and r.model == MODEL
    assert r.status == "completed"
    assert r.id.startswith("resp_")
    assert [item.type for item in r.output] == ["message"]
    assert r.output_text.strip()
    with c.responses.stream(**kwargs) as stream:
        deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert "".join(deltas) == r.output_text
    assert final.output_text == r.output_text and final.status == r.status
    chat = c.chat.completions.create(model=MODEL, max_tokens=200, temperature=0, messages=[
        {"role": "system", "content": INSTRUCTIONS}, {"role": "user", "content": "Name three colors."}])
    assert chat.choices[0].message.content == r.output_text
    assert chat.usage.prompt_tokens == r.usage.input_tokens
    assert chat.usage.completion_tokens == r.usage.output_tokens
    assert r.usage.total_tokens == r.usage.input_tokens + r.usage.output_tokens


def test_incomplete_and_multi_turn_input(smollm):
    c = client(smollm)
    short = c.responses.create(model=MODEL, input="Tell me a story.", max_output_tokens=3)
    assert short.status == "incomplete"
    assert short.incomplete_details.reason == "max_output_tokens"
    assert short.usage.output_tokens == 3
    turns = [{"role": "user", "content": "My name is Ada."},
             {"role": "assistant", "content": "Hello Ada!"},
             {"role": "user", "content": [{"type": "input_text", "text": "What is my name?"}]}]
    r = c.responses.create(model=MODEL, input=turns, max_output_tokens=16, temperature=0)
    chat = c.chat.completions.create(model=MODEL, max_tokens=16, temperature=0, messages=[
        {"role": "user", "content": "My name is Ada."},
        {"role": "assistant", "content": "Hello Ada!"},
        {"role": "user", "content": "What is my name?"}])
    assert r.output_text == chat.choices[0].message.content
    assert r.usage.input_tokens == chat.usage.prompt_tokens


def test_errors(smollm):
    c = client(smollm)
    with pytest.raises(openai.NotFoundError):
        c.responses.create(model="gpt-unknown", input="Hi")
    with pytest.raises(openai.BadRequestError) as e:
        c.responses.create(model=MODEL, input="Hi", previous_response_id="resp_123")
    assert e.value.body["param"] == "previous_response_id"
    # Every field that asks for what this server does not do is refused by name, never ignored.
    for field, value in [("conversation", "conv_1"), ("background", True), ("store", True),
                         ("max_tool_calls", 2),
                         ("truncation", "auto"), ("service_tier", "flex"),
                         ("prompt", {"id": "pmpt_1"}), ("top_logprobs", 3)]:
        with pytest.raises(openai.BadRequestError) as e:
            c.responses.create(model=MODEL, input="Hi", **{field: value})
        assert e.value.body["param"] == field and e.value.body["code"] == "unsupported_value"
    # An `include` value that needs stored state is refused by its index (the stateless
    # "reasoning.encrypted_content" is accepted: test_client_fixes.py).
    with pytest.raises(openai.BadRequestError) as e:
        c.responses.create(model=MODEL, input="Hi", include=["file_search_call.results"])
    assert e.value.body["param"] == "include[0]"
    assert e.value.body["code"] == "unsupported_value"
    # Values that ask for nothing are fine.
    ok = c.responses.create(model=MODEL, input="Hi", max_output_tokens=2, store=False,
                            background=False, truncation="disabled", service_tier="auto")
    assert ok.status in ("completed", "incomplete")
    with pytest.raises(openai.BadRequestError) as e:
        c.responses.create(model=MODEL, input="Hi", tools=[{"type": "web_search"}])
    assert e.value.body["code"] == "unsupported_value"
    with pytest.raises(openai.BadRequestError) as e:
        c.responses.create(model=MODEL, input="Hi", max_output_tokens=10_000_000)
    assert e.value.body["code"] == "context_length_exceeded"
    assert c.responses.create(model=MODEL, input="Hi", max_output_tokens=2).usage.output_tokens
