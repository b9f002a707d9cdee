"""Real client libraries, unchanged, against a real `deepinfer serve` on SmolLM2: the OpenAI
Agents SDK (Responses and Chat Completions models, run and streamed; it sends `store: false` with
`include: ["reasoning.encrypted_content"]` when asked to be stateless, and never asks for stream
usage, which `--enable-force-include-usage` supplies), the LiteLLM proxy's Anthropic
`/v1/messages` bridge (it turns Anthropic requests into Responses requests carrying that
`include`) driven by the official anthropic SDK, instructor's JSON-schema mode (and its TOOLS
mode, which SmolLM2's template cannot enforce: a clear 400), the anthropic SDK's
`messages.parse`, `count_tokens` and `models`, and the SDKs' request ids.

Each library is imported with `pytest.importorskip`, so a missing package skips its tests only.
The LiteLLM proxy runs offline (local cost map, no telemetry, no database) in a temporary folder;
it takes about half a minute to import, so it is started before the module's first test and
waited for only by the test that uses it."""

import asyncio
import importlib.util
import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from typing import Literal

import httpx
import pydantic
import pytest

from conftest import Server, free_port, smollm_path, wait_healthy

openai = pytest.importorskip("openai")
anthropic = pytest.importorskip("anthropic")

NAME = "SmolLM2-135M-Instruct"
# Short enough that SmolLM2 ends its answer well inside the budget: the Agents SDK raises on an
# `incomplete` Responses answer.
INSTRUCTIONS = "You are terse."
PROMPT = "Reply with one word: hello."
AGENT_MAX_TOKENS = 48


def oai(server):
    return openai.OpenAI(base_url=server.base_url + "/v1", api_key="unused", max_retries=0,
                         timeout=60)


def anth(base_url, key="unused"):
    return anthropic.Anthropic(base_url=base_url, api_key=key, max_retries=0, timeout=60)


def text_of(message):
    return "".join(b.text for b in message.content if b.type == "text")


def serve_log(server) -> str:
    server.log.flush()
    return pathlib.Path(server.log.name).read_text(errors="replace")


@pytest.fixture(scope="module")
def usage_server():
    """A second SmolLM2 server with --enable-force-include-usage (for clients that never ask)."""
    path = smollm_path()
    if not path.exists():
        pytest.skip(f"SmolLM2 not found at {path} (run `make setup`)")
    server = Server(path, NAME, ["--max-model-len", "2048", "--enable-force-include-usage"])
    yield server
    assert server.alive(), "the server died during the tests:\n" + server.logs()
    server.stop()


# --- OpenAI Agents SDK -----------------------------------------------------------------------

class Recorder:
    """An httpx.AsyncClient whose request bodies are kept (the SDK's calls, as sent)."""

    def __init__(self):
        self.bodies = []

    async def _hook(self, request):
        self.bodies.append((request.url.path, json.loads(request.content or b"null")))

    def client(self, server):
        http = httpx.AsyncClient(event_hooks={"request": [self._hook]}, timeout=60)
        return openai.AsyncOpenAI(base_url=server.base_url + "/v1", api_key="unused",
                                  max_retries=0, http_client=http)


def make_agent(agents, model_cls, server, recorder, **settings):
    # A fresh AsyncOpenAI client per run: run_sync and asyncio.run each have their own loop.
    model = model_cls(model=NAME, openai_client=recorder.client(server))
    return agents.Agent(name="terse", instructions=INSTRUCTIONS, model=model,
                        model_settings=agents.ModelSettings(max_tokens=AGENT_MAX_TOKENS,
                                                            temperature=0, **settings))


def run_streamed(agents, agent):
    """Runner.run_streamed to the end: (result, the text of its output_text deltas)."""
    async def go():
        result = agents.Runner.run_streamed(agent, PROMPT)
        deltas = []
        async for event in result.stream_events():
            if (event.type == "raw_response_event"
                    and event.data.type == "response.output_text.delta"):
                deltas.append(event.data.delta)
        return result, "".join(deltas)
    return asyncio.run(go())


