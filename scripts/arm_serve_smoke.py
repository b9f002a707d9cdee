#!/usr/bin/env python3
"""The `serve` smoke of the aarch64 stage (scripts/run_arm_tests.sh): the cross-built deepinfer
serves stories260K under qemu-aarch64, and one greedy chat completion and one streamed one must
be well-formed and agree; with --native, the native build's server must give the same greedy
text for the same request. Stops each server with SIGTERM and requires exit status 0.

Usage: scripts/arm_serve_smoke.py ARM_DEEPINFER MODEL [--native NATIVE_DEEPINFER] [--log-dir D]
Exit status 0 when every check passes, 1 on the first failure (with the server's log tail).
Python's standard library only (it runs before and without .venv).
"""

import argparse
import http.client
import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import time

MODEL_NAME = "stories260K"
# Greedy and short: qemu decodes stories260K at some tens of tokens a second, and the fewer the
# tokens, the less room a last-bit difference between NEON and x86 sums has to flip a near-tie
# (the parity tests bound those differences; this checks the server around them).
REQUEST = {
    "model": MODEL_NAME,
    "messages": [{"role": "user", "content": "Tell me a story about a cat."}],
    "max_tokens": 16,
    "temperature": 0,
}
# qemu starts the process and maps the model in a few seconds; generous for a loaded CI host.
READY_TIMEOUT_S = 120
REQUEST_TIMEOUT_S = 120
STOP_TIMEOUT_S = 30


class SmokeError(Exception):
    pass


def check(cond, what):
    if not cond:
        raise SmokeError(what)


