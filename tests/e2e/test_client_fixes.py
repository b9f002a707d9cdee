"""What real client libraries tripped over (issue: "Real clients work unchanged"), each checked
against a real `deepinfer serve` on SmolLM2 with the official openai and anthropic SDKs or raw
HTTP: Responses `include`, Anthropic structured outputs, text parts joined with a newline,
request ids, refusals of fields that ask for what is not done, continuous and forced stream
usage, the Anthropic model list, and API keys on serve."""

import json
import os
import pathlib
import signal
import subprocess
import time

import httpx
import pytest

from conftest import Server, binary, free_port, smollm_path, wait_healthy
from helpers import chunks, post_stream

openai = pytest.importorskip("openai")
anthropic = pytest.importorskip("anthropic")

NAME = "SmolLM2-135M-Instruct"
KEYS = ("sk-test-first", "sk-test-second")


def oai(server, key="unused"):
    return openai.OpenAI(base_url=server.base_url + "/v1", api_key=key, max_retries=0, timeout=60)


def anth(server, key="unused"):
    return anthropic.Anthropic(base_url=server.base_url, api_key=key, max_retries=0, timeout=60)


# --- Responses include -----------------------------------------------------------------------

def test_responses_include_encrypted_reasoning_is_answered_without_it(smollm):
    """LangChain's store=False mode and the LiteLLM proxy's Anthropic bridge always send it."""
    r = oai(smollm).responses.create(model=NAME, input="Say hi.", max_output_tokens=4,
                                     store=False, include=["reasoning.encrypted_content"],
                                     extra_body={"temperature": 0})
    assert r.status == "incomplete" or r.status == "completed"
    assert r.output_text is not None
    for item in r.output:
        assert getattr(item, "encrypted_content", None) is None
    bad = httpx.post(smollm.base_url + "/v1/responses", timeout=30,
                     json={"input": "x", "include": ["reasoning.encrypted_content",
                                                     "file_search_call.results"]})
    assert bad.status_code == 400
    err = bad.json()["error"]
    assert err["param"] == "include[1]" and err["code"] == "unsupported_value"
    assert "file_search_call.results" in err["message"]


# --- Anthropic structured outputs ------------------------------------------------------------

SCHEMA = {"type": "object", "properties": {"color": {"type": "string", "enum": ["red", "blue"]},
                                           "count": {"type": "integer"}},
          "required": ["color", "count"], "additionalProperties": False}


@pytest.mark.parametrize("field", ["output_config", "output_format"])
def test_anthropic_output_format_constrains_the_answer(smollm, field):
    fmt = {"type": "json_schema", "schema": SCHEMA}
    body = {"output_config": {"format": fmt}} if field == "output_config" else {"output_format": fmt}
    msg = anth(smollm).messages.create(
        model=NAME, max_tokens=64, messages=[{"role": "user", "content": "Pick a color."}],
        extra_body={"temperature": 0, **body})
    value = json.loads(msg.content[0].text)
    assert value["color"] in ("red", "blue") and isinstance(value["count"], int)
    # Streamed, the text deltas join to the same JSON.
    with anth(smollm).messages.stream(
            model=NAME, max_tokens=64, messages=[{"role": "user", "content": "Pick a color."}],
            extra_body={"temperature": 0, **body}) as stream:
        text = "".join(stream.text_stream)
    assert json.loads(text) == value


def test_anthropic_sdk_messages_parse_returns_the_model_object(smollm):
    pydantic = pytest.importorskip("pydantic")
    if not hasattr(anth(smollm).messages, "parse"):
        pytest.skip("this anthropic SDK has no messages.parse")

    class Pick(pydantic.BaseModel):
        color: str
        count: int

    parsed = anth(smollm).messages.parse(
        model=NAME, max_tokens=64, messages=[{"role": "user", "content": "Pick a color."}],
        output_format=Pick, extra_body={"temperature": 0})
    assert isinstance(parsed.parsed_output, Pick)


