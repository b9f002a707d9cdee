"""Enforced tool choice on a tiny DeepSeek checkpoint (random weights: left alone it writes noise,
never a tool call) served by real `deepinfer serve` processes, one per DeepSeek tool-call syntax
(V3, V3.1, and the DSML blocks of V3.2, V4 and V4.1), driven by the official openai and anthropic
SDKs: tool_choice "required" always yields tool calls whose arguments validate against the
tool's schema (jsonschema), sampled with many seeds, streamed and not; a named tool gives exactly
one call of it; Anthropic's {"type": "any"} / {"type": "tool"} likewise; what cannot be enforced
is a 400 before anything runs."""

import json

import httpx
import pytest

from conftest import Server
from helpers import concurrently
from test_deepseek import write_v3_tiny

openai = pytest.importorskip("openai")
anthropic = pytest.importorskip("anthropic")
jsonschema = pytest.importorskip("jsonschema")

NAME = "tiny-deepseek"
# Bounded values, so that a random model finishes its arguments well within max_tokens (each
# byte is a token in the toy vocabulary).
WEATHER = {"type": "object",
           "properties": {"city": {"type": "string", "enum": ["Paris", "Oslo", "Lima"]},
                          "days": {"type": "integer", "minimum": 1, "maximum": 7},
                          "metric": {"type": "boolean"}},
           "required": ["city", "days"]}
# A pattern of ASCII letters rather than maxLength: under random weights xgrammar's character
# classes also admit the UTF-8 bytes of surrogates, which the detokenizer turns into three
# U+FFFD each (docs/api.md, structured outputs).
TIME = {"type": "object", "properties": {"zone": {"type": "string", "pattern": "^[A-Za-z_/]{1,16}$"}},
        "required": ["zone"]}
SCHEMAS = {"get_weather": WEATHER, "get_time": TIME}
TOOLS = [{"type": "function", "function": {"name": n, "description": f"{n} tool", "parameters": s}}
         for n, s in SCHEMAS.items()]
MESSAGES = [{"role": "user", "content": "What is the weather in Paris?"}]
TEMPLATES = ["deepseek-v3", "deepseek-v3.1", "deepseek-v3.2", "deepseek-v4", "deepseek-v4.1"]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """The tiny V3 checkpoint with its window raised from 256 to 4,096 positions: the DSML
    encoders' tool instructions take about 1,500 byte-level tokens (YaRN's original window is
    unchanged, so are the numerics)."""
    d = write_v3_tiny(tmp_path_factory.mktemp("tiny_deepseek_tools"))
    config = json.loads((d / "config.json").read_text())
    config["max_position_embeddings"] = 4096
    (d / "config.json").write_text(json.dumps(config))
    return d


@pytest.fixture(scope="module", params=TEMPLATES)
def server(request, checkpoint):
    """The same weights under each encoder: the syntax comes from --chat-template."""
    s = Server(checkpoint, NAME, ["--chat-template", request.param, "--threads", "2",
                                  "--max-num-seqs", "8"])
    yield s
    assert s.alive(), "the server died during the tests:\n" + s.logs()
    s.stop()


def oai(s):
    return openai.OpenAI(base_url=s.base_url + "/v1", api_key="unused", max_retries=0,
                         timeout=300)


def check_calls(calls, names=tuple(SCHEMAS)):
    assert calls, "no tool call"
    for c in calls:
        assert c.function.name in names
        jsonschema.validate(json.loads(c.function.arguments), SCHEMAS[c.function.name])


def test_required_always_yields_valid_tool_calls(server):
    """8 sampled requests at once (seeds 0-7, temperature 1): every answer is tool calls only.
    Parallel calls are allowed, and random weights may go on calling until max_tokens cuts the
    block ("length"); the calls completed by then are still whole and valid."""
    c = oai(server)
    results = concurrently(
        lambda i: c.chat.completions.create(model=NAME, messages=MESSAGES, tools=TOOLS,
                                            tool_choice="required", temperature=1.0, seed=i,
                                            max_tokens=1000), 8)
    for r in results:
        choice = r.choices[0]
        check_calls(choice.message.tool_calls)
        if choice.finish_reason != "length":
            assert choice.finish_reason == "tool_calls", choice
            assert not choice.message.content
    # Left free, the same weights write no tool call: the constraint made the difference.
    free = c.chat.completions.create(model=NAME, messages=MESSAGES, tools=TOOLS, seed=0,
                                     temperature=1.0, max_tokens=60)
    assert not free.choices[0].message.tool_calls


