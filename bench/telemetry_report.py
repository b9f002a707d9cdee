#!/usr/bin/env python3
"""Summarizes a serve run's batch telemetry (DEEPINFER_BATCH_TELEMETRY_DIR, docs/engine.md).

  python3 bench/telemetry_report.py DIR RUN_ID [--plot out.png] [--json out.json]

Reads DIR/RUN_ID.rank*.jsonl and prints, per rank: steps, step time p50/p90/p99, the batch
(decode sequences, prefill tokens) per step, requests and how many have a whole lifecycle
(arrived, queued, then first_scheduled and first_token as far as the request got, then
finished or cancelled, in time order), and records dropped. --plot draws batch size and step time over the run (one
panel each, a line per rank). Exit status 1 when a file does not parse or a request's events
are out of order.
"""

import argparse
import collections
import json
import pathlib
import statistics
import sys


def pct(values, p):
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


ORDER = ["arrived", "queued", "first_scheduled", "first_token"]


def read_rank(path: pathlib.Path) -> dict:
    steps, requests, start, end = [], collections.defaultdict(list), None, None
    for n, line in enumerate(path.read_text().splitlines(), 1):
        try:
            r = json.loads(line)
        except json.JSONDecodeError as e:
            sys.exit(f"{path}:{n}: not JSON ({e})")
        kind = r.get("type")
        if kind == "step":
            steps.append(r)
        elif kind == "request":
            requests[r["seq"]].append(r)
        elif kind == "start":
            start = r
        elif kind == "end":
            end = r
    problems = []
    complete = 0
    for seq, events in requests.items():
        names = [e["event"] for e in events]
        times = [e["t_unix"] for e in events]
        # arrived, queued, then as far as it got (first_scheduled, first_token), then the end.
        body = names[:-1]
        if (names and names[-1] in ("finished", "cancelled") and 2 <= len(body) <= len(ORDER)
                and body == ORDER[:len(body)]):
            complete += 1
        else:
            problems.append(f"seq {seq}: events {names}")
        if times != sorted(times):
            problems.append(f"seq {seq}: times out of order")
    return {"start": start, "end": end, "steps": steps, "requests": requests,
            "complete": complete, "problems": problems}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir")
    ap.add_argument("run_id")
    ap.add_argument("--plot")
    ap.add_argument("--json")
    args = ap.parse_args()
    files = sorted(pathlib.Path(args.dir).glob(f"{args.run_id}.rank*.jsonl"))
    if not files:
        sys.exit(f"no {args.run_id}.rank*.jsonl in {args.dir}")
    ranks = {int(f.name.rsplit(".rank", 1)[1].split(".")[0]): read_rank(f) for f in files}
    summary = {}
    print("| rank | steps | step ms p50 / p90 / p99 | decode seqs p50 / max | prefill tokens per "
          "step p50 / max | requests | complete lifecycles | dropped |")
    print("|---:|---:|---|---|---|---:|---:|---:|")
    bad = False
    for rank, d in sorted(ranks.items()):
        dur = [s["duration_ms"] for s in d["steps"]]
        dec = [s["decode_seqs"] for s in d["steps"]]
        pre = [s["prefill_tokens"] for s in d["steps"]]
        dropped = d["end"]["dropped"] if d["end"] else "no end record"
        print(f"| {rank} | {len(dur)} | {pct(dur, 50):.2f} / {pct(dur, 90):.2f} / "
              f"{pct(dur, 99):.2f} | {pct(dec, 50)} / {max(dec, default=0)} | {pct(pre, 50)} / "
              f"{max(pre, default=0)} | {len(d['requests'])} | {d['complete']} | {dropped} |")
        for p in d["problems"][:10]:
            print(f"  rank {rank}: {p}", file=sys.stderr)
        bad = bad or bool(d["problems"])
        summary[rank] = {"steps": len(dur), "step_ms_p50": pct(dur, 50), "step_ms_p99": pct(dur, 99),
                         "requests": len(d["requests"]), "complete": d["complete"],
                         "dropped": dropped}
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(summary, indent=1) + "\n")
    if args.plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 5), dpi=120, sharex=True)
        t0 = min(s["start_unix"] for d in ranks.values() for s in d["steps"][:1]) if any(
            d["steps"] for d in ranks.values()) else 0
        for rank, d in sorted(ranks.items()):
            t = [s["start_unix"] - t0 for s in d["steps"]]
            top.plot(t, [s["decode_seqs"] + s["prefill_seqs"] for s in d["steps"]],
                     drawstyle="steps-post", label=f"rank {rank}")
            bottom.plot(t, [s["duration_ms"] for s in d["steps"]], ".", markersize=2,
                        label=f"rank {rank}")
        top.set_ylabel("sequences in the step")
        bottom.set_ylabel("step time ms")
        bottom.set_xlabel("seconds since the first step")
        for ax in (top, bottom):
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8)
        fig.suptitle(f"batch telemetry {args.run_id}", fontsize=10)
        fig.tight_layout()
        fig.savefig(args.plot)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