def test_malformed_anthropic_output_format_is_invalid_constraint(smollm):
    r = httpx.post(smollm.base_url + "/v1/messages", timeout=30,
                   json={"model": NAME, "max_tokens": 8, "messages": [{"role": "user",
                                                                       "content": "x"}],
                         "output_format": {"type": "json_schema", "schema": "not a schema"}})
    assert r.status_code == 400
    assert r.json()["type"] == "error"
    assert r.json()["error"]["type"] == "invalid_request_error"
    assert "schema" in r.json()["error"]["message"]


# --- Text parts are joined -------------------------------------------------------------------

def test_text_parts_are_joined_with_a_newline_in_prompt_tokenize_and_count(smollm):
    parts = [{"type": "text", "text": "You are an expert"}, {"type": "text", "text": "Answer briefly."}]
    joined = "You are an expert\nAnswer briefly."

    def tokenize(content):
        r = httpx.post(smollm.base_url + "/tokenize", timeout=30,
                       json={"messages": [{"role": "user", "content": content}]})
        assert r.status_code == 200, r.text
        return r.json()["tokens"]

    assert tokenize(parts) == tokenize(joined)
    usage = oai(smollm).chat.completions.create(
        model=NAME, max_tokens=1, messages=[{"role": "user", "content": parts}]).usage
    assert usage.prompt_tokens == len(tokenize(joined))
    count = anth(smollm).messages.count_tokens(
        model=NAME, system=[{"type": "text", "text": "A"}, {"type": "text", "text": "B"}],
        messages=[{"role": "user", "content": [{"type": "text", "text": "You are an expert"},
                                               {"type": "text", "text": "Answer briefly."}]}])
    same = anth(smollm).messages.count_tokens(
        model=NAME, system="A\nB", messages=[{"role": "user", "content": joined}])
    assert count.input_tokens == same.input_tokens


# --- Request ids -----------------------------------------------------------------------------

def test_every_answer_carries_a_request_id_and_the_sdks_read_it(smollm):
    mine = httpx.get(smollm.base_url + "/v1/models", headers={"x-request-id": "trace-7"},
                     timeout=10)
    assert mine.headers["x-request-id"] == "trace-7"
    made = httpx.get(smollm.base_url + "/health", timeout=10).headers["x-request-id"]
    other = httpx.get(smollm.base_url + "/health", timeout=10).headers["x-request-id"]
    assert made.startswith("req-") and made != other
    # An id that could split a header or a log line is replaced.
    odd = httpx.get(smollm.base_url + "/health", headers={"x-request-id": "a b"}, timeout=10)
    assert odd.headers["x-request-id"].startswith("req-")
    assert httpx.post(smollm.base_url + "/v1/chat/completions", content=b"{",
                      timeout=10).headers["x-request-id"].startswith("req-")
    completion = oai(smollm).chat.completions.create(
        model=NAME, max_tokens=2, messages=[{"role": "user", "content": "Hi"}],
        extra_headers={"X-Request-Id": "sdk-trace-1"})
    assert completion._request_id == "sdk-trace-1"
    message = anth(smollm).messages.create(model=NAME, max_tokens=2,
                                           messages=[{"role": "user", "content": "Hi"}])
    assert message._request_id and message._request_id.startswith("req-")
    # The log line names it.
    deadline = time.monotonic() + 5
    while "x_request_id=sdk-trace-1" not in smollm.logs() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert "x_request_id=sdk-trace-1" in smollm.logs()


# --- Nothing silently ignored ----------------------------------------------------------------

@pytest.mark.parametrize("extra,param,code", [
    ({"suffix": " the end"}, "suffix", "unsupported_value"),
    ({"best_of": 3, "n": 1}, "best_of", "unsupported_value"),
    ({"best_of": 1, "n": 2}, "best_of", "invalid_value"),
])
def test_completion_fields_not_done_are_refused_by_name(smollm, extra, param, code):
    r = httpx.post(smollm.base_url + "/v1/completions", timeout=30,
                   json={"model": NAME, "prompt": "Once", "max_tokens": 2, **extra})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param and r.json()["error"]["code"] == code