def test_agents_sdk_responses_model_stateless_run_and_stream(smollm):
    """OpenAIResponsesModel with store=False and include=[reasoning.encrypted_content]: the
    combination the server used to refuse."""
    agents = pytest.importorskip("agents")
    agents.set_tracing_disabled(True)
    stateless = dict(store=False, response_include=["reasoning.encrypted_content"])

    rec = Recorder()
    result = agents.Runner.run_sync(
        make_agent(agents, agents.OpenAIResponsesModel, smollm, rec, **stateless), PROMPT)
    text = result.final_output
    assert isinstance(text, str) and text.strip()
    usage = result.context_wrapper.usage
    assert usage.requests == 1 and usage.input_tokens > 0 and usage.output_tokens > 0
    assert usage.total_tokens == usage.input_tokens + usage.output_tokens
    [(path, body)] = rec.bodies
    assert path == "/v1/responses"
    assert body["include"] == ["reasoning.encrypted_content"] and body["store"] is False
    assert body["max_output_tokens"] == AGENT_MAX_TOKENS and body["instructions"] == INSTRUCTIONS

    rec = Recorder()
    streamed, deltas = run_streamed(
        agents, make_agent(agents, agents.OpenAIResponsesModel, smollm, rec, **stateless))
    [(path, body)] = rec.bodies
    assert path == "/v1/responses" and body["stream"] is True
    assert body["include"] == ["reasoning.encrypted_content"]
    assert streamed.is_complete
    assert streamed.final_output == deltas == text  # greedy: the same answer either way
    su = streamed.context_wrapper.usage
    assert su.requests == 1 and su.input_tokens == usage.input_tokens
    assert su.output_tokens == usage.output_tokens


def test_agents_sdk_chat_completions_model_run_and_stream_usage(smollm, usage_server):
    """OpenAIChatCompletionsModel: the SDK sends no stream_options to a non-OpenAI base_url, so a
    streamed run's usage comes only from --enable-force-include-usage."""
    agents = pytest.importorskip("agents")
    agents.set_tracing_disabled(True)
    chat = agents.OpenAIChatCompletionsModel

    rec = Recorder()
    result = agents.Runner.run_sync(make_agent(agents, chat, smollm, rec), PROMPT)
    text = result.final_output
    assert isinstance(text, str) and text.strip()
    usage = result.context_wrapper.usage
    assert usage.requests == 1 and usage.input_tokens > 0 and usage.output_tokens > 0
    [(path, body)] = rec.bodies
    assert path == "/v1/chat/completions" and body["max_tokens"] == AGENT_MAX_TOKENS
    assert body["messages"][0] == {"role": "system", "content": INSTRUCTIONS}

    # Default server: the stream completes, but no usage was asked for, so none is reported.
    rec = Recorder()
    streamed, deltas = run_streamed(agents, make_agent(agents, chat, smollm, rec))
    [(_, body)] = rec.bodies
    assert body["stream"] is True and "stream_options" not in body
    assert streamed.is_complete and streamed.final_output == deltas == text
    assert streamed.context_wrapper.usage.output_tokens == 0

    # --enable-force-include-usage: the same request now ends with a usage chunk the SDK reads.
    rec = Recorder()
    streamed, deltas = run_streamed(agents, make_agent(agents, chat, usage_server, rec))
    [(_, body)] = rec.bodies
    assert "stream_options" not in body
    assert streamed.is_complete and streamed.final_output == deltas == text
    su = streamed.context_wrapper.usage
    assert su.requests == 1
    assert su.input_tokens == usage.input_tokens and su.output_tokens == usage.output_tokens
    assert su.total_tokens == su.input_tokens + su.output_tokens


# --- LiteLLM proxy: Anthropic /v1/messages -> our Responses API --------------------------------

LITELLM_MODEL = "smol"
LITELLM_KEY = "sk-deepinfer-e2e-" + "0123456789abcdef" * 2  # the proxy refuses to start without


