#!/usr/bin/env python3
"""Checks figures of docs/benchmarks.md against a run on this machine; --write rewrites them.

    scripts/figures.py [--distlock PATH] [--seconds S] [--tolerance F] [--write]

It covers the table that needs no server, "Embedded backends" (file:// in a
fresh temporary directory, memory://): for each row it runs `distlock bench`
with the row's mode, processes and threads, and compares the cycles per second
with the documented figure. A row off by more than --tolerance times (default
3) either way fails: exit 1, the two figures printed side by side. --write puts
the measured rows and today's date in the page instead (then review the text
around the table). The server tables are scripts/bench.sh's, each server
started alone; their figures are ratios to a floor measured in the same run.

PATH defaults to build/bin/distlock (scripts/test.sh's and scripts/bench.sh's
build, optimized: -O2). Run it on a quiet machine: a loaded one measures the
load.
"""

import argparse
import datetime
import json
import os
import re
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGE = os.path.join(REPO, "docs", "benchmarks.md")
HEADING = re.compile(r"^## Embedded backends \((\d{4}-\d{2}-\d{2})\)$")
ROW = re.compile(r"^\| `(file|memory)://` \| (uncontended|contended) \| (\d+) x (\d+) \| ([\d,]+) \| ([\d.,]+) \| ([\d.,]+) \|$")


def number(text):
    return float(text.replace(",", ""))


def grouped(v, digits=0):
    return "{:,.{}f}".format(v, digits)


def table_rows(lines):
    """(index of the heading, [(line index, scheme, mode, processes, threads, cycles/s)])."""
    start = next((i for i, line in enumerate(lines) if HEADING.match(line)), None)
    if start is None:
        sys.exit("figures: no '## Embedded backends (DATE)' heading in " + PAGE)
    rows = []
    for i in range(start + 1, len(lines)):
        if lines[i].startswith("## "):
            break
        m = ROW.match(lines[i])
        if m:
            rows.append((i, m.group(1), m.group(2), int(m.group(3)), int(m.group(4)), number(m.group(5))))
    if not rows:
        sys.exit("figures: no row under the Embedded backends heading matches " + ROW.pattern)
    return start, rows


def measure(distlock, scheme, mode, processes, threads, seconds):
    with tempfile.TemporaryDirectory(prefix="distlock-figures-") as d:
        url = "file://" + d if scheme == "file" else "memory://"
        cmd = [distlock, "bench", "--backend", url, "--mode", mode, "--processes", str(processes), "--threads",
               str(threads), "--seconds", str(seconds), "--json", "--quiet"]
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds * 10 + 60)
        if out.returncode != 0:
            sys.exit("figures: %s exited %d: %s" % (" ".join(cmd), out.returncode, out.stderr.strip()))
        return json.loads(out.stdout)


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--distlock", default=os.path.join(REPO, "build", "bin", "distlock"))
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--tolerance", type=float, default=3.0)
    ap.add_argument("--write", action="store_true")
    args = ap.parse_args(argv)
    if args.tolerance <= 1:
        ap.error("--tolerance must be above 1")
    if not os.access(args.distlock, os.X_OK):
        ap.error("no distlock tool at %s (scripts/bench.sh builds it; or --distlock PATH)" % args.distlock)
    with open(PAGE) as f:
        lines = f.read().split("\n")
    start, rows = table_rows(lines)
    failed = 0
    print("| backend | mode | processes x threads | documented cycles/s | measured cycles/s | measured / documented |")
    print("|---|---|---|---|---|---|")
    for i, scheme, mode, processes, threads, documented in rows:
        j = measure(args.distlock, scheme, mode, processes, threads, args.seconds)
        got = float(j["cycles_per_s"])
        ratio = got / documented if documented > 0 else float("inf")
        off = not (1 / args.tolerance <= ratio <= args.tolerance)
        failed += off
        print("| `%s://` | %s | %d x %d | %s | %s | %.2f%s |" % (scheme, mode, processes, threads, grouped(documented),
                                                             grouped(got), ratio, " **off**" if off else ""))
        # Three significant figures, as the page writes them.
        cps = float("%.3g" % got)
        p50, p99 = float(j["p50_us"]), float(j["p99_us"])
        lines[i] = "| `%s://` | %s | %d x %d | %s | %s | %s |" % (
            scheme, mode, processes, threads, grouped(cps), "%.3g" % p50 if p50 < 100 else grouped(p50),
            "%.3g" % p99 if p99 < 100 else grouped(p99))
    if args.write:
        lines[start] = "## Embedded backends (%s)" % datetime.date.today().isoformat()
        with open(PAGE, "w") as f:
            f.write("\n".join(lines))
        print("figures: %s rewritten (%d rows)" % (os.path.relpath(PAGE, REPO), len(rows)))
        return 0
    if failed:
        print("figures: %d row(s) more than %gx off the documented figure: rerun on a quiet machine, or "
              "scripts/figures.py --write" % (failed, args.tolerance), file=sys.stderr)
        return 1
    print("figures: every row within %gx of the documented figure" % args.tolerance)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
