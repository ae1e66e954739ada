#!/usr/bin/env python3
"""The figures of docs/benchmarks.md, drawn from recorded runs, never by hand.

    plot_bench.py --out DIR RECORD.jsonl...

Each RECORD line is one run as `scripts/bench.sh --record FILE` writes it:
{"server": ..., "kind": "uncontended" | "contended" | "flash-sale",
 "result": <distlock bench or flash-sale --json>}. Writes to DIR:
  cycle.svg       per backend URL, the uncontended acquire+release cycle (p50,
                  median of the runs) beside its floor, two round trips of the
                  backend's own (what a cycle cannot do with less);
  handoff.svg     per backend URL, the contended hand-off (4 processes on one
                  name) in the backend's round trips: p50 and p99 of each run;
  flash-sale.svg  per backend URL, the flash sale's time with 1 stock segment
                  and with 10 (median of the runs).
Each figure names the record files it was drawn from. SVG metadata carries no
date, so that the same records give the same files.
"""
import argparse
import json
import statistics
import sys
from collections import OrderedDict
from pathlib import Path

import matplotlib

matplotlib.use("svg")
import matplotlib.pyplot as plt  # noqa: E402

matplotlib.rcParams["svg.hashsalt"] = "distlock"  # stable ids
matplotlib.rcParams["font.size"] = 9


def label(record):
    """A short name for the URL: scheme and strategy (no host, no secrets)."""
    url = record["result"]["backend"]
    scheme = url.split("://", 1)[0]
    strategy = ""
    if "?" in url:
        for part in url.split("?", 1)[1].split("&"):
            key, _, value = part.partition("=")
            if key in ("strategy", "wake", "engine", "fence"):
                strategy += (" " if strategy else "") + (value if key == "strategy" else key + "=" + value)
    return scheme + (" " + strategy if strategy else "")


def grouped(records, kind):
    out = OrderedDict()
    for r in records:
        if r["kind"] == kind:
            out.setdefault(label(r), []).append(r["result"])
    return out


def save(fig, path, sources):
    fig.text(0.01, 0.005, "drawn by tools/bench/plot_bench.py from " + ", ".join(sources), fontsize=6, color="0.4")
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    fig.savefig(path, metadata={"Date": None, "Creator": "distlock tools/bench/plot_bench.py"})
    plt.close(fig)
    print("wrote", path)


def paired_bars(names, first, second, note, xlabel, title, path, sources):
    """Two horizontal bars per name, (values, label, colour) each, the second
    annotated with note(first value, second value)."""
    fig, ax = plt.subplots(figsize=(8, 0.35 * len(names) + 1.2))
    y = range(len(names))
    ax.barh([i - 0.2 for i in y], first[0], height=0.4, label=first[1], color=first[2])
    ax.barh([i + 0.2 for i in y], second[0], height=0.4, label=second[1], color=second[2])
    for i, (a, b) in enumerate(zip(first[0], second[0])):
        ax.text(b, i + 0.2, note(a, b), va="center", fontsize=7)
    ax.set_yticks(list(y), names)
    ax.invert_yaxis()
    ax.set_xlabel(xlabel)
    ax.set_title(title)
    ax.legend(loc="lower right", fontsize=7)
    save(fig, path, sources)


def cycle(records, out, sources):
    runs = grouped(records, "uncontended")
    names = [n for n, rs in runs.items() if any(r.get("floor_rtt_us") for r in rs)]
    if not names:
        return
    p50 = [statistics.median(r["p50_us"] for r in runs[n]) for n in names]
    floor = [statistics.median(2 * r["floor_rtt_us"] for r in runs[n] if r.get("floor_rtt_us")) for n in names]
    paired_bars(names, (floor, "floor: two round trips of the backend", "0.7"), (p50, "distlock cycle, p50", "C0"),
                lambda a, b: " %.2fx" % (b / a), "microseconds (median of the runs)",
                "Uncontended acquire + release, beside its floor", out / "cycle.svg", sources)


def handoff(records, out, sources):
    runs = grouped(records, "contended")
    names = [n for n, rs in runs.items() if any("handoff_p50_rt" in r for r in rs)]
    if not names:
        return
    fig, ax = plt.subplots(figsize=(8, 0.35 * len(names) + 1.2))
    for i, n in enumerate(names):
        rs = [r for r in runs[n] if "handoff_p50_rt" in r]
        ax.scatter([r["handoff_p50_rt"] for r in rs], [i] * len(rs), marker="o", color="C0",
                   label="p50" if i == 0 else None)
        ax.scatter([r["handoff_p99_rt"] for r in rs], [i] * len(rs), marker="x", color="C3",
                   label="p99" if i == 0 else None)
        for r in rs:
            ax.plot([r["handoff_p50_rt"], r["handoff_p99_rt"]], [i, i], color="0.8", zorder=0)
    ax.axvline(5, color="C0", linestyle=":", linewidth=0.8)
    ax.axvline(20, color="C3", linestyle=":", linewidth=0.8)
    ax.set_xscale("log")
    ax.set_yticks(range(len(names)), names)
    ax.invert_yaxis()
    ax.set_xlabel("hand-off, in the backend's round trips (log; dotted: the targets 5 at p50, 20 at p99)")
    ax.set_title("Contended hand-off, 4 processes on one name: each run's p50 and p99")
    ax.legend(loc="lower right", fontsize=7)
    save(fig, out / "handoff.svg", sources)


def flash(records, out, sources):
    runs = grouped(records, "flash-sale")
    names, one, ten = [], [], []
    for n, rs in runs.items():
        a = [r["elapsed_ms"] for r in rs if r["segments"] == 1]
        b = [r["elapsed_ms"] for r in rs if r["segments"] == 10]
        if a and b:
            names.append(n)
            one.append(statistics.median(a))
            ten.append(statistics.median(b))
    if not names:
        return
    paired_bars(names, (one, "1 stock segment", "0.6"), (ten, "10 segments, a lock each", "C0"),
                lambda a, b: " %.1fx faster" % (a / b),
                "ms to sell 2,000 items to 4,000 requests, 2 app servers (median of the runs)",
                "Flash sale, with and without segments", out / "flash-sale.svg", sources)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("records", nargs="+", type=Path)
    args = ap.parse_args()
    records = []
    for path in args.records:
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if line.strip():
                try:
                    records.append(json.loads(line))
                except json.JSONDecodeError as e:
                    sys.exit(f"{path}:{n}: not a record: {e}")
    args.out.mkdir(parents=True, exist_ok=True)
    sources = [p.name for p in args.records]
    cycle(records, args.out, sources)
    handoff(records, args.out, sources)
    flash(records, args.out, sources)


if __name__ == "__main__":
    main()
