"""A tiny DeepSeek-V4 checkpoint (random weights written at test time from the recipe of
tests/golden/deepseek_v4/v4_flash_tiny, made by tests/reference/make_deepseek_v4_golden.py) run
by `deepinfer generate` against transformers' greedy tokens, and served by a real
`deepinfer serve` driven by the official openai and anthropic SDKs with the deepseek-v4 encoder,
which serve picks by itself from the checkpoint's model_type."""

import json
import subprocess

import openai
import pytest

from conftest import REPO, Server, binary, eventually
from test_deepseek import synthetic_checkpoint

GOLDEN = REPO / "tests" / "golden" / "deepseek_v4" / "v4_flash_tiny"
TOKENIZER = REPO / "tests" / "golden" / "deepseek_v3" / "v3_direct_q"  # the toy BPE, 320 ids
NAME = "tiny-deepseek-v4"


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    d = tmp_path_factory.mktemp("tiny_deepseek_v4")
    for f in ("config.json", "weights.json"):
        (d / f).write_bytes((GOLDEN / f).read_bytes())
    synthetic_checkpoint(d, d)
    return d


@pytest.fixture(scope="module")
def chat_checkpoint(checkpoint, tmp_path_factory):
    """The same weights with the toy tokenizer beside them (its vocabulary is the model's)."""
    d = tmp_path_factory.mktemp("tiny_deepseek_v4_chat")
    for f in checkpoint.iterdir():
        if f.name != "config.json":
            (d / f.name).symlink_to(f)
    # Byte-level toy tokens make the V4 tool prompt long: allow more than the recipe's 512.
    config = json.loads((checkpoint / "config.json").read_text())
    config["max_position_embeddings"] = 4096
    (d / "config.json").write_text(json.dumps(config))
    for f in ("tokenizer.json", "tokenizer_config.json"):
        (d / f).write_bytes((TOKENIZER / f).read_bytes())
    return d


@pytest.fixture(scope="module")
def server(chat_checkpoint):
    s = Server(chat_checkpoint, NAME, ["--threads", "2"])
    yield s
    s.stop()


def generate(*args):
    return subprocess.run([str(binary()), "generate", *args], capture_output=True, text=True,
                          timeout=120)


def test_greedy_tokens_equal_transformers(checkpoint):
    """Prefill of the 64-token prompt, then 16 decode steps through the engine: transformers'
    greedy tokens (decoded through its own cache) exactly."""
    golden = json.loads((GOLDEN / "golden.json").read_text())
    prompt = golden["prompts"][golden["greedy_prompt_index"]]
    r = generate("--model", str(checkpoint), "--prompt-ids", ",".join(map(str, prompt)),
                 "--max-tokens", str(len(golden["greedy_tokens"])), "--ignore-eos",
                 "--threads", "2")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == ",".join(map(str, golden["greedy_tokens"])), r.stderr


def client(s):
    return openai.OpenAI(base_url=s.base_url + "/v1", api_key="unused", max_retries=0)


MESSAGES = [{"role": "system", "content": "You are terse."},
            {"role": "user", "content": "Count to five, please."}]


def test_chat_streaming_equals_non_streaming(server):
    c = client(server)
    assert [m.id for m in c.models.list().data] == [NAME]
    full = c.chat.completions.create(model=NAME, messages=MESSAGES, max_tokens=24, temperature=0)
    assert full.usage.completion_tokens == 24
    text = ""
    for chunk in c.chat.completions.create(model=NAME, messages=MESSAGES, max_tokens=24,
                                           temperature=0, stream=True):
        if chunk.choices and chunk.choices[0].delta.content:
            text += chunk.choices[0].delta.content
    assert text == full.choices[0].message.content
    again = c.chat.completions.create(model=NAME, messages=MESSAGES, max_tokens=24, temperature=0)
    assert again.choices[0].message.content == full.choices[0].message.content
    assert again.usage.prompt_tokens_details.cached_tokens > 0  # the prefix cache served it


def test_thinking_mode_returns_reasoning_separately(server):
    c = client(server)
    kw = dict(model=NAME, messages=MESSAGES, max_tokens=16, temperature=0,
              extra_body={"chat_template_kwargs": {"thinking": True}})
    r = c.chat.completions.create(**kw)
    msg = r.choices[0].message.model_dump()
    # The V4 thinking prompt opens <think>; random weights never close it: all is reasoning.
    assert msg["reasoning_content"]
    assert msg["content"] == ""
    streamed = ""
    for chunk in c.chat.completions.create(**kw, stream=True):
        if chunk.choices:
            streamed += chunk.choices[0].delta.model_dump().get("reasoning_content") or ""
    assert streamed == msg["reasoning_content"]


def test_anthropic_messages_with_tools_rendered_by_the_v4_encoder(server):
    anthropic = pytest.importorskip("anthropic")
    a = anthropic.Anthropic(base_url=server.base_url, api_key="unused", max_retries=0, timeout=60)
    tools = [{"name": "get_weather", "description": "Weather of a city",
              "input_schema": {"type": "object", "properties": {"city": {"type": "string"}},
                               "required": ["city"]}}]
    kw = dict(model=NAME, max_tokens=12, system="You are terse.", tools=tools,
              messages=[{"role": "user", "content": "Weather in Paris?"}],
              extra_body={"temperature": 0})
    msg = a.messages.create(**kw)
    assert msg.usage.output_tokens == 12 and msg.stop_reason == "max_tokens"
    with a.messages.stream(**kw) as stream:
        final = stream.get_final_message()
    assert [b.model_dump() for b in final.content] == [b.model_dump() for b in msg.content]
    # The tool definitions reach the prompt: it is longer than without them.
    count = lambda **k: a.messages.count_tokens(**k).input_tokens  # noqa: E731
    base = {k: v for k, v in kw.items() if k not in ("max_tokens", "extra_body", "tools")}
    assert count(**base, tools=tools) > count(**base)


