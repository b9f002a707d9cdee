"""Tiny DeepSeek-V4.1 checkpoints from ../shared/goldens/deepseek_v41 (weights written at test
time from their recipes) run by `deepinfer generate` and `deepinfer serve`: transformers' greedy
tokens through the engine's scheduler and cache (the Engram cases with the token classes built
from the toy tokenizer beside them), an Engram checkpoint without its tokenizer refused in one
line, and the Engram checkpoint served with the deepseek-v4.1 encoder (picked from its
model_type) driven by the openai and anthropic SDKs: streaming, thinking, tools (the prompt the
encoder rendered is read back through /tokenize and /detokenize), images refused as
unsupported_content, and a batch of 8 concurrent greedy requests equal to each alone. Skips when
../shared is absent (a user's clone)."""

import concurrent.futures
import json
import shutil
import subprocess
import threading
import time

import anthropic
import httpx
import openai
import pytest

from conftest import REPO, Server, binary, eventually
from test_deepseek import synthetic_checkpoint

GOLDENS = REPO.parent / "shared" / "goldens" / "deepseek_v41"

pytestmark = pytest.mark.skipif(not GOLDENS.is_dir(),
                                reason="../shared/goldens/deepseek_v41 is absent (a user's "
                                       "clone has none)")


def make(case, tmp_path_factory, with_tokenizer=True):
    d = tmp_path_factory.mktemp(case)
    files = ["config.json", "weights.json"]
    if with_tokenizer and (GOLDENS / case / "tokenizer.json").exists():
        files.append("tokenizer.json")
    for f in files:
        shutil.copy(GOLDENS / case / f, d / f)
    synthetic_checkpoint(d, d)
    return d


@pytest.fixture(scope="module")
def noengram(tmp_path_factory):
    return make("v41_noengram_noqat", tmp_path_factory)


def generate(*args):
    return subprocess.run([str(binary()), "generate", *args], capture_output=True, text=True,
                          timeout=120)


def greedy(case):
    g = json.loads((GOLDENS / case / "greedy.json").read_text())
    return g["prompt"], g["tokens"]


@pytest.mark.parametrize("case,numerics", [("v41_noengram_noqat", None),
                                           ("v41_noengram_noqat", "fast"),
                                           ("v41_full", None), ("v41_full_fp8", None)])
def test_greedy_tokens_equal_transformers(case, numerics, tmp_path_factory):
    """Prefill of the 64-token prompt, then 16 decode steps: transformers' greedy tokens exactly.
    The no-Engram case's dimensions are not multiples of the QAT blocks, so the reference skips
    every fake-quant there and the default numerics (deepseek-qat) and fast agree; the full cases
    run Engram (classes from their toy tokenizer.json) and every fake-quant."""
    d = make(case, tmp_path_factory)
    prompt, tokens = greedy(case)
    extra = ["--numerics", numerics] if numerics else []
    r = generate("--model", str(d), "--prompt-ids", ",".join(map(str, prompt)),
                 "--max-tokens", str(len(tokens)), "--ignore-eos", "--threads", "2",
                 "--print-ids", *extra)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == ",".join(map(str, tokens)), r.stderr


def test_engram_checkpoint_without_its_tokenizer_is_refused_in_one_line(tmp_path_factory):
    """Engram hashes token classes derived from the tokenizer: without tokenizer.json, a clear
    unsupported_config (exit 2), never a crash or wrong output."""
    d = make("v41_full", tmp_path_factory, with_tokenizer=False)
    prompt, _ = greedy("v41_full")
    r = generate("--model", str(d), "--prompt-ids", ",".join(map(str, prompt[:8])),
                 "--max-tokens", "2", "--threads", "2")
    assert r.returncode == 2, r.stdout + r.stderr
    errors = [l for l in r.stderr.strip().splitlines() if "no tokenizer" not in l]
    assert len(errors) == 1 and "unsupported_config" in errors[0], r.stderr
    assert "engram" in errors[0].lower(), r.stderr


NAME = "tiny-v41"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """v41_full served once for the module. The toy tokenizer is byte-level (320 ids), so the
    V4.1 tool prompt is about 1,500 tokens: the window is raised from the recipe's 512 to 4,096
    (rope_scaling gives its YaRN factor, so the numerics are unchanged)."""
    d = make("v41_full", tmp_path_factory)
    config = json.loads((d / "config.json").read_text())
    config["text_config"]["max_position_embeddings"] = 4096
    (d / "config.json").write_text(json.dumps(config))
    s = Server(d, NAME, ["--threads", "2", "--max-num-seqs", "8"])
    yield s
    assert s.alive(), "the server died during the tests:\n" + s.logs()
    s.stop()


