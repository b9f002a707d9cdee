"""Prefill/decode disaggregation as real processes: a `--pd-role prefill` and a `--pd-role decode`
`deepinfer serve` sharing a temporary folder answer the same greedy requests with the same tokens
as one combined server (a Llama GGUF, DeepSeek-V3, V4 and V4.1 tiny checkpoints; prompts across
block and compression-group boundaries); the decode-side guard (its prefill side down, dying
mid-request, refusing the key, unable to write) answers a clean 503 and stays healthy; a corrupt
or foreign checkpoint is refused, counted and recomputed with the same tokens; images get 400
unsupported_on_pd; bad P/D settings stop the start."""

import json
import os
import pathlib
import random
import re
import shutil
import socket
import subprocess
import threading
import time

import httpx
import pytest

from conftest import REPO, STORIES, Server, binary, eventually, free_port, smollm_path
from test_deepseek import synthetic_checkpoint, write_v3_tiny

KEY = "pd-test-key"
GOLDENS_V41 = REPO.parent / "shared" / "goldens" / "deepseek_v41"
TOY_TOKENIZER = REPO / "tests" / "golden" / "deepseek_v3" / "v3_direct_q"
BLOCK = 16  # the engine's default block size


@pytest.fixture(autouse=True)
def pd_key(monkeypatch):
    monkeypatch.setenv("DEEPINFER_PD_API_KEY", KEY)


def decode_side(model, folder, prefill_url, revision="r1"):
    """A `--pd-role decode` server on `folder` whose prefill side is at `prefill_url`."""
    return Server(model, "m", ["--threads", "1", "--pd-role", "decode", "--pd-checkpoint-dir",
                               str(folder), "--model-revision", revision, "--pd-prefill-url",
                               prefill_url])


class Pair:
    """A prefill side and a decode side on one folder."""

    def __init__(self, model, folder, extra=(), decode_extra=(), prefill_extra=(),
                 revision="r1"):
        self.folder = folder
        common = ["--threads", "1", "--pd-checkpoint-dir", str(folder),
                  "--model-revision", revision, *extra]
        self.prefill = Server(model, "m", ["--pd-role", "prefill", *common, *prefill_extra])
        try:
            self.decode = Server(model, "m", ["--pd-role", "decode", "--pd-prefill-url",
                                              self.prefill.base_url, *common, *decode_extra])
        except BaseException:
            self.prefill.stop()
            raise

    def stop(self):
        self.decode.stop()
        self.prefill.stop()


