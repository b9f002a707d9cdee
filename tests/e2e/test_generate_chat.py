"""`deepinfer generate --chat` as a person uses it: on a real pseudo-terminal (line editing, Up
recalls a prompt, Ctrl-C stops a reply, Ctrl-C on an empty line exits 130, Ctrl-D exits 0), and
from a pipe (plain lines, as scripts use it)."""

import os
import pty
import re
import select
import signal
import subprocess
import termios
import time

import pytest

from conftest import binary, smollm_path

UP = b"\x1b[A"
CTRL_C = b"\x03"
CTRL_D = b"\x04"
PROMPT = re.compile(rb"(^|\n)> ")
# 300 bytes past the echoed prompt: well into a reply, and far from its end at 4000 tokens.
REPLY_UNDER_WAY = re.compile(rb"(?s).{300}")
STATS = re.compile(rb"\[prefill \d+ tokens .*? decode (\d+) tokens .*?finish: (\w+)\]")


class Terminal:
    """One process on its own pseudo-terminal; expect() waits for output, send() types."""

    def __init__(self, args, home):
        self.pid, self.fd = pty.fork()
        if self.pid == 0:  # the child: its stdin, stdout and stderr are the terminal
            try:
                env = dict(os.environ, TERM="xterm", HOME=str(home))  # not the user's ~/.editrc
                os.execve(args[0], args, env)
            finally:
                os._exit(127)
        self.seen = b""  # everything read so far
        self.pos = 0  # where the next expect() starts looking

    def expect(self, pattern, timeout_s=60):
        regex = re.compile(pattern) if isinstance(pattern, bytes) else pattern
        deadline = time.monotonic() + timeout_s
        while True:
            m = regex.search(self.seen, self.pos)
            if m:
                self.pos = m.end()
                return m
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no {regex.pattern!r} within {timeout_s}s; the terminal "
                                     f"shows:\n{self.seen[-3000:].decode(errors='replace')}")
            ready, _, _ = select.select([self.fd], [], [], min(left, 0.2))
            if ready:
                try:
                    chunk = os.read(self.fd, 65536)
                except OSError:  # EIO: the child closed the terminal
                    chunk = b""
                if not chunk:
                    raise AssertionError(f"the process ended before {regex.pattern!r}:\n"
                                         f"{self.seen[-3000:].decode(errors='replace')}")
                self.seen += chunk

    def prompt(self, timeout_s=60):
        """Waits for the prompt and for libedit to have the terminal: typed before that, keys go
        through the terminal's line discipline (echoed twice, and Ctrl-D taken as end of input)."""
        self.expect(PROMPT, timeout_s)
        deadline = time.monotonic() + timeout_s
        # On Linux the leader side reports the follower's modes; libedit clears ICANON.
        while termios.tcgetattr(self.fd)[3] & termios.ICANON:
            assert time.monotonic() < deadline, "libedit did not take the terminal"
            time.sleep(0.01)

    def send(self, data: bytes):
        os.write(self.fd, data)

    def wait_exit(self, timeout_s=30):
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            # Keep draining so the child never blocks on a full terminal.
            ready, _, _ = select.select([self.fd], [], [], 0.1)
            if ready:
                try:
                    self.seen += os.read(self.fd, 65536)
                except OSError:
                    pass
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.pid = 0
                return os.waitstatus_to_exitcode(status)
        raise AssertionError(f"still running after {timeout_s}s:\n"
                             f"{self.seen[-3000:].decode(errors='replace')}")

    def close(self):
        if self.pid:
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
            self.pid = 0
        os.close(self.fd)


@pytest.fixture()
def chat(tmp_path):
    if not smollm_path().exists():
        pytest.skip(f"SmolLM2 not found at {smollm_path()}")
    terminals = []

    def start(*flags):
        t = Terminal([str(binary()), "generate", "--model", str(smollm_path()), "--chat",
                      "--temperature", "0", "--threads", "2", *flags], tmp_path)
        terminals.append(t)
        t.expect(rb"Ctrl-C stops a reply; Ctrl-C on an empty line or Ctrl-D exits\.")
        t.prompt()
        return t

    yield start
    for t in terminals:
        t.close()


def test_terminal_chat_answers_recalls_history_and_ctrl_d_exits_0(chat):
    t = chat("--max-tokens", "12")
    question = b"What is the capital of France?"
    t.send(question + b"\r")
    first = t.expect(STATS)
    assert int(first.group(1)) > 0
    t.prompt()

    # Up brings the question back onto the line (nothing typed but the key), Enter sends it.
    t.send(UP)
    t.expect(re.escape(question))
    t.send(b"\r")
    t.expect(STATS)
    t.prompt()

    # Line editing: Ctrl-A goes to the start of the line, so "Say " lands before "café" (whose
    # two-byte UTF-8 character must come back whole).
    t.send("café\x01Say \r".encode())
    t.expect(STATS)
    t.prompt()
    t.send(UP)
    t.expect("Say café".encode())
    t.send(b"\x15")  # Ctrl-U: clear the recalled line
    t.expect(rb"\x1b\[K")  # (the line's display is erased)

    # Ctrl-C with text on the line drops the text and keeps the chat going.
    # (Ctrl-C waits for the echo: the terminal signals at once and drops unread input.)
    t.send(b"never sent")
    t.expect(rb"never sent")
    t.send(CTRL_C)
    t.expect(rb"\^C")
    t.prompt()
    t.send(CTRL_D)
    assert t.wait_exit() == 0
    assert t.seen.count(b"[prefill ") == 3  # "never sent" was not answered


def test_ctrl_c_stops_a_long_reply_and_ctrl_c_again_exits_130(chat):
    t = chat("--max-tokens", "4000", "--ignore-eos")
    t.send(b"Tell me a very long story about a dragon.\r")
    t.expect(rb"dragon\.\r\n")  # the echoed line
    t.expect(REPLY_UNDER_WAY, timeout_s=60)
    t.send(CTRL_C)
    stats = t.expect(STATS, timeout_s=20)
    assert stats.group(2) == b"interrupted"
    assert 0 < int(stats.group(1)) < 4000
    t.prompt(timeout_s=10)

    # The chat goes on after a stopped reply.
    t.send(b"Thanks.\r")
    t.expect(rb"Thanks\.\r\n")
    t.expect(REPLY_UNDER_WAY, timeout_s=60)
    t.send(CTRL_C)
    assert t.expect(STATS, timeout_s=20).group(2) == b"interrupted"
    t.prompt(timeout_s=10)

    # Ctrl-C on the empty prompt right after one that stopped a reply: the chat ends.
    t.send(CTRL_C)
    assert t.wait_exit() == 130


def test_piped_chat_reads_plain_lines_and_ends_at_an_empty_line():
    if not smollm_path().exists():
        pytest.skip(f"SmolLM2 not found at {smollm_path()}")
    r = subprocess.run([str(binary()), "generate", "--model", str(smollm_path()), "--chat",
                        "--max-tokens", "8", "--temperature", "0", "--threads", "2"],
                       input="What is the capital of France?\n\nnot read\n", capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "Empty line or end of input ends." in r.stderr
    assert r.stderr.count("[prefill ") == 1  # the line after the empty one was not answered
    assert r.stdout.strip()
