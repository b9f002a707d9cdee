"""DSpark speculative decoding through `deepinfer serve` on the tiny DeepSeek-V4.1 checkpoints of
tests/golden/deepseek_v41_dspark (weights written at test time from their recipes; the byte-level
toy tokenizer of ../shared/goldens/deepseek_v41/v41_full beside them, so the module skips when
../shared is absent): DSpark is the default drafter, greedy text is the same as a server without
drafts for batches of 1 and 8 mixed speculative and opted-out requests, the per-position
acceptance counters reach the block's last position, and the flags that cannot be honoured on
this checkpoint exit 2."""

import json
import shutil
import subprocess
import sys

import httpx
import openai
import pytest

from conftest import REPO, Server, binary
from helpers import check_constrained_drafts, concurrently, metric_value
from test_deepseek import synthetic_checkpoint

CASES = REPO / "tests" / "golden" / "deepseek_v41_dspark"
GOLDENS = REPO.parent / "shared" / "goldens" / "deepseek_v41"
TOKENIZER = GOLDENS / "v41_full" / "tokenizer.json"
sys.path.insert(0, str(REPO / "tests" / "reference"))
import deepseek_v41_shapes as shapes  # noqa: E402
NAME = "tiny-dspark"

pytestmark = pytest.mark.skipif(not TOKENIZER.exists(),
                                reason="../shared/goldens/deepseek_v41 is absent (a user's clone "
                                       "has none): the DSpark cases borrow its toy tokenizer")


def make(case, tmp_path_factory):
    d = tmp_path_factory.mktemp(case)
    for f in ("config.json", "weights.json"):
        shutil.copy(CASES / case / f, d / f)
    shutil.copy(TOKENIZER, d / "tokenizer.json")
    synthetic_checkpoint(d, d)
    return d


def golden_with_stages(case, tmp_path_factory):
    """A ../shared V4.1 golden case with random DSpark stages added (the config's DSpark keys:
    3 stages over its last three layers, block 5, the last id as noise; the stages' tensors
    appended to the recipe, in the release formats where the case is)."""
    d = tmp_path_factory.mktemp(case + "_dspark")
    config = json.loads((GOLDENS / case / "config.json").read_text())
    tc = config["text_config"]
    layers = tc["num_hidden_layers"]
    tc.update(num_nextn_predict_layers=3, dspark_block_size=5,
              dspark_noise_token_id=tc["vocab_size"] - 1,
              dspark_target_layer_ids=[layers - 3, layers - 2, layers - 1], dspark_markov_rank=32,
              dspark_n_routed_experts=tc["n_routed_experts"],
              dspark_num_experts_per_tok=tc["num_experts_per_tok"])
    tc["compress_ratios"] = tc["compress_ratios"][:layers] + [0, 0, 0]
    (d / "config.json").write_text(json.dumps(config))
    recipe = json.loads((GOLDENS / case / "weights.json").read_text())
    stages = [t for s in range(3) for t in shapes.dspark_stage_tensors(tc, s)]
    recipe["tensors"] += shapes.make_recipe(stages, seed=0)["tensors"]
    for key, section in shapes.quant_section(stages).items():
        if isinstance(section, dict) and key in recipe.get("quant", {}):
            recipe["quant"][key]["tensors"] += section["tensors"]
    (d / "weights.json").write_text(json.dumps(recipe))
    if (GOLDENS / case / "tokenizer.json").exists():
        shutil.copy(GOLDENS / case / "tokenizer.json", d / "tokenizer.json")
    synthetic_checkpoint(d, d)
    return d