def complete(base, prompt, max_tokens=8, **extra):
    r = httpx.post(base + "/v1/completions", timeout=300, json={
        "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, **extra})
    return r


def metric(base, name, labels=""):
    text = httpx.get(base + "/metrics", timeout=10).text
    want = name + ("{" + labels + "}" if labels else "")
    m = re.search(rf"^{re.escape(want)} (\S+)$", text, re.MULTILINE)
    assert m, f"no {want} in /metrics"
    return float(m.group(1))


def expected_cached(n):
    """Prompt tokens restored: the full blocks, less the last one when the prompt ends on a block
    boundary (the engine recomputes the prompt's last token to get its logits)."""
    return (n - 1) // BLOCK * BLOCK


def prompts(vocab, lengths, seed=7):
    rng = random.Random(seed)
    return [[rng.randrange(3, vocab) for _ in range(n)] for n in lengths]


def v4_tiny(d: pathlib.Path):
    golden = REPO / "tests" / "golden" / "deepseek_v4" / "v4_flash_tiny"
    for f in ("config.json", "weights.json"):
        shutil.copy(golden / f, d / f)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(TOY_TOKENIZER / f, d / f)
    synthetic_checkpoint(d, d)
    return d


def v41_tiny(d: pathlib.Path):
    if not GOLDENS_V41.is_dir():
        pytest.skip("../shared/goldens/deepseek_v41 is absent (a user's clone has none)")
    for f in ("config.json", "weights.json", "tokenizer.json"):
        shutil.copy(GOLDENS_V41 / "v41_full" / f, d / f)
    synthetic_checkpoint(d, d)
    return d


def llama_gguf(d: pathlib.Path):
    if not smollm_path().exists():
        pytest.skip(f"SmolLM2 not found at {smollm_path()}")
    return smollm_path()


# (builder, vocabulary for the token-id prompts, prompt lengths). The V4 tiny checkpoint
# compresses in groups of 4 and 128 with a sliding window of 8; V4.1 in groups of 2 and 1 with
# Engram n-grams over the cached tokens.
MODELS = {
    "llama_gguf": (llama_gguf, 49152, [9, 16, 17, 70]),
    "deepseek_v3": (write_v3_tiny, 320, [5, 16, 33, 100]),
    "deepseek_v4": (v4_tiny, 320, [7, 16, 17, 129, 200]),
    "deepseek_v41": (v41_tiny, 320, [7, 16, 19, 130]),
}


@pytest.mark.parametrize("arch", list(MODELS))
def test_pd_pair_gives_the_tokens_of_a_combined_server(arch, tmp_path):
    build, vocab, lengths = MODELS[arch]
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    model = build(model_dir)
    folder = tmp_path / "pd"
    folder.mkdir()
    combined = Server(model, "m", ["--threads", "1"])
    try:
        want = []
        for p in prompts(vocab, lengths):
            r = complete(combined.base_url, p)
            assert r.status_code == 200, r.text
            want.append(r.json()["choices"][0]["text"])
    finally:
        combined.stop()
    pair = Pair(model, folder)
    try:
        restored = 0
        for p, text in zip(prompts(vocab, lengths), want):
            r = complete(pair.decode.base_url, p)
            assert r.status_code == 200, r.text
            body = r.json()
            assert body["choices"][0]["text"] == text, (arch, len(p))
            cached = body["usage"]["prompt_tokens_details"]["cached_tokens"]
            assert cached == expected_cached(len(p)), (len(p), body["usage"])
            restored += cached
        # One file per prompt with a full block before its last token (the others need no
        # prefill side), written by the prefill side only.
        files = sorted(folder.glob("*.dipc"))
        sent = [n for n in lengths if n > BLOCK]
        assert len(files) == len(sent)
        d = pair.decode.base_url
        assert metric(d, "deepinfer_pd_prefill_failures_total") == 0
        assert metric(d, "deepinfer_pd_checkpoint_tokens_total") == sum(map(expected_cached, sent))
        assert metric(d, "deepinfer_pd_transfer_seconds_count") == len(sent)
        assert metric(d, "deepinfer_pd_suffix_tokens_sum") == sum(lengths) - restored
        # Asked again: the prefill side finds the file and computes nothing; same text.
        p = prompts(vocab, lengths)[-1]
        r = complete(pair.decode.base_url, p)
        assert r.json()["choices"][0]["text"] == want[-1]
        assert pair.prefill.alive() and pair.decode.alive()
    finally:
        pair.stop()


@pytest.fixture()
def stories_model():
    if not STORIES.exists():
        pytest.skip(f"stories260K not found at {STORIES}")
    return STORIES


STORY = "Tell me a story about a cat who lived in a big house with a little girl and a dog."


def chat(base, content=STORY, stream=False):
    return httpx.post(base + "/v1/chat/completions", timeout=60, json={
        "messages": [{"role": "user", "content": content}], "max_tokens": 8,
        "temperature": 0, "stream": stream})


def assert_error(r, status, code):
    assert r.status_code == status, r.text
    assert r.json()["error"]["code"] == code, r.text


def test_plain_request_to_a_decode_side_whose_prefill_side_is_down_is_a_clean_503(
        stories_model, tmp_path):
    """The incident's shape: a client talks straight to the decode side while nothing listens at
    its --pd-prefill-url. Each request gets 503 pd_prefill_unavailable; the instance stays up and
    healthy, and serves again once a prefill side is there."""
    dead = free_port()
    decode = decode_side(stories_model, tmp_path, f"http://127.0.0.1:{dead}")
    try:
        for stream in (False, True, False):
            r = chat(decode.base_url, stream=stream)
            assert_error(r, 503, "pd_prefill_unavailable")
            assert f"127.0.0.1:{dead}" in r.json()["error"]["message"]
            assert httpx.get(decode.base_url + "/health", timeout=5).status_code == 200
        assert metric(decode.base_url, "deepinfer_pd_prefill_failures_total") == 3
        # A prompt without a full block before its last token needs no prefill side.
        assert chat(decode.base_url, content="Hi").status_code == 200
        assert KEY not in decode.logs()
        assert decode.alive()
    finally:
        decode.stop()


class DyingPrefillSide:
    """A harness prefill side that reads each call and closes the connection without an answer,
    as a prefill process killed mid-request does."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen()
        self.port = self.sock.getsockname()[1]
        self.calls = 0
        self.auth = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = conn.recv(65536)
                if not chunk:
                    break
                data += chunk
            self.calls += 1
            self.auth += [line for line in data.split(b"\r\n")
                          if line.lower().startswith(b"authorization:")]
            conn.close()

    def close(self):
        self.sock.close()


def test_prefill_side_dying_mid_request_is_a_clean_503_and_other_requests_go_on(
        stories_model, tmp_path):
    harness = DyingPrefillSide()
    decode = decode_side(stories_model, tmp_path, f"http://127.0.0.1:{harness.port}")
    try:
        results = []
        threads = [threading.Thread(target=lambda s=s: results.append(chat(decode.base_url,
                                                                           stream=s)))
                   for s in (False, True, False, True)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for r in results:
            assert_error(r, 503, "pd_prefill_unavailable")
        assert harness.calls == 4
        # The key travels in the header, never elsewhere.
        assert harness.auth == [f"Authorization: Bearer {KEY}".encode()] * 4
        assert httpx.get(decode.base_url + "/health", timeout=5).status_code == 200
        assert decode.alive()
    finally:
        decode.stop()
        harness.close()


class SilentPrefillSide:
    """A harness prefill side that takes each call and never answers; it notes when the caller
    closes the connection."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen()
        self.port = self.sock.getsockname()[1]
        self.closed_after = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._hold, args=(conn,), daemon=True).start()

    def _hold(self, conn):
        start = time.monotonic()
        while conn.recv(65536):
            pass
        self.closed_after.append(time.monotonic() - start)

    def close(self):
        self.sock.close()


def test_a_client_leaving_while_the_prefill_side_works_ends_the_call(stories_model, tmp_path):
    harness = SilentPrefillSide()
    decode = decode_side(stories_model, tmp_path, f"http://127.0.0.1:{harness.port}")
    try:
        with pytest.raises(httpx.TimeoutException):
            httpx.post(decode.base_url + "/v1/chat/completions", timeout=1.0, json={
                "messages": [{"role": "user", "content": STORY}], "max_tokens": 8})
        deadline = time.monotonic() + 5
        while not harness.closed_after and time.monotonic() < deadline:
            time.sleep(0.05)
        assert harness.closed_after and harness.closed_after[0] < 3.0, harness.closed_after
        assert metric(decode.base_url, "deepinfer_pd_prefill_failures_total") == 0
        assert httpx.get(decode.base_url + "/health", timeout=5).status_code == 200
    finally:
        decode.stop()
        harness.close()


def test_many_concurrent_prefill_calls_all_get_their_checkpoint(stories_model, tmp_path):
    """More calls at once than the prefill side runs (16): they wait for a slot, none is
    dropped."""
    pair = Pair(stories_model, tmp_path)
    try:
        rng = random.Random(3)
        bodies = [[rng.randrange(3, 500) for _ in range(rng.randrange(17, 60))] for _ in range(48)]
        results = [None] * len(bodies)

        def one(i):
            results[i] = complete(pair.decode.base_url, bodies[i], max_tokens=2)

        threads = [threading.Thread(target=one, args=(i,)) for i in range(len(bodies))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert [r.status_code for r in results] == [200] * len(bodies), \
            [r.text for r in results if r.status_code != 200][:2]
        assert metric(pair.decode.base_url, "deepinfer_pd_prefill_failures_total") == 0
    finally:
        pair.stop()


def test_prefill_side_refuses_internal_calls_without_its_key(stories_model, tmp_path):
    pair = Pair(stories_model, tmp_path)
    try:
        url = pair.prefill.base_url + "/internal/pd/prefill"
        body = {"prompt_token_ids": list(range(3, 40))}
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": KEY}):
            assert_error(httpx.post(url, json=body, headers=headers, timeout=10), 401,
                         "pd_unauthorized")
        ok = httpx.post(url, json=body, headers={"Authorization": f"Bearer {KEY}"}, timeout=60)
        assert ok.status_code == 200, ok.text
        assert ok.json()["num_tokens"] == 32 and ok.json()["checkpoint"].endswith(".dipc")
        assert (tmp_path / ok.json()["checkpoint"]).is_file()
        # Malformed bodies are 400s, not crashes.
        auth = {"Authorization": f"Bearer {KEY}"}
        for bad, code in (("[", "invalid_json"), ('{"prompt_token_ids": []}', "invalid_type"),
                          ('{"prompt_token_ids": [1, -4]}', "invalid_token"),
                          ('{"prompt_token_ids": [1], "cache_salt": "x"}', "invalid_value")):
            assert_error(httpx.post(url, content=bad, headers=auth, timeout=10), 400, code)
        # The decode side and a combined server have no such route.
        assert_error(httpx.post(pair.decode.base_url + "/internal/pd/prefill", json=body,
                                headers=auth, timeout=10), 404, "not_found")
        # A request id reaches the log as plain characters only.
        r = httpx.post(url, headers=auth, timeout=30, json={
            "prompt_token_ids": list(range(3, 40)), "request_id": "x\n\u001b[31mevil"})
        assert r.status_code == 200
        # The request line is logged after the answer is sent, so it may land a moment later.
        assert eventually(lambda: "x???31mevil" in pair.prefill.logs()), pair.prefill.logs()
        assert KEY not in pair.prefill.logs() and KEY not in pair.decode.logs()
    finally:
        pair.stop()


def test_decode_side_with_another_key_gets_503_naming_the_key(stories_model, tmp_path):
    prefill = Server(stories_model, "m", ["--threads", "1", "--pd-role", "prefill",
                                          "--pd-checkpoint-dir", str(tmp_path),
                                          "--model-revision", "r1"])
    os.environ["DEEPINFER_PD_API_KEY"] = "another"
    try:
        decode = decode_side(stories_model, tmp_path, prefill.base_url)
        try:
            r = chat(decode.base_url)
            assert_error(r, 503, "pd_prefill_unavailable")
            assert "DEEPINFER_PD_API_KEY" in r.json()["error"]["message"]
        finally:
            decode.stop()
    finally:
        prefill.stop()


def test_images_on_the_decode_side_are_unsupported_on_pd(stories_model, tmp_path):
    pair = Pair(stories_model, tmp_path)
    try:
        r = httpx.post(pair.decode.base_url + "/v1/chat/completions", timeout=30, json={
            "messages": [{"role": "user", "content": [
                {"type": "text", "text": "what is this?"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]}]})
        assert_error(r, 400, "unsupported_on_pd")
        assert r.json()["error"]["param"].startswith("messages[0].content")
        r = httpx.post(pair.decode.base_url + "/v1/messages", timeout=30, json={
            "model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": [
                {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                             "data": "AAAA"}}]}]})
        assert r.status_code == 400, r.text
        assert r.json()["error"]["type"] == "invalid_request_error"
        assert "prefill/decode" in r.json()["error"]["message"]
        assert chat(pair.decode.base_url).status_code == 200
    finally:
        pair.stop()