def test_a_named_tool_gives_one_call_of_it_streamed_or_not(server):
    c = oai(server)
    kw = dict(model=NAME, messages=MESSAGES, tools=TOOLS, temperature=0.8, seed=3,
              max_tokens=600, tool_choice={"type": "function", "function": {"name": "get_time"}})
    whole = c.chat.completions.create(**kw)
    assert whole.choices[0].finish_reason == "tool_calls"
    calls = whole.choices[0].message.tool_calls
    assert len(calls) == 1
    check_calls(calls, names=("get_time",))
    # Streamed: the argument deltas add up to the same call.
    name, args = None, ""
    for chunk in c.chat.completions.create(**kw, stream=True):
        for d in (chunk.choices[0].delta.tool_calls or []) if chunk.choices else []:
            name = d.function.name or name
            args += d.function.arguments or ""
    assert name == "get_time"
    assert json.loads(args) == json.loads(calls[0].function.arguments)


def test_required_without_parallel_calls_gives_one_call(server):
    r = oai(server).chat.completions.create(model=NAME, messages=MESSAGES, tools=TOOLS,
                                            tool_choice="required", parallel_tool_calls=False,
                                            temperature=1.0, seed=11, max_tokens=600)
    assert r.choices[0].finish_reason == "tool_calls"
    assert len(r.choices[0].message.tool_calls) == 1
    check_calls(r.choices[0].message.tool_calls)


def test_anthropic_any_and_tool_are_enforced(server):
    a = anthropic.Anthropic(base_url=server.base_url, api_key="unused", max_retries=0,
                            timeout=300)
    tools = [{"name": n, "description": f"{n} tool", "input_schema": s}
             for n, s in SCHEMAS.items()]
    messages = [{"role": "user", "content": "What is the weather in Paris?"}]
    # disable_parallel_tool_use: one call, so that random weights end the block.
    for choice, names in (({"type": "any", "disable_parallel_tool_use": True}, tuple(SCHEMAS)),
                          ({"type": "tool", "name": "get_weather"}, ("get_weather",))):
        msg = a.messages.create(model=NAME, max_tokens=600, tools=tools, tool_choice=choice,
                                messages=messages, extra_body={"temperature": 1.0, "seed": 5})
        assert msg.stop_reason == "tool_use"
        uses = [b for b in msg.content if b.type == "tool_use"]
        assert len(uses) == 1 and all(b.type == "tool_use" for b in msg.content)
        for b in uses:
            assert b.name in names
            jsonschema.validate(b.input, SCHEMAS[b.name])


def test_what_cannot_be_enforced_is_a_400(server):
    def post(**body):
        return httpx.post(server.base_url + "/v1/chat/completions", timeout=60,
                          json={"model": NAME, "messages": MESSAGES, "max_tokens": 4, **body})

    r = post(tool_choice="required")
    assert r.status_code == 400 and r.json()["error"]["param"] == "tool_choice", r.text
    r = post(tools=TOOLS, tool_choice={"type": "function", "function": {"name": "get_mood"}})
    assert r.status_code == 400 and "get_mood" in r.json()["error"]["message"], r.text
    r = post(tools=TOOLS, tool_choice="sometimes")
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_value", r.text
    # A tool whose parameters are not a schema xgrammar can compile: invalid_constraint.
    bad = [{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"a": {"type": 7}}}}}]
    r = post(tools=bad, tool_choice="required")
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_constraint", r.text
    # A name the call markers cannot carry.
    quoted = [{"type": "function", "function": {"name": 'get"w', "parameters": WEATHER}}]
    r = post(tools=quoted, tool_choice="required")
    assert r.status_code == 400 and r.json()["error"]["param"] == "tools[0].function.name", r.text


def test_responses_required_gives_function_call_items(server):
    r = oai(server).responses.create(
        model=NAME, input="What time is it in Lima?", max_output_tokens=600, temperature=1.0,
        tools=[{"type": "function", "name": n, "parameters": s} for n, s in SCHEMAS.items()],
        tool_choice={"type": "function", "name": "get_time"})
    calls = [item for item in r.output if item.type == "function_call"]
    assert len(calls) == 1 and calls[0].name == "get_time", r.output
    jsonschema.validate(json.loads(calls[0].arguments), TIME)
