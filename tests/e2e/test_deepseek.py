"""A tiny DeepSeek-V3 checkpoint (random weights with one MTP layer, written at test time from a
recipe made by tests/reference/make_deepseek_v3_golden.py) served by real `deepinfer serve`
processes and driven by the official openai SDK: chat, streaming, thinking mode with reasoning_content, and MTP
speculative decoding giving the same greedy text as plain decoding."""

import json
import pathlib
import subprocess

import openai
import pytest

from conftest import REPO, Server, binary

GOLDEN = REPO / "tests" / "golden" / "deepseek_v3"
VOCAB = 320  # the toy tokenizer.json's vocabulary


def synthetic_checkpoint(case_dir: pathlib.Path, out: pathlib.Path):
    """Writes the weights of a recipe case with the build's `synthetic_checkpoint` tool."""
    tool = binary().parent / "synthetic_checkpoint"
    if not tool.exists():
        pytest.fail(f"{tool} not found (build it: ninja -C build synthetic_checkpoint)")
    subprocess.run([str(tool), str(case_dir), str(out)], check=True, capture_output=True,
                   timeout=120)


def write_v3_tiny(d: pathlib.Path) -> pathlib.Path:
    """v3_groups_yarn (3 layers, YaRN, one MTP module) with its vocabulary widened to the toy
    tokenizer's 320 ids (the recipe's embedding and head draw 320 rows instead of 256), written
    into the folder `d` with the toy tokenizer."""
    config = json.loads((GOLDEN / "v3_groups_yarn" / "config.json").read_text())
    config["vocab_size"] = VOCAB
    (d / "config.json").write_text(json.dumps(config))
    recipe = json.loads((GOLDEN / "v3_groups_yarn" / "weights.json").read_text())
    for t in recipe["tensors"]:
        if t["name"] in ("model.embed_tokens.weight", "lm_head.weight"):
            t["shape"][0] = VOCAB
    (d / "weights.json").write_text(json.dumps(recipe))
    for f in ("tokenizer.json", "tokenizer_config.json"):
        (d / f).write_bytes((GOLDEN / "v3_direct_q" / f).read_bytes())
    synthetic_checkpoint(d, d)
    return d


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return write_v3_tiny(tmp_path_factory.mktemp("tiny_deepseek"))


@pytest.fixture(scope="module")
def plain(checkpoint):
    s = Server(checkpoint, "tiny-deepseek", ["--chat-template", "deepseek-v3.1", "--threads", "2"])
    yield s
    s.stop()


@pytest.fixture(scope="module")
def speculative(checkpoint):
    s = Server(checkpoint, "tiny-deepseek", ["--chat-template", "deepseek-v3.1", "--threads", "2",
                                             "--speculative-tokens", "2"])
    yield s
    s.stop()


def client(server):
    return openai.OpenAI(base_url=server.base_url + "/v1", api_key="unused")


MESSAGES = [{"role": "system", "content": "You are terse."},
            {"role": "user", "content": "Count to five, please."}]


def test_chat_streaming_equals_non_streaming(plain):
    c = client(plain)
    full = c.chat.completions.create(model="tiny-deepseek", messages=MESSAGES, max_tokens=24,
                                     temperature=0)
    assert full.usage.completion_tokens == 24
    assert full.usage.prompt_tokens_details.cached_tokens >= 0
    text = ""
    for chunk in c.chat.completions.create(model="tiny-deepseek", messages=MESSAGES,
                                           max_tokens=24, temperature=0, stream=True):
        if chunk.choices and chunk.choices[0].delta.content:
            text += chunk.choices[0].delta.content
    assert text == full.choices[0].message.content


def test_thinking_mode_returns_reasoning_separately(plain):
    c = client(plain)
    r = c.chat.completions.create(model="tiny-deepseek", messages=MESSAGES, max_tokens=16,
                                  temperature=0, extra_body={"chat_template_kwargs": {"thinking": True}})
    msg = r.choices[0].message.model_dump()
    # V3.1's thinking prompt opens <think>; random weights never close it, so all is reasoning.
    assert msg["reasoning_content"]
    assert msg["content"] == ""
    streamed = ""
    for chunk in c.chat.completions.create(model="tiny-deepseek", messages=MESSAGES, max_tokens=16,
                                           temperature=0, stream=True,
                                           extra_body={"chat_template_kwargs": {"thinking": True}}):
        if chunk.choices:
            delta = chunk.choices[0].delta.model_dump()
            streamed += delta.get("reasoning_content") or ""
    assert streamed == msg["reasoning_content"]
    off = c.chat.completions.create(model="tiny-deepseek", messages=MESSAGES, max_tokens=16,
                                    temperature=0)
    assert off.choices[0].message.model_dump().get("reasoning_content") in (None, "")


