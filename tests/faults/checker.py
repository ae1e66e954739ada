#!/usr/bin/env python3
"""The fault harness checker: reads one run directory, reports every check.

    python3 checker.py RUN_DIR [--json] [--expect FILE]

Reads run.json, history/*.jsonl, store.jsonl and nemesis.jsonl (formats and the
definitions of every check: tests/faults/README.md), prints a text report (or,
with --json, the same report as JSON on stdout and in RUN_DIR/report.json) and
exits 0 when no check FAILs, 1 when one does, 2 when the input is unreadable.

Python 3.11 standard library only.
"""

from __future__ import annotations

import argparse
import bisect
import json
import math
import signal
import sys
from dataclasses import dataclass, field
from pathlib import Path

EXIT_OK, EXIT_FAIL, EXIT_UNREADABLE = 0, 1, 2

# The checks (figures that must be zero unless expected), in report order.
CHECKS = (
    "double_grants",
    "stale_writes_accepted",
    "legitimate_writes_rejected",
    "token_order_violations",
    "lost_updates",
    "hung_workers",
    "crashed_workers",
)
# A figure that becomes a check only when the expectations give it a bound (ms).
GAP_CHECK = "longest_no_holder_gap_ms"
# The same for the lost-lock detection latency (measure_loss_detection): its maximum.
DETECTION_CHECK = "loss_detection_ms"

CHECK_TITLES = {
    "double_grants": "double grants (unexcused)",
    "stale_writes_accepted": "stale writes accepted",
    "legitimate_writes_rejected": "legitimate writes rejected",
    "token_order_violations": "token order violations",
    "lost_updates": "lost updates",
    "hung_workers": "hung workers",
    "crashed_workers": "crashed workers",
    GAP_CHECK: "longest time with waiters but no holder",
    DETECTION_CHECK: "slowest lost-lock detection",
}

MAX_EXAMPLES = 10  # examples listed per check
DEFAULT_SILENCE_FLOOR_MS = 15_000  # the controller's own SIGTERM grace
DEFAULT_SILENCE_LEASES = 10
DEFAULT_SILENCE_WAITS = 3  # a worker is silent in try_lock_for(wait_ms)


class InputError(Exception):
    """The run directory cannot be read (exit status 2)."""


# --------------------------------------------------------------------------
# Reading the run directory


def read_jsonl(path: Path, kind: str) -> tuple[list[dict], int]:
    """Parses a JSON-lines file; returns (records, truncated line count).

    A last line that does not parse (a writer killed mid-line) is tolerated and
    counted; any other line that does not parse is an InputError. Blank lines
    are skipped. Each record keeps its line number as "_line".
    """
    try:
        data = path.read_bytes()
    except OSError as e:
        raise InputError(f"{path}: {e.strerror or e}") from e
    lines = data.split(b"\n")
    # index of the last non-blank line
    last = max((i for i, ln in enumerate(lines) if ln.strip()), default=-1)
    records, truncated = [], 0
    for i, raw in enumerate(lines):
        if not raw.strip():
            continue
        try:
            rec = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            if i == last:
                truncated += 1
                continue
            raise InputError(f"{path}:{i + 1}: not a JSON line ({e})") from e
        if not isinstance(rec, dict):
            raise InputError(f"{path}:{i + 1}: not a JSON object")
        t = rec.get("t")
        if kind != "nemesis" and (not isinstance(t, int) or isinstance(t, bool)):
            raise InputError(f"{path}:{i + 1}: no integer 't'")
        if kind == "history" and not isinstance(rec.get("ev"), str):
            raise InputError(f"{path}:{i + 1}: no 'ev'")
        if kind == "store" and not isinstance(rec.get("op"), str):
            raise InputError(f"{path}:{i + 1}: no 'op'")
        rec["_line"] = i + 1
        records.append(rec)
    return records, truncated


def worker_key(w: str) -> tuple:
    """Sorts worker ids naturally: "2.1" before "10.1"."""
    return tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in w.split("."))


def as_int(value, default=None):
    """A token/value/status as an int (JSON number or decimal string), else default."""
    if isinstance(value, bool):
        return default
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            return default
    return default


@dataclass
class Grant:
    """One `acquire ok` and the belief interval that follows it."""

    w: str
    ok_t: int
    invoke_t: int | None  # the `acquire invoke` of this attempt
    token: int | None
    end_t: int = 0  # `release invoke`, or the worker's last event
    released: bool = False  # ended by `release invoke`
    release_ok_t: int | None = None  # `release ok`: unlock() returned
    index: int = -1  # position among all grants ordered by (ok_t, w)
    signals: list = field(default_factory=list)  # (t, "lost" | "held")

    def first_signal(self):
        """The earliest loss signal the holder had by the time unlock() returned.

        For a released grant that is before its `release ok` (a loss that the
        release itself found is reported inside unlock(), between `release
        invoke` and `release ok`); a grant whose unlock() never returned, or
        that never released (worker killed, crashed, history ended), counts
        every signal matched to it.
        """
        ok = [s for s in self.signals if self.release_ok_t is None or s[0] <= self.release_ok_t]
        return min(ok, default=None)


@dataclass
class Worker:
    """One worker incarnation: its history and what was derived from it."""

    w: str
    path: str
    events: list  # sorted by t (stable)
    truncated: int = 0
    start: dict | None = None
    grants: list = field(default_factory=list)
    pending: list = field(default_factory=list)  # (invoke_t, end_t) of acquires
    lost_events: list = field(default_factory=list)
    kill_event: dict | None = None
    ok_times: list = field(default_factory=list)  # match_grant's index
    by_token: dict | None = None
    exit_event: dict | None = None
    notes: list = field(default_factory=list)

    @property
    def first_t(self) -> int:
        return self.events[0]["t"] if self.events else 0

    @property
    def last_t(self) -> int:
        return self.events[-1]["t"] if self.events else 0

    @property
    def pid(self):
        return self.start.get("pid") if self.start else None


@dataclass
class Run:
    """Everything read from one run directory."""

    path: Path
    meta: dict
    workers: dict  # w -> Worker
    grants: list  # all grants, ordered by (ok_t, w)
    store: list  # store.jsonl records sorted by t (stable)
    nemesis: list  # nemesis.jsonl records, file order
    truncated: dict  # file name -> truncated line count
    t0: int
    notes: list = field(default_factory=list)
    writes: list | None = None  # attribute_writes' result, computed once
    fencing: bool = False  # the backend gives fencing tokens (fencing_applies)
    server: list | None = None  # server.jsonl (the observer's inspect() answers), None when absent


