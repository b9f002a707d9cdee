"""Expert parallelism over MPI (engine/expert_parallel.h): `mpirun -np N deepinfer generate|serve
--expert-parallel` with 2, 3 and 4 ranks on this machine (OpenMPI from Debian, shared memory
between the ranks) gives exactly the tokens of one process: DeepSeek-V4 with hash-routed layers
(transformers' greedy tokens), V3 with and without MTP drafts, V4.1 (transformers' greedy
tokens; with DSpark drafts, the drafter-free text). Served: 8 concurrent greedy chats and a
prompt prefilled in 32-token chunks equal a one-process server's, streaming included; rank 0
stops the group on SIGTERM (every process exits 0); a rank killed mid-stream ends the job (no
hang), a rank frozen mid-stream turns /health 503 and then ends the job; data-parallel engines
on rank 0 each get a lane; a prefix checkpoint restored on rank 0 reaches the others, as does
a P/D decode side's restore (both sides 2-rank groups); a dense
model and ranks that loaded different checkpoints are refused with their codes."""

import concurrent.futures
import json
import os
import shutil
import signal
import subprocess
import time

import httpx
import openai
import pytest

from conftest import REPO, STORIES, Server, binary
from test_deepseek import synthetic_checkpoint, write_v3_tiny
from test_dspark import golden_with_stages

V4 = REPO / "tests" / "golden" / "deepseek_v4" / "v4_flash_tiny"
V41 = REPO.parent / "shared" / "goldens" / "deepseek_v41"
TOKENIZER = REPO / "tests" / "golden" / "deepseek_v3" / "v3_direct_q"
# Running as root (CI containers) needs OpenMPI's consent; harmless otherwise.
MPI_ENV = {**os.environ, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
           "OMPI_MCA_rmaps_base_oversubscribe": "1"}


def mpirun(n):
    if shutil.which("mpirun") is None:
        pytest.fail("mpirun not found: install openmpi-bin (scripts/setup.sh does)")
    return ["mpirun", "-np", str(n), "--oversubscribe", "--bind-to", "none"]


def generate(model, prompt, max_tokens, ranks=1, extra=()):
    """Token ids from `deepinfer generate` on one process (ranks=1) or an EP group."""
    args = [str(binary()), "generate", "--model", str(model), "--prompt-ids",
            ",".join(map(str, prompt)), "--max-tokens", str(max_tokens), "--ignore-eos",
            "--print-ids", *extra]
    if ranks > 1:
        args = mpirun(ranks) + args[:2] + ["--expert-parallel", "--threads", "1"] + args[2:]
    else:
        args += ["--threads", "2"]
    r = subprocess.run(args, capture_output=True, text=True, timeout=240, env=MPI_ENV)
    assert r.returncode == 0, r.stdout + r.stderr
    return [int(t) for t in r.stdout.strip().split(",")]


@pytest.fixture(scope="module")
def v4(tmp_path_factory):
    d = tmp_path_factory.mktemp("ep_v4")
    for f in ("config.json", "weights.json"):
        shutil.copy(V4 / f, d / f)
    synthetic_checkpoint(d, d)
    return d


@pytest.mark.parametrize("ranks", [2, 3, 4])
def test_v4_with_hash_routed_layers_equals_transformers(v4, ranks):
    """8 experts over 2, 3 (uneven: 2/3/3) and 4 ranks; the first two layers route by token id."""
    golden = json.loads((V4 / "golden.json").read_text())
    assert golden["hash_layers"], "the case must keep its hash-routed layers"
    prompt = golden["prompts"][golden["greedy_prompt_index"]]
    assert generate(v4, prompt, len(golden["greedy_tokens"]), ranks) == golden["greedy_tokens"]


def test_v3_with_and_without_mtp_drafts_equals_one_process(tmp_path_factory):
    d = write_v3_tiny(tmp_path_factory.mktemp("ep_v3"))
    prompt = list(range(3, 40))
    plain = generate(d, prompt, 40)
    assert generate(d, prompt, 40, ranks=2) == plain
    mtp = ["--speculative-method", "mtp", "--speculative-tokens", "2"]
    assert generate(d, prompt, 40, ranks=2, extra=mtp) == plain


def test_v3_fp8_experts_of_other_ranks_stay_fp8_and_the_tokens_agree(tmp_path_factory):
    """A V3 checkpoint in DeepSeek's FP8 (128x128 blocks), which the loader converts to BF16: each
    rank converts only its own experts (the others stay FP8, never read), and the tokens equal
    one process's."""
    d = tmp_path_factory.mktemp("ep_v3_fp8")
    case = REPO / "tests" / "golden" / "deepseek_v3" / "v3_groups_yarn_fp8"
    for f in ("config.json", "weights.json"):
        shutil.copy(case / f, d / f)
    synthetic_checkpoint(d, d)
    prompt = list(range(3, 40))
    plain = generate(d, prompt, 24)
    assert generate(d, prompt, 24, ranks=2) == plain
    assert generate(d, prompt, 24, ranks=3) == plain


