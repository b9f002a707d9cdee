#!/usr/bin/env python3
"""PNG plots of the benchmark results for docs/benchmarks.md (matplotlib, bench/requirements.txt).

  python3 bench/plots.py serve bench/results/serve/summary.json docs/images/serve_throughput.png
      output tokens/s against concurrent streams, one line per engine (median over repeats,
      with every repeat as a dot), from bench/serve_vs_llamacpp.py's summary.json;
  python3 bench/plots.py runtime bench/results/runtime_llama_bench.json docs/images/decode_vs_context.png
      decode tokens/s against context length and prefill tokens/s against prompt length, one
      line per engine, from bench/runtime_vs_llama_bench.py's JSON.
"""

import json
import pathlib
import statistics
import sys


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    return plt


def serve_throughput(summary: dict, png: pathlib.Path) -> None:
    plt = _pyplot()
    levels = summary["levels"]
    fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=120)
    for name, per_level in summary["results"].items():
        medians, dots = [], []
        for c in levels:
            vals = [r["metrics"]["output_throughput"] for r in per_level[str(c)] if r["metrics"]]
            medians.append(statistics.median(vals) if vals else float("nan"))
            dots += [(c, v) for v in vals]
        line, = ax.plot(levels, medians, marker="o", label=name)
        ax.scatter([d[0] for d in dots], [d[1] for d in dots], s=10, color=line.get_color(),
                   alpha=0.4)
    args = summary.get("args", {})
    ax.set_xscale("log", base=2)
    ax.set_xticks(levels, [str(c) for c in levels])
    ax.set_xlabel("concurrent streams")
    ax.set_ylabel("output tokens/s")
    ax.set_ylim(bottom=0)
    ax.set_title(f"{pathlib.Path(args.get('model', 'model')).name}: "
                 f"{args.get('input_len', '?')} in / {args.get('output_len', '?')} out, "
                 f"{args.get('threads', '?')} threads", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png)


def runtime(result: dict, png: pathlib.Path) -> None:
    plt = _pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4.0), dpi=120)
    for ax, part in ((left, "prefill"), (right, "decode")):
        ticks = set()
        for name, rows in result[part].items():
            if not rows:
                continue
            xs = sorted(int(n) for n in rows)
            ticks.update(xs)
            ax.plot(xs, [rows[str(n)]["median"] for n in xs], marker="o", label=name)
        ax.set_xscale("log", base=2)
        ax.set_xticks(sorted(ticks), [f"{t:,}" for t in sorted(ticks)])
    for ax, what, unit in ((left, "prompt tokens", "prefill tokens/s"),
                           (right, "context tokens before decoding", "decode tokens/s")):
        ax.minorticks_off()
        ax.set_xlabel(what)
        ax.set_ylabel(unit)
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"{result['model']}, {result['threads']} threads", fontsize=10)
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png)


def main() -> None:
    if len(sys.argv) != 4 or sys.argv[1] not in ("serve", "runtime"):
        sys.exit(__doc__)
    data = json.loads(pathlib.Path(sys.argv[2]).read_text())
    {"serve": serve_throughput, "runtime": runtime}[sys.argv[1]](data, pathlib.Path(sys.argv[3]))


if __name__ == "__main__":
    main()
