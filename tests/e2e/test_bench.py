"""`deepinfer bench` against a real `deepinfer serve` on stories260K: the JSON result is complete,
the numbers are sane, and exit codes mean what they say. Against llama.cpp's `llama-server`: a
fake speaking its API (CI does not build llama-server), and the real one when it is built
(bench/build_llama_server.sh)."""

import http.server
import json
import math
import os
import pathlib
import subprocess
import threading
import time

import pytest

from conftest import REPO, STORIES, Server, binary, free_port, smollm_path, wait_healthy

PERCENTILES = ["p50", "p90", "p99"]
DISTRIBUTION_KEYS = {"count", "mean", "std", "min", "max", *PERCENTILES}
METRIC_KEYS = {
    "num_requests", "completed", "failed", "duration_s", "total_input_tokens",
    "total_output_tokens", "total_cached_tokens", "request_throughput", "output_throughput",
    "total_token_throughput", "peak_output_throughput", "mean_concurrency", "token_counts_from",
    "ttft_ms", "tpot_ms", "itl_ms", "e2el_ms",
}


@pytest.fixture(scope="module")
def server():
    """A server of its own, so the bench's load and prefix-cache traffic stay out of other
    tests' counters."""
    if not STORIES.exists():
        pytest.skip(f"stories260K not found at {STORIES}")
    s = Server(STORIES, "stories260K", ["--threads", "1"])
    yield s
    assert s.alive(), "the server died during the bench:\n" + s.logs()
    s.stop()


def bench(*args, timeout=300):
    return subprocess.run([str(binary()), "bench", "--no-progress", *args], capture_output=True,
                          text=True, timeout=timeout)


def check_distribution(d: dict, count: int):
    assert DISTRIBUTION_KEYS <= d.keys(), d
    assert d["count"] == count
    if count == 0:
        return
    assert 0 <= d["min"] <= d["p50"] <= d["p90"] <= d["p99"] <= d["max"], d
    assert d["min"] <= d["mean"] <= d["max"]
    assert d["std"] >= 0


def test_random_dataset_sweep_gives_complete_sane_json(server, tmp_path):
    out = tmp_path / "random.json"
    r = bench("--base", server.base_url + "/v1", "--model", "stories260K", "--input-len", "64",
              "--output-len", "16", "--concurrency", "1,4", "--num-prompts", "8", "--json",
              str(out), "--label", "e2e")
    assert r.returncode == 0, r.stderr
    # The summary table: a header, a separator and one row per level.
    rows = [line for line in r.stdout.splitlines() if line.startswith("|")]
    assert len(rows) == 4 and "TTFT p50 ms" in rows[0]

    result = json.loads(out.read_text())
    assert result["tool"] == "deepinfer bench" and result["ok"] is True
    assert result["label"] == "e2e"
    assert result["server"] == {"kind": "deepinfer", "model": "stories260K",
                                "max_model_len": 512, "tokenizer": "vllm"}
    config = result["config"]
    assert config["dataset"] == "random" and config["concurrency"] == [1, 4]
    assert config["exact_input_lengths"] is True and config["request_rate"] == "inf"
    assert result["errors"] == []
    assert [run["concurrency"] for run in result["runs"]] == [1, 4]
    for run in result["runs"]:
        m = run["metrics"]
        assert METRIC_KEYS <= m.keys(), m.keys()
        assert m["num_requests"] == 8 and m["completed"] == 8 and m["failed"] == 0
        # Exact lengths: the server's own usage says 64 prompt tokens and (EOS ignored) 16 out.
        assert m["token_counts_from"] == "usage"
        assert m["total_input_tokens"] == 8 * 64
        assert m["total_output_tokens"] == 8 * 16
        assert m["duration_s"] > 0
        assert math.isclose(m["output_throughput"], m["total_output_tokens"] / m["duration_s"],
                            rel_tol=1e-9)
        assert math.isclose(m["request_throughput"], 8 / m["duration_s"], rel_tol=1e-9)
        assert math.isclose(m["total_token_throughput"], (8 * 64 + 8 * 16) / m["duration_s"],
                            rel_tol=1e-9)
        assert 0 < m["mean_concurrency"] <= run["concurrency"] + 1e-6
        check_distribution(m["ttft_ms"], 8)
        check_distribution(m["tpot_ms"], 8)
        check_distribution(m["e2el_ms"], 8)
        assert m["itl_ms"]["count"] > 0
        check_distribution(m["itl_ms"], m["itl_ms"]["count"])
        assert m["ttft_ms"]["p50"] > 0 and m["tpot_ms"]["p50"] > 0
        assert m["e2el_ms"]["min"] >= m["ttft_ms"]["min"]
        # Nothing takes a minute on a 260K-parameter model.
        assert m["e2el_ms"]["max"] < 60_000
        # Random prompts share no prefix blocks with each other.
        assert m["total_cached_tokens"] < 8 * 16


