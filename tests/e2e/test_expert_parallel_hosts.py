"""Expert parallelism across two hosts, simulated on one machine: two network namespaces joined
by a veth pair (10.231.0.1 and 10.231.0.2) stand in for the hosts. mpirun runs in namespace A
and starts rank 1's daemon in namespace B through netns_rsh.sh, an rsh agent doing
`ip netns exec` where ssh would log in; the ranks talk over TCP only (ob1 with the tcp and self
BTLs, no shared memory) on the veth subnet, and both "hosts" see the same checkpoint path.
`deepinfer generate` gives transformers' greedy tokens on DeepSeek-V4, and a served greedy chat
(rank 0 listening on A's address, asked by a client thread that entered A with setns) the text
and log-probabilities of a one-process server; each rank's namespace is checked, and the
veth's byte counters show the MoE rows crossed the link.
Needs root (CAP_SYS_ADMIN) for `ip netns add`; skipped without it."""

import concurrent.futures
import contextlib
import ctypes
import json
import os
import pathlib
import shutil
import signal
import subprocess
import tempfile
import types

import pytest

from conftest import Server, binary, wait_healthy
from test_expert_parallel import MPI_ENV, PROMPTS, V4, chat, chat_v4, v4  # noqa: F401 (fixtures)

HOSTS = ("10.231.0.1", "10.231.0.2")  # seen only inside the two namespaces: no clash
SUBNET = "10.231.0.0/24"
RSH = pathlib.Path(__file__).with_name("netns_rsh.sh")
CLONE_NEWNET = 0x40000000


def ip(*args):
    return subprocess.run(["ip", *args], check=True, capture_output=True, text=True, timeout=10)


class Hosts:
    """Two network namespaces, `ns[0]` (host A, HOSTS[0]) and `ns[1]` (host B, HOSTS[1])."""

    def __init__(self, tag):
        self.ns = [f"deepinfer-{tag}-a", f"deepinfer-{tag}-b"]
        self.dev = ["ep-a", "ep-b"]  # made inside their namespaces: no clash with other runs

    def create(self):
        ip("netns", "add", self.ns[1])
        ip("link", "add", self.dev[0], "netns", self.ns[0], "type", "veth", "peer", "name",
           self.dev[1], "netns", self.ns[1])
        for ns, dev, addr in zip(self.ns, self.dev, HOSTS):
            ip("-n", ns, "addr", "add", addr + "/24", "dev", dev)
            ip("-n", ns, "link", "set", dev, "up")
            ip("-n", ns, "link", "set", "lo", "up")

    def remove(self):
        """Kills what still runs in the namespaces (by pid: a failed test's ranks and daemons),
        then deletes them; the veth pair goes with them."""
        for ns in self.ns:
            if not pathlib.Path("/run/netns", ns).exists():
                continue
            pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True,
                                  timeout=10).stdout.split()
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(pid), signal.SIGKILL)
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=10)

    def inode(self, ns):
        return os.stat(f"/run/netns/{ns}").st_ino

    def link_bytes(self):
        """Bytes through host A's end of the veth, both directions: all that crossed the link."""
        out = ip("-j", "-s", "-n", self.ns[0], "link", "show", self.dev[0]).stdout
        stats = json.loads(out)[0]["stats64"]
        return stats["rx"]["bytes"] + stats["tx"]["bytes"]

    def mpirun(self):
        """mpirun in namespace A with one rank per host, TCP only on the veth subnet (the daemon
        link too), rank 1's daemon started by netns_rsh.sh."""
        return ["ip", "netns", "exec", self.ns[0], "mpirun", "-np", "2",
                "--host", f"{HOSTS[0]}:1,{HOSTS[1]}:1", "--bind-to", "none",
                "--mca", "plm_rsh_agent", str(RSH),
                "--mca", "pml", "ob1", "--mca", "btl", "tcp,self",
                "--mca", "btl_tcp_if_include", SUBNET, "--mca", "oob_tcp_if_include", SUBNET]

    def env(self):
        return {**MPI_ENV, "NETNS_RSH_HOSTS": " ".join(f"{a}={n}" for a, n in zip(HOSTS, self.ns))}

    def client(self):
        """A one-thread pool whose thread has entered namespace A (setns(2) moves only the
        calling thread), for HTTP clients that reach rank 0 there."""
        libc = ctypes.CDLL(None, use_errno=True)

        def enter():
            with open(f"/run/netns/{self.ns[0]}") as f:
                if libc.setns(f.fileno(), CLONE_NEWNET) != 0:
                    raise OSError(ctypes.get_errno(), "setns into " + self.ns[0])

        return concurrent.futures.ThreadPoolExecutor(1, initializer=enter)

    def rank_namespaces(self, launcher_pid):
        """The namespace (index into `ns`) of each deepinfer process under `launcher_pid`."""
        parent = {}
        for d in pathlib.Path("/proc").iterdir():
            with contextlib.suppress(OSError, IndexError):
                if d.name.isdigit():
                    stat = (d / "stat").read_text()
                    parent[int(d.name)] = (int(stat.rsplit(")", 1)[1].split()[1]),
                                           stat[stat.index("(") + 1:stat.rindex(")")])
        inodes = {self.inode(ns): i for i, ns in enumerate(self.ns)}
        found = {}
        for pid, (_, comm) in parent.items():
            up = pid
            while up in parent and up != launcher_pid:
                up = parent[up][0]
            if comm == "deepinfer" and up == launcher_pid:
                found[pid] = inodes.get(os.stat(f"/proc/{pid}/ns/net").st_ino)
        return found