def test_continuous_usage_stats_put_the_usage_so_far_in_every_chunk(smollm):
    events = chunks(post_stream(smollm.base_url, "/v1/chat/completions", {
        "model": NAME, "max_tokens": 6, "temperature": 0, "stream": True, "ignore_eos": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        "messages": [{"role": "user", "content": "Count to ten."}]}))
    with_choices = [e for e in events if e["choices"]]
    assert all(e["usage"] is not None for e in with_choices)
    counts = [e["usage"]["completion_tokens"] for e in with_choices]
    assert counts == sorted(counts) and counts[-1] >= 1
    final = events[-1]
    assert final["choices"] == [] and final["usage"]["completion_tokens"] == 6
    assert final["usage"]["completion_tokens_details"] == {"reasoning_tokens": 0}


def test_anthropic_model_list_answers_in_anthropic_shape(smollm):
    models = anth(smollm).models.list()
    assert [m.id for m in models.data] == [NAME]
    card = models.data[0]
    assert card.type == "model" and card.display_name == NAME and card.created_at.year >= 2026
    assert anth(smollm).models.retrieve(NAME).id == NAME
    with pytest.raises(anthropic.NotFoundError):
        anth(smollm).models.retrieve("nope")
    # Without the header: OpenAI's list.
    assert oai(smollm).models.list().data[0].object == "model"


# --- API keys and forced usage ----------------------------------------------------------------

@pytest.fixture(scope="module")
def keyed(tmp_path_factory):
    path = smollm_path()
    if not path.exists():
        pytest.skip(f"SmolLM2 not found at {path}")
    key_file = tmp_path_factory.mktemp("keys") / "keys.txt"
    key_file.write_text(f"# operators\n{KEYS[1]}\n\n")
    s = Server(path, NAME, ["--max-model-len", "2048", "--api-key", KEYS[0], "--api-key-file",
                            str(key_file), "--enable-force-include-usage"])
    yield s
    assert s.alive(), s.logs()
    s.stop()


def test_api_keys_guard_every_route_but_health(keyed):
    base = keyed.base_url
    assert httpx.get(base + "/health", timeout=10).status_code == 200
    for path, anthropic_shape in (("/v1/models", False), ("/metrics", False),
                                  ("/v1/messages", True), ("/nowhere", False)):
        r = httpx.get(base + path, timeout=10)
        assert r.status_code == 401, (path, r.text)
        if anthropic_shape:
            assert r.json()["error"]["type"] == "authentication_error"
        else:
            assert r.json()["error"]["code"] == "missing_api_key"
    wrong = httpx.get(base + "/v1/models", headers={"Authorization": "Bearer sk-nope"}, timeout=10)
    assert wrong.status_code == 401 and wrong.json()["error"]["code"] == "invalid_api_key"
    for key in KEYS:
        assert oai(keyed, key).models.list().data[0].id == NAME
        msg = anth(keyed, key).messages.create(model=NAME, max_tokens=2,
                                               messages=[{"role": "user", "content": "Hi"}])
        assert msg.usage.output_tokens >= 1
    with pytest.raises(openai.AuthenticationError):
        oai(keyed, "sk-nope").models.list()
    with pytest.raises(anthropic.AuthenticationError):
        anth(keyed, "sk-nope").messages.create(model=NAME, max_tokens=2,
                                               messages=[{"role": "user", "content": "Hi"}])
    logs = keyed.logs()
    assert all(k not in logs for k in KEYS) and "sk-nope" not in logs


def test_forced_usage_ends_every_stream_with_usage(keyed):
    stream = oai(keyed, KEYS[0]).chat.completions.create(
        model=NAME, max_tokens=3, stream=True, messages=[{"role": "user", "content": "Hi"}])
    events = list(stream)
    assert events[-1].usage is not None and events[-1].usage.completion_tokens == 3