@pytest.mark.parametrize("case", ["v41_noengram_noqat", "v41_full", "v41_full_fp8"])
def test_every_golden_variant_with_stages_decodes_the_same_greedy_tokens(case, tmp_path_factory):
    """The golden cases (Engram, QAT, release formats) with DSpark stages added: the main
    model is unchanged (transformers' 16 greedy tokens), and 40 tokens are the same with the
    drafter and without."""
    d = golden_with_stages(case, tmp_path_factory)
    g = json.loads((GOLDENS / case / "greedy.json").read_text())
    ids = ",".join(map(str, g["prompt"]))
    out = {}
    for method in ("dspark", "none"):
        r = subprocess.run([str(binary()), "generate", "--model", str(d), "--prompt-ids", ids,
                            "--max-tokens", "40", "--ignore-eos", "--threads", "2", "--print-ids",
                            "--speculative-method", method],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        out[method] = r.stdout.strip().split(",")
    assert out["dspark"] == out["none"]
    assert out["none"][:len(g["tokens"])] == [str(t) for t in g["tokens"]]


@pytest.fixture(scope="module", params=["dspark_agree", "dspark_random"])
def servers(request, tmp_path_factory):
    """(DSpark by default, no drafter) on one checkpoint."""
    d = make(request.param, tmp_path_factory)
    common = ["--threads", "2", "--max-num-seqs", "8"]
    drafted = Server(d, NAME, common)
    plain = Server(d, NAME, common + ["--speculative-method", "none"])
    yield request.param, drafted, plain
    for s in (drafted, plain):
        assert s.alive(), "the server died during the tests:\n" + s.logs()
        s.stop()


def client(s):
    return openai.OpenAI(base_url=s.base_url + "/v1", api_key="unused", max_retries=0, timeout=120)


PROMPTS = ["Count to five.", "Name a colour.", "Say hello.", "What is two plus two?",
           "Spell cat.", "Pick a number.", "Describe rain.", "Tell a joke."]


def ask(s, i, speculative=True, max_tokens=24):
    extra = {} if speculative else {"speculative": False}
    return client(s).completions.create(model=NAME, prompt=PROMPTS[i % len(PROMPTS)],
                                        max_tokens=max_tokens, temperature=0, extra_body=extra)


def test_dspark_is_the_default_and_greedy_text_is_unchanged(servers):
    case, drafted, plain = servers
    for max_tokens in (1, 7, 40):
        want = ask(plain, 0, max_tokens=max_tokens)
        got = ask(drafted, 0, max_tokens=max_tokens)
        assert got.choices[0].text == want.choices[0].text, max_tokens
        assert got.usage.completion_tokens == want.usage.completion_tokens
    usage = got.model_dump()["usage"]
    assert usage["speculative"]["draft_tokens"] > 0
    if case == "dspark_agree":  # the drafter made to agree: most drafts accepted
        assert usage["speculative"]["acceptance_rate"] > 0.5, usage
    assert "speculative" not in want.model_dump()["usage"]


def test_a_batch_of_eight_mixed_requests_equals_plain_decoding(servers):
    """Eight at once, every other one with "speculative": false."""
    _, drafted, plain = servers
    want = [ask(plain, i).choices[0].text for i in range(8)]
    got = concurrently(lambda i: ask(drafted, i, speculative=i % 2 == 0), 8)
    for i, r in enumerate(got):
        assert r.choices[0].text == want[i], i
        drafted_tokens = r.model_dump()["usage"].get("speculative", {}).get("draft_tokens", 0)
        assert (drafted_tokens > 0) == (i % 2 == 0), (i, r.usage)


def test_constrained_requests_take_drafts_and_keep_their_text(servers):
    """JSON schema, regex, choice and JSON-object requests draft too (drafts cut at the first
    the grammar refuses, rows masked through the drafts): greedy text unchanged."""
    case, drafted, plain = servers
    accepted = check_constrained_drafts(drafted, plain, NAME, PROMPTS)
    if case == "dspark_agree":  # where the grammar allows the model's own guess, it is taken
        assert accepted > 0


def test_acceptance_per_position_reaches_the_last_block_position(servers):
    case, drafted, _ = servers
    ask(drafted, 3, max_tokens=40)
    metrics = httpx.get(drafted.base_url + "/metrics").text
    per_pos = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
    for pos in range(5):  # dspark_block_size 5
        assert f'{per_pos}{{model_name="{NAME}",position="{pos}"}}' in metrics
    if case == "dspark_agree":
        assert metric_value(metrics, per_pos, f'model_name="{NAME}",position="4"') > 0
    assert metric_value(metrics, "vllm:spec_decode_num_draft_tokens_total") > 0


@pytest.fixture(scope="module")
def agree(tmp_path_factory):
    return make("dspark_agree", tmp_path_factory)


@pytest.mark.parametrize("flags", [["--speculative-method", "mtp"],
                                   ["--speculative-method", "dspark", "--speculative-tokens", "0"]])
def test_flags_this_checkpoint_cannot_honour_exit_2(agree, flags):
    r = subprocess.run([str(binary()), "serve", "--model", str(agree), "--port", "0", *flags],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2, r.stderr
    assert "speculative" in r.stderr, r.stderr


def test_no_dspark_and_a_block_cap(agree):
    """--no-dspark on a model without MTP layers serves without drafts; --speculative-tokens 2
    caps DSpark's block at two drafts."""
    s = Server(agree, NAME, ["--threads", "2", "--no-dspark"])
    try:
        assert "speculative" not in ask(s, 1).model_dump()["usage"]
    finally:
        s.stop()
    s = Server(agree, NAME, ["--threads", "2", "--speculative-tokens", "2"])
    try:
        spec = ask(s, 1, max_tokens=30).model_dump()["usage"]["speculative"]
        assert 0 < spec["draft_tokens"] <= 2 * 15, spec
        metrics = httpx.get(s.base_url + "/metrics").text
        per_pos = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
        assert metric_value(metrics, per_pos, f'model_name="{NAME}",position="2"') == 0
    finally:
        s.stop()