def test_shared_prefix_hot_requests_hit_the_cache(server, tmp_path):
    out = tmp_path / "prefix.json"
    r = bench("--base", server.base_url, "--prefix-len", "256", "--suffix-len", "8",
              "--output-len", "4", "--num-prompts", "3", "--json", str(out))
    assert r.returncode == 0, r.stderr
    result = json.loads(out.read_text())
    assert result["config"]["dataset"] == "shared-prefix"
    (run,) = result["runs"]
    assert run["pairs"] == 3
    assert run["cold"]["completed"] == 3 and run["hot"]["completed"] == 3
    # The hot request reuses the whole-block part of the 256-token prefix.
    assert run["hot_cached_tokens_mean"] >= 240
    assert run["ttft_p50_cold_ms"] > 0 and run["ttft_p50_hot_ms"] > 0
    assert run["ttft_speedup_p50"] == pytest.approx(
        run["ttft_p50_cold_ms"] / run["ttft_p50_hot_ms"])
    check_distribution(run["cold"]["ttft_ms"], 3)
    check_distribution(run["hot"]["ttft_ms"], 3)


def test_needle_mode_reports_every_case(server, tmp_path):
    out = tmp_path / "needle.json"
    r = bench("--base", server.base_url, "--needle", "--needle-output-len", "16", "--json",
              str(out))
    # A 260K-parameter story model retrieves no secret codes: failures, reported as such.
    assert r.returncode in (0, 1), r.stderr
    result = json.loads(out.read_text())
    needle = result["needle"]
    names = [c["name"] for c in needle["cases"]]
    assert names == ["four-needles", "streaming", "multi-turn", "prefix-repeat"]
    assert needle["passed"] + needle["failed"] == 4
    assert r.returncode == (0 if needle["failed"] == 0 else 1)
    assert result["ok"] == (needle["failed"] == 0)
    for case in needle["cases"]:
        assert isinstance(case["pass"], bool)
        assert case["checks"], case
        assert all(len(c["code"]) == 5 and c["needle"] in "ABCD" for c in case["checks"])
        # The haystack fills most of the window but never overflows it.
        assert 200 < case["prompt_tokens"] <= 512
        assert all(t > 0 for t in case["ttft_ms"])
    multi = needle["cases"][2]
    assert len(multi["answers"]) == 3 and {c["needle"] for c in multi["checks"]} == set("ABCD")
    repeat = needle["cases"][3]
    assert len(repeat["cached_tokens"]) == 2 and repeat["cached_tokens"][1] > 0
    assert "needle:" in r.stdout


@pytest.mark.parametrize("args", [
    ["--concurrency", "0"],
    ["--concurrency", "1,x"],
    ["--dataset", "sharegpt"],
    ["--percentiles", "50,101"],
    ["--request-rate", "-1"],
    ["--base", "https://127.0.0.1:1"],
    ["--no-such-flag"],
])
def test_bad_flags_exit_2(server, args):
    base = [] if "--base" in args else ["--base", server.base_url]
    r = bench(*base, *args)
    assert r.returncode == 2, (r.stdout, r.stderr)


def test_unknown_model_exits_2(server):
    r = bench("--base", server.base_url, "--model", "no-such-model")
    assert r.returncode == 2
    assert "model_not_found" in r.stderr