def start_serve(args, env=None):
    port = free_port()
    proc = subprocess.Popen([str(binary()), "serve", "--model", str(smollm_path()), "--port",
                             str(port), *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            env=env)
    return proc, port


def test_an_open_address_without_a_key_refuses_to_start_unless_allowed():
    if not smollm_path().exists():
        pytest.skip("SmolLM2 not found")
    proc, _ = start_serve(["--host", "0.0.0.0"])
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 2, out
    assert b"--allow-unauthenticated" in out and b"bad_option" in out
    # A key from the environment is enough, and is never printed.
    env = dict(os.environ, DEEPINFER_API_KEY="sk-env-secret")
    for args, environ in ((["--host", "0.0.0.0", "--allow-unauthenticated"], None),
                          (["--host", "0.0.0.0"], env)):
        proc, port = start_serve(args, environ)
        try:
            wait_healthy(f"http://127.0.0.1:{port}", proc, 60, "deepinfer serve",
                         lambda: "(its log is its stdout, read when it stops)")
            models = httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=10,
                               headers={"x-api-key": "sk-env-secret"})
            assert models.status_code == 200
        finally:
            proc.send_signal(signal.SIGINT)
            out, _ = proc.communicate(timeout=30)
        assert b"sk-env-secret" not in out


# --- Prompt scoring ---------------------------------------------------------------------------

def test_echo_with_logprobs_scores_the_prompt_as_llama_cpp_does(smollm):
    """lm-evaluation-harness's loglikelihood request: echo, logprobs, max_tokens 0. The prompt is
    a golden prompt followed by llama.cpp's greedy continuation (tests/golden/llama_cpp), so each
    continuation token must be the top entry wherever llama.cpp was decisive."""
    golden = json.loads((pathlib.Path(__file__).resolve().parents[1] / "golden" / "llama_cpp" /
                         "smollm2_greedy.json").read_text())
    case = golden["cases"][0]
    prompt_ids, greedy = case["prompt_ids"], case["greedy_ids"][:16]
    ids = prompt_ids + greedy
    r = httpx.post(smollm.base_url + "/v1/completions", timeout=60,
                   json={"model": NAME, "prompt": ids, "echo": True, "logprobs": 2,
                         "max_tokens": 0})
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    assert choice["finish_reason"] == "length" and r.json()["usage"]["completion_tokens"] == 0
    lp = choice["logprobs"]
    assert len(lp["tokens"]) == len(ids)
    assert lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None
    assert all(isinstance(v, float) and v <= 0 for v in lp["token_logprobs"][1:])
    assert lp["text_offset"] == sorted(lp["text_offset"])
    tie = case["f16_kv_max_abs_diff"]
    for i, token in enumerate(greedy):
        at = len(prompt_ids) + i
        top = case["top_logits"][i]
        if top[0][1] - top[1][1] > tie:
            best = max(lp["top_logprobs"][at].items(), key=lambda kv: kv[1])
            assert best[1] == lp["token_logprobs"][at], (i, best, lp["tokens"][at])
    # With tokens generated after it, streamed: the echo chunk carries the prompt's logprobs.
    events = chunks(post_stream(smollm.base_url, "/v1/completions", {
        "model": NAME, "prompt": ids, "echo": True, "logprobs": 1, "max_tokens": 3,
        "temperature": 0, "ignore_eos": True, "stream": True}))
    first = events[0]["choices"][0]
    assert first["logprobs"]["token_logprobs"][0] is None
    assert len(first["logprobs"]["tokens"]) == len(ids)
    generated = [e for e in events[1:] if e["choices"] and e["choices"][0]["logprobs"]]
    assert sum(len(e["choices"][0]["logprobs"]["tokens"]) for e in generated) == 3
    # Without logprobs, max_tokens 0 asks for nothing.
    none = httpx.post(smollm.base_url + "/v1/completions", timeout=30,
                      json={"model": NAME, "prompt": "x", "echo": True, "max_tokens": 0})
    assert none.status_code == 400 and none.json()["error"]["param"] == "max_tokens"
