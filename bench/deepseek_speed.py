#!/usr/bin/env python3
"""DeepSeek-V3-shaped speed: decode and prefill on BF16 and FP8 checkpoints, bandwidth roofline,
8 streams, and the speedup of MTP speculative decoding.

Checkpoints come from bench/make_deepseek_bench_model.py (made on first use, under --models):
  main/{bf16,fp8}   ~0.9B parameters: 4 layers (1 dense), hidden 1024, MLA, 64 routed experts
                    top-6 + 1 shared, DeepSeek-V3 vocabulary, 1 MTP module.
  mtp-moe/bf16      8 MoE layers (1 dense), toy 320-token vocabulary, MTP head copied so drafts
                    are mostly accepted (see the generator's docstring).
  mtp-dense/bf16    the same with dense MLPs in every layer (no routed experts).

Measured:
  1 stream   `deepinfer generate --random-prompt-tokens P --max-tokens G --ignore-eos --json`,
             median of --repeats runs: prefill and decode tokens/s, peak RSS. Decode bandwidth =
             active weight bytes per token (attention, dense MLP or router + shared + top-k
             experts, lm_head, as stored in memory: BF16, since FP8 is dequantized at load) x
             decode tokens/s, over bench/membw.cc's measured read bandwidth.
  8 streams  `deepinfer serve` + `deepinfer bench` (random prompts of P tokens, G output tokens,
             concurrency 1 and 8): output tokens/s, TPOT.
  MTP        serve with --speculative-tokens 0, 1, 2 on the MTP checkpoints, concurrency 1:
             output tokens/s, TPOT, acceptance rate and acceptance length from /metrics.

Usage: python bench/deepseek_speed.py [--deepinfer build/deepinfer] [--models /tmp/ds-bench]
           [--json bench/results/deepseek.json] > bench/results/deepseek.md
Needs numpy (for the generator), /usr/bin/time and a C++ compiler (membw).

bench/deepseek_v4_speed.py and bench/deepseek_v41_speed.py use its helpers: generate /
run_generate, serve_and_bench, measure_bandwidth and active_bytes (V4-family shard headers).
"""

import argparse
import json
import pathlib
import re
import statistics
import subprocess
import sys
import tempfile
import urllib.request

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
from runtime_vs_llamacpp import build_membw, load_average, run_timed  # noqa: E402
from serve_vs_llamacpp import Engine, RssSampler, free_port  # noqa: E402

TOY_TOKENIZER = REPO / "tests" / "golden" / "deepseek_v3" / "v3_direct_q"
CHECKPOINTS = {
    "main": ["--kinds", "bf16,fp8"],
    "mtp-moe": ["--vocab-size", "320", "--layers", "8", "--kinds", "bf16", "--output-scale",
                "0.03", "--tokenizer-dir", str(TOY_TOKENIZER)],
    "mtp-dense": ["--vocab-size", "320", "--layers", "8", "--dense-layers", "9", "--kinds",
                  "bf16", "--output-scale", "0.03", "--tokenizer-dir", str(TOY_TOKENIZER)],
}


def ensure_checkpoint(models: pathlib.Path, name: str) -> pathlib.Path:
    d = models / name
    kinds = CHECKPOINTS[name][CHECKPOINTS[name].index("--kinds") + 1].split(",")
    if not all((d / k / "model.safetensors").exists() for k in kinds):
        subprocess.run([sys.executable, str(REPO / "bench" / "make_deepseek_bench_model.py"),
                        "--out", str(d), *CHECKPOINTS[name]], check=True)
    return d