needs_v41 = pytest.mark.skipif(not V41.is_dir(), reason="../shared/goldens/deepseek_v41 is absent "
                                                        "(a user's clone has none)")


@needs_v41
def test_v41_equals_transformers(tmp_path_factory):
    """Engram, QAT and the release formats (FP8 attention, FP4 experts) over 2 ranks."""
    d = tmp_path_factory.mktemp("ep_v41")
    for f in ("config.json", "weights.json", "tokenizer.json"):
        shutil.copy(V41 / "v41_full_fp8" / f, d / f)
    synthetic_checkpoint(d, d)
    g = json.loads((V41 / "v41_full_fp8" / "greedy.json").read_text())
    assert generate(d, g["prompt"], len(g["tokens"]), ranks=2) == g["tokens"]


@needs_v41
def test_v41_dspark_drafts_over_ranks_keep_the_text(tmp_path_factory):
    """The DSpark stages' MoE layers are split too; drafted text equals drafter-free text."""
    d = golden_with_stages("v41_full", tmp_path_factory)
    g = json.loads((V41 / "v41_full" / "greedy.json").read_text())
    plain = generate(d, g["prompt"], 40, extra=["--speculative-method", "none"])
    assert generate(d, g["prompt"], 40, ranks=2, extra=["--speculative-method", "dspark"]) == plain


class EpServer(Server):
    """`mpirun -np N deepinfer serve --expert-parallel`: the Server helper with mpirun in front."""

    def __init__(self, model, name, ranks, extra_args=()):
        super().__init__(model, name, ["--expert-parallel", *extra_args], env=MPI_ENV,
                         launcher=mpirun(ranks))

    def rank_pids(self):
        """The ranks' pids, rank 0 first (mpirun starts them in rank order)."""
        out = subprocess.run(["pgrep", "-P", str(self.proc.pid)], capture_output=True, text=True)
        return sorted(int(p) for p in out.stdout.split())


@pytest.fixture(scope="module")
def chat_v4(v4, tmp_path_factory):
    d = tmp_path_factory.mktemp("ep_v4_chat")
    for f in v4.iterdir():
        if f.name != "config.json":
            (d / f.name).symlink_to(f)
    config = json.loads((v4 / "config.json").read_text())
    config["max_position_embeddings"] = 4096
    (d / "config.json").write_text(json.dumps(config))
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(TOKENIZER / f, d / f)
    return d


PROMPTS = ["Count to five.", "Name a colour.", "Say hello.", "What is two plus two?",
           "Spell cat.", "Pick a number.", "Describe rain.", "Tell a joke."]


def chat(s, prompt, stream=False, max_tokens=24):
    """The greedy text; non-streaming, with every token's top-5 log-probabilities as the server
    printed them (17 significant digits: equal only when the logits are bit-identical)."""
    c = openai.OpenAI(base_url=s.base_url + "/v1", api_key="unused", max_retries=0, timeout=120)
    kw = dict(model="ep", messages=[{"role": "user", "content": prompt}], max_tokens=max_tokens,
              temperature=0)
    if not stream:
        choice = c.chat.completions.create(**kw, logprobs=True, top_logprobs=5).choices[0]
        return choice.message.content, [[(t.token, t.logprob) for t in p.top_logprobs]
                                        for p in choice.logprobs.content]
    return "".join(ch.choices[0].delta.content or ""
                   for ch in c.chat.completions.create(**kw, stream=True) if ch.choices)