def build_worker(w: str, path: str, events: list, truncated: int) -> Worker:
    """Derives grants, pending acquires and loss signals from one history.

    Main-thread events (everything but `lost`/`error`, which come from callback
    threads) are walked in time order: `acquire invoke` opens a pending acquire,
    `ok`/`fail`/`unknown` close it (only `ok` opens a grant), `release invoke`
    closes the open grant, `held` false is a loss signal of the open grant.
    What is still open at the end closes at the worker's last event.
    """
    wk = Worker(w=w, path=path, events=events, truncated=truncated)
    pending_since = None
    invoke_t = None
    open_grant = None
    releasing = None  # the grant whose unlock() is under way
    for ev in events:
        kind, t, phase = ev["ev"], ev["t"], ev.get("phase")
        if kind == "start" and wk.start is None:
            wk.start = ev
        elif kind == "acquire" and phase == "invoke":
            if open_grant is not None:
                wk.notes.append(f"acquire invoke at line {ev['_line']} while a grant was open: "
                                "that grant ends here")
                open_grant.end_t = t
                open_grant = None
            if pending_since is not None:
                wk.pending.append((pending_since, t))
            pending_since = invoke_t = t
        elif kind == "acquire" and phase in ("ok", "fail", "unknown"):
            if pending_since is not None:
                wk.pending.append((pending_since, t))
                pending_since = None
            if phase == "ok":
                if open_grant is not None:
                    wk.notes.append(f"acquire ok at line {ev['_line']} while a grant was open: "
                                    "that grant ends here")
                    open_grant.end_t = t
                open_grant = Grant(w=w, ok_t=t, invoke_t=invoke_t, token=as_int(ev.get("token")))
                wk.grants.append(open_grant)
            invoke_t = None
        elif kind == "release" and phase == "invoke":
            if open_grant is not None:
                open_grant.end_t = t
                open_grant.released = True
                releasing = open_grant
                open_grant = None
        elif kind == "release" and phase == "ok":
            if releasing is not None:
                releasing.release_ok_t = t
                releasing = None
        elif kind == "held" and ev.get("held") is False:
            target = open_grant or match_grant(wk, None, t)
            if target is not None:
                target.signals.append((t, "held"))
        elif kind == "lost":
            wk.lost_events.append(ev)
        elif kind == "kill":
            wk.kill_event = ev
        elif kind == "exit":
            wk.exit_event = ev
    if pending_since is not None:
        wk.pending.append((pending_since, wk.last_t))
    if open_grant is not None:
        open_grant.end_t = wk.last_t
    return wk


def match_grant(wk: Worker, token, t: int) -> Grant | None:
    """The grant of worker `wk` that an event with `token` at time `t` belongs to.

    Candidates are the worker's grants with that token (all its grants when the
    token is missing, 0, or matches none: backends without fencing report 0).
    Among them: the one whose belief interval contains t, else the latest one
    granted before t, else None. A worker's grants never overlap, so both are
    the latest candidate whose `acquire ok` is at or before t.
    """
    if wk.by_token is None or len(wk.ok_times) != len(wk.grants):
        wk.ok_times = [g.ok_t for g in wk.grants]
        wk.by_token = {}
        for g in wk.grants:
            wk.by_token.setdefault(g.token, []).append(g)
    grants, times = wk.grants, wk.ok_times
    if token not in (None, 0) and token in wk.by_token:
        grants = wk.by_token[token]
        times = [g.ok_t for g in grants]
    i = bisect.bisect_right(times, t) - 1
    return grants[i] if i >= 0 else None


def attach_lost_events(run: Run) -> None:
    """Matches every `lost` event to its grant and records it as a loss signal."""
    for wk in run.workers.values():
        for ev in wk.lost_events:
            g = match_grant(wk, as_int(ev.get("token")), ev["t"])
            ev["_grant"] = g
            if g is not None:
                g.signals.append((ev["t"], "lost"))