def active_weights(config: dict) -> dict:
    """Weights one decode token reads (counts of values), from the HF config."""
    h, v = config["hidden_size"], config["vocab_size"]
    nh = config["num_attention_heads"]
    dn, dr, dv = config["qk_nope_head_dim"], config["qk_rope_head_dim"], config["v_head_dim"]
    rq, rkv = config["q_lora_rank"], config["kv_lora_rank"]
    q = h * nh * (dn + dr) if rq is None else h * rq + rq * nh * (dn + dr)
    attn = q + h * (rkv + dr) + rkv * nh * (dn + dv) + nh * dv * h
    dense = 3 * h * config["intermediate_size"]
    expert = 3 * h * config["moe_intermediate_size"]
    moe = (h * config["n_routed_experts"]
           + (config["num_experts_per_tok"] + config["n_shared_experts"]) * expert)
    layers = config["num_hidden_layers"]
    n_dense = min(config["first_k_dense_replace"], layers)
    per_token = layers * attn + n_dense * dense + (layers - n_dense) * moe + v * h
    return {"attention": layers * attn, "mlp": n_dense * dense + (layers - n_dense) * moe,
            "lm_head": v * h, "per_token": per_token}


def generate(args, model: pathlib.Path) -> dict:
    out, rss = run_timed([args.deepinfer, "generate", "--model", str(model),
                          "--random-prompt-tokens", str(args.prompt_tokens), "--max-tokens",
                          str(args.gen_tokens), "--ignore-eos", "--threads", str(args.threads),
                          "--json"])
    r = json.loads(out.strip().splitlines()[-1])
    r["peak_rss_mib"] = rss
    return r


def run_generate(args, model: pathlib.Path, prompt: int, gen: int, repeats: int) -> dict:
    """`generate` of a random prompt of `prompt` tokens and `gen` new ones, `repeats` times:
    the runs and the medians of prefill and decode tokens/s, the highest peak RSS."""
    a = argparse.Namespace(**vars(args))
    a.prompt_tokens, a.gen_tokens = prompt, gen
    runs = [generate(a, model) for _ in range(repeats)]
    return {"runs": runs,
            "prefill": statistics.median(r["prefill_tokens_per_s"] for r in runs),
            "decode": statistics.median(r["decode_tokens_per_s"] for r in runs),
            "peak_rss_mib": max(r["peak_rss_mib"] for r in runs)}


def measure_bandwidth(args) -> dict:
    """bench/membw.cc at 1 and --threads threads (its binary beside --deepinfer when the build
    made one, else compiled into the temporary folder); `read_gbps` by thread count."""
    exe = pathlib.Path(args.deepinfer).parent / "membw"
    if not exe.exists():
        exe = build_membw(pathlib.Path(tempfile.gettempdir()))
    return json.loads(subprocess.run([str(exe), "--threads", f"1,{args.threads}", "--json"],
                                     capture_output=True, text=True, check=True).stdout)


def active_bytes(model: pathlib.Path, experts_per_tok: int, n_experts: int,
                 engram_columns: int = 0) -> dict:
    """Bytes one decode token reads, by part, from the safetensors headers (as stored) of a
    DeepSeek-V4 / V4.1 checkpoint in native names: routed experts k/E of theirs, every other
    matrix whole, the embedding one row (left out), an Engram table `engram_columns` rows."""
    header = {}
    for shard in sorted(model.glob("*.safetensors")):
        with open(shard, "rb") as f:
            n = int.from_bytes(f.read(8), "little")
            header.update(json.loads(f.read(n)))
    parts = {"attention": 0, "experts": 0, "shared+router": 0, "head": 0, "engram": 0,
             "mixers": 0}
    total_on_disk = 0
    for name, t in header.items():
        if name == "__metadata__":
            continue
        size = t["data_offsets"][1] - t["data_offsets"][0]
        total_on_disk += size
        if name == "embed.weight":
            continue  # one row per token
        if ".engram.embed." in name:  # the table (and its scales): the hashed rows only
            parts["engram"] += size / t["shape"][0] * engram_columns
        elif ".engram." in name:
            parts["engram"] += size
        elif ".ffn.experts." in name:
            parts["experts"] += size * experts_per_tok / n_experts
        elif ".ffn." in name:
            parts["shared+router"] += size
        elif name in ("head.weight", "lm_head.weight"):
            parts["head"] += size
        elif ".attn." in name:
            parts["attention"] += size
        else:
            parts["mixers"] += size
    parts["per_token"] = sum(parts.values())
    parts["on_disk"] = total_on_disk
    return parts