def test_served_batches_and_chunks_equal_one_process(chat_v4):
    """8 concurrent chats (one batch) and a long prompt prefilled in 32-token chunks next to
    decodes: the same text and log-probabilities as a one-process server; rank 0 ends the group
    on SIGTERM."""
    common = ["--prefill-budget", "32", "--max-num-seqs", "8"]
    one = Server(chat_v4, "ep", common + ["--threads", "2"])
    ep = EpServer(chat_v4, "ep", 2, common + ["--threads", "1"])
    try:
        long_prompt = " ".join(PROMPTS * 4)
        with concurrent.futures.ThreadPoolExecutor(9) as pool:
            want = list(pool.map(lambda p: chat(one, p), PROMPTS + [long_prompt]))
            got = list(pool.map(lambda p: chat(ep, p), PROMPTS + [long_prompt]))
        assert got == want
        assert chat(ep, PROMPTS[0], stream=True) == want[0][0]
        assert httpx.get(ep.base_url + "/health").status_code == 200
        metrics = {line.split()[0].split("{")[0]: float(line.split()[-1])
                   for line in httpx.get(ep.base_url + "/metrics").text.splitlines()
                   if line.startswith("deepinfer_ep_")}
        assert metrics["deepinfer_ep_ranks"] == 2
        assert metrics["deepinfer_ep_forward_calls_total"] > 8
        # At least the final gather of every prompt token's output in each of the 4 layers.
        assert metrics["deepinfer_ep_exchange_bytes_total"] > 4 * 64 * 4 * 100
        assert metrics["deepinfer_ep_broadcast_bytes_total"] > 0
        assert "deepinfer_ep_ranks" not in httpx.get(one.base_url + "/metrics").text
        pids = ep.rank_pids()
        assert len(pids) == 2, pids
        os.kill(pids[0], signal.SIGTERM)  # rank 0: it stops the followers, then itself
        assert ep.proc.wait(timeout=30) == 0, ep.logs()
        assert "rank 1 done (rank 0 stopped)" in ep.logs()
    finally:
        one.stop()
        ep.stop()


def one_process_chat(model, prompt):
    """chat() of a one-process server started for it."""
    one = Server(model, "ep", ["--threads", "2"])
    try:
        return chat(one, prompt)
    finally:
        one.stop()


def test_a_restored_prefix_checkpoint_reaches_every_rank(chat_v4, tmp_path):
    """A prompt's prefix saved by one EP group and restored by a new one (whose followers get the
    restored KV bytes from rank 0): the same text and log-probabilities as a one-process server
    computing it cold. Without the copy the followers' attention, so their routing, would
    differ and their experts' rows would not line up."""
    prompt = " ".join(PROMPTS * 3)
    want = one_process_chat(chat_v4, prompt)
    args = ["--threads", "1", "--prefix-checkpoint-dir", str(tmp_path), "--checkpoint-min-tokens",
            "32"]
    for run in ("save", "restore"):
        ep = EpServer(chat_v4, "ep", 2, args)
        try:
            assert chat(ep, prompt) == want, run
            name = ("deepinfer_prefix_checkpoint_saved_total" if run == "save"
                    else "deepinfer_prefix_checkpoint_restored_total")
            deadline = time.monotonic() + 20
            while metric(ep, name) < 1:
                assert time.monotonic() < deadline, f"{name} stayed 0"
                time.sleep(0.05)
        finally:
            ep.stop()


def test_pd_sides_as_expert_parallel_groups(chat_v4, tmp_path, monkeypatch):
    """P/D with a 2-rank group on each side: the prefill side saves the prompt, the decode side
    restores it (its followers get the KV from rank 0) and answers with the one-process text and
    log-probabilities."""
    monkeypatch.setenv("DEEPINFER_PD_API_KEY", "pd-key")
    prompt = " ".join(PROMPTS * 3)
    want = one_process_chat(chat_v4, prompt)
    common = ["--threads", "1", "--pd-checkpoint-dir", str(tmp_path), "--model-revision", "r1"]
    prefill = EpServer(chat_v4, "ep", 2, ["--pd-role", "prefill", *common])
    try:
        decode = EpServer(chat_v4, "ep", 2, ["--pd-role", "decode", "--pd-prefill-url",
                                             prefill.base_url, *common])
        try:
            assert chat(decode, prompt) == want
            assert metric(decode, "deepinfer_prefix_checkpoint_restored_total") >= 1
        finally:
            decode.stop()
    finally:
        prefill.stop()


def metric(s, name):
    return sum(float(line.split()[-1]) for line in httpx.get(s.base_url + "/metrics").text.splitlines()
               if line.split(" ")[0].split("{")[0] == name)


def start_long_stream(s):
    """A greedy stream of up to 2,000 tokens, its first chunk read (returned to keep it open)."""
    c = openai.OpenAI(base_url=s.base_url + "/v1", api_key="unused", max_retries=0, timeout=60)
    stream = c.chat.completions.create(
        model="ep", messages=[{"role": "user", "content": "Go on."}], max_tokens=2000,
        temperature=0, stream=True)
    next(iter(stream))
    return stream


def test_a_rank_killed_mid_stream_ends_the_job(chat_v4):
    """No hang: a follower killed while a stream runs ends every rank, non-zero, in seconds."""
    ep = EpServer(chat_v4, "ep", 2, ["--threads", "1"])
    try:
        stream = start_long_stream(ep)
        os.kill(ep.rank_pids()[1], signal.SIGKILL)
        start = time.monotonic()
        assert ep.proc.wait(timeout=30) != 0
        assert time.monotonic() - start < 30
    finally:
        ep.stop()