def test_served_with_engram_through_the_openai_sdk(server):
    """Streaming equals non-streaming, and a repeated prompt is served from the prefix cache
    with the same text (the Engram look-back lives in the cached slots)."""
    c = openai.OpenAI(base_url=server.base_url + "/v1", api_key="unused", max_retries=0)
    messages = [{"role": "user", "content": "Count to five, please."}]
    kw = dict(model=NAME, messages=messages, max_tokens=16, temperature=0)
    full = c.chat.completions.create(**kw)
    assert full.usage.completion_tokens == 16
    text = "".join(ch.choices[0].delta.content or ""
                   for ch in c.chat.completions.create(**kw, stream=True) if ch.choices)
    assert text == full.choices[0].message.content
    again = c.chat.completions.create(**kw)
    assert again.choices[0].message.content == full.choices[0].message.content
    assert again.usage.prompt_tokens_details.cached_tokens > 0


def oai(s):
    return openai.OpenAI(base_url=s.base_url + "/v1", api_key="unused", max_retries=0, timeout=120)


def anth(s):
    return anthropic.Anthropic(base_url=s.base_url, api_key="unused", max_retries=0, timeout=120)


def rendered(s, **body):
    """The prompt the server renders for a chat body (messages, tools, chat_template_kwargs): its
    token count and text, read back through POST /tokenize (the tokens a chat request with this
    body is charged for) and POST /detokenize (special tokens, here only BOS and EOS, left out;
    the toy tokenizer spells every DeepSeek marker in bytes, so they all stay)."""
    t = httpx.post(s.base_url + "/tokenize", json={"model": NAME, **body}, timeout=60)
    assert t.status_code == 200, t.text
    tokens = t.json()["tokens"]
    d = httpx.post(s.base_url + "/detokenize", json={"model": NAME, "tokens": tokens}, timeout=60)
    assert d.status_code == 200, d.text
    return len(tokens), d.json()["prompt"]


def prompt_tokens(msg):
    """An Anthropic answer's whole prompt: input_tokens leaves out what the cache read."""
    u = msg.usage
    return u.input_tokens + (u.cache_read_input_tokens or 0) + (u.cache_creation_input_tokens or 0)


SYSTEM = "You are terse."
QUESTION = "Weather in Paris?"
THINKING = {"type": "enabled", "budget_tokens": 1024}
# V4.1 with thinking on: the effort prompt (default "high" = 75) opens the first system turn and
# the assistant turn opens <think>; without thinking it opens </think>.
EFFORT = "<｜System｜>Reasoning Effort: 75 (range 1-100, the higher the value, the more"


def test_anthropic_messages_streaming_and_not(server):
    a = anth(server)
    kw = dict(model=NAME, max_tokens=16, system=SYSTEM, extra_body={"temperature": 0},
              messages=[{"role": "user", "content": "Count to five, please."}])
    msg = a.messages.create(**kw)
    assert msg.type == "message" and msg.role == "assistant" and msg.model == NAME
    assert msg.stop_reason == "max_tokens" and msg.usage.output_tokens == 16
    assert [b.type for b in msg.content] == ["text"] and msg.content[0].text
    with a.messages.stream(**kw) as stream:
        deltas = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert deltas == msg.content[0].text
    assert [b.model_dump() for b in final.content] == [b.model_dump() for b in msg.content]
    assert final.usage.output_tokens == 16 and final.stop_reason == "max_tokens"
    # The same prompt as the OpenAI chat route renders: no thinking, so </think> opens the turn.
    n, text = rendered(server, messages=[{"role": "system", "content": SYSTEM},
                                         {"role": "user", "content": "Count to five, please."}])
    assert prompt_tokens(msg) == n
    assert text == "<｜System｜>You are terse.<｜User｜>Count to five, please.<｜Assistant｜></think>"