def test_window_overflow_is_refused_before_sending(server):
    r = bench("--base", server.base_url, "--input-len", "500", "--output-len", "64")
    assert r.returncode == 2
    assert "window" in r.stderr


def test_unreachable_server_exits_1():
    r = bench("--base", f"http://127.0.0.1:{free_port()}", "--timeout", "5")
    assert r.returncode == 1
    assert "connect" in r.stderr


class FakeLlamaServer:
    """The API shapes of llama.cpp's `llama-server` (the llama-cpp-python 0.3.36 sdist's tree,
    tools/server/, answers captured from the real one): /v1/models says owned_by "llamacpp" and
    no max_model_len, /props has the slot context; POST /tokenize reads only "content" (anything
    else tokenizes nothing) and adds BOS with add_special; /detokenize answers {"content"};
    /v1/completions streams one token per chunk, honors `ignore_eos` (an answer without it ends
    at EOS after 3 tokens), has no `min_tokens`, and puts usage in the final chunk when
    stream_options.include_usage is set. One word is one token; BOS is id 1."""

    BOS, EOS_AFTER, N_CTX = 1, 3, 512

    def __init__(self):
        self.vocab, self.words = {}, {}
        self.completions = []  # request bodies seen
        self.lock = threading.Lock()
        fake = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def send_json(self, obj, status=200):
                body = json.dumps(obj).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):
                if self.path == "/v1/models":
                    self.send_json({"object": "list", "data": [{
                        "id": "smollm2", "object": "model", "owned_by": "llamacpp",
                        "meta": {"n_ctx": fake.N_CTX, "n_ctx_train": 8192}}]})
                elif self.path == "/props":
                    self.send_json({"default_generation_settings": {"n_ctx": fake.N_CTX},
                                    "total_slots": 2})
                else:
                    self.send_json({"error": {"code": 404, "message": "File Not Found"}}, 404)

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if self.path == "/tokenize":
                    tokens = []
                    if "content" in body:
                        tokens = fake.tokenize(body["content"])
                        if body.get("add_special", False):
                            tokens.insert(0, fake.BOS)
                    self.send_json({"tokens": tokens})
                elif self.path == "/detokenize":
                    self.send_json({"content": " ".join(fake.words[t] for t in body["tokens"]
                                                        if t != fake.BOS)})
                elif self.path == "/v1/completions":
                    self.complete(body)
                else:
                    self.send_json({"error": {"code": 404, "message": "File Not Found"}}, 404)

            def complete(self, body):
                with fake.lock:
                    fake.completions.append(body)
                prompt_tokens = 1 + len(fake.tokenize(body["prompt"]))
                n = body["max_tokens"]
                if not body.get("ignore_eos", False):
                    n = min(n, fake.EOS_AFTER)
                finish = "length" if n == body["max_tokens"] else "stop"
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()

                def event(obj):
                    data = f"data: {json.dumps(obj)}\n\n".encode()
                    self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                    self.wfile.flush()

                for i in range(n):
                    time.sleep(0.002)
                    event({"choices": [{"text": f" w{i}", "index": 0, "logprobs": None,
                                        "finish_reason": None}], "object": "text_completion"})
                final = {"choices": [{"text": "", "index": 0, "logprobs": None,
                                      "finish_reason": finish}], "object": "text_completion"}
                if body.get("stream_options", {}).get("include_usage"):
                    final["usage"] = {"completion_tokens": n, "prompt_tokens": prompt_tokens,
                                      "total_tokens": n + prompt_tokens,
                                      "prompt_tokens_details": {"cached_tokens": 0}}
                event(final)
                done = b"data: [DONE]\n\n"
                self.wfile.write(f"{len(done):x}\r\n".encode() + done + b"\r\n0\r\n\r\n")
                self.wfile.flush()

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def tokenize(self, text):
        with self.lock:
            ids = []
            for w in text.split():
                if w not in self.vocab:
                    self.vocab[w] = len(self.vocab) + 10
                    self.words[self.vocab[w]] = w
                ids.append(self.vocab[w])
            return ids

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def fake_llama_server():
    s = FakeLlamaServer()
    yield s
    s.stop()