def load_run(run_dir: Path) -> Run:
    """Reads a run directory; raises InputError when it cannot."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise InputError(f"{run_dir}: not a directory")
    try:
        meta = json.loads((run_dir / "run.json").read_text())
    except OSError as e:
        raise InputError(f"{run_dir / 'run.json'}: {e.strerror or e}") from e
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise InputError(f"{run_dir / 'run.json'}: not JSON ({e})") from e
    if not isinstance(meta, dict):
        raise InputError(f"{run_dir / 'run.json'}: not a JSON object")

    hist_dir = run_dir / "history"
    files = sorted(hist_dir.glob("*.jsonl")) if hist_dir.is_dir() else []
    if not files:
        raise InputError(f"{hist_dir}: no history files")
    truncated: dict[str, int] = {}
    workers: dict[str, Worker] = {}
    for f in files:
        records, cut = read_jsonl(f, "history")
        rel = f"history/{f.name}"
        if cut:
            truncated[rel] = cut
        ids = {r["w"] for r in records if isinstance(r.get("w"), str)}
        w = f.stem if (not ids or f.stem in ids) else sorted(ids)[0]
        if w in workers:
            raise InputError(f"{f}: worker id {w!r} also in {workers[w].path}")
        records.sort(key=lambda r: r["t"])  # stable: file order among equal times
        workers[w] = build_worker(w, rel, records, cut)

    store_path = run_dir / "store.jsonl"
    if not store_path.exists():
        raise InputError(f"{store_path}: missing")
    store, cut = read_jsonl(store_path, "store")
    if cut:
        truncated["store.jsonl"] = cut
    store.sort(key=lambda r: r["t"])

    nemesis_path = run_dir / "nemesis.jsonl"
    nemesis = []
    if nemesis_path.exists():
        nemesis, cut = read_jsonl(nemesis_path, "nemesis")
        if cut:
            truncated["nemesis.jsonl"] = cut

    server = None
    server_path = run_dir / "server.jsonl"
    if server_path.exists():
        server, cut = read_jsonl(server_path, "server")
        if cut:
            truncated["server.jsonl"] = cut
        server = [r for r in server if r.get("ev") == "server" and isinstance(r.get("t_invoke"), int)]
        server.sort(key=lambda r: r["t_invoke"])

    grants = [g for wk in workers.values() for g in wk.grants]
    grants.sort(key=lambda g: (g.ok_t, g.w))
    for i, g in enumerate(grants):
        g.index = i
    times = [wk.first_t for wk in workers.values() if wk.events]
    times += [r["t"] for r in store[:1]]
    times += [r["t"] for r in nemesis if isinstance(r.get("t"), int)]
    run = Run(path=run_dir, meta=meta, workers=workers, grants=grants, store=store,
              nemesis=nemesis, truncated=truncated, t0=min(times, default=0), server=server)
    attach_lost_events(run)
    for wk in workers.values():
        run.notes += [f"{wk.path}: {n}" for n in wk.notes]
    return run


# --------------------------------------------------------------------------
# nemesis.jsonl: which records concern which worker


def record_workers(run: Run, rec: dict) -> set[str]:
    """The worker ids a nemesis record is about: its `w` (a string or a list),
    `ws`, or every worker whose start event has its `pid` (memory backend:
    one process, many workers)."""
    ids: set[str] = set()
    for key in ("w", "ws"):
        v = rec.get(key)
        if isinstance(v, str):
            ids.add(v)
        elif isinstance(v, list):
            ids.update(x for x in v if isinstance(x, str))
    if not ids and rec.get("pid") is not None:
        ids = {wk.w for wk in run.workers.values() if wk.pid == rec.get("pid")}
    return ids


def nemesis_records(run: Run, w: str, *kinds: str) -> list[dict]:
    """The nemesis records of the given kinds (`ev`) that concern worker w."""
    return [r for r in run.nemesis if r.get("ev") in kinds and w in record_workers(run, r)]


def describe_exit(rec: dict) -> tuple[bool, str]:
    """(abnormal, text) for a nemesis `exit` record.

    Reads `signal` (number or name) and `status` (also `code`, `exit_code`, or
    Python's `returncode`, where a negative value is a signal number).
    """
    sig = rec.get("signal")
    status = None
    for key in ("status", "code", "exit_code", "returncode"):
        if rec.get(key) is not None:
            status = as_int(rec.get(key), rec.get(key))
            break
    if sig in (None, 0, "") and isinstance(status, int) and status < 0:
        sig, status = -status, None
    if sig not in (None, 0, ""):
        return True, f"killed by {signal_name(sig)}"
    if status not in (None, 0):
        return True, f"exit status {status}"
    return False, "exit status 0"


def signal_name(sig) -> str:
    n = as_int(sig)
    if n is None:
        return str(sig)
    try:
        return signal.Signals(n).name
    except ValueError:
        return f"signal {n}"


# --------------------------------------------------------------------------
# The checks: one function each, returning (value, examples) or a figure


def rel_ms(run: Run, t: int) -> float:
    """A monotonic time as milliseconds since the start of the run."""
    return round((t - run.t0) / 1e6, 3)


def grant_ref(run: Run, g: Grant) -> dict:
    return {"w": g.w, "token": g.token, "ok_ms": rel_ms(run, g.ok_t), "end_ms": rel_ms(run, g.end_t)}


def concurrent(a: Grant, b: Grant) -> bool:
    """Whether two acquires ran at once: each was invoked before the other returned."""
    if a.invoke_t is None or b.invoke_t is None:
        return False
    return a.invoke_t < b.ok_t and b.invoke_t < a.ok_t


def later(run: Run, b: Grant, a: Grant) -> bool:
    """Whether grant b comes after grant a in the order the lock granted them:
    by `acquire ok`, except for two acquires that ran at once on a backend with
    fencing tokens, whose replies may arrive in either order: the server
    ordered those by token (whether tokens follow real time is the token order
    check's business)."""
    if (run.fencing and concurrent(a, b) and a.token is not None and b.token is not None
            and a.token != b.token):
        return b.token > a.token
    return (b.ok_t, b.w) > (a.ok_t, a.w)


def overlapping_pairs(run: Run):
    """Yields (earlier, later) for every two grants of different workers whose
    belief intervals overlap: later.ok_t < earlier.end_t, in grant order."""
    gs = run.grants
    for i, a in enumerate(gs):
        for b in gs[i + 1:]:
            if b.ok_t >= a.end_t:
                break
            if b.w != a.w:
                yield a, b


def check_double_grants(run: Run):
    """Counts overlapping pairs of grants (different workers) whose earlier
    grant had no loss signal (`lost` event or `held` false) by the time its
    unlock() returned: the library never told it. Returns (count, examples,
    excused) where excused lists the signalled overlaps with their loss latency
    (signal time minus the later grant's `acquire ok`) and whether the holder
    was told only at release (by unlock(), after its last write)."""
    count, examples, excused = 0, [], []
    unsignalled = set()  # earlier grants involved
    for a, b in overlapping_pairs(run):
        if later(run, a, b):  # granted in the other order: the earlier one is b
            a, b = b, a
        sig = a.first_signal()
        if sig is None:
            count += 1
            unsignalled.add(a.index)
            if len(examples) < MAX_EXAMPLES:
                examples.append({"earlier": grant_ref(run, a), "later": grant_ref(run, b),
                                 "overlap_ms": round((min(a.end_t, b.end_t) - b.ok_t) / 1e6, 3)})
        else:
            excused.append({"earlier": grant_ref(run, a), "later": grant_ref(run, b),
                            "signal": sig[1], "signal_ms": rel_ms(run, sig[0]),
                            "latency_ns": sig[0] - b.ok_t,
                            "at_release": a.released and sig[0] >= a.end_t})
    return count, examples, excused, len(unsignalled)


def attribute_writes(run: Run) -> list[tuple[dict, Grant | None]]:
    """The store's fenced writes (`W`) in processing order, each with the grant
    that made it (worker `w`, its token, the store's time)."""
    if run.writes is not None:
        return run.writes
    out = []
    for rec in run.store:
        if rec["op"] != "W":
            continue
        wk = run.workers.get(rec.get("w"))
        g = match_grant(wk, as_int(rec.get("token")), rec["t"]) if wk else None
        out.append((rec, g))
    run.writes = out
    return out


def check_stale_writes_accepted(run: Run):
    """Counts fenced writes of a grant G that the store accepted after it had
    processed a write (accepted or not) of a grant later than G."""
    count, examples = 0, []
    latest: Grant | None = None  # the latest grant that has written so far
    for rec, g in attribute_writes(run):
        if g is None:
            continue
        if rec.get("accepted") is True and latest is not None and later(run, latest, g):
            count += 1
            if len(examples) < MAX_EXAMPLES:
                examples.append({"at_ms": rel_ms(run, rec["t"]), "writer": grant_ref(run, g),
                                 "after_write_of": grant_ref(run, latest),
                                 "highest": rec.get("highest")})
        if latest is None or later(run, g, latest):
            latest = g
    return count, examples


def check_legitimate_writes_rejected(run: Run):
    """Counts fenced writes of a grant G that the store rejected although no
    grant later than G had written before it."""
    count, examples = 0, []
    latest: Grant | None = None
    for rec, g in attribute_writes(run):
        if g is None:
            continue
        if rec.get("accepted") is False and (latest is None or not later(run, latest, g)):
            count += 1
            if len(examples) < MAX_EXAMPLES:
                examples.append({"at_ms": rel_ms(run, rec["t"]), "writer": grant_ref(run, g),
                                 "highest": rec.get("highest")})
        if latest is None or later(run, g, latest):
            latest = g
    return count, examples


def fencing_applies(run: Run) -> tuple[bool, str]:
    """Whether the backend gives fencing tokens: every worker `start` event
    that states caps.fencing says true (run.json capabilities when no start
    event states it)."""
    said = [wk.start["caps"]["fencing"] for wk in run.workers.values()
            if wk.start and isinstance(wk.start.get("caps"), dict)
            and isinstance(wk.start["caps"].get("fencing"), bool)]
    if not said:
        caps = run.meta.get("capabilities") or run.meta.get("caps") or {}
        if isinstance(caps, dict) and caps.get("fencing") is True:
            return True, ""
        return False, "not applicable: no fencing token"
    if all(said):
        return True, ""
    if any(said):
        return False, "not applicable: workers disagree on caps.fencing"
    return False, "not applicable: no fencing token"


def check_token_order(run: Run):
    """Counts pairs of grants (G1, G2) where G1's `acquire ok` precedes G2's
    `acquire invoke` but token(G2) <= token(G1). Backends with fencing only."""
    gs = [g for g in run.grants if g.token is not None]
    by_ok = sorted(gs, key=lambda g: g.ok_t)
    by_invoke = sorted(gs, key=lambda g: (g.invoke_t if g.invoke_t is not None else g.ok_t))
    tokens: list[int] = []  # sorted tokens of grants whose ok precedes the current invoke
    best: Grant | None = None  # the highest-token grant among them
    i, count, examples = 0, 0, []
    for g2 in by_invoke:
        start = g2.invoke_t if g2.invoke_t is not None else g2.ok_t
        while i < len(by_ok) and by_ok[i].ok_t < start:
            bisect.insort(tokens, by_ok[i].token)
            if best is None or by_ok[i].token > best.token:
                best = by_ok[i]
            i += 1
        n = len(tokens) - bisect.bisect_left(tokens, g2.token)
        if n:
            count += n
            if len(examples) < MAX_EXAMPLES:
                examples.append({"grant": grant_ref(run, g2), "invoke_ms": rel_ms(run, start),
                                 "earlier_with_higher_or_equal_token": grant_ref(run, best),
                                 "pairs": n})
    return count, examples


def check_lost_updates(run: Run):
    """Completed `S` operations (in store.jsonl) minus the counter's final value
    (the value of the last `S`; 0 when there was none)."""
    sets = [r for r in run.store if r["op"] == "S"]
    final = as_int(sets[-1].get("value"), 0) if sets else 0
    lost = len(sets) - final
    return lost, [{"sets": len(sets), "final_value": final}] if lost else []


def measure_no_holder_gap(run: Run) -> dict:
    """The longest span during which at least one `acquire` was pending (from
    its invoke to its ok/fail/unknown, or its worker's last event) and no
    belief interval was open."""
    changes: dict[int, list[int]] = {}
    for wk in run.workers.values():
        for a, b in wk.pending:
            changes.setdefault(a, [0, 0])[0] += 1
            changes.setdefault(b, [0, 0])[0] -= 1
    for g in run.grants:
        changes.setdefault(g.ok_t, [0, 0])[1] += 1
        changes.setdefault(g.end_t, [0, 0])[1] -= 1
    pending = holders = 0
    since = None
    best = (0, None, None)
    for t in sorted(changes):
        dp, dh = changes[t]
        pending, holders = pending + dp, holders + dh
        gap = pending > 0 and holders == 0
        if gap and since is None:
            since = t
        elif not gap and since is not None:
            if t - since > best[0]:
                best = (t - since, since, t)
            since = None
    ns, a, b = best
    return {"ms": round(ns / 1e6, 3),
            "from_ms": rel_ms(run, a) if a is not None else None,
            "to_ms": rel_ms(run, b) if b is not None else None}


def silence_limit_ms(run: Run) -> int:
    """How long a worker may go without an event: run.json `silence_limit_ms`,
    else max(15 s, 10 leases, 3 waits) (`lease_ms`, `wait_ms` of run.json)."""
    given = as_int(run.meta.get("silence_limit_ms"))
    if given:
        return given
    lease = as_int(run.meta.get("lease_ms"), 0) or 0
    wait = as_int(run.meta.get("wait_ms"), 0) or 0
    return max(DEFAULT_SILENCE_FLOOR_MS, DEFAULT_SILENCE_LEASES * lease, DEFAULT_SILENCE_WAITS * wait)


def stopped_spans(run: Run, wk: Worker) -> list[tuple[int, float]]:
    """When the worker was stopped by the nemesis: from a `pause stop` event (or
    a nemesis `stop` record) to the next `pause cont` event or nemesis `cont`
    record, whichever comes first (no continuation: stopped to the end).
    Returned sorted and merged, so no stopped time counts twice."""
    stops = [e["t"] for e in wk.events if e["ev"] == "pause" and e.get("phase") == "stop"]
    conts = [e["t"] for e in wk.events if e["ev"] == "pause" and e.get("phase") == "cont"]
    for r in nemesis_records(run, wk.w, "stop", "cont"):
        if isinstance(r.get("t"), int):
            (stops if r["ev"] == "stop" else conts).append(r["t"])
    conts.sort()
    spans: list[list] = []  # merged: a pause event and the controller's record overlap
    for s in sorted(stops):
        j = bisect.bisect_left(conts, s)
        e = conts[j] if j < len(conts) else math.inf
        if spans and s <= spans[-1][1]:
            spans[-1][1] = max(spans[-1][1], e)
        else:
            spans.append([s, e])
    return [(s, e) for s, e in spans]


def longest_silence(run: Run, wk: Worker) -> tuple[int, int | None, int | None]:
    """The longest span between two consecutive events of the worker, minus the
    time it was stopped by the nemesis: (ns, from, to). The span after its last
    event is not counted: a worker stuck at the end is SIGKILLed and recorded
    `hung` by the controller; one that died there is a crash or a kill."""
    times = [e["t"] for e in wk.events]
    spans = stopped_spans(run, wk)
    ends = [e for _, e in spans]
    best = (0, None, None)
    for a, b in zip(times, times[1:]):
        stopped = 0
        for s, e in spans[bisect.bisect_right(ends, a):]:  # spans ending after a
            if s >= b:
                break
            stopped += min(b, e) - max(a, s)
        silent = int((b - a) - stopped)
        if silent > best[0]:
            best = (silent, a, b)
    return best


def check_hung_workers(run: Run):
    """Counts workers the controller had to SIGKILL at the end (nemesis.jsonl
    `hung`), or silent for longer than the run allows (silence_limit_ms) while
    not stopped by the nemesis."""
    limit_ns = silence_limit_ms(run) * 1_000_000
    count, examples = 0, []
    for w, wk in sorted(run.workers.items(), key=lambda kv: worker_key(kv[0])):
        why = []
        if nemesis_records(run, w, "hung"):
            why.append("SIGKILLed by the controller at the end")
        ns, a, b = longest_silence(run, wk)
        if ns > limit_ns:
            why.append(f"silent {ns / 1e6:.0f} ms (limit {limit_ns / 1e6:.0f} ms) "
                       f"from {rel_ms(run, a)} ms to {rel_ms(run, b)} ms")
        if why:
            count += 1
            if len(examples) < MAX_EXAMPLES:
                examples.append({"w": w, "why": "; ".join(why)})
    return count, examples


def worker_fate(run: Run, wk: Worker) -> tuple[str, str]:
    """How the worker ended: (kind, text) with kind one of exit, self-kill,
    nemesis-kill, hung, crash, unknown-end."""
    exits = nemesis_records(run, wk.w, "exit")
    abnormal = [describe_exit(r)[1] for r in exits if describe_exit(r)[0]]
    if nemesis_records(run, wk.w, "hung"):
        return "hung", "SIGKILLed by the controller (hung)"
    if wk.kill_event is not None:
        return "self-kill", f"kill event at point {wk.kill_event.get('point')}"
    if nemesis_records(run, wk.w, "kill"):
        return "nemesis-kill", "killed by the nemesis"
    if abnormal:
        return "crash", abnormal[0]
    if exits:
        return "exit", describe_exit(exits[0])[1]
    if wk.exit_event is not None:
        return "exit", "exit event"
    return "unknown-end", "history ends without an exit or kill event, and no exit recorded"


def check_crashed_workers(run: Run):
    """Counts workers that exited by a signal or a non-zero status not caused
    by the nemesis (a `kill` event or a nemesis kill excuses it; a hung worker
    is counted as hung), and workers whose history ends without `exit` or
    `kill` with no exit recorded by the controller."""
    count, examples = 0, []
    for w, wk in sorted(run.workers.items(), key=lambda kv: worker_key(kv[0])):
        kind, text = worker_fate(run, wk)
        if kind in ("crash", "unknown-end"):
            count += 1
            if len(examples) < MAX_EXAMPLES:
                examples.append({"w": w, "why": text, "last_event_ms": rel_ms(run, wk.last_t)})
    return count, examples


def percentiles(values: list[int]) -> dict:
    """Nearest-rank p50, p99 and maximum of nanosecond values, in ms."""
    if not values:
        return {"n": 0, "p50_ms": None, "p99_ms": None, "max_ms": None}
    v = sorted(values)
    rank = lambda q: v[max(0, math.ceil(q * len(v)) - 1)]  # noqa: E731
    return {"n": len(v), "p50_ms": round(rank(0.5) / 1e6, 3), "p99_ms": round(rank(0.99) / 1e6, 3),
            "max_ms": round(v[-1] / 1e6, 3)}


def p50_max(values: list[int]) -> dict:
    """Nearest-rank median and maximum of nanosecond values, in ms (percentiles without p99)."""
    p = percentiles(values)
    del p["p99_ms"]
    return p


def measure_losses_reported(run: Run) -> dict:
    """Counts `lost` events (and how many came after their grant's `release
    invoke`, or matched no grant). Latency of a `lost` event: its time minus the
    `acquire ok` of the first later grant (another worker) that overlapped its
    grant; events whose grant nobody overlapped have none."""
    first_later: dict[int, Grant] = {}
    for a, b in overlapping_pairs(run):
        first_later.setdefault(a.index, b)
    total = after_release = unmatched = 0
    latencies = []
    for wk in run.workers.values():
        for ev in wk.lost_events:
            total += 1
            g = ev.get("_grant")
            if g is None:
                unmatched += 1
                continue
            if g.released and ev["t"] >= g.end_t:
                after_release += 1
            if g.index in first_later:
                latencies.append(ev["t"] - first_later[g.index].ok_t)
    return {"count": total, "after_release": after_release, "unmatched": unmatched,
            "latency": p50_max(latencies)}


def stopped_within(spans: list, a: int, b: int) -> int:
    """How long (ns) the spans cover of [a, b]."""
    total = 0
    for s, e in spans:
        lo, hi = max(a, s), min(b, e)
        if hi > lo:
            total += int(hi - lo)
    return total


def server_shows(run: Run, rec: dict, g: Grant) -> bool | None:
    """Whether an observer record shows grant g as the holder: by its token on a
    backend with fencing tokens, else by the holder label "<host>:<pid>" of g's
    worker. None when the record cannot tell (no answer, held unknown)."""
    if "error" in rec or rec.get("held") is None:
        return None
    if not rec["held"]:
        return False
    if run.fencing and g.token is not None and rec.get("token") is not None:
        return rec["token"] == g.token
    pid = run.workers[g.w].pid
    holder = rec.get("holder")
    if pid is None or not isinstance(holder, str):
        return None
    return holder.rsplit(":", 1)[-1] == str(pid)


def server_loss(run: Run, g: Grant) -> int | None:
    """When the server stopped holding g while g's holder still believed it held
    it, as the observer saw it: the `t_invoke` of its first answer that no longer
    shows g after one that did, before g's `release invoke`. None when the
    observer never saw g (a grant shorter than its period) or saw it to the end."""
    seen = False
    start = g.invoke_t if g.invoke_t is not None else g.ok_t
    for rec in run.server or []:
        if rec["t_invoke"] < start:
            continue
        if rec["t_invoke"] >= g.end_t:
            return None
        shows = server_shows(run, rec, g)
        if shows:
            seen = True
        elif shows is False and seen:
            return rec["t_invoke"]
    return None


def server_kills(run: Run) -> list[int]:
    """When the server lost every grant, as the nemesis recorded it: the kills of
    restart-server-empty (the server comes back without its data)."""
    if run.meta.get("nemesis") != "restart-server-empty":
        return []
    return sorted(r["t"] for r in run.nemesis if r.get("ev") == "server-kill" and isinstance(r.get("t"), int))


def measure_loss_detection(run: Run) -> dict:
    """How long a holder went on believing it held a lock after losing it. The
    loss: the earliest of the server's giving up the grant as the observer saw it
    (server.jsonl: provider::inspect every few ms; server_loss), the server losing
    its data (server_kills), and another worker's overlapping later grant (its
    `acquire ok`), while the holder believed (before its `release invoke`). The
    end of the belief: the holder's first loss signal (`lost`, on_lost running, or
    a `held` check that said false), or its `release invoke` when that came first
    (it gave the lock up untold: a server it could not reach cannot tell it), or
    its worker's end.
    The latency is the time between, minus the time the holder's worker was
    stopped meanwhile (a stopped process cannot be told: the nemesis's pauses are
    not the library's latency); a signal before the loss (the holder's own lease
    deadline passed first) counts 0."""
    first_later: dict[int, Grant] = {}
    for a, b in overlapping_pairs(run):
        if later(run, a, b):
            a, b = b, a
        if a.index not in first_later or b.ok_t < first_later[a.index].ok_t:
            first_later[a.index] = b
    kills = server_kills(run)
    spans = {w: stopped_spans(run, wk) for w, wk in run.workers.items()}
    latencies, examples = [], []
    ended = {"told": 0, "released": 0, "worker_ended": 0}
    for g in run.grants:
        h = first_later.get(g.index)
        k = bisect.bisect_left(kills, g.ok_t)
        candidates = [h.ok_t if h else None, server_loss(run, g),
                      kills[k] if k < len(kills) and kills[k] < g.end_t else None]
        lost_at = min([t for t in candidates if t is not None], default=None)
        if lost_at is None:
            continue
        by = ("granted to another" if h is not None and lost_at == h.ok_t
              else "server data lost" if lost_at == candidates[2] else "server")
        sig = g.first_signal()
        if sig is not None and sig[0] <= g.end_t:
            end, how = sig[0], "told (%s)" % sig[1]
            ended["told"] += 1
        elif g.released:  # it gave the lock up first (an unlock() that then found the loss tells it late)
            end, how = g.end_t, "released untold"
            ended["released"] += 1
        else:
            end, how = g.end_t, "worker ended"
            ended["worker_ended"] += 1
        lat = max(0, end - lost_at - stopped_within(spans.get(g.w, []), lost_at, end))
        latencies.append(lat)
        examples.append({"grant": grant_ref(run, g), "loss": by, "lost_ms": rel_ms(run, lost_at), "ended": how,
                         "ended_ms": rel_ms(run, end), "latency_ms": round(lat / 1e6, 3)})
    examples.sort(key=lambda e: -e["latency_ms"])
    return {**percentiles(latencies), "observed": run.server is not None, **ended,
            "slowest": examples[:MAX_EXAMPLES]}


def totals(run: Run) -> dict:
    """Totals over the run, and per worker."""
    per_worker = {}
    n = {"grants": 0, "acquire_fails": 0, "acquire_unknowns": 0, "held_false": 0, "errors": 0}
    for w, wk in sorted(run.workers.items(), key=lambda kv: worker_key(kv[0])):
        fails = sum(1 for e in wk.events if e["ev"] == "acquire" and e.get("phase") == "fail")
        unknown = sum(1 for e in wk.events if e["ev"] == "acquire" and e.get("phase") == "unknown")
        held_false = sum(1 for e in wk.events if e["ev"] == "held" and e.get("held") is False)
        errors = sum(1 for e in wk.events if e["ev"] == "error")
        kind, text = worker_fate(run, wk)
        per_worker[w] = {
            "grants": len(wk.grants), "acquire_fails": fails, "acquire_unknowns": unknown,
            "cycles": as_int(wk.exit_event.get("cycles")) if wk.exit_event else None,
            "lost": len(wk.lost_events), "end": kind, "end_detail": text,
            "truncated_lines": wk.truncated,
        }
        n["grants"] += len(wk.grants)
        n["acquire_fails"] += fails
        n["acquire_unknowns"] += unknown
        n["held_false"] += held_false
        n["errors"] += errors
    writes = [r for r in run.store if r["op"] == "W"]
    n["writes_accepted"] = sum(1 for r in writes if r.get("accepted") is True)
    n["writes_rejected"] = sum(1 for r in writes if r.get("accepted") is False)
    n["writes_unattributed"] = sum(1 for _, g in attribute_writes(run) if g is None)
    n["counter_sets"] = sum(1 for r in run.store if r["op"] == "S")
    n["counter_reads"] = sum(1 for r in run.store if r["op"] == "G")
    n["workers"] = len(run.workers)
    n["per_worker"] = per_worker
    return n


# --------------------------------------------------------------------------
# Expectations and the verdict


def load_expectations(run: Run, expect_file: str | None) -> dict:
    """The expectations: --expect FILE if given, else run.json `expectations`."""
    if expect_file is not None:
        try:
            exp = json.loads(Path(expect_file).read_text())
        except (OSError, json.JSONDecodeError, UnicodeDecodeError) as e:
            raise InputError(f"{expect_file}: {e}") from e
    else:
        exp = run.meta.get("expectations") or {}
    if not isinstance(exp, dict):
        raise InputError("expectations: not a JSON object")
    return exp


def parse_expectation(value):
    """An expectation as (allowed, bound, why): allowed nonzero?, a numeric
    upper bound (None: any), and the reason text if one was given.

    Accepted: "expected" / true (any nonzero expected), a number N (expected up
    to N), "ok" / false / 0 / null (must be zero), or an object
    {"expected": <one of those>, "why": "..."}.
    """
    why = None
    if isinstance(value, dict):
        why = value.get("why") or value.get("reason")
        value = value.get("expected", True)
    if value is True or (isinstance(value, str) and value.lower() == "expected"):
        return True, None, why
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
        return True, value, why
    return False, None, why


def judge(value, expectation) -> str:
    """ok (0), expected-fail (nonzero and expected), FAIL (nonzero, not expected)."""
    if not value:
        return "ok"
    if expectation is None:
        return "FAIL"
    allowed, bound, _ = parse_expectation(expectation)
    if allowed and (bound is None or value <= bound):
        return "expected-fail"
    return "FAIL"


def analyse(run_dir, expect_file: str | None = None) -> dict:
    """Reads a run directory and returns the whole report (a JSON-able dict)."""
    run = load_run(Path(run_dir))
    run.fencing = fencing_applies(run)[0]
    expectations = load_expectations(run, expect_file)

    results: dict[str, dict] = {}

    def put(name, value, examples, reason=None):
        exp = expectations.get(name)
        entry = {"value": value, "examples": examples}
        if reason is not None:
            entry.update(status="n/a", reason=reason)
        else:
            entry["status"] = judge(value, exp)
        if exp is not None:
            entry["expected"] = exp
            why = parse_expectation(exp)[2]
            if why:
                entry["why"] = why
        results[name] = entry

    dg, dg_examples, excused, dg_grants = check_double_grants(run)
    put("double_grants", dg, dg_examples)
    results["double_grants"]["detail"] = f"pairs; {dg_grants} earlier grant(s) never signalled"
    put("stale_writes_accepted", *check_stale_writes_accepted(run))
    put("legitimate_writes_rejected", *check_legitimate_writes_rejected(run))
    applies, reason = fencing_applies(run)
    if applies:
        put("token_order_violations", *check_token_order(run))
    else:
        put("token_order_violations", None, [], reason)
    put("lost_updates", *check_lost_updates(run))
    put("hung_workers", *check_hung_workers(run))
    put("crashed_workers", *check_crashed_workers(run))

    gap = measure_no_holder_gap(run)
    bound = expectations.get(GAP_CHECK)
    if isinstance(bound, (int, float)) and not isinstance(bound, bool):
        results[GAP_CHECK] = {"value": gap["ms"], "expected": bound, "examples": [gap],
                              "status": "ok" if gap["ms"] <= bound else "FAIL",
                              "reason": f"bound {bound} ms"}

    detection = measure_loss_detection(run)
    bound = expectations.get(DETECTION_CHECK)
    if isinstance(bound, (int, float)) and not isinstance(bound, bool):
        worst = detection["max_ms"] or 0
        results[DETECTION_CHECK] = {"value": detection["max_ms"], "expected": bound,
                                    "examples": detection["slowest"],
                                    "status": "ok" if worst <= bound else "FAIL", "reason": f"bound {bound} ms",
                                    "detail": f"{detection['n']} loss(es): {detection['told']} told, "
                                              f"{detection['released']} released untold"}

    known = set(CHECKS) | {GAP_CHECK, DETECTION_CHECK}
    notes = list(run.notes)
    notes += [f"expectation for unknown check {k!r} ignored" for k in expectations if k not in known]
    failed = [k for k, v in results.items() if v["status"] == "FAIL"]
    meta = run.meta
    report = {
        "run_dir": str(run.path),
        "run": {k: meta.get(k) for k in ("backend", "url", "nemesis", "workers", "seconds",
                                          "lease_ms", "pause_ms") if k in meta},
        "input": {"history_files": len(run.workers), "store_records": len(run.store),
                  "nemesis_records": len(run.nemesis),
                  "truncated_lines": sum(run.truncated.values()),
                  "truncated_files": run.truncated},
        "checks": results,
        "figures": {
            "double_grants_excused": {
                "count": len(excused),
                "told_at_release": sum(1 for e in excused if e["at_release"]),
                "loss_latency": p50_max([e["latency_ns"] for e in excused]),
                "examples": excused[:MAX_EXAMPLES],
            },
            "losses_reported": measure_losses_reported(run),
            "loss_detection": detection,
            "longest_no_holder_gap": gap,
            "silence_limit_ms": silence_limit_ms(run),
        },
        "totals": totals(run),
        "notes": notes,
        "failed": failed,
        "exit_status": EXIT_FAIL if failed else EXIT_OK,
    }
    return report


# --------------------------------------------------------------------------
# The text report


def format_text(rep: dict) -> str:
    """The report as readable text."""
    out = []
    run = rep["run"]
    out.append(f"fault run {rep['run_dir']}")
    out.append("  " + "  ".join(f"{k}={v}" for k, v in run.items()))
    inp = rep["input"]
    trunc = ", ".join(f"{f}: {n}" for f, n in inp["truncated_files"].items()) or "none"
    out.append(f"  input: {inp['history_files']} histories, {inp['store_records']} store records, "
               f"{inp['nemesis_records']} nemesis records; truncated last lines: {trunc}")
    out.append("")
    out.append("checks")
    for name, c in rep["checks"].items():
        title = CHECK_TITLES.get(name, name)
        if c["status"] == "n/a":
            out.append(f"  {title:<42} {'-':>8}  n/a ({c['reason']})")
            continue
        value = "-" if c["value"] is None else c["value"]  # a measure with nothing to measure
        line = f"  {title:<42} {value:>8}  {c['status']}"
        if c["status"] == "expected-fail":
            line += f" (expected: {c.get('why') or c.get('expected')})"
        elif name in (GAP_CHECK, DETECTION_CHECK):
            line += f" (bound {c['expected']} ms)"
        if c["value"] and c.get("detail"):
            line += f"  [{c['detail']}]"
        out.append(line)
        if c["status"] != "ok":
            for ex in c["examples"]:
                out.append(f"      {describe_example(name, ex)}")
            if isinstance(c["value"], int) and c["value"] > len(c["examples"]) > 0:
                out.append(f"      ... (the first {len(c['examples'])} listed)")
    fig = rep["figures"]
    exc = fig["double_grants_excused"]
    lost = fig["losses_reported"]
    gap = fig["longest_no_holder_gap"]
    out.append("")
    out.append("figures")
    out.append(f"  {'double grants excused (loss signalled)':<42} {exc['count']:>8}"
               f"  loss latency {fmt_latency(exc['loss_latency'])}; told only at release"
               f" {exc['told_at_release']}")
    out.append(f"  {'losses reported (lost events)':<42} {lost['count']:>8}"
               f"  latency {fmt_latency(lost['latency'])}; after release {lost['after_release']},"
               f" unmatched {lost['unmatched']}")
    det = fig["loss_detection"]
    out.append(f"  {'lost-lock detection (running time)':<42} {det['n']:>8}"
               + (f"  p50 {det['p50_ms']} ms, p99 {det['p99_ms']} ms, max {det['max_ms']} ms" if det["n"] else "  -")
               + f"; told {det['told']}, released untold {det['released']}"
               + ("" if det["observed"] else " (no server observer)"))
    where = f" (from {gap['from_ms']} ms to {gap['to_ms']} ms)" if gap["from_ms"] is not None else ""
    out.append(f"  {'longest time with waiters but no holder':<42} {gap['ms']:>8} ms{where}")
    tot = rep["totals"]
    out.append("")
    out.append("totals")
    out.append(f"  grants {tot['grants']}, acquire fails {tot['acquire_fails']}, "
               f"acquire unknowns {tot['acquire_unknowns']}, held false {tot['held_false']}, "
               f"on_error {tot['errors']}")
    out.append(f"  writes accepted {tot['writes_accepted']}, rejected {tot['writes_rejected']}"
               f" (unattributed {tot['writes_unattributed']}); counter sets {tot['counter_sets']},"
               f" reads {tot['counter_reads']}")
    out.append(f"  {'worker':<10} {'grants':>7} {'fails':>6} {'unknown':>8} {'cycles':>7} "
               f"{'lost':>5}  end")
    for w, p in tot["per_worker"].items():
        cycles = "-" if p["cycles"] is None else p["cycles"]
        out.append(f"  {w:<10} {p['grants']:>7} {p['acquire_fails']:>6} {p['acquire_unknowns']:>8} "
                   f"{cycles:>7} {p['lost']:>5}  {p['end']}: {p['end_detail']}")
    if rep["notes"]:
        out.append("")
        out.append("notes")
        out += [f"  {n}" for n in rep["notes"]]
    out.append("")
    if rep["failed"]:
        out.append(f"FAIL: {', '.join(rep['failed'])}")
    else:
        out.append("PASS: no unexpected violation")
    return "\n".join(out) + "\n"


def describe_grant(g: dict) -> str:
    return f"{g['w']} (token {g['token']}, {g['ok_ms']}..{g['end_ms']} ms)"


def describe_example(name: str, ex: dict) -> str:
    """One example of a check, as a line of text."""
    if name == "double_grants":
        return (f"{describe_grant(ex['earlier'])} and {describe_grant(ex['later'])}: "
                f"overlap {ex['overlap_ms']} ms, the earlier one never signalled")
    if name == "stale_writes_accepted":
        return (f"at {ex['at_ms']} ms: write of {describe_grant(ex['writer'])} accepted after a "
                f"write of {describe_grant(ex['after_write_of'])}; highest {ex['highest']}")
    if name == "legitimate_writes_rejected":
        return (f"at {ex['at_ms']} ms: write of {describe_grant(ex['writer'])} rejected "
                f"(highest {ex['highest']}) though no later grant had written")
    if name == "token_order_violations":
        return (f"{describe_grant(ex['grant'])}, invoked at {ex['invoke_ms']} ms, after "
                f"{describe_grant(ex['earlier_with_higher_or_equal_token'])}: {ex['pairs']} pair(s)")
    if name == "lost_updates":
        return f"{ex['sets']} completed sets, final value {ex['final_value']}"
    if name in ("hung_workers", "crashed_workers"):
        return f"{ex['w']}: {ex['why']}"
    if name == GAP_CHECK:
        return f"from {ex['from_ms']} ms to {ex['to_ms']} ms"
    if name == DETECTION_CHECK:
        return (f"{describe_grant(ex['grant'])} lost at {ex['lost_ms']} ms ({ex['loss']}), {ex['ended']} "
                f"{ex['latency_ms']} ms later (running time)")
    return json.dumps(ex, sort_keys=True)


def fmt_latency(lat: dict) -> str:
    if not lat["n"]:
        return "-"
    return f"p50 {lat['p50_ms']} ms, max {lat['max_ms']} ms (n={lat['n']})"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="Check a fault-harness run directory.")
    ap.add_argument("run_dir")
    ap.add_argument("--json", action="store_true",
                    help="print the report as JSON and write RUN_DIR/report.json")
    ap.add_argument("--expect", metavar="FILE",
                    help="expectations (JSON object: check name -> \"expected\"); "
                         "default: run.json's expectations")
    args = ap.parse_args(argv)
    try:
        rep = analyse(args.run_dir, args.expect)
    except InputError as e:
        print(f"checker: unreadable input: {e}", file=sys.stderr)
        return EXIT_UNREADABLE
    if args.json:
        text = json.dumps(rep, indent=2, sort_keys=False) + "\n"
        sys.stdout.write(text)
        try:
            (Path(args.run_dir) / "report.json").write_text(text)
        except OSError as e:
            print(f"checker: cannot write report.json: {e}", file=sys.stderr)
    else:
        sys.stdout.write(format_text(rep))
    return rep["exit_status"]


if __name__ == "__main__":
    sys.exit(main())