def test_anthropic_thinking_renders_the_v41_thinking_prompt(server):
    a = anth(server)
    messages = [{"role": "user", "content": QUESTION}]
    kw = dict(model=NAME, max_tokens=16, system=SYSTEM, thinking=THINKING, messages=messages,
              extra_body={"temperature": 0})
    msg = a.messages.create(**kw)
    # The prompt opened <think> and random weights never close it: all of the answer is one
    # thinking block.
    assert msg.stop_reason == "max_tokens" and msg.usage.output_tokens == 16
    assert [b.type for b in msg.content] == ["thinking"] and msg.content[0].thinking
    with a.messages.stream(**kw) as stream:
        final = stream.get_final_message()
    assert [b.model_dump() for b in final.content] == [b.model_dump() for b in msg.content]
    # What the encoder rendered: the OpenAI spelling of the same request, read back.
    chat = [{"role": "system", "content": SYSTEM}, *messages]
    n, text = rendered(server, messages=chat, chat_template_kwargs={"thinking": True})
    assert prompt_tokens(msg) == n
    assert a.messages.count_tokens(model=NAME, system=SYSTEM, thinking=THINKING,
                                   messages=messages).input_tokens == n
    assert text.startswith(EFFORT) and "You are terse.<｜User｜>Weather in Paris?" in text
    assert text.endswith("<｜Assistant｜><think>")
    n_off, text_off = rendered(server, messages=chat)
    assert text_off.endswith("<｜Assistant｜></think>") and "Reasoning Effort" not in text_off
    off = a.messages.create(**{**kw, "thinking": {"type": "disabled"}})
    assert prompt_tokens(off) == n_off < n


def test_openai_thinking_renders_the_v41_thinking_prompt(server):
    kw = dict(model=NAME, max_tokens=16, temperature=0,
              messages=[{"role": "user", "content": QUESTION}],
              extra_body={"chat_template_kwargs": {"thinking": True}})
    r = oai(server).chat.completions.create(**kw)
    msg = r.choices[0].message.model_dump()
    assert msg["reasoning_content"] and msg["content"] == ""
    n, text = rendered(server, messages=kw["messages"], chat_template_kwargs={"thinking": True})
    assert r.usage.prompt_tokens == n
    assert text.startswith(EFFORT)
    assert text.endswith("<｜User｜>Weather in Paris?<｜Assistant｜><think>")


WEATHER = {"name": "get_weather", "description": "Weather of a city",
           "input_schema": {"type": "object", "properties": {"city": {"type": "string"}},
                            "required": ["city"]}}
OPENAI_TOOLS = [{"type": "function",
                 "function": {"name": WEATHER["name"], "description": WEATHER["description"],
                              "parameters": WEATHER["input_schema"]}}]
# A whole tool round: the call and its result, then the model answers.
OPENAI_ROUND = [{"role": "system", "content": SYSTEM},
                {"role": "user", "content": QUESTION},
                {"role": "assistant", "content": None,
                 "tool_calls": [{"id": "call_1", "type": "function",
                                 "function": {"name": "get_weather",
                                              "arguments": json.dumps({"city": "Paris"})}}]},
                {"role": "tool", "tool_call_id": "call_1", "content": "22 C, sunny"}]
ANTHROPIC_ROUND = [{"role": "user", "content": QUESTION},
                   {"role": "assistant",
                    "content": [{"type": "tool_use", "id": "call_1", "name": "get_weather",
                                 "input": {"city": "Paris"}}]},
                   {"role": "user",
                    "content": [{"type": "tool_result", "tool_use_id": "call_1",
                                 "content": "22 C, sunny"}]}]


def check_v41_tool_prompt(text):
    """The tool round as the V4.1 encoder renders it: the "## Tools" block with the schema as
    one Python json.dumps line in the first system turn, the call as a V4.1 DSML block (tags
    "<｜DSML｜ calls>", " invoke", " parameter"), the result as a <tool_result> block of a user
    turn, and the assistant turn opened again."""
    schema = json.dumps({"name": WEATHER["name"], "description": WEATHER["description"],
                         "parameters": WEATHER["input_schema"]}, ensure_ascii=False)
    assert text.startswith("<｜System｜>You are terse.\n\n## Tools\n\n"), text[:200]
    assert "\n### Available Tool Schemas\n\n" + schema + "\n\n" in text
    assert '<｜DSML｜ calls>\n<｜DSML｜ invoke name="$TOOL_NAME">' in text  # the instructions
    assert ("<｜User｜>Weather in Paris?<｜Assistant｜></think>\n\n<｜DSML｜ calls>\n"
            '<｜DSML｜ invoke name="get_weather">\n'
            '<｜DSML｜ parameter name="city" string="true">Paris</｜DSML｜ parameter>\n'
            "</｜DSML｜ invoke>\n</｜DSML｜ calls>") in text
    assert text.endswith("<｜User｜><tool_result>22 C, sunny</tool_result><｜Assistant｜></think>")