class Server:
    """A `deepinfer serve` process on a port it picks itself (--port 0: no race for a free
    port), read back from its `listening on` line."""

    def __init__(self, argv, model, what, log_path):
        self.what = what
        self.log_path = log_path
        self.log = open(log_path, "wb")
        self.proc = subprocess.Popen(
            argv + ["serve", "--model", str(model), "--served-model-name", MODEL_NAME,
                    "--host", "127.0.0.1", "--port", "0",
                    # The default 2 GiB of KV cache is untouched memory, but qemu need not
                    # reserve it: stories260K's 512-token window needs 640 KiB.
                    "--kv-cache-memory", "64MiB"],
            stdout=self.log, stderr=subprocess.STDOUT)
        self.port = None

    def logs(self):
        self.log.flush()
        return pathlib.Path(self.log_path).read_text(errors="replace")[-4000:]

    def wait_ready(self):
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            check(self.proc.poll() is None,
                  f"{self.what} exited with {self.proc.returncode} before it was ready")
            if self.port is None:
                m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", self.logs())
                if m:
                    self.port = int(m.group(1))
            if self.port is not None:
                try:
                    status, _, _ = self.request("GET", "/health", None, timeout=5)
                    if status == 200:
                        return
                except OSError:
                    pass
            time.sleep(0.2)
        raise SmokeError(f"{self.what} was not ready within {READY_TIMEOUT_S} s")

    def request(self, method, path, body, timeout=REQUEST_TIMEOUT_S):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            conn.request(method, path, body=None if body is None else json.dumps(body),
                         headers={"Content-Type": "application/json"})
            resp = conn.getresponse()
            return resp.status, resp.getheader("Content-Type", ""), resp.read()
        finally:
            conn.close()

    def stop(self):
        """SIGTERM, then the clean exit (status 0) the API promises (docs/api.md)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise SmokeError(f"{self.what} did not exit within {STOP_TIMEOUT_S} s of SIGTERM")
        self.log.close()
        check(self.proc.returncode == 0,
              f"{self.what} exited with {self.proc.returncode} after SIGTERM")


def chat(server):
    """The greedy non-streamed answer: (text, completion_tokens)."""
    status, ctype, body = server.request("POST", "/v1/chat/completions", REQUEST)
    check(status == 200, f"chat: HTTP {status}: {body[:500]!r}")
    check(ctype.startswith("application/json"), f"chat: Content-Type {ctype!r}")
    doc = json.loads(body)
    check(doc.get("object") == "chat.completion", f"chat: object {doc.get('object')!r}")
    check(doc.get("model") == MODEL_NAME, f"chat: model {doc.get('model')!r}")
    choice = doc["choices"][0]
    text = choice["message"]["content"]
    check(choice["message"]["role"] == "assistant", "chat: role is not assistant")
    check(isinstance(text, str) and text.strip(), f"chat: no text: {choice!r}")
    check(choice["finish_reason"] in ("stop", "length"),
          f"chat: finish_reason {choice['finish_reason']!r}")
    usage = doc["usage"]
    check(usage["prompt_tokens"] > 0 and 0 < usage["completion_tokens"] <= REQUEST["max_tokens"],
          f"chat: usage {usage!r}")
    check(usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"],
          f"chat: usage {usage!r}")
    return text, usage["completion_tokens"]


def stream(server):
    """The same request streamed: (concatenated deltas, completion_tokens of its usage chunk)."""
    body = dict(REQUEST, stream=True, stream_options={"include_usage": True})
    status, ctype, raw = server.request("POST", "/v1/chat/completions", body)
    check(status == 200, f"stream: HTTP {status}: {raw[:500]!r}")
    check(ctype.startswith("text/event-stream"), f"stream: Content-Type {ctype!r}")
    events = [line[len("data: "):] for line in raw.decode().split("\n")
              if line.startswith("data: ")]
    check(events and events[-1] == "[DONE]", f"stream: does not end with [DONE]: {events[-2:]!r}")
    text, finish, usage = "", None, None
    for event in events[:-1]:
        chunk = json.loads(event)
        check(chunk.get("object") == "chat.completion.chunk",
              f"stream: object {chunk.get('object')!r}")
        for choice in chunk["choices"]:
            text += choice["delta"].get("content") or ""
            finish = choice["finish_reason"] or finish
        usage = chunk.get("usage") or usage
    check(finish in ("stop", "length"), f"stream: finish_reason {finish!r}")
    check(usage is not None, "stream: no usage chunk (stream_options.include_usage)")
    return text, usage["completion_tokens"]


def run(argv, model, what, log_path):
    """Starts a server, returns its greedy (text, tokens) after checking the streamed answer is
    the same, and stops it."""
    t0 = time.monotonic()
    server = Server(argv, model, what, log_path)
    try:
        server.wait_ready()
        ready_s = time.monotonic() - t0
        text, tokens = chat(server)
        streamed, streamed_tokens = stream(server)
        check((streamed, streamed_tokens) == (text, tokens),
              f"{what}: the streamed answer {streamed!r} ({streamed_tokens} tokens) is not the "
              f"greedy one {text!r} ({tokens} tokens)")
        server.stop()
    except (SmokeError, OSError, ValueError, KeyError, IndexError, TypeError) as e:
        print(f"arm64 serve smoke: FAILED: {what}: {type(e).__name__}: {e}\n"
              f"--- {server.log_path} (tail) ---\n{server.logs()}", file=sys.stderr)
        if server.proc.poll() is None:
            server.proc.kill()
            server.proc.wait()
        sys.exit(1)
    print(f"arm64 serve smoke: {what}: ready in {ready_s:.1f} s, answered in "
          f"{time.monotonic() - t0 - ready_s:.1f} s: {text!r} ({tokens} tokens)")
    return text, tokens


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("arm_binary", type=pathlib.Path)
    parser.add_argument("model", type=pathlib.Path)
    parser.add_argument("--native", type=pathlib.Path,
                        help="the native build's deepinfer, whose greedy text must be the same")
    parser.add_argument("--log-dir", type=pathlib.Path, default=pathlib.Path("."))
    args = parser.parse_args()

    # QEMU_CPU (run_arm_tests.sh sets it) reaches qemu through the environment.
    arm = run(["qemu-aarch64", str(args.arm_binary)], args.model, "aarch64 serve under qemu",
              args.log_dir / "serve-smoke.log")
    if args.native is None:
        print("arm64 serve smoke: no native deepinfer given; greedy text not compared")
        return
    native = run([str(args.native)], args.model, "native serve",
                 args.log_dir / "serve-smoke-native.log")
    if arm != native:
        print(f"arm64 serve smoke: FAILED: greedy answers differ: aarch64 {arm[0]!r} "
              f"({arm[1]} tokens), native {native[0]!r} ({native[1]} tokens)", file=sys.stderr)
        sys.exit(1)
    print("arm64 serve smoke: the aarch64 greedy answer is the native one")


if __name__ == "__main__":
    main()
