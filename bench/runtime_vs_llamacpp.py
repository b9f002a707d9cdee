#!/usr/bin/env python3
"""Single-stream runtime speed: deepinfer vs llama.cpp (through llama-cpp-python) on one GGUF.

Both engines, in the same run, alternating, each in its own process (so peak RSS is per engine):
  prefill: one forward pass over a random prompt of --prompt-tokens tokens (n_batch = 512);
  decode:  --gen-tokens single-token forward passes after it (EOS ignored).
deepinfer runs `deepinfer generate --random-prompt-tokens N --max-tokens M --ignore-eos --json`;
llama.cpp runs Llama.eval() on the same number of random non-special tokens, then M single-token
evals of the greedy token. Each pair is repeated --repeats times; medians are reported.

Also measured here: the machine's read bandwidth (bench/membw.cc, 1 GiB buffer, 1 and N
threads) and the weight bytes each decode step reads (from the GGUF's tensor sizes), so decode
speed is shown as a fraction of the roofline.

Usage (from the repo root):
  /tmp/refvenv/bin/python bench/runtime_vs_llamacpp.py --deepinfer build/deepinfer \
      --model ~/.cache/deepinfer/models/SmolLM2-135M-Instruct.Q4_1.gguf --threads 2 \
      --json bench/results/runtime.json > bench/results/runtime.md
Needs: llama-cpp-python and gguf in the interpreter running it; /usr/bin/time; a C++ compiler.
"""

import argparse
import json
import os
import pathlib
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parents[1]


def load_average() -> str:
    return " ".join(pathlib.Path("/proc/loadavg").read_text().split()[:3])


def run_timed(cmd: list) -> tuple:
    """Runs cmd under /usr/bin/time -v; returns (stdout, peak RSS in MiB)."""
    with tempfile.NamedTemporaryFile(mode="r", suffix=".time") as t:
        p = subprocess.run(["/usr/bin/time", "-v", "-o", t.name, *cmd], capture_output=True,
                           text=True)
        if p.returncode != 0:
            sys.exit(f"failed ({p.returncode}): {' '.join(cmd)}\n{p.stderr[-2000:]}")
        m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", t.read())
        return p.stdout, int(m.group(1)) / 1024.0 if m else float("nan")


def llamacpp_child(args) -> None:
    """Runs inside the child process: measures llama.cpp and prints one JSON line."""
    import numpy as np
    from llama_cpp import Llama

    llm = Llama(model_path=args.model, n_threads=args.threads, n_threads_batch=args.threads,
                n_batch=512, n_ubatch=512, n_ctx=args.prompt_tokens + args.gen_tokens + 16,
                verbose=False)
    rng = random.Random(args.seed)
    n_vocab = llm.n_vocab()
    # Ordinary tokens only, as `deepinfer generate --random-prompt-tokens` draws them.
    import llama_cpp
    vocab = llama_cpp.llama_model_get_vocab(llm._model.model)
    special = {t for t in range(n_vocab) if llama_cpp.llama_vocab_is_control(vocab, t)
               or llama_cpp.llama_vocab_is_eog(vocab, t)}
    prompt = []
    while len(prompt) < args.prompt_tokens:
        t = rng.randrange(n_vocab)
        if t not in special:
            prompt.append(t)
    # Warm-up on a short prompt so first-touch page faults of the weights are not timed
    # (deepinfer's generate pays them at load as well).
    llm.eval(prompt[:8])
    llm.reset()
    t0 = time.perf_counter()
    llm.eval(prompt)
    t1 = time.perf_counter()
    for _ in range(args.gen_tokens):
        # Greedy, as deepinfer's run: the logits of the last evaluated token.
        logits = np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(n_vocab,))
        token = int(np.argmax(logits))
        llm.eval([token])
    t2 = time.perf_counter()
    print(json.dumps({"prefill_tokens_per_s": args.prompt_tokens / (t1 - t0),
                      "decode_tokens_per_s": args.gen_tokens / (t2 - t1)}))


def weight_bytes_per_token(model: str) -> dict:
    """Bytes of weights one decode step reads: every tensor once, except that the token embedding
    is read one row at a time unless it doubles as the output matrix (tied)."""
    from gguf import GGUFReader

    reader = GGUFReader(model)
    sizes = {t.name: int(t.n_bytes) for t in reader.tensors}
    total = sum(sizes.values())
    embd = sizes.get("token_embd.weight", 0)
    tied = "output.weight" not in sizes
    per_token = total if tied else total - embd
    return {"file_tensor_bytes": total, "bytes_per_decode_token": per_token, "tied_output": tied}