def check_llama_server_result(result, n, input_len, output_len, bos_tokens, window):
    assert result["server"] == {"kind": "llama.cpp", "model": "smollm2",
                                "max_model_len": window, "tokenizer": "llama.cpp"}
    assert result["config"]["exact_input_lengths"] is True
    assert result["config"]["bos_tokens"] == bos_tokens
    assert result["ok"] is True and result["errors"] == []
    for run in result["runs"]:
        m = run["metrics"]
        assert m["completed"] == n and m["failed"] == 0
        assert m["token_counts_from"] == "usage"
        # Exact prompt lengths through POST /tokenize {content}, and exactly --output-len
        # tokens out: llama-server has no min_tokens, its ignore_eos does it.
        assert m["total_input_tokens"] == n * input_len
        assert m["total_output_tokens"] == n * output_len
        assert m["tpot_ms"]["count"] == n and m["itl_ms"]["count"] == n * (output_len - 1)


def test_llama_server_dialect_exact_lengths(fake_llama_server, tmp_path):
    out = tmp_path / "llama.json"
    r = bench("--base", fake_llama_server.base_url, "--input-len", "40", "--output-len", "12",
              "--concurrency", "1,2", "--num-prompts", "4", "--json", str(out))
    assert r.returncode == 0, r.stderr
    assert "llama.cpp server, window 512, tokenizer llama.cpp" in r.stderr
    check_llama_server_result(json.loads(out.read_text()), 4, 40, 12, 1, 512)
    measured = [b for b in fake_llama_server.completions if b["max_tokens"] == 12]
    assert len(measured) == 8
    assert all(b["ignore_eos"] is True and b["stream"] is True and
               b["stream_options"] == {"include_usage": True} for b in measured)


def test_llama_server_window_from_props(fake_llama_server):
    # /v1/models has no max_model_len: the slot context of /props (512) bounds the requests.
    r = bench("--base", fake_llama_server.base_url, "--input-len", "500", "--output-len", "64")
    assert r.returncode == 2
    assert "window of 512" in r.stderr


def llama_server_bin():
    cache = pathlib.Path(os.environ.get("DEEPINFER_CACHE") or
                         pathlib.Path.home() / ".cache" / "deepinfer")
    for d in (os.environ.get("LLAMA_BIN"), cache / "llama.cpp" / "build" / "bin"):
        if d and (pathlib.Path(d) / "llama-server").exists():
            return pathlib.Path(d) / "llama-server"
    return None


def test_real_llama_server(tmp_path):
    """The real llama-server, when bench/build_llama_server.sh has built it (never in CI)."""
    exe = llama_server_bin()
    if exe is None:
        pytest.skip("llama-server not built (bench/build_llama_server.sh, or LLAMA_BIN=DIR)")
    if not smollm_path().exists():
        pytest.skip(f"SmolLM2 not found at {smollm_path()}")
    port = free_port()
    log = tmp_path / "llama-server.log"
    # --no-repack: ggml's AMX kernels crash on some hosts; this test is about the API.
    with open(log, "w") as f:
        proc = subprocess.Popen([str(exe), "-m", str(smollm_path()), "-a", "smollm2", "-t", "1",
                                 "--parallel", "2", "-c", "2048", "--no-repack", "--host",
                                 "127.0.0.1", "--port", str(port)], stdout=f,
                                stderr=subprocess.STDOUT, cwd=REPO)
    try:
        base = f"http://127.0.0.1:{port}"
        wait_healthy(base, proc, 120, "llama-server", lambda: log.read_text()[-3000:])
        out = tmp_path / "real.json"
        r = bench("--base", base, "--input-len", "48", "--output-len", "8", "--concurrency",
                  "2", "--num-prompts", "4", "--json", str(out))
        assert r.returncode == 0, r.stderr
        # SmolLM2 adds no BOS; each slot holds 2048 / 2 tokens.
        check_llama_server_result(json.loads(out.read_text()), 4, 48, 8, 0, 1024)
    finally:
        proc.terminate()
        proc.wait(timeout=20)