def test_anthropic_thinking_comes_as_a_thinking_block(plain):
    """The Anthropic route splits DeepSeek's reasoning into a thinking block, streamed or not,
    with the same text the OpenAI route puts in reasoning_content."""
    anthropic = pytest.importorskip("anthropic")
    a = anthropic.Anthropic(base_url=plain.base_url, api_key="unused", max_retries=0, timeout=60)
    kwargs = dict(model="tiny-deepseek", max_tokens=16, system=MESSAGES[0]["content"],
                  messages=MESSAGES[1:], thinking={"type": "enabled", "budget_tokens": 1024},
                  extra_body={"temperature": 0})
    msg = a.messages.create(**kwargs)
    assert msg.content[0].type == "thinking" and msg.content[0].thinking
    with a.messages.stream(**kwargs) as stream:
        final = stream.get_final_message()
    assert final.content[0].type == "thinking"
    assert final.content[0].thinking == msg.content[0].thinking
    r = client(plain).chat.completions.create(
        model="tiny-deepseek", messages=MESSAGES, max_tokens=16, temperature=0,
        extra_body={"chat_template_kwargs": {"thinking": True}})
    assert r.choices[0].message.model_dump()["reasoning_content"] == msg.content[0].thinking
    off = a.messages.create(**{**kwargs, "thinking": {"type": "disabled"}})
    assert all(b.type != "thinking" for b in off.content)


def test_responses_reasoning_comes_as_a_reasoning_item(plain):
    """The Responses route puts DeepSeek's reasoning in a reasoning item (reasoning_text), with
    the same text the chat route gives as reasoning_content."""
    c = client(plain)
    kwargs = dict(model="tiny-deepseek", instructions=MESSAGES[0]["content"],
                  input=MESSAGES[1]["content"], max_output_tokens=16, temperature=0,
                  reasoning={"effort": "high"})
    r = c.responses.create(**kwargs)
    assert r.output[0].type == "reasoning"
    thinking = r.output[0].content[0].text
    assert thinking
    with c.responses.stream(**kwargs) as stream:
        deltas = [e.delta for e in stream if e.type == "response.reasoning_text.delta"]
        final = stream.get_final_response()
    assert "".join(deltas) == thinking
    assert final.output[0].type == "reasoning"
    chat = c.chat.completions.create(model="tiny-deepseek", messages=MESSAGES, max_tokens=16,
                                     temperature=0, reasoning_effort="high")
    assert chat.choices[0].message.model_dump()["reasoning_content"] == thinking


def test_speculative_decoding_gives_the_same_greedy_text(plain, speculative):
    for max_tokens in (1, 9, 40):
        want = client(plain).chat.completions.create(
            model="tiny-deepseek", messages=MESSAGES, max_tokens=max_tokens, temperature=0)
        got = client(speculative).chat.completions.create(
            model="tiny-deepseek", messages=MESSAGES, max_tokens=max_tokens, temperature=0)
        assert got.choices[0].message.content == want.choices[0].message.content
        assert got.usage.completion_tokens == want.usage.completion_tokens
    usage = got.model_dump()["usage"]
    assert usage["speculative"]["draft_tokens"] > 0
    metrics = __import__("httpx").get(speculative.base_url + "/metrics").text
    assert "vllm:spec_decode_num_draft_tokens_total" in metrics


def test_constrained_requests_take_mtp_drafts_and_keep_their_text(plain, speculative):
    from helpers import check_constrained_drafts

    check_constrained_drafts(speculative, plain, "tiny-deepseek",
                             ["Say a name.", "Count.", "Pick one.", "Write JSON."])


def test_a_request_can_opt_out_of_speculative_drafts(speculative):
    """"speculative": false: the same greedy text, nothing drafted for it; the per-position
    acceptance counters are exported."""
    c = client(speculative)
    kw = dict(model="tiny-deepseek", messages=MESSAGES, max_tokens=24, temperature=0)
    drafted = c.chat.completions.create(**kw)
    plain = c.chat.completions.create(**kw, extra_body={"speculative": False})
    assert plain.choices[0].message.content == drafted.choices[0].message.content
    assert drafted.model_dump()["usage"]["speculative"]["draft_tokens"] > 0
    assert "speculative" not in plain.model_dump()["usage"]
    metrics = __import__("httpx").get(speculative.base_url + "/metrics").text
    per_pos = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
    assert per_pos + '{model_name="tiny-deepseek",position="0"}' in metrics


@pytest.mark.parametrize("flags", [["--speculative-method", "dspark"],
                                   ["--speculative-method", "none", "--speculative-tokens", "2"],
                                   ["--no-dspark", "--speculative-method", "dspark"],
                                   ["--speculative-method", "mtp", "--speculative-tokens", "0"]])
def test_speculative_flags_that_cannot_be_honoured_exit_2(checkpoint, flags):
    r = subprocess.run([str(binary()), "serve", "--model", str(checkpoint), "--port", "0", *flags],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2, r.stderr
    assert "speculative" in r.stderr or "dspark" in r.stderr, r.stderr


def test_no_dspark_serves_with_mtp_drafts(checkpoint):
    s = Server(checkpoint, "tiny-deepseek", ["--chat-template", "deepseek-v3.1", "--threads", "2",
                                             "--no-dspark"])
    try:
        r = client(s).chat.completions.create(model="tiny-deepseek", messages=MESSAGES,
                                              max_tokens=16, temperature=0)
        assert r.model_dump()["usage"]["speculative"]["draft_tokens"] > 0
    finally:
        s.stop()