def test_corrupt_and_foreign_checkpoints_are_refused_counted_and_recomputed(stories_model,
                                                                            tmp_path):
    text = " ".join(["Once upon a time there was a little dog who liked to run."] * 4)
    combined = Server(stories_model, "m", ["--threads", "1"])
    try:
        want = complete(combined.base_url, text).json()["choices"][0]["text"]
    finally:
        combined.stop()
    pair = Pair(stories_model, tmp_path)
    try:
        corrupt_then_foreign(pair, stories_model, tmp_path, text, want)
    finally:
        pair.stop()


def corrupt_then_foreign(pair, stories_model, tmp_path, text, want):
    try:
        r = complete(pair.decode.base_url, text)
        assert r.json()["choices"][0]["text"] == want
        [path] = list(tmp_path.glob("*.dipc"))
        # Flip one payload byte: the prefill side sees its file and computes nothing; the decode
        # side (on a fresh process: the first one holds the prefix in its cache) refuses it.
        data = bytearray(path.read_bytes())
        data[-10] ^= 0x40
        path.write_bytes(bytes(data))
    finally:
        pair.decode.stop()
    decode = decode_side(stories_model, tmp_path, pair.prefill.base_url)
    try:
        r = complete(decode.base_url, text)
        assert r.status_code == 200, r.text
        assert r.json()["choices"][0]["text"] == want
        assert r.json()["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
        assert metric(decode.base_url, "deepinfer_prefix_checkpoint_rejected_total",
                      'reason="corrupt"') == 1
        assert "ignored" in decode.logs()
        # The damaged file was removed; the next request has it written again and restored.
        r = complete(decode.base_url, text + " Again.")
        assert r.status_code == 200, r.text
        assert r.json()["usage"]["prompt_tokens_details"]["cached_tokens"] > 0
        assert metric(decode.base_url, "deepinfer_prefix_checkpoint_restored_total") == 1
    finally:
        decode.stop()
    for f in tmp_path.glob("*.dipc"):
        f.unlink()
    # A decode side of another revision refuses what the prefill side writes.
    other = decode_side(stories_model, tmp_path, pair.prefill.base_url, revision="r2")
    try:
        r = complete(other.base_url, text)
        assert r.status_code == 200, r.text
        assert r.json()["choices"][0]["text"] == want
        assert metric(other.base_url, "deepinfer_prefix_checkpoint_rejected_total",
                      'reason="wrong_revision"') == 1
    finally:
        other.stop()


def test_prefill_side_that_cannot_write_its_checkpoint_gives_503(stories_model, tmp_path):
    """A budget smaller than one checkpoint stands for a full folder: the prefill side answers
    503 pd_checkpoint_not_written, the decode side 503 pd_prefill_unavailable; prompts shorter
    than a block need no checkpoint and are still served."""
    pair = Pair(stories_model, tmp_path, prefill_extra=["--checkpoint-max-bytes", "1KiB"])
    try:
        long_prompt = list(range(3, 60))
        r = complete(pair.decode.base_url, long_prompt)
        assert_error(r, 503, "pd_prefill_unavailable")
        assert "pd_checkpoint_not_written" in r.json()["error"]["message"]
        assert complete(pair.decode.base_url, [5, 6, 7]).status_code == 200
        assert httpx.get(pair.decode.base_url + "/health", timeout=5).status_code == 200
        assert httpx.get(pair.prefill.base_url + "/health", timeout=5).status_code == 200
    finally:
        pair.stop()


@pytest.mark.parametrize("args,env,expect", [
    (["--pd-role", "decode", "--model-revision", "r"], KEY, "--pd-checkpoint-dir"),
    (["--pd-role", "decode", "--pd-checkpoint-dir", "{tmp}", "--model-revision", "r"], KEY,
     "--pd-prefill-url"),
    (["--pd-role", "decode", "--pd-checkpoint-dir", "{tmp}", "--model-revision", "r",
      "--pd-prefill-url", "https://x:1"], KEY, "--pd-prefill-url"),
    (["--pd-role", "prefill", "--pd-checkpoint-dir", "{tmp}"], KEY, "--model-revision"),
    (["--pd-role", "prefill", "--pd-checkpoint-dir", "{tmp}", "--model-revision", "r"], "",
     "DEEPINFER_PD_API_KEY"),
    (["--pd-role", "prefill", "--pd-checkpoint-dir", "{tmp}/missing", "--model-revision", "r"],
     KEY, "bad_option"),
    (["--pd-checkpoint-dir", "{tmp}"], KEY, "--pd-role"),
    (["--pd-role", "prefill", "--pd-checkpoint-dir", "{tmp}", "--model-revision", "r"],
     "a\r\nX-Injected: 1", "visible ASCII"),
    (["--pd-role", "decode", "--pd-checkpoint-dir", "{tmp}", "--model-revision", "r",
      "--pd-prefill-url", "http://127.0.0.1:1", "--no-prefix-caching"], KEY, "prefix cache"),
])
def test_bad_pd_settings_stop_the_start_with_exit_2(stories_model, tmp_path, args, env, expect,
                                                    monkeypatch):
    monkeypatch.setenv("DEEPINFER_PD_API_KEY", env)
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    r = subprocess.run([str(binary()), "serve", "--model", str(stories_model), "--port",
                        str(free_port()), *args], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2, r.stderr
    assert expect in r.stderr and "bad_option" in r.stderr, r.stderr
    assert KEY not in r.stderr