def build_membw(out_dir: pathlib.Path) -> pathlib.Path:
    exe = out_dir / "membw"
    src = REPO / "bench" / "membw.cc"
    if not exe.exists() or exe.stat().st_mtime < src.stat().st_mtime:
        subprocess.run([os.environ.get("CXX", "c++"), "-O3", "-march=native", "-pthread",
                        str(src), "-o", str(exe)], check=True)
    return exe


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--deepinfer", default=str(REPO / "build" / "deepinfer"))
    ap.add_argument("--model", default=os.path.expanduser(
        "~/.cache/deepinfer/models/SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompt-tokens", type=int, default=512)
    ap.add_argument("--gen-tokens", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", help="write raw results here")
    ap.add_argument("--child", choices=["llamacpp"], help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child == "llamacpp":
        llamacpp_child(args)
        return

    load_before = load_average()
    tmp = pathlib.Path(tempfile.gettempdir())
    membw = json.loads(subprocess.run([str(build_membw(tmp)), "--threads", f"1,{args.threads}",
                                       "--json"], capture_output=True, text=True,
                                      check=True).stdout)
    bw_gbps = max(membw["read_gbps"].values())
    weights = weight_bytes_per_token(args.model)

    runs = {"deepinfer": [], "llama.cpp": []}
    for rep in range(args.repeats):
        out, rss = run_timed([args.deepinfer, "generate", "--model", args.model,
                              "--random-prompt-tokens", str(args.prompt_tokens), "--max-tokens",
                              str(args.gen_tokens), "--ignore-eos", "--threads",
                              str(args.threads), "--seed", str(args.seed + rep), "--json"])
        j = json.loads(out.strip().splitlines()[-1])
        runs["deepinfer"].append({"prefill": j["prefill_tokens_per_s"],
                                  "decode": j["decode_tokens_per_s"], "rss_mib": rss})
        out, rss = run_timed([sys.executable, __file__, "--child", "llamacpp", "--model",
                              args.model, "--threads", str(args.threads), "--prompt-tokens",
                              str(args.prompt_tokens), "--gen-tokens", str(args.gen_tokens),
                              "--seed", str(args.seed + rep)])
        j = json.loads(out.strip().splitlines()[-1])
        runs["llama.cpp"].append({"prefill": j["prefill_tokens_per_s"],
                                  "decode": j["decode_tokens_per_s"], "rss_mib": rss})
        print(f"repeat {rep + 1}: deepinfer {runs['deepinfer'][-1]}, "
              f"llama.cpp {runs['llama.cpp'][-1]}", file=sys.stderr)
    load_after = load_average()

    med = {k: {m: statistics.median(r[m] for r in v) for m in ("prefill", "decode", "rss_mib")}
           for k, v in runs.items()}
    bpt = weights["bytes_per_decode_token"]
    rows = []
    for name in ("deepinfer", "llama.cpp"):
        m = med[name]
        eff = m["decode"] * bpt / 1e9
        rows.append(f"| {name} | {m['prefill']:.1f} | {m['decode']:.1f} | {eff:.2f} | "
                    f"{100 * eff / bw_gbps:.0f}% | {m['rss_mib']:.0f} |")
    d, l = med["deepinfer"], med["llama.cpp"]
    print(f"Model: `{pathlib.Path(args.model).name}`, {args.threads} threads, prompt "
          f"{args.prompt_tokens} tokens, {args.gen_tokens} generated; median of {args.repeats} "
          f"alternating runs. Load average before/after: {load_before} / {load_after}.\n")
    print("| engine | prefill tok/s | decode tok/s | decode weight GB/s | of measured BW | "
          "peak RSS MiB |")
    print("|---|---|---|---|---|---|")
    print("\n".join(rows))
    print(f"| **ratio deepinfer / llama.cpp** | **{d['prefill'] / l['prefill']:.2f}x** | "
          f"**{d['decode'] / l['decode']:.2f}x** | | | |")
    print(f"\nMeasured read bandwidth (1 GiB buffer): "
          + ", ".join(f"{k} thread(s) {v:.1f} GB/s" for k, v in membw["read_gbps"].items())
          + f". Weight bytes read per decode token: {bpt / 1e6:.1f} MB "
          f"(tied output: {weights['tied_output']}).")
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps({
            "model": args.model, "threads": args.threads, "prompt_tokens": args.prompt_tokens,
            "gen_tokens": args.gen_tokens, "repeats": args.repeats, "load_before": load_before,
            "load_after": load_after, "membw": membw, "weights": weights, "runs": runs,
            "median": med}, indent=2) + "\n")


if __name__ == "__main__":
    main()
