#!/usr/bin/env python3
"""Prefix checkpoints (`serve --prefix-checkpoint-dir`): TTFT of a long prompt cold (computed),
hot (in the prefix cache of the same server) and restored (a server restarted on the checkpoint
folder: read, verified, copied into the KV cache), and checkpoint bytes per token.

For each prefix length: a fresh folder and server; the prompt (random words, a token each for
SmolLM2) sent streamed with max_tokens 1 -> cold; again -> hot; the server stopped once its
checkpoint is written; a new server on the folder; the prompt -> restored (its cached_tokens
checked). Medians of --repeats, load average recorded. --deepseek-v4 DIR serves the tiny
DeepSeek-V4 recipe (window raised to --max-model-len) with random token-id prompts, for
prefixes longer than SmolLM2's 8,192-token window.

Usage: python3 bench/prefix_checkpoint.py [--deepinfer build/deepinfer] [--json out.json] > out.md
"""

import argparse
import json
import os
import pathlib
import random
import statistics
import subprocess
import sys
import tempfile
import time

import httpx

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import data_parallel  # noqa: E402
from fairness import text  # noqa: E402
from runtime_vs_llamacpp import load_average  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[1]
CACHE = pathlib.Path(os.environ.get("DEEPINFER_CACHE", pathlib.Path.home() / ".cache/deepinfer"))


def make_deepseek_v4(args, out: pathlib.Path) -> str:
    """The tiny DeepSeek-V4 recipe (tests/golden/deepseek_v4/v4_flash_tiny: mHC, CSA/HCA
    compression at 4 and 128, sliding window, MoE, MTP) with its window raised to
    --max-model-len, written by the build's synthetic_checkpoint tool with the toy tokenizer."""
    golden = REPO / "tests" / "golden" / "deepseek_v4" / "v4_flash_tiny"
    out.mkdir(parents=True, exist_ok=True)
    config = json.loads((golden / "config.json").read_text())
    config["max_position_embeddings"] = args.max_model_len
    (out / "config.json").write_text(json.dumps(config))
    (out / "weights.json").write_bytes((golden / "weights.json").read_bytes())
    toy = REPO / "tests" / "golden" / "deepseek_v3" / "v3_direct_q"
    for f in ("tokenizer.json", "tokenizer_config.json"):
        (out / f).write_bytes((toy / f).read_bytes())
    tool = pathlib.Path(args.deepinfer).parent / "synthetic_checkpoint"
    subprocess.run([str(tool), str(out), str(out)], check=True, capture_output=True)
    return str(out)


class Serve(data_parallel.Serve):
    def __init__(self, args, folder: str):
        super().__init__(args, ["--max-model-len", str(args.max_model_len), "--kv-cache-memory",
                                args.kv_cache_memory, "--prefix-checkpoint-dir", folder,
                                "--checkpoint-min-tokens", "512"])

    def metric(self, name: str) -> float:
        for line in httpx.get(self.base + "/metrics", timeout=10).text.splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
        return 0.0

    def ttft(self, prompt: str) -> tuple:
        """(seconds to the first token, prompt tokens, cached tokens) of one streamed request."""
        start = time.monotonic()
        first, usage = None, None
        with httpx.stream("POST", self.base + "/v1/completions", timeout=900, json={
                "prompt": prompt, "max_tokens": 1, "temperature": 0, "stream": True,
                "stream_options": {"include_usage": True}}) as r:
            for line in r.iter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                event = json.loads(line[6:])
                if first is None and event.get("choices"):
                    first = time.monotonic() - start
                if event.get("usage"):
                    usage = event["usage"]
        return first, usage["prompt_tokens"], usage["prompt_tokens_details"]["cached_tokens"]


def one(args, words: int, seed: int) -> dict:
    if args.token_ids:  # random token ids below the vocabulary given
        rng = random.Random(seed)
        prompt = [rng.randrange(3, args.token_ids) for _ in range(words)]
    else:
        prompt = text(words, seed)
    with tempfile.TemporaryDirectory(prefix="dipc-bench-") as folder:
        a = Serve(args, folder)
        try:
            cold, prompt_tokens, _ = a.ttft(prompt)
            hot, _, hot_cached = a.ttft(prompt)
            deadline = time.monotonic() + 60
            while a.metric("deepinfer_prefix_checkpoint_saved_total") < 1:
                if time.monotonic() > deadline:
                    sys.exit("no checkpoint was written")
                time.sleep(0.05)
        finally:
            a.stop()
        files = list(pathlib.Path(folder).glob("*.dipc"))
        size = sum(f.stat().st_size for f in files)
        b = Serve(args, folder)
        try:
            restored, _, restored_cached = b.ttft(prompt)
            restore_s = b.metric("deepinfer_prefix_checkpoint_restore_seconds_total")
        finally:
            b.stop()
    return {"prompt_tokens": prompt_tokens, "cold_s": cold, "hot_s": hot, "hot_cached": hot_cached,
            "restored_s": restored, "restored_cached": restored_cached, "read_verify_s": restore_s,
            "file_bytes": size}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--deepinfer", default=str(REPO / "build" / "deepinfer"))
    ap.add_argument("--model", default=str(CACHE / "models/SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--lengths", default="1000,2000,7000",
                    help="prompt words (about tokens), or tokens with --token-ids")
    ap.add_argument("--token-ids", type=int, default=0,
                    help="prompts of random token ids below this vocabulary size instead of words")
    ap.add_argument("--max-model-len", type=int, default=8192)
    ap.add_argument("--kv-cache-memory", default="1GiB")
    ap.add_argument("--deepseek-v4", metavar="DIR",
                    help="serve the tiny DeepSeek-V4 recipe, written into DIR (implies "
                         "--token-ids 320)")
    ap.add_argument("--json")
    args = ap.parse_args()
    if args.deepseek_v4:
        args.model = make_deepseek_v4(args, pathlib.Path(args.deepseek_v4))
        args.token_ids = args.token_ids or 320
    lengths = [int(x) for x in args.lengths.split(",")]
    rows = {n: [] for n in lengths}
    loads = [load_average()]
    for rep in range(args.repeats):
        for n in (lengths if rep % 2 == 0 else lengths[::-1]):
            rows[n].append(one(args, n, 100 * rep + n))
        loads.append(load_average())
        print(f"[{rep + 1}/{args.repeats}] load {loads[-1]}", file=sys.stderr)

    def med(rs, key):
        return statistics.median(r[key] for r in rs)

    print(f"Model `{pathlib.Path(args.model).name}`, --threads {args.threads}, f32 KV cache, "
          f"median of {args.repeats}; load average at start and after each repeat: "
          f"{' | '.join(loads)}.\n")
    print("| prompt tokens | cold TTFT s | restored TTFT s | hot TTFT s | cold / restored | "
          "restored tokens | read + verify s | checkpoint MiB | bytes per token |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for n in lengths:
        rs = rows[n]
        print(f"| {med(rs, 'prompt_tokens'):.0f} | {med(rs, 'cold_s'):.3f} | "
              f"{med(rs, 'restored_s'):.3f} | {med(rs, 'hot_s'):.3f} | "
              f"{med(rs, 'cold_s') / med(rs, 'restored_s'):.1f}x | "
              f"{med(rs, 'restored_cached'):.0f} | {med(rs, 'read_verify_s'):.3f} | "
              f"{med(rs, 'file_bytes') / 2**20:.1f} | "
              f"{med(rs, 'file_bytes') / max(1, med(rs, 'restored_cached')):.0f} |")
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps({"loads": loads, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