def metric_sum(base: str, name: str) -> float:
    with urllib.request.urlopen(base + "/metrics", timeout=10) as resp:
        text = resp.read().decode()
    return sum(float(m.group(1)) for m in re.finditer(rf"^{re.escape(name)}(?:{{[^}}]*}})? (\S+)$",
                                                       text, re.M))


def serve_and_bench(args, model: pathlib.Path, concurrency: str, extra_serve: list,
                    input_len: int, output_len: int, num_prompts: int) -> dict:
    port = free_port()
    engine = Engine("deepinfer", [args.deepinfer, "serve", "--model", str(model), "--threads",
                                  str(args.threads), "--host", "127.0.0.1", "--port", str(port),
                                  "--served-model-name", "ds", "--max-model-len", "4096",
                                  *extra_serve], port, "/health")
    try:
        with RssSampler(engine.proc.pid) as rss, tempfile.TemporaryDirectory() as tmp:
            out = pathlib.Path(tmp) / "bench.json"
            p = subprocess.run([args.deepinfer, "bench", "--base", engine.base, "--model", "ds",
                                "--input-len", str(input_len), "--output-len", str(output_len),
                                "--concurrency", concurrency, "--num-prompts", str(num_prompts),
                                "--no-progress", "--json", str(out)], capture_output=True,
                               text=True)
            if p.returncode != 0:
                sys.exit(f"deepinfer bench failed: {p.stderr[-2000:]}")
            result = json.loads(out.read_text())
        result["peak_rss_mib"] = rss.peak_kib / 1024
        # serve's start-up lines on the cache ("KV cache: N tokens, B bytes per token ...",
        # "window cache: ..."), logged once the engine is ready
        result["startup_log"] = [line for line in pathlib.Path(engine.log.name).read_text(
            errors="replace").splitlines() if "KV cache:" in line or "window cache:" in line]
        result["drafts"] = metric_sum(engine.base, "vllm:spec_decode_num_drafts_total")
        result["draft_tokens"] = metric_sum(engine.base, "vllm:spec_decode_num_draft_tokens_total")
        result["accepted"] = metric_sum(engine.base, "vllm:spec_decode_num_accepted_tokens_total")
        return result
    finally:
        engine.stop()


def level(result: dict, c: int) -> dict:
    return next(r["metrics"] for r in result["runs"] if r["concurrency"] == c)