def test_openai_tools_rendered_by_the_v41_encoder(server):
    c = oai(server)
    r = c.chat.completions.create(model=NAME, messages=OPENAI_ROUND, tools=OPENAI_TOOLS,
                                  max_tokens=8, temperature=0)
    assert r.choices[0].finish_reason in ("length", "stop", "tool_calls")
    assert r.usage.completion_tokens <= 8
    n, text = rendered(server, messages=OPENAI_ROUND, tools=OPENAI_TOOLS)
    assert r.usage.prompt_tokens == n
    check_v41_tool_prompt(text)
    # Streaming gives the same answer.
    chunks = list(c.chat.completions.create(model=NAME, messages=OPENAI_ROUND, tools=OPENAI_TOOLS,
                                            max_tokens=8, temperature=0, stream=True))
    assert "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices) == \
        (r.choices[0].message.content or "")


def test_anthropic_tools_rendered_by_the_v41_encoder(server):
    a = anth(server)
    kw = dict(model=NAME, max_tokens=8, system=SYSTEM, tools=[WEATHER], messages=ANTHROPIC_ROUND,
              extra_body={"temperature": 0})
    msg = a.messages.create(**kw)
    assert msg.stop_reason in ("max_tokens", "end_turn", "tool_use")
    with a.messages.stream(**kw) as stream:
        final = stream.get_final_message()
    assert [b.model_dump() for b in final.content] == [b.model_dump() for b in msg.content]
    # The Anthropic round renders exactly as its OpenAI spelling, whose prompt is read back.
    n, text = rendered(server, messages=OPENAI_ROUND, tools=OPENAI_TOOLS)
    assert prompt_tokens(msg) == n
    assert a.messages.count_tokens(model=NAME, system=SYSTEM, tools=[WEATHER],
                                   messages=ANTHROPIC_ROUND).input_tokens == n
    check_v41_tool_prompt(text)


PNG = ("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5"
       "ErkJggg==")  # one pixel


def images_refused(body):
    return "has no vision tower" in body["message"]


@pytest.mark.parametrize("stream", [False, True])
def test_openai_image_part_is_unsupported_content(server, stream):
    messages = [{"role": "user", "content": [
        {"type": "text", "text": "What is in this picture?"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64," + PNG}}]}]
    with pytest.raises(openai.BadRequestError) as e:
        r = oai(server).chat.completions.create(model=NAME, messages=messages, max_tokens=4,
                                                stream=stream)
        list(r) if stream else None
    assert e.value.status_code == 400
    body = e.value.body
    assert body["code"] == "unsupported_content" and body["type"] == "invalid_request_error"
    assert body["param"] == "messages[0].content[1]" and images_refused(body), body
    # Refused before any stream byte: one JSON error answer, not an event stream.
    raw = httpx.post(server.base_url + "/v1/chat/completions", timeout=60,
                     json={"model": NAME, "messages": messages, "max_tokens": 4,
                           "stream": stream})
    assert raw.status_code == 400
    assert raw.headers["content-type"].startswith("application/json")
    assert raw.json()["error"]["code"] == "unsupported_content"


def test_responses_input_image_is_unsupported_content(server):
    with pytest.raises(openai.BadRequestError) as e:
        oai(server).responses.create(model=NAME, max_output_tokens=4, input=[
            {"role": "user", "content": [{"type": "input_text", "text": "What is it?"},
                                         {"type": "input_image",
                                          "image_url": "data:image/png;base64," + PNG}]}])
    assert e.value.body["code"] == "unsupported_content" and images_refused(e.value.body)


@pytest.mark.parametrize("stream", [False, True])
def test_anthropic_image_block_is_unsupported_content(server, stream):
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                         "data": PNG}}
    messages = [{"role": "user", "content": [image,
                                             {"type": "text", "text": "What is in this picture?"}]}]
    with pytest.raises(anthropic.BadRequestError) as e:
        r = anth(server).messages.create(model=NAME, max_tokens=4, messages=messages,
                                         stream=stream)
        list(r) if stream else None
    assert e.value.status_code == 400
    body = e.value.body
    assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
    assert images_refused(body["error"]), body
    raw = httpx.post(server.base_url + "/v1/messages", timeout=60,
                     json={"model": NAME, "max_tokens": 4, "messages": messages,
                           "stream": stream})
    assert raw.status_code == 400
    assert raw.headers["content-type"].startswith("application/json")
    assert raw.json()["error"]["type"] == "invalid_request_error"
    # Anthropic's error body has no code: the request log names it (written after the answer).
    def logged():
        return [l for l in server.logs().splitlines()
                if "POST /v1/messages 400" in l and "error=unsupported_content" in l]
    deadline = time.monotonic() + 5
    while not logged() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert logged(), server.logs()
    # An image inside a tool_result is refused the same way.
    with pytest.raises(anthropic.BadRequestError) as e:
        anth(server).messages.create(model=NAME, max_tokens=4, tools=[WEATHER], messages=[
            *ANTHROPIC_ROUND[:2],
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "call_1",
                                          "content": [image]}]}])
    assert images_refused(e.value.body["error"])