def test_a_stopped_rank_turns_health_503_then_ends_the_job(chat_v4):
    """A follower frozen (SIGSTOP: alive, silent) mid-stream: within the 2 s heartbeat timeout
    rank 0 answers /health and new requests with 503 ep_rank_lost naming rank 1, then every
    rank ends, non-zero."""
    ep = EpServer(chat_v4, "ep", 2, ["--threads", "1", "--expert-parallel-timeout", "2"])
    follower = None
    try:
        stream = start_long_stream(ep)
        follower = ep.rank_pids()[1]
        os.kill(follower, signal.SIGSTOP)
        start = time.monotonic()
        health = None
        while time.monotonic() - start < 15:
            health = httpx.get(ep.base_url + "/health", timeout=5)
            if health.status_code == 503:
                break
            time.sleep(0.2)
        assert health.status_code == 503, health.text
        assert health.json()["error"]["code"] == "ep_rank_lost", health.text
        assert "rank 1" in health.json()["error"]["message"], health.text
        refused = httpx.post(ep.base_url + "/v1/completions", timeout=5,
                             json={"model": "ep", "prompt": "Hi", "max_tokens": 2})
        assert refused.status_code == 503 and "ep_rank_lost" in refused.text, refused.text
        assert ep.proc.wait(timeout=30) != 0
        assert time.monotonic() - start < 30
        assert "rank 1 has not answered" in ep.logs()
    finally:
        if follower is not None:
            try:
                os.kill(follower, signal.SIGKILL)
            except ProcessLookupError:
                pass
        ep.stop()


def test_data_parallel_engines_each_get_a_lane(chat_v4):
    """--data-parallel-size 2 on a 2-rank group: rank 0's two engines step on lanes of their own
    (one communicator each, a replay thread each on rank 1); 8 concurrent chats spread over both
    engines give the one-process text and log-probabilities, and the group stops cleanly."""
    one = Server(chat_v4, "ep", ["--threads", "2"])
    ep = EpServer(chat_v4, "ep", 2, ["--threads", "2", "--data-parallel-size", "2"])
    try:
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            want = list(pool.map(lambda p: chat(one, p), PROMPTS))
            got = list(pool.map(lambda p: chat(ep, p), PROMPTS))
        assert got == want
        ranks = httpx.get(ep.base_url + "/health").json()["ranks"]
        assert len(ranks) == 2
        calls = [line for line in httpx.get(ep.base_url + "/metrics").text.splitlines()
                 if line.startswith("deepinfer_ep_forward_calls_total")]
        assert len(calls) == 2 and all(float(c.split()[-1]) > 0 for c in calls), calls
        os.kill(ep.rank_pids()[0], signal.SIGTERM)
        assert ep.proc.wait(timeout=30) == 0, ep.logs()
    finally:
        one.stop()
        ep.stop()


def test_a_dense_model_is_refused(tmp_path):
    if not STORIES.exists():
        pytest.skip(f"stories260K not found at {STORIES}")
    r = subprocess.run(mpirun(2) + [str(binary()), "generate", "--expert-parallel", "--model",
                                    str(STORIES), "--prompt", "Once", "--max-tokens", "2"],
                       capture_output=True, text=True, timeout=60, env=MPI_ENV)
    assert r.returncode != 0
    assert "bad_option" in r.stderr and "mixture-of-experts" in r.stderr, r.stderr


def test_ranks_with_different_checkpoints_are_refused(v4, tmp_path):
    """mpirun's MPMD form gives rank 1 another revision of the checkpoint (the same config in
    the FP8 format): both ranks stop at start with ep_mismatch naming rank 1."""
    other = tmp_path / "other"
    other.mkdir()
    for f in ("config.json", "weights.json"):
        shutil.copy(V4.parent / "v4_flash_tiny_fp8" / f, other / f)
    synthetic_checkpoint(other, other)
    base = [str(binary()), "generate", "--expert-parallel", "--prompt-ids", "1,2,3",
            "--max-tokens", "2", "--threads", "1", "--print-ids"]
    args = (["mpirun", "--oversubscribe", "--bind-to", "none", "-np", "1"] + base +
            ["--model", str(v4), ":", "-np", "1"] + base + ["--model", str(other)])
    r = subprocess.run(args, capture_output=True, text=True, timeout=60, env=MPI_ENV)
    assert r.returncode != 0
    assert "ep_mismatch" in r.stderr and "rank 1" in r.stderr, r.stderr