class LiteLLMProxy:
    def __init__(self, backend: Server):
        exe = shutil.which("litellm", path=str(pathlib.Path(sys.executable).parent))
        if exe is None:
            pytest.skip("the litellm proxy CLI is not installed (litellm[proxy])")
        self.dir = tempfile.TemporaryDirectory(prefix="deepinfer-litellm-")
        cwd = pathlib.Path(self.dir.name)
        (cwd / "config.yaml").write_text(
            "model_list:\n"
            f"  - model_name: {LITELLM_MODEL}\n"
            "    litellm_params:\n"
            f"      model: openai/{NAME}\n"
            f"      api_base: {backend.base_url}/v1\n"
            "      api_key: unused\n"
            "litellm_settings:\n"
            "  telemetry: False\n"
            "general_settings:\n"
            f"  master_key: {LITELLM_KEY}\n")
        env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_TELEMETRY": "False",
               "LITELLM_LOG": "ERROR", "NO_PROXY": "127.0.0.1,localhost"}
        for var in ("DATABASE_URL", "LITELLM_MASTER_KEY", "REDIS_HOST", "REDIS_URL"):
            env.pop(var, None)
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.log = open(cwd / "proxy.log", "w+b")
        # Its own process group, so stop() ends the proxy and any worker it forks.
        self.proc = subprocess.Popen(
            [exe, "--config", "config.yaml", "--host", "127.0.0.1", "--port", str(self.port)],
            cwd=cwd, env=env, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        self.started = time.monotonic()

    def logs(self) -> str:
        self.log.flush()
        return pathlib.Path(self.log.name).read_text(errors="replace")[-4000:]

    def wait_ready(self, timeout_s: float = 90):
        wait_healthy(self.base_url, self.proc, self.started + timeout_s - time.monotonic(),
                     "the litellm proxy", self.logs, path="/health/liveliness")

    def stop(self):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.log.close()
        self.dir.cleanup()


@pytest.fixture(scope="module", autouse=True)
def litellm_boot(request):
    """Starts the LiteLLM proxy at the module's start when a selected test needs it and litellm
    is installed (None otherwise); `litellm_proxy` waits for it."""
    wanted = any("litellm_proxy" in item.fixturenames for item in request.session.items
                 if item.module is request.module)
    if not wanted or importlib.util.find_spec("litellm") is None:
        yield None
        return
    proxy = LiteLLMProxy(request.getfixturevalue("smollm"))
    yield proxy
    proxy.stop()


@pytest.fixture()
def litellm_proxy(litellm_boot):
    pytest.importorskip("litellm")
    litellm_boot.wait_ready()
    return litellm_boot


def test_litellm_proxy_anthropic_messages_bridge_reaches_the_responses_api(smollm, litellm_proxy):
    """The anthropic SDK against LiteLLM's /v1/messages; LiteLLM sends our server Responses
    requests with include=["reasoning.encrypted_content"], which the server used to refuse (400)."""
    before = serve_log(smollm).count("POST /v1/responses 200")
    c = anth(litellm_proxy.base_url, key=LITELLM_KEY)
    msg = c.messages.create(model=LITELLM_MODEL, max_tokens=32, system=INSTRUCTIONS,
                            messages=[{"role": "user", "content": PROMPT}])
    assert msg.type == "message" and msg.role == "assistant"
    assert text_of(msg).strip()
    assert msg.stop_reason in ("end_turn", "max_tokens")
    assert msg.usage.input_tokens > 0 and 0 < msg.usage.output_tokens <= 32

    with c.messages.stream(model=LITELLM_MODEL, max_tokens=32, system=INSTRUCTIONS,
                           messages=[{"role": "user", "content": PROMPT}]) as stream:
        streamed = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert streamed.strip() and text_of(final) == streamed
    assert final.stop_reason in ("end_turn", "max_tokens")

    after = serve_log(smollm).count("POST /v1/responses 200")
    assert after - before >= 2, "LiteLLM did not bridge through /v1/responses:\n" + \
        smollm.logs()


# --- instructor ------------------------------------------------------------------------------

class Pet(pydantic.BaseModel):
    name: str
    species: Literal["cat", "dog"]
    age: int


PET_MESSAGES = [{"role": "user", "content": "Extract the pet: Tom is a 3 year old cat."}]


def test_instructor_json_schema_mode_returns_a_valid_model(smollm):
    instructor = pytest.importorskip("instructor")
    client = instructor.from_openai(oai(smollm), mode=instructor.Mode.JSON_SCHEMA)
    pet, raw = client.chat.completions.create_with_completion(
        model=NAME, response_model=Pet, messages=PET_MESSAGES, max_tokens=64, temperature=0,
        max_retries=0)
    assert isinstance(pet, Pet)
    assert raw.choices[0].finish_reason == "stop"
    # The constrained text itself is the object, with nothing around it.
    assert Pet.model_validate_json(raw.choices[0].message.content).model_dump() == pet.model_dump()
    assert raw.usage.completion_tokens <= 64


def test_instructor_tools_mode_is_a_clear_400_on_a_template_without_tool_syntax(smollm):
    """TOOLS mode forces a named tool_choice; SmolLM2's ChatML template has no tool-call syntax,
    so the server refuses it up front (docs/api.md, "Enforced tool choice")."""
    instructor = pytest.importorskip("instructor")
    client = instructor.from_openai(oai(smollm), mode=instructor.Mode.TOOLS)
    with pytest.raises(Exception) as info:
        client.chat.completions.create(model=NAME, response_model=Pet, messages=PET_MESSAGES,
                                       max_tokens=64, temperature=0, max_retries=0)
    err = info.value
    while err is not None and not isinstance(err, openai.BadRequestError):
        err = err.__cause__ or err.__context__
    assert isinstance(err, openai.BadRequestError), repr(info.value)
    assert err.status_code == 400
    assert err.code == "unsupported_value" and err.param == "tool_choice"
    assert "tool-call syntax" in err.message


# --- anthropic SDK: parse, count_tokens, models ---------------------------------------------

class Color(pydantic.BaseModel):
    name: str
    hex_code: str


COLOR_MESSAGES = [{"role": "user",
                   "content": "Give the color red as JSON with its name and hex code."}]


def test_anthropic_sdk_parse_stream_count_tokens_and_models(smollm):
    c = anth(smollm.base_url)
    assert hasattr(c.messages, "parse"), f"anthropic {anthropic.__version__} has no parse"
    parsed = c.messages.parse(model=NAME, max_tokens=64, output_format=Color,
                              messages=COLOR_MESSAGES, extra_body={"temperature": 0})
    assert isinstance(parsed.parsed_output, Color)
    assert parsed.stop_reason == "end_turn"
    assert Color.model_validate_json(text_of(parsed)) == parsed.parsed_output

    with c.messages.stream(model=NAME, max_tokens=64, output_format=Color,
                           messages=COLOR_MESSAGES, extra_body={"temperature": 0}) as stream:
        streamed = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert streamed == text_of(parsed)
    assert final.parsed_output == parsed.parsed_output

    # count_tokens counts the prompt the answer was charged for (the schema adds no tokens).
    count = c.messages.count_tokens(model=NAME, messages=COLOR_MESSAGES, output_format=Color)
    assert count.input_tokens == parsed.usage.input_tokens + parsed.usage.cache_read_input_tokens
    plain = c.messages.count_tokens(model=NAME, messages=COLOR_MESSAGES)
    assert plain.input_tokens == count.input_tokens

    models = list(c.models.list())
    assert [m.id for m in models] == [NAME]
    assert models[0].type == "model" and models[0].display_name
    assert c.models.retrieve(NAME).id == NAME
    with pytest.raises(anthropic.NotFoundError):
        c.models.retrieve("no-such-model")


# --- request ids -----------------------------------------------------------------------------

def rid(what):
    return f"e2e-{what}-{uuid.uuid4().hex[:12]}"


def test_sdk_request_ids_echo_the_sent_x_request_id(smollm):
    o = oai(smollm)
    sent = rid("chat")
    r = o.chat.completions.create(model=NAME, max_tokens=4, messages=[{"role": "user",
                                                                       "content": "hi"}],
                                  extra_headers={"X-Request-Id": sent})
    assert r._request_id == sent

    sent = rid("responses")
    r = o.responses.create(model=NAME, input="hi", max_output_tokens=4,
                           extra_headers={"X-Request-Id": sent})
    assert r._request_id == sent

    sent = rid("stream")
    stream = o.chat.completions.create(model=NAME, max_tokens=4, stream=True,
                                       messages=[{"role": "user", "content": "hi"}],
                                       extra_headers={"X-Request-Id": sent})
    assert stream.response.headers["x-request-id"] == sent
    assert [c for c in stream]

    sent = rid("error")
    with pytest.raises(openai.NotFoundError) as info:
        o.chat.completions.create(model="no-such-model", max_tokens=4,
                                  messages=[{"role": "user", "content": "hi"}],
                                  extra_headers={"X-Request-Id": sent})
    assert info.value.request_id == sent

    r = o.models.list()
    assert r._request_id and r._request_id.startswith("req-")  # none sent: the server's own

    a = anth(smollm.base_url)
    sent = rid("messages")
    m = a.messages.create(model=NAME, max_tokens=4, messages=[{"role": "user", "content": "hi"}],
                          extra_headers={"X-Request-Id": sent})
    assert m._request_id == sent
    raw = a.messages.with_raw_response.create(model=NAME, max_tokens=4,
                                              messages=[{"role": "user", "content": "hi"}],
                                              extra_headers={"X-Request-Id": sent})
    assert raw.headers["request-id"] == raw.headers["x-request-id"] == sent

    sent = rid("count")
    n = a.messages.count_tokens(model=NAME, messages=[{"role": "user", "content": "hi"}],
                                extra_headers={"X-Request-Id": sent})
    assert n._request_id == sent

    m = a.messages.create(model=NAME, max_tokens=4, messages=[{"role": "user", "content": "hi"}])
    assert m._request_id and m._request_id.startswith("req-")