@pytest.fixture(scope="module")
def hosts():
    if shutil.which("ip") is None:
        pytest.skip("ip not found (install iproute2)")
    h = Hosts(f"ep{os.getpid()}")
    try:
        ip("netns", "add", h.ns[0])
    except subprocess.CalledProcessError as e:
        h.remove()
        pytest.skip(f"cannot create network namespaces (needs root or CAP_SYS_ADMIN): "
                    f"{e.stderr.strip()}")
    try:
        h.create()
        yield h
    finally:
        h.remove()


def moe_row_bytes(model):
    """What the allgather of one token's MoE output moves across the link in one layer (the
    row crosses once: its owner is on one host, the other host needs it), over all layers:
    every layer of the tiny DeepSeek-V4 is a MoE layer, rows are `hidden_size` floats."""
    config = json.loads((model / "config.json").read_text())
    return config["num_hidden_layers"] * config["hidden_size"] * 4


def test_generate_across_hosts_equals_transformers(hosts, v4):
    golden = json.loads((V4 / "golden.json").read_text())
    prompt = golden["prompts"][golden["greedy_prompt_index"]]
    want = golden["greedy_tokens"]
    before = hosts.link_bytes()
    r = subprocess.run(hosts.mpirun() + [
        str(binary()), "generate", "--expert-parallel", "--threads", "1", "--model", str(v4),
        "--prompt-ids", ",".join(map(str, prompt)), "--max-tokens", str(len(want)),
        "--ignore-eos", "--print-ids"], capture_output=True, text=True, timeout=60,
        env=hosts.env())
    moved = hosts.link_bytes() - before
    assert r.returncode == 0, r.stdout + r.stderr
    assert [int(t) for t in r.stdout.strip().split(",")] == want
    # Prefill rows and one row per later token, at least once over the veth: shared memory
    # between the ranks would leave the link with the daemons' few KB only.
    rows = len(prompt) + len(want) - 1
    assert moved >= rows * moe_row_bytes(v4), moved


def test_served_chat_across_hosts_equals_one_process(hosts, chat_v4):
    """Rank 0 in A listens on A's address; the client is a thread in A. The same greedy text
    and top-5 log-probabilities as a one-process server in this namespace; rank 0 stops the
    group across the link on SIGTERM."""
    one = Server(chat_v4, "ep", ["--threads", "2"])
    try:
        want = chat(one, PROMPTS[0])
    finally:
        one.stop()
    base_url = f"http://{HOSTS[0]}:8000"  # namespace A is new: any port is free
    log = tempfile.NamedTemporaryFile(prefix="deepinfer-ep-hosts-", suffix=".log")
    proc = subprocess.Popen(hosts.mpirun() + [
        str(binary()), "serve", "--expert-parallel", "--threads", "1", "--model", str(chat_v4),
        "--host", HOSTS[0], "--port", "8000", "--served-model-name", "ep",
        "--allow-unauthenticated"],  # only namespace A reaches the address
        stdout=log, stderr=subprocess.STDOUT, env=hosts.env())

    def logs():
        return pathlib.Path(log.name).read_text(errors="replace")[-4000:]

    try:
        with hosts.client() as client:
            client.submit(wait_healthy, base_url, proc, 60, "mpirun ... serve", logs).result()
            ranks = hosts.rank_namespaces(proc.pid)
            assert sorted(ranks.values()) == [0, 1], (ranks, logs())  # one rank per host
            before = hosts.link_bytes()
            got = client.submit(chat, types.SimpleNamespace(base_url=base_url),
                                PROMPTS[0]).result(timeout=120)
            moved = hosts.link_bytes() - before
        assert got == want
        assert moved >= len(got[1]) * moe_row_bytes(chat_v4), moved
        rank0 = next(pid for pid, ns in ranks.items() if ns == 0)
        os.kill(rank0, signal.SIGTERM)  # it tells rank 1 to stop, over the link
        assert proc.wait(timeout=30) == 0, logs()
        assert "rank 1 done (rank 0 stopped)" in logs()
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        log.close()
