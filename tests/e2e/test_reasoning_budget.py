"""Reasoning tokens and Anthropic's thinking budget on the tiny DeepSeek-V3 checkpoint, its toy
vocabulary extended by "<think>" and "</think>" as non-special added tokens (as DeepSeek's own
tokenizer has them), served by a real `deepinfer serve` under the V3.1 encoder (whose thinking
prompt opens the block) and driven by the official SDKs: usage counts the tokens inside the
thinking block, and thinking.budget_tokens closes the block at the budget."""

import json

import pytest

from conftest import Server
from test_deepseek import GOLDEN, VOCAB, synthetic_checkpoint

openai = pytest.importorskip("openai")
anthropic = pytest.importorskip("anthropic")

NAME = "tiny-deepseek"
THINK = {"chat_template_kwargs": {"thinking": True}}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """write_v3_tiny's checkpoint, two ids wider: the embedding and head draw VOCAB + 2 rows."""
    d = tmp_path_factory.mktemp("tiny_deepseek_think")
    config = json.loads((GOLDEN / "v3_groups_yarn" / "config.json").read_text())
    config["vocab_size"] = VOCAB + 2
    (d / "config.json").write_text(json.dumps(config))
    recipe = json.loads((GOLDEN / "v3_groups_yarn" / "weights.json").read_text())
    for t in recipe["tensors"]:
        if t["name"] in ("model.embed_tokens.weight", "lm_head.weight"):
            t["shape"][0] = VOCAB + 2
    (d / "weights.json").write_text(json.dumps(recipe))
    (d / "tokenizer_config.json").write_bytes(
        (GOLDEN / "v3_direct_q" / "tokenizer_config.json").read_bytes())
    tokenizer = json.loads((GOLDEN / "v3_direct_q" / "tokenizer.json").read_text())
    for i, content in enumerate(("<think>", "</think>")):
        tokenizer["added_tokens"].append({"id": VOCAB + i, "content": content, "single_word": False,
                                          "lstrip": False, "rstrip": False, "normalized": False,
                                          "special": False})
    (d / "tokenizer.json").write_text(json.dumps(tokenizer))
    synthetic_checkpoint(d, d)
    s = Server(d, NAME, ["--chat-template", "deepseek-v3.1", "--threads", "2"])
    yield s
    assert s.alive(), s.logs()
    s.stop()


def test_reasoning_tokens_count_the_thinking_block(server):
    c = openai.OpenAI(base_url=server.base_url + "/v1", api_key="unused", max_retries=0,
                      timeout=120)
    r = c.chat.completions.create(model=NAME, max_tokens=24, temperature=0, extra_body=THINK,
                                  messages=[{"role": "user", "content": "Think."}])
    usage = r.usage
    reasoning = usage.completion_tokens_details.reasoning_tokens
    assert 0 < reasoning <= usage.completion_tokens
    message = r.choices[0].message
    if message.content:  # the block closed: everything before </think> was reasoning
        assert reasoning < usage.completion_tokens
    else:  # random weights rarely close it: every token was reasoning
        assert reasoning == usage.completion_tokens
    plain = c.chat.completions.create(model=NAME, max_tokens=8, temperature=0,
                                      messages=[{"role": "user", "content": "Think."}])
    assert plain.usage.completion_tokens_details.reasoning_tokens == 0
    responses = c.responses.create(model=NAME, input="Think.", max_output_tokens=24,
                                   reasoning={"effort": "high"}, extra_body={"temperature": 0})
    assert responses.usage.output_tokens_details.reasoning_tokens > 0


@pytest.mark.parametrize("budget", [0, 3, 10])
def test_thinking_budget_closes_the_block_at_the_budget(server, budget):
    a = anthropic.Anthropic(base_url=server.base_url, api_key="unused", max_retries=0, timeout=120)

    def think(**kwargs):
        msg = a.messages.create(model=NAME, messages=[{"role": "user", "content": "Think."}],
                                extra_body={"temperature": 0}, **kwargs)
        return msg, "".join(b.thinking for b in msg.content if b.type == "thinking")

    msg, thinking = think(max_tokens=24, thinking={"type": "enabled", "budget_tokens": budget})
    kinds = [b.type for b in msg.content]
    assert "text" in kinds, kinds  # the answer went on after the forced </think>
    # The same greedy request without a budget, cut by max_tokens after `budget` tokens, thought
    # exactly those tokens (random weights never close the block themselves). Compared as text,
    # not re-tokenized: the toy vocabulary's thinking is not valid UTF-8.
    if budget > 0:
        cut, cut_thinking = think(max_tokens=budget, thinking={"type": "enabled"})
        assert cut.stop_reason == "max_tokens"
        assert [b.type for b in cut.content] == ["thinking"]
        assert thinking == cut_thinking
    else:
        assert thinking == ""
    # Without a budget the same request thinks past it.
    free, free_thinking = think(max_tokens=24, thinking={"type": "enabled"})
    assert free_thinking.startswith(thinking)
    assert len(free_thinking) > len(thinking)