def finish(results: dict, json_path) -> None:
    """Records and prints the load average after a run, and writes the raw results to
    `json_path` (if given): the common end of the DeepSeek speed scripts."""
    results["load_after"] = load_average()
    print(f"\nLoad average after: {results['load_after']}.")
    if json_path:
        pathlib.Path(json_path).write_text(json.dumps(results, indent=1) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--deepinfer", default=str(REPO / "build" / "deepinfer"))
    ap.add_argument("--models", default="/tmp/ds-bench", help="where checkpoints are made")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompt-tokens", type=int, default=512)
    ap.add_argument("--gen-tokens", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", help="write raw results here")
    args = ap.parse_args()
    models = pathlib.Path(args.models)
    main_dir = ensure_checkpoint(models, "main")
    mtp_dirs = {name: ensure_checkpoint(models, name) for name in ("mtp-moe", "mtp-dense")}

    load_before = load_average()
    membw = measure_bandwidth(args)
    bw_gbps = max(membw["read_gbps"].values())
    config = json.loads((main_dir / "bf16" / "config.json").read_text())
    weights = active_weights(config)
    bytes_per_token = 2 * weights["per_token"]  # BF16 in memory for both checkpoints

    results = {"load_before": load_before, "membw": membw, "active_weights": weights,
               "config": config, "single": {}, "streams": {}, "mtp": {}}
    print(f"DeepSeek-V3-shaped random checkpoints, {args.threads} threads. Load average before: "
          f"{load_before}. Measured read bandwidth: "
          + ", ".join(f"{k} thread(s) {v:.1f} GB/s" for k, v in membw["read_gbps"].items())
          + f". Active weights per decode token: {weights['per_token'] / 1e6:.1f} M "
          f"({bytes_per_token / 1e6:.0f} MB in BF16; lm_head {weights['lm_head'] / 1e6:.1f} M).\n")

    print(f"One stream, prompt {args.prompt_tokens} tokens, {args.gen_tokens} generated, "
          f"median of {args.repeats}:\n")
    print("| checkpoint | prefill tok/s | decode tok/s | active weight GB/s | of measured BW "
          "| peak RSS MiB |")
    print("|---|---|---|---|---|---|")
    for kind in ("bf16", "fp8"):
        runs = [generate(args, main_dir / kind) for _ in range(args.repeats)]
        prefill = statistics.median(r["prefill_tokens_per_s"] for r in runs)
        decode = statistics.median(r["decode_tokens_per_s"] for r in runs)
        rss = max(r["peak_rss_mib"] for r in runs)
        gbps = decode * bytes_per_token / 1e9
        results["single"][kind] = {"runs": runs, "prefill": prefill, "decode": decode,
                                   "weight_gbps": gbps, "bw_fraction": gbps / bw_gbps}
        print(f"| {kind} | {prefill:.1f} | {decode:.1f} | {gbps:.1f} | {100 * gbps / bw_gbps:.0f}% "
              f"| {rss:.0f} |", flush=True)

    print(f"\nServing: random prompts of {args.prompt_tokens // 2} tokens, {args.gen_tokens} "
          "output tokens, 16 requests per level:\n")
    print("| checkpoint | streams | out tok/s | TPOT p50 ms | TTFT p50 ms | peak RSS MiB |")
    print("|---|---|---|---|---|---|")
    for kind in ("bf16", "fp8"):
        r = serve_and_bench(args, main_dir / kind, "1,8", [], args.prompt_tokens // 2,
                            args.gen_tokens, 16)
        results["streams"][kind] = r
        for c in (1, 8):
            m = level(r, c)
            print(f"| {kind} | {c} | {m['output_throughput']:.1f} | {m['tpot_ms']['p50']:.1f} | "
                  f"{m['ttft_ms']['p50']:.0f} | {r['peak_rss_mib']:.0f} |", flush=True)

    print("\nMTP speculative decoding, one stream, prompts of 128 tokens, 256 output tokens "
          "(greedy), 4 requests:\n")
    print("| checkpoint | --speculative-tokens | out tok/s | TPOT p50 ms | acceptance rate "
          "| acceptance length | speedup |")
    print("|---|---|---|---|---|---|---|")
    for name, d in mtp_dirs.items():
        base = None
        for n in (0, 1, 2):
            extra = ["--speculative-tokens", str(n)] if n else []
            r = serve_and_bench(args, d / "bf16", "1", extra, 128, 256, 4)
            m = level(r, 1)
            base = base or m["output_throughput"]
            rate = r["accepted"] / r["draft_tokens"] if r["draft_tokens"] else 0.0
            length = 1 + r["accepted"] / r["drafts"] if r["drafts"] else 1.0
            results["mtp"][f"{name}/{n}"] = {"result": r, "acceptance_rate": rate,
                                             "acceptance_length": length}
            print(f"| {name} | {n} | {m['output_throughput']:.1f} | {m['tpot_ms']['p50']:.2f} | "
                  f"{100 * rate:.0f}% | {length:.2f} | {m['output_throughput'] / base:.2f}x |",
                  flush=True)
    finish(results, args.json)


if __name__ == "__main__":
    main()