@pytest.fixture(scope="module")
def speculative(chat_checkpoint):
    s = Server(chat_checkpoint, NAME, ["--threads", "2", "--speculative-tokens", "2"])
    yield s
    s.stop()


def test_speculative_decoding_with_the_mtp_module_gives_the_same_greedy_text(server, speculative):
    for stream in (False, True):
        for max_tokens in (1, 9, 40):
            kw = dict(model=NAME, messages=MESSAGES, max_tokens=max_tokens, temperature=0)
            want = client(server).chat.completions.create(**kw).choices[0].message.content
            if stream:
                got = "".join(c.choices[0].delta.content or ""
                              for c in client(speculative).chat.completions.create(**kw, stream=True)
                              if c.choices)
            else:
                got = client(speculative).chat.completions.create(**kw).choices[0].message.content
            assert got == want, (stream, max_tokens)
    r = client(speculative).chat.completions.create(model=NAME, messages=MESSAGES, max_tokens=40,
                                                    temperature=0)
    assert r.model_dump()["usage"]["speculative"]["draft_tokens"] > 0


def test_numerics_switch(checkpoint):
    """--numerics deepseek-qat runs DeepSeek's fake-quantized cache numerics (greedy stays
    reproducible); an arithmetic the architecture lacks is one line and exit 2."""
    golden = json.loads((GOLDEN / "golden.json").read_text())
    prompt = ",".join(map(str, golden["prompts"][2]))
    args = ("--model", str(checkpoint), "--prompt-ids", prompt, "--max-tokens", "8",
            "--ignore-eos", "--threads", "2")
    a = generate(*args, "--numerics", "deepseek-qat")
    b = generate(*args, "--numerics", "deepseek-qat")
    assert a.returncode == 0, a.stderr
    assert a.stdout == b.stdout and len(a.stdout.strip().split(",")) == 8
    bad = generate(*args, "--numerics", "ggml")
    assert bad.returncode == 2, bad.stderr
    # (A note that this checkpoint has no tokenizer may precede the error line.)
    errors = [l for l in bad.stderr.strip().splitlines() if "no tokenizer" not in l]
    assert len(errors) == 1 and "unsupported_numerics" in errors[0], bad.stderr


def test_operator_tools_work_on_the_v4_folder(server, chat_checkpoint, tmp_path):
    """count-tokens counts what serve counts (the deepseek-v4 encoder picked the same way), and
    verify-model writes and checks a manifest of the folder, unchanged for V4."""
    body = {"model": NAME, "messages": MESSAGES, "max_tokens": 4}
    req = tmp_path / "req.json"
    req.write_text(json.dumps(body))
    r = subprocess.run([str(binary()), "count-tokens", "--model", str(chat_checkpoint),
                        "--request", str(req), "--json"], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    counted = json.loads(r.stdout)["input_tokens"]
    served = client(server).chat.completions.create(**body, temperature=0)
    assert counted == served.usage.prompt_tokens
    manifest = tmp_path / "manifest.json"
    w = subprocess.run([str(binary()), "verify-model", "--root", str(chat_checkpoint),
                        "--write-manifest", str(manifest), "--no-progress"],
                       capture_output=True, text=True, timeout=120)
    assert w.returncode == 0, w.stderr
    v = subprocess.run([str(binary()), "verify-model", "--root", str(chat_checkpoint),
                        "--manifest", str(manifest), "--full", "--no-progress"],
                       capture_output=True, text=True, timeout=120)
    assert v.returncode == 0, v.stdout + v.stderr


def test_a_million_token_context_with_the_compact_cache(server, chat_checkpoint):
    """V4's compact KV cache (window cache + entries only): `--max-model-len 1048576` starts,
    serve reports the per-token bytes of the layout (entries and index keys, 52 floats, plus the
    MTP module's 64-float window key), and a prompt well past the 128-position window (whose
    window blocks are released behind it) gives the default server's greedy text, with MTP
    drafts and repeated for a prefix-cache hit."""
    s = Server(chat_checkpoint, NAME, ["--threads", "2", "--max-model-len", "1048576",
                                       "--speculative-tokens", "2"])
    try:
        assert eventually(lambda: "window cache" in s.logs()), s.logs()  # the last start-up line
        logs = s.logs()
        assert "context 1048576 tokens" in logs, logs
        assert "464 bytes per token" in logs, logs
        assert "window cache" in logs and "last 128 positions" in logs, logs
        long_messages = [{"role": "user", "content": "Repeat after me: " + "abcdefgh " * 60}]
        kw = dict(model=NAME, messages=long_messages, max_tokens=12, temperature=0)
        want = client(server).chat.completions.create(**kw)
        assert want.usage.prompt_tokens > 400
        cached = []
        for _ in range(2):  # the second one hits the prefix cache, window blocks restored
            got = client(s).chat.completions.create(**kw)
            assert got.choices[0].message.content == want.choices[0].message.content
            cached.append(got.usage.prompt_tokens_details.cached_tokens)
        assert cached[0] == 0 and cached[1] >= 384, cached
        assert s.alive(), s.logs()
    finally:
        s.stop()
