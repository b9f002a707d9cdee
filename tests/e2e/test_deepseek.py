"""A tiny DeepSeek-V3 checkpoint (random weights with one MTP layer, made by
tests/reference/make_deepseek_v3_golden.py) served by real `deepinfer serve` processes and driven
by the official openai SDK: chat, streaming, thinking mode with reasoning_content, and MTP
speculative decoding giving the same greedy text as plain decoding."""

import json
import pathlib
import struct

import openai
import pytest

from conftest import REPO, Server

GOLDEN = REPO / "tests" / "golden" / "deepseek_v3"
VOCAB = 320  # the toy tokenizer.json's vocabulary


def widen_vocab(src: pathlib.Path, dst: pathlib.Path, vocab: int):
    """Copies a safetensors file, growing the [256, hidden] embedding and head to `vocab` rows
    (the extra rows repeat the first ones) so the checkpoint matches the toy tokenizer."""
    data = src.read_bytes()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    body = data[8 + n:]
    out_header, chunks, offset = {}, [], 0
    for name, info in header.items():
        if name == "__metadata__":
            out_header[name] = info
            continue
        begin, end = info["data_offsets"]
        raw = body[begin:end]
        shape = list(info["shape"])
        if name in ("model.embed_tokens.weight", "lm_head.weight"):
            row = len(raw) // shape[0]
            extra = vocab - shape[0]
            raw = raw + raw[: extra * row]
            shape[0] = vocab
        out_header[name] = {"dtype": info["dtype"], "shape": shape,
                            "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    h = json.dumps(out_header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    dst.write_bytes(struct.pack("<Q", len(h)) + h + b"".join(chunks))


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    d = tmp_path_factory.mktemp("tiny_deepseek")
    config = json.loads((GOLDEN / "v3_groups_yarn" / "config.json").read_text())
    config["vocab_size"] = VOCAB
    (d / "config.json").write_text(json.dumps(config))
    widen_vocab(GOLDEN / "v3_groups_yarn" / "model.safetensors", d / "model.safetensors", VOCAB)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        (d / f).write_bytes((GOLDEN / "v3_direct_q" / f).read_bytes())
    return d


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