BATCH_PROMPTS = [
    "Hi.",
    "Count to five, please.",
    "Name three colors of the rainbow and one that is not in it.",
    "What is the capital of France?",
    "Write a haiku about a cat sleeping in the sun on a warm afternoon in late summer.",
    "2+2=?",
    "Tell me a short story about a robot who learns to paint, in two sentences at most.",
    "Why is the sky blue? Answer in one line.",
]


def test_batch_of_eight_concurrent_greedy_requests_equals_each_alone(server):
    """Eight different prompts sent at once (run together by the scheduler: --max-num-seqs 8)
    give exactly the greedy answers each gives alone afterwards (then also from the prefix
    cache)."""
    check_batch_equals_alone(server)


def check_batch_equals_alone(server):
    spans = []

    def ask(prompt, barrier=None):
        c = oai(server)
        if barrier is not None:
            barrier.wait(timeout=60)
        start = time.monotonic()
        r = c.chat.completions.create(model=NAME, max_tokens=16, temperature=0,
                                      messages=[{"role": "user", "content": prompt}],
                                      logprobs=True, extra_body={"ignore_eos": True})
        spans.append((start, time.monotonic()))
        ch = r.choices[0]
        return (ch.message.content, [t.token for t in ch.logprobs.content],
                r.usage.completion_tokens, ch.finish_reason)

    barrier = threading.Barrier(len(BATCH_PROMPTS))
    with concurrent.futures.ThreadPoolExecutor(len(BATCH_PROMPTS)) as pool:
        together = list(pool.map(lambda p: ask(p, barrier), BATCH_PROMPTS))
    # All eight were in flight at one moment.
    assert max(s for s, _ in spans) < min(e for _, e in spans), spans
    alone = [ask(p) for p in BATCH_PROMPTS]
    for prompt, t, a in zip(BATCH_PROMPTS, together, alone):
        assert t[2] == 16 and t[3] == "length", (prompt, t)
        assert t == a, prompt
    assert len({t[0] for t in together}) > 1  # different prompts, different answers


def test_bf16_activations_keep_a_batch_equal_to_each_alone(tmp_path_factory):
    """The release-format checkpoint (FP8 attention, FP4 experts) served with
    DEEPINFER_BF16_ACTIVATIONS=1: where the CPU has AMX the start-up line says its tiles multiply
    those weights, where it has AVX512-BF16 but no AMX (Zen 4) that VDPBF16PS does, and eight
    concurrent greedy requests still equal each alone, log-probabilities included (either kernel
    gives a token the same bits whatever the batch and the prefill chunks)."""
    d = make("v41_full_fp8", tmp_path_factory)
    config = json.loads((d / "config.json").read_text())
    config["text_config"]["max_position_embeddings"] = 4096
    (d / "config.json").write_text(json.dumps(config))
    s = Server(d, NAME, ["--threads", "2", "--max-num-seqs", "8"],
               env={"DEEPINFER_BF16_ACTIVATIONS": "1"})
    try:
        flags = open("/proc/cpuinfo").read().split()
        amx = all(f in flags for f in ("amx_tile", "amx_bf16", "avx512_bf16"))
        bf16_dot = not amx and all(f in flags for f in ("avx512_bf16", "avx512_vnni", "avx512bw"))
        assert eventually(lambda: "matmul kernels:" in s.logs()), s.logs()
        line = next(ln for ln in s.logs().splitlines() if "matmul kernels:" in ln)
        assert ("AMX-BF16 tiles for F8_E4M3/FP4_E2M1" in line) == amx, line
        assert ("AVX512-BF16 dot products for F8_E4M3/FP4_E2M1" in line) == bf16_dot, line
        check_batch_equals_alone(s)
        assert s.alive(), s.logs()
    finally:
        s.stop()
