#!/usr/bin/env python3
"""Many cells of the fault harness: backends x nemeses, with what each is expected to do.

    matrix.py --profile short|full [--seconds S] [--repeat N] [--only ID,...] [--nemesis N,...]
              [--lanes N] [--out DIR] [--report FILE] [--list]
    matrix.py --profile soak [--ops N] [--hold-ms MS] [--max-hours H] [--seconds S] [--only ...] [--lanes N]

For every cell (backend id, nemesis) that applies, runs harness.py (one cell; it
starts the store, proxies, workers and nemesis and runs checker.py) with the
cell's expectations, then prints a summary and, with --report, writes the
Markdown page of docs/reliability.md. Cells that do not apply are listed with
their reason, never run and never counted as passed.

Exit status: 0 when no cell FAILed, 1 when one did (a check nonzero that is not
expected, or a harness error).

`short` (scripts/test.sh): a few seconds per cell, every backend at least once and
every nemesis at least once. --lanes N (scripts/test.sh: 2) runs N cells at a
time, never two on one server (integration/backends.sh's, which a nemesis may
kill, restart, wipe or put under libfaketime): the cells of one server run one
after the other in one lane. `full` (scripts/faults.sh): every applicable cell for
--seconds (default 60), --repeat times. `soak` (scripts/faults.sh --soak): per
backend, cells of the nemeses that apply to it in turn, with workers that hold
each grant --hold-ms (2), until --ops (100,000) lock operations (acquire calls
and releases) were made and checked; soak.json records how many in how long.
"""

import argparse
import collections
import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))

# ---- what each backend is -----------------------------------------------------

LEASE = "lease"          # a grant expires unless renewed; held() turns false with time
SESSION_SQL = "session"  # held by a database session (a connection); no lease
ZK = "zk-session"        # a ZooKeeper session (heartbeats) holds it; no per-lock lease
FLOCK = "flock"          # the kernel holds it (file://)
MEMORY = "memory"        # in-process

BACKENDS = {
    # id: (kind, fencing token, server keeps its data across a restart, cluster)
    "file": (FLOCK, True, None, False),
    "memory": (MEMORY, True, None, False),
    "redis": (LEASE, True, False, False),
    "redis-reentrant": (LEASE, True, False, False),
    "redlock": (LEASE, False, False, False),
    "mysql-lease-table": (LEASE, True, True, False),
    "mysql-lease-table-bell": (LEASE, True, True, False),  # wake=bell: waiters on the holder's doorbell
    # wake=bell on a lock table of the MEMORY engine: the leases vanish with the server, the tokens do not.
    "mysql-memory-bell": (LEASE, True, True, False),
    "mysql-optimistic": (LEASE, True, True, False),
    "mysql-for-update": (SESSION_SQL, True, True, False),
    "mysql-get-lock": (SESSION_SQL, True, True, False),
    "postgres-lease-table": (LEASE, True, True, False),
    "postgres-optimistic": (LEASE, True, True, False),
    "postgres-for-update": (SESSION_SQL, True, True, False),
    "postgres-advisory": (SESSION_SQL, True, True, False),
    "zk": (ZK, True, True, False),
    "zk-ensemble": (ZK, True, True, True),
    "etcd": (LEASE, True, True, False),
    "etcd-cluster": (LEASE, True, True, True),
    "consul-emulator": (LEASE, True, False, False),
    # A master, two replicas and three sentinels: kill-leader kills the master.
    "redis-sentinel": (LEASE, True, False, True),
    # Grants confirmed by WAIT 2: both replicas. WAIT 1 of 2 is not enough: the sentinels
    # may promote the replica that did not acknowledge (they compare replication offsets
    # they read up to a second before); the soak run of 2026-11-28 saw tokens go back by
    # 76 that way (docs/backends/redis.md, "What min_replicas does and does not guarantee").
    "redis-sentinel-min-replicas": (LEASE, True, False, True),
    # Three masters, each with a replica: kill-leader and partition-leader act on the
    # master of the lock's slot.
    "redis-cluster": (LEASE, True, False, True),
    "redis-cluster-min-replicas": (LEASE, True, False, True),  # grants confirmed by WAIT 1
}
SENTINEL = {"redis-sentinel", "redis-sentinel-min-replicas"}
CLUSTER = {"redis-cluster", "redis-cluster-min-replicas"}
# Replicated Redis deployments without min_replicas: asynchronous replication loses
# grants in a failover and in a split brain.
ASYNC_REPLICATION = {"redis-sentinel", "redis-cluster"}
# Leader elections (provider::election) on a backend's server: id -> the id of
# that backend, whose server, URL and nature they share (harness.py --election).
ELECTION = {"zk-election": "zk", "etcd-election": "etcd", "redis-election": "redis"}
# The same backends with workers that acquire through the asynchronous API
# (harness.py --async): id -> the backend whose server, URL and nature they share.
ASYNC = {"file-async": "file", "redis-async": "redis", "postgres-lease-table-async": "postgres-lease-table",
         "zk-async": "zk", "etcd-async": "etcd"}
# What a cell id runs as: its backend, and the harness flags that make it a variant.
VARIANT = {**{e: (b, ["--election"]) for e, b in ELECTION.items()}, **{e: (b, ["--async"]) for e, b in ASYNC.items()}}
for _e, (_b, _flags) in VARIANT.items():
    BACKENDS[_e] = BACKENDS[_b]

NEMESES = ["none", "pause-holder", "pause-before-write", "kill-holder", "delay-replies", "freeze-client",
           "restart-server", "restart-server-empty", "kill-leader", "clock-jump-client", "clock-jump-server",
           "break-lock", "partition-leader", "partition-minority", "partition-bridge"]
PARTITIONS = ("partition-leader", "partition-minority", "partition-bridge")
# Clusters whose members run on hosts of their own (network namespaces: see
# member_ns_up in integration/backends.sh), so that the links between them can be cut.
ON_HOSTS_OF_THEIR_OWN = {"etcd-cluster", "zk-ensemble"} | SENTINEL | CLUSTER

# Servers whose lock expiry runs on their wall clock (what an NTP step or an
# operator moves), which the clock-jump-server nemesis moves: the SQL lease
# tables compare NOW() (the server under libfaketime), and Redis expires keys by
# its wall clock (redis-server under tests/faults/wallclock_shift.c, since it
# cannot start under libfaketime: that file says why).
WALL_CLOCK_EXPIRY = {"mysql-lease-table", "mysql-lease-table-bell", "mysql-memory-bell", "mysql-optimistic",
                     "postgres-lease-table", "postgres-optimistic", "postgres-lease-table-async",
                     "redis", "redis-reentrant", "redlock", "redis-election", "redis-async"}


def not_applicable(bid, nemesis):
    """The reason a cell does not apply, or None when it does."""
    kind, _, durable, cluster = BACKENDS[bid]
    server = kind not in (FLOCK, MEMORY)
    if kind == MEMORY and nemesis not in ("none", "break-lock"):
        return "memory:// lives in one process (its workers are threads): only in-process nemeses apply"
    if nemesis in ("delay-replies", "freeze-client", "restart-server", "restart-server-empty", "kill-leader",
                   "clock-jump-server") and not server:
        return "no server: nothing to delay, freeze or restart"
    if nemesis == "restart-server" and durable is False:
        return "this server keeps nothing on disk here: a restart is restart-server-empty"
    if nemesis == "restart-server-empty" and durable:
        return ("a durable store that comes back without its data is a new store (its tokens and leases start "
                "over): outside the fault model; restart-server restarts it on its data")
    if bid in SENTINEL and nemesis in ("delay-replies", "freeze-client", "restart-server", "restart-server-empty"):
        return ("the data nodes are found through the sentinels, so a proxy would stand before the sentinels "
                "only; a server failure here is the master's, which kill-leader is (redis:// has the rest)")
    if bid in CLUSTER and nemesis in ("delay-replies", "freeze-client", "restart-server", "restart-server-empty"):
        return ("the nodes are found through the cluster's slot map, so a proxy would stand before the seeds "
                "only; a server failure here is the slot's master's, which kill-leader is (redis:// has the rest)")
    if nemesis == "kill-leader" and not cluster:
        return "a single server has no leader to lose (restart-server kills it)"
    if nemesis == "clock-jump-server" and bid not in WALL_CLOCK_EXPIRY:
        if bid in SENTINEL | CLUSTER:
            return ("a deployment of six servers: the nemesis restarts one server with a clock of its own "
                    "(redis:// measures Redis's wall-clock expiry)")
        if kind == SESSION_SQL:
            return "nothing on the server expires: the lock lasts as long as the session"
        return ("its expiry runs on a monotonic clock (ZooKeeper's sessions, etcd's leases, the Consul emulator's "
                "TTLs, as Consul's Go timers): a wall-clock jump does not move it")
    if nemesis in PARTITIONS:
        if not server:
            return "no server: no links between members to cut"
        if bid == "redlock":
            return ("three independent masters that never talk to each other: no links between them to cut "
                    "(freeze-client cuts a client from all three)")
        if not cluster:
            return "one server: no links between members to cut (freeze-client cuts a client from it)"
        if bid not in ON_HOSTS_OF_THEIR_OWN:
            return ("its members share one host here (loopback), so no link between two of them can be cut "
                    "without cutting the clients too: not measured yet")
        if bid in SENTINEL and nemesis != "partition-leader":
            return ("Sentinel's data nodes are a master and its replicas, not peers of a quorum: the partition "
                    "that matters is the master cut from its replicas and the sentinels while clients still reach "
                    "it (partition-leader); a replica cut off only lags")
        if bid in CLUSTER and nemesis != "partition-leader":
            return ("a Redis Cluster's lock lives on one slot, whose master and replica are not peers of a quorum: "
                    "the partition that matters is that master cut from its replica and the other masters while "
                    "clients still reach it (partition-leader); the other masters vote, and lag nothing the lock "
                    "needs")
    if nemesis == "break-lock" and server:
        return "an in-process test hook for the embedded backends; servers lose state by restart-server(-empty)"
    return None


# ---- what each cell is expected to do -------------------------------------------

WHY_PAUSE_WRITE = ("a holder paused between its held() check and its write, past its lease, writes without "
                   "knowing (the limit of every lease lock, Kleppmann): the unfenced counter loses updates (the "
                   "holder is told at release; the fenced store rejects its write)")
WHY_SESSION_RESTART = ("the lock dies with the server's session: the holder hears of it at its next liveness "
                       "check (lease/3) or at release, and may write the unfenced counter before that (the "
                       "fenced store rejects it)")
WHY_EMPTY_RESTART = ("a server that comes back empty forgets the grant: the holder hears of it at its next "
                     "renewal (lease/3) or at release, and may write the unfenced counter before that (the "
                     "fenced store rejects it)")
WHY_MEMORY_RESTART = ("the lease rows are in a MEMORY table, which the server empties when it restarts: the "
                      "holder hears of it at its next renewal (lease/3) or at release, and may write the unfenced "
                      "counter before that; the tokens come from the InnoDB counter and never repeat, so the fenced "
                      "store rejects that write")
WHY_INDEX_RESTART = ("the Consul emulator keeps nothing: restarted, it starts its Raft index (the fencing token) "
                     "over, so later grants carry lower tokens than the fenced store has seen, which rejects "
                     "their writes (no stale write gets in); Consul servers keep their Raft data, and etcd and "
                     "ZooKeeper tokens start over the same way after data loss (docs/backends/consul.md)")
WHY_NO_FENCE = ("no fencing token (Redlock): the store cannot tell a stale holder's write from the current "
                "one's")
WHY_SERVER_CLOCK = ("the server's wall clock jumps ahead of the lease: the server expires the grant early and "
                    "gives the lock to another while the holder's own (monotonic) lease still runs; the holder "
                    "hears of it at its next renewal (lease/3) or at release, and may write the unfenced counter "
                    "before that (the fenced store rejects it)")
WHY_BREAK = ("the lock is removed out of band: the holder hears of it at once (memory: break_lock reports "
             "through its loss sink) or at its next check (file: check=) or at release, and may write the "
             "unfenced counter before that (the fenced store rejects it)")

# No cell may show a worker that hangs or crashes, and none may leave waiters
# without a holder longer than this (a bound against hangs, not a speed target).
NO_HOLDER_BOUND_MS = 20000

# The lost-lock detection bound (checker.py, measure_loss_detection): no holder
# goes on believing it holds a lock more than this after the server gave it up
# (as the observer saw it, or when it lost its data) or gave it to another,
# counted in the holder's running time. Every backend tells a holder at its next
# renewal or liveness check (every lease/3), or when its own lease deadline
# passes (a lease after its last confirmed renewal), whichever comes first: one
# lease, and one more for a loaded two-core machine. With the harness's 1 s leases.
LOSS_DETECTION_BOUND_MS = 2000
WHY_NO_DETECTION_BOUND = ("a holder on a master that lost its place keeps renewing there, where its grant is "
                          "still held, and is told only when that master learns it was replaced: no bound")


WHY_ASYNC_FAILOVER = ("Redis replicates asynchronously: a grant (and its fence INCR) the killed master had not "
                      "sent to the replica the sentinels promote is gone, so another client gets the lock while "
                      "the holder is told only at its next renewal (lease/3), and tokens may repeat; "
                      "min_replicas equal to the number of replicas is the remedy (the redis-sentinel-min-replicas cell)")


WHY_CLUSTER_FAILOVER = ("Redis replicates asynchronously: a grant (and its fence INCR) the killed master of "
                        "the lock's slot had not sent to the replica that takes its slots over is gone, so "
                        "another client gets the lock while the holder is told only at its next renewal "
                        "(lease/3), and tokens may repeat; min_replicas=1 is the remedy (the "
                        "redis-cluster-min-replicas cell)")


WHY_CLUSTER_SPLIT = ("the master of the lock's slot is cut from its replica and the other masters while clients "
                     "still reach it: it goes on granting until the cluster node timeout (2 s here), while its "
                     "replica is promoted (Redis replicates asynchronously, so grants it had not sent are gone on "
                     "the new master): two masters may grant the lock, each with its own fence counter, and a "
                     "holder on the old one may write or release there before it is told; min_replicas=1 (its one replica) is the "
                     "remedy (the redis-cluster-min-replicas cell, where none of this is allowed)")


WHY_SPLIT_BRAIN = ("the master is cut from its replicas and the sentinels while clients still reach it: the "
                   "sentinels promote a replica, and for the length of the partition two masters grant the lock, "
                   "each with its own fence counter (Redis replicates asynchronously; the old master learns it "
                   "was replaced only when the partition heals, and drops its data then). A holder on the old "
                   "master may release there before it is told; min_replicas equal to the number of replicas is the remedy (the "
                   "redis-sentinel-min-replicas cell, where none of this is allowed)")


WHY_EVERY_REPLICA_PARTITION = ("with min_replicas equal to the number of replicas every grant needs every replica: "
                               "while a partition keeps the old master away (it comes back as a replica only once "
                               "the partition heals and the sentinels reconfigure it), the new master has one "
                               "replica too few and refuses every grant, so nobody holds the lock; with partitions "
                               "a few seconds apart it never has both. That is the price of keeping every "
                               "acknowledged grant across a failover")


def expectations(bid, nemesis):
    """check name -> {"expected": true, "why": ...} for the checks this cell may fail."""
    kind, fencing, durable, _ = BACKENDS[bid]
    exp = {}

    def allow(checks, why):
        for c in checks:
            exp[c] = {"expected": True, "why": why}

    if bid in ASYNC_REPLICATION and nemesis == "kill-leader":
        allow(("double_grants", "lost_updates", "token_order_violations", "legitimate_writes_rejected"),
              WHY_ASYNC_FAILOVER if bid in SENTINEL else WHY_CLUSTER_FAILOVER)
    if bid in ASYNC_REPLICATION and nemesis == "partition-leader":
        allow(("double_grants", "lost_updates", "token_order_violations", "legitimate_writes_rejected",
               "stale_writes_accepted"), WHY_SPLIT_BRAIN if bid in SENTINEL else WHY_CLUSTER_SPLIT)

    unfenced_loss = ("lost_updates",)
    if nemesis == "pause-before-write" and kind in (LEASE, ZK):
        allow(unfenced_loss, WHY_PAUSE_WRITE)
    if nemesis == "restart-server" and kind == SESSION_SQL:
        allow(unfenced_loss, WHY_SESSION_RESTART)
    if nemesis == "restart-server" and bid == "mysql-memory-bell":
        allow(unfenced_loss, WHY_MEMORY_RESTART)
    if nemesis == "restart-server-empty":
        allow(unfenced_loss, WHY_EMPTY_RESTART)
        if bid == "consul-emulator":
            allow(("token_order_violations", "legitimate_writes_rejected"), WHY_INDEX_RESTART)
    if nemesis == "break-lock":
        allow(unfenced_loss, WHY_BREAK)
    if nemesis == "clock-jump-server":
        allow(unfenced_loss, WHY_SERVER_CLOCK)
    if not fencing and any(c in exp for c in unfenced_loss):
        allow(("stale_writes_accepted",), WHY_NO_FENCE)
    exp["longest_no_holder_gap_ms"] = NO_HOLDER_BOUND_MS
    if bid == "redis-sentinel-min-replicas" and nemesis == "partition-leader":
        exp["longest_no_holder_gap_ms"] = {"expected": True, "why": WHY_EVERY_REPLICA_PARTITION}
    if bid == "redis-sentinel" and nemesis in ("kill-leader", "partition-leader"):
        exp["loss_detection_ms"] = {"expected": True, "why": WHY_NO_DETECTION_BOUND}
    else:
        exp["loss_detection_ms"] = LOSS_DETECTION_BOUND_MS
    return exp


# ---- the cells of each profile ------------------------------------------------------

SHORT = [
    ("file", "pause-before-write"), ("file", "kill-holder"), ("memory", "break-lock"),
    ("redis", "pause-before-write"), ("redis", "restart-server-empty"), ("redis", "delay-replies"),
    ("redis", "clock-jump-server"),
    ("redis-reentrant", "kill-holder"), ("redlock", "freeze-client"),
    ("mysql-lease-table-bell", "pause-holder"), ("mysql-optimistic", "delay-replies"),
    ("mysql-for-update", "kill-holder"), ("mysql-get-lock", "restart-server"),
    ("postgres-lease-table", "restart-server"), ("postgres-optimistic", "pause-before-write"),
    ("postgres-for-update", "freeze-client"), ("postgres-advisory", "pause-holder"),
    ("zk", "pause-holder"), ("zk-ensemble", "kill-leader"), ("etcd", "clock-jump-client"),
    ("mysql-lease-table", "clock-jump-server"), ("mysql-memory-bell", "restart-server"),
    ("etcd-cluster", "kill-leader"), ("etcd-cluster", "partition-leader"), ("consul-emulator", "pause-before-write"),
    ("redis-sentinel-min-replicas", "kill-leader"), ("redis-sentinel-min-replicas", "partition-leader"),
    ("redis-cluster-min-replicas", "partition-leader"), ("zk-election", "kill-holder"),
    ("redis-async", "pause-holder"), ("zk-async", "kill-holder"), ("postgres-lease-table-async", "restart-server"),
]


def cells(profile, only, nemeses):
    out = []
    if profile == "short":
        out = [(b, n) for b, n in SHORT]
    else:
        out = [(b, n) for b in BACKENDS for n in NEMESES]
    if only:
        out = [(b, n) for b, n in out if b in only]
    if nemeses:
        out = [(b, n) for b, n in out if n in nemeses]
    return out


# ---- running ---------------------------------------------------------------------------

def server_of(bid):
    """The integration/backends.sh server a cell's nemesis may act on (None: in-process or files)."""
    if HERE not in sys.path:
        sys.path.insert(0, HERE)
    from harness import server_name  # the harness's own answer
    return server_name(VARIANT.get(bid, (bid, []))[0])


def lanes(planned, count):
    """`planned` ((rep, backend id, nemesis), in order) in `count` lanes: all the cells of
    one server in one lane, in their order; the servers' groups, largest first, each
    to the lane with the fewest cells. Cells of no server are spread like the rest."""
    groups = collections.OrderedDict()
    for i, (rep, b, n) in enumerate(planned):
        key = server_of(b) or ("no-server", i)
        groups.setdefault(key, []).append((rep, b, n))
    out = [[] for _ in range(count)]
    for group in sorted(groups.values(), key=len, reverse=True):
        min(out, key=len).extend(group)
    return out


def cell_seconds(bid, nemesis, seconds):
    """The nemesis seconds of a cell: at least what its nemesis needs to act once (a
    Sentinel or Cluster partition lasts 6 leases, after up to 3 of waiting: 12 s with 1 s leases)."""
    if bid in SENTINEL | CLUSTER and nemesis in PARTITIONS:
        return max(seconds, 12.0)
    return seconds


def run_cell(bid, nemesis, seconds, out_dir, extra):
    exp = expectations(bid, nemesis)
    seconds = cell_seconds(bid, nemesis, seconds)
    base, flags = VARIANT.get(bid, (bid, []))
    extra = flags + extra
    cmd = [sys.executable, os.path.join(HERE, "harness.py"), "--backend", base, "--nemesis", nemesis,
           "--seconds", str(seconds), "--out", out_dir, "--expect", json.dumps(exp)] + extra
    t0 = time.monotonic()
    with open(os.path.join(os.path.dirname(out_dir), os.path.basename(out_dir) + ".log"), "w") as log:
        rc = subprocess.call(cmd, stdout=log, stderr=subprocess.STDOUT)
    elapsed = time.monotonic() - t0
    report = None
    try:
        with open(os.path.join(out_dir, "report.json")) as f:
            report = json.load(f)
    except (OSError, ValueError):
        pass
    return {"backend": bid, "nemesis": nemesis, "rc": rc, "elapsed_s": round(elapsed, 1), "dir": out_dir,
            "expectations": exp, "report": report, "actions": nemesis_actions(out_dir)}


# What counts as the nemesis acting, in nemesis.jsonl; and in the histories, a
# worker's self-pause (`pause stop`) or self-kill (`kill`).
NEMESIS_ACTIONS = {"server-kill", "leader-kill", "clock", "break-lock", "delay", "freeze", "partition"}


def nemesis_actions(run_dir):
    """How often the nemesis acted in a cell: a cell whose nemesis never acted proves nothing."""
    count = 0

    def records(path):
        try:
            with open(path) as f:
                for line in f:
                    try:
                        yield json.loads(line)
                    except ValueError:
                        continue
        except OSError:
            return

    for r in records(os.path.join(run_dir, "nemesis.jsonl")):
        if r.get("ev") in NEMESIS_ACTIONS and r.get("phase", "start") == "start":
            count += 1
    hist = os.path.join(run_dir, "history")
    for name in (os.listdir(hist) if os.path.isdir(hist) else []):
        for r in records(os.path.join(hist, name)):
            if r.get("ev") == "kill" or (r.get("ev") == "pause" and r.get("phase") == "stop"):
                count += 1
    return count


def verdict(cell):
    r = cell["report"]
    if r is None:
        return "ERROR"
    statuses = [c.get("status") for c in r.get("checks", {}).values()]
    if cell["rc"] != 0 or "FAIL" in statuses:
        return "FAIL"
    if cell["nemesis"] != "none" and cell["actions"] == 0:
        return "FAIL"  # the nemesis never acted: nothing was tested
    if "expected-fail" in statuses:
        return "expected-fail"
    return "pass"


VERDICT_ORDER = ("pass", "expected-fail", "FAIL", "ERROR")


def worst_verdict(cells):
    """The verdict of a cell's repeats together: the worst of them."""
    return max((verdict(c) for c in cells), key=VERDICT_ORDER.index)


def repeat_of(cell):
    """A cell's repeat number (its directory ends in .<repeat>)."""
    tail = cell["dir"].rsplit(".", 1)[-1]
    return int(tail) if tail.isdigit() else 1


def safety_totals(cells):
    """Unexcused double grants in all cells, and stale writes the fenced store accepted on the backends
    with fencing tokens: what no page may show above 0 without saying so."""
    def value(c, check):
        return (c["report"] or {}).get("checks", {}).get(check, {}).get("value", 0) or 0
    return (sum(value(c, "double_grants") for c in cells),
            sum(value(c, "stale_writes_accepted") for c in cells if BACKENDS[c["backend"]][1]))


def fmt_ms(v):
    return "-" if v is None else ("%.0f" % v)


KIND_TEXT = {
    LEASE: "a lease (the grant expires unless renewed)",
    SESSION_SQL: "a database session (no lease: the lock lasts as long as the connection)",
    ZK: "a ZooKeeper session (no per-lock lease; the session is the lease)",
    FLOCK: "the kernel (flock: no lease, one host)",
    MEMORY: "the process (in-process only)",
}

# The page's "What to expect" (plain words per backend; each claim is a cell of the matrix below).
WHAT_TO_EXPECT = [
    ("file://", "one holder on one host; a crashed holder's lock is free at once (the kernel); a paused holder "
                "keeps it (no lease)", "anything across hosts; a lock file deleted by hand is noticed only at the "
                "holder's next check"),
    ("memory://", "one holder in one process", "anything across processes"),
    ("redis://", "one holder while the server runs; a holder paused past its lease is told at its next renewal "
                 "or at unlock, and its late write is rejected by the fencing token", "grants kept across a "
                 "restart without persistence (the holder is told within a lease); a write by a paused holder "
                 "that you do not fence"),
    ("redlock://", "one holder while a majority of the masters runs", "rejecting a paused holder's late write "
                   "(no fencing token)"),
    ("mysql:// and postgres:// (lease-table, optimistic)", "one holder, across server restarts (the lease rows "
     "are durable); expiry judged by the server's clock; fencing tokens", "a write by a paused holder that you do "
     "not fence; a server clock that jumps ahead expires leases early (the holder is told at its next renewal)"),
    ("mysql:// and postgres:// (for-update, get-lock, advisory)", "one holder while its session lives; a paused "
     "holder keeps the lock (no lease)", "the lock across a server restart or a lost connection (the holder is "
     "told at its next liveness check, lease/3)"),
    ("zk://", "one holder; on an ensemble, through the loss of the leader and partitions that leave a majority",
     "a holder paused past its session timeout keeps nothing (it is told when it runs again)"),
    ("etcd://", "one holder; on a cluster, through the loss of the leader and partitions that leave a majority",
     "a write by a holder paused past its lease that you do not fence"),
    ("consul://", "one holder while its session lives", "a write by a paused holder that you do not fence; the "
                  "emulator's index starts over when it loses its data"),
    ("redis-sentinel://", "one holder while the master stays the master", "a failover, or a master cut off from "
     "its replicas, can give the lock twice and repeat tokens (asynchronous replication): use min_replicas=N, N "
     "the number of replicas"),
    ("redis-sentinel://...?min_replicas=N (every replica)", "one holder through failovers and a master cut off "
     "from its replicas; a grant or renewal too few replicas acknowledge is refused", "availability while fewer "
     "replicas than min_replicas answer (after a failover, until the old master is back as a replica); with "
     "min_replicas below the number of replicas, a failover can still lose grants and repeat tokens"),
    ("redis-cluster://", "one holder while the master of the lock's slot stays its master; a slot that migrates "
     "takes the lock with it", "a failover of that master, or that master cut off from its replica and the other "
     "masters, can give the lock twice and repeat tokens (asynchronous replication): use min_replicas=1"),
    ("redis-cluster://...?min_replicas=1", "one holder through failovers and partitions of the slot's master; a "
     "grant or renewal its replica does not acknowledge is refused", "availability while the slot's master has "
     "fewer replicas than min_replicas"),
]


# What a holder's loss detection depends on, per kind (the harness's settings: 1 s leases).
DETECTION_SETTINGS = {
    LEASE: "lease 1 s, renewed every lease/3; told at a renewal that fails, or at its own lease deadline",
    SESSION_SQL: "the session checked every lease/3 (1 s lease setting); told at a check that fails",
    ZK: "session_timeout 1 s; told when the session is lost or expires",
    FLOCK: "the lock file checked every check= period; told at a check that finds it gone",
    MEMORY: "told at once by the provider's loss sink",
}


def detection_rows(results):
    """Per backend and nemesis (repeats together): the lost-lock detection figures and the bound."""
    rows = collections.OrderedDict()
    for c in results:
        det = ((c["report"] or {}).get("figures") or {}).get("loss_detection")
        if not det:
            continue
        key = (c["backend"], c["nemesis"])
        r = rows.setdefault(key, {"n": 0, "told": 0, "released": 0, "p50": [], "p99": [], "max": None,
                                  "bound": c["expectations"].get("loss_detection_ms")})
        r["n"] += det.get("n", 0)
        r["told"] += det.get("told", 0)
        r["released"] += det.get("released", 0)
        if det.get("n"):
            r["p50"].append(det["p50_ms"])
            r["p99"].append(det["p99_ms"])
            r["max"] = max(r["max"] or 0, det["max_ms"])
    return rows


SHORT_VERDICT = {"pass": "pass", "expected-fail": "exp. fail", "FAIL": "**FAIL**", "ERROR": "**ERROR**"}


def cell_row(cell, repeated=False):
    r = cell["report"] or {}
    ch = r.get("checks", {})
    fig = r.get("figures", {})
    tot = r.get("totals", {})

    def val(name):
        c = ch.get(name)
        if not c:
            return "-"
        if c.get("status") == "n/a":
            return "n/a"
        v = c.get("value", 0)
        mark = {"FAIL": " **FAIL**", "expected-fail": " (expected)"}.get(c.get("status"), "")
        return "%s%s" % (v, mark)

    exc = fig.get("double_grants_excused", {})
    losses = fig.get("losses_reported", {})
    gap = fig.get("longest_no_holder_gap", {}).get("ms")
    name = cell["nemesis"] if not repeated else "%s (%d)" % (cell["nemesis"], repeat_of(cell))
    return [name, verdict(cell), str(cell["actions"]), str(tot.get("grants", "-")), val("double_grants"),
            "%s / %s / %s" % (exc.get("count", "-"), exc.get("told_at_release", "-"),
                              fmt_ms((exc.get("loss_latency") or {}).get("max_ms"))),
            val("stale_writes_accepted"), val("legitimate_writes_rejected"), val("token_order_violations"),
            val("lost_updates"), "%s / %s" % (losses.get("count", "-"), fmt_ms((losses.get("latency") or {}).get("max_ms"))),
            fmt_ms(gap), "%s / %s" % (val("hung_workers"), val("crashed_workers"))]


HEADER = ["nemesis", "result", "faults injected", "grants", "double grants (unexcused)",
          "excused overlaps / told at release / max loss latency ms", "stale writes accepted",
          "legit writes rejected", "token order violations", "lost updates", "losses reported / max latency ms",
          "longest no-holder gap ms", "hung / crashed"]


def markdown(results, skipped, meta):
    """The page of docs/reliability.md from a run's cells (`meta`: started, finished, planned, commit,
    seconds, repeat, workers, machine)."""
    lines = []
    add = lines.append
    add("# Reliability under faults: the full matrix")
    add("")
    add("Generated by `scripts/faults.sh` (`tests/faults/matrix.py --profile full`) from one recorded run; "
        "do not edit by hand (re-render a run with `matrix.py --render DIR/matrix.json ...`). How the harness works "
        "and what each check means: [tests/faults/README.md](../tests/faults/README.md). Long histories (at least "
        "100,000 lock operations per backend under a rotating nemesis): [soak.md](soak.md).")
    add("")
    finished = meta.get("finished") or "(not finished: %d of %d cells so far)" % (len(results), meta.get("planned", 0))
    add("- Run: %s to %s (UTC), commit `%s`, %s." % (meta.get("started"), finished, meta.get("commit") or "?",
                                                     meta.get("machine") or "?"))
    for c in results:
        if c.get("rechecked"):
            add("- Checked again after the run: %s / %s, recorded as %s, whose histories were checked again by "
                "`checker.py` with the expectations declared at commit `%s` (the recorded report is kept as "
                "`report.recorded.json`)." % (c["backend"], c["nemesis"], c["rechecked"]["recorded_verdict"],
                                              c["rechecked"]["commit"]))
    if len(meta.get("parts", [])) > 1:
        add("- Recorded in %d parts (an interrupted run, resumed with the cells it had not run, at the same "
            "commit and settings): %s." % (len(meta["parts"]), "; ".join(
                "%s to %s, %d cells" % (a, b or "interrupted", n) for a, b, n in meta["parts"])))
    add("- Each cell: %d worker processes on one lock, 1 s leases, %g s of nemesis, repeated %d time(s); every "
        "worker records its history, `checker.py` reads them." % (meta.get("workers", 6), meta.get("seconds", 0),
                                                                    meta.get("repeat", 1)))
    passed = sum(1 for c in results if verdict(c) == "pass")
    expected = sum(1 for c in results if verdict(c) == "expected-fail")
    failed = sum(1 for c in results if verdict(c) in ("FAIL", "ERROR"))
    add("- Cells run: %d: %d passed, %d failed only where expected (marked, with the reason), %d FAILED; %d "
        "cells do not apply (listed with their reason)." % (len(results), passed, expected, failed, len(skipped)))
    double, stale_fenced = safety_totals(results)
    add("- Unexcused double grants, all cells: %d. Stale writes accepted by the fenced store on the backends "
        "with fencing tokens: %d." % (double, stale_fenced))
    add("")
    add("## What to expect")
    add("")
    add("In plain words, what the cells below show per backend. *Told*: the holder's `on_lost` runs and "
        "`held()` says false (within the bound of [the detection table](#how-soon-a-holder-learns-of-a-lost-lock)).")
    add("")
    add("| backend | you can rely on | you cannot rely on |")
    add("|---|---|---|")
    for backend, yes, no in WHAT_TO_EXPECT:
        add("| %s | %s | %s |" % (backend, yes, no))
    add("")
    add("## The matrix")
    add("")
    nemeses = [n for n in NEMESES if any(c["nemesis"] == n for c in results) or any(n == k for _, k, _ in skipped)]
    add("| backend | " + " | ".join(nemeses) + " |")
    add("|---|" + "---|" * len(nemeses))
    cells_of = {}
    for c in results:
        cells_of.setdefault((c["backend"], c["nemesis"]), []).append(c)
    for bid in BACKENDS:
        row = []
        for n in nemeses:
            cs = cells_of.get((bid, n))
            row.append(SHORT_VERDICT[worst_verdict(cs)] if cs else ("n/a" if not_applicable(bid, n) else "-"))
        add("| %s | %s |" % (bid, " | ".join(row)))
    add("")
    add("*exp. fail*: a check failed that the cell declares as a documented limit (below); *n/a*: the nemesis "
        "cannot apply to that backend (the reason is listed under the backend). With repeats, a cell shows the "
        "worst of its runs; each run is a row of its backend's table, its repeat in parentheses.")
    add("")
    add("## What is guaranteed, what is expected to fail")
    add("")
    add("Never expected, on any backend under any nemesis: a double grant the library never told the holder "
        "about (not even by `unlock()`), a hung or crashed worker, waiters left without a holder for more than "
        "%d s (unless listed below); and on every backend with fencing tokens, a stale write accepted by the fenced store; nor, "
        "unless a store that lost its data restarts its tokens (listed below), a legitimate write rejected or a "
        "token that does not increase across holders." % (NO_HOLDER_BOUND_MS // 1000))
    add("")
    add("Expected to fail (a documented limit, not a defect), by cause, with where it did fail in this run:")
    add("")
    seen = {}
    for c in results:
        checks = (c["report"] or {}).get("checks", {})
        for name, e in c["expectations"].items():
            if isinstance(e, dict) and e.get("why"):
                # A measure given no bound (loss detection) is no check: neither failed nor passed.
                failed_here = None if name not in checks else (checks[name].get("value") or 0) > 0
                seen.setdefault(e["why"], {}).setdefault(failed_here, set()).add(
                    "%s/%s (%s)" % (c["backend"], c["nemesis"], name.replace("_", " ")))
    for why, where in seen.items():
        add("- %s." % (why[0].upper() + why[1:]))
        if where.get(True):
            add("  Failed as expected: %s." % ", ".join(sorted(where[True])))
        if where.get(False):
            add("  Expected, but did not fail in this run: %s." % ", ".join(sorted(where[False])))
        if where.get(None):
            add("  No bound held to: %s." % ", ".join(sorted(where[None])))
    add("")
    add("## How soon a holder learns of a lost lock")
    add("")
    add("From the moment the server gave a grant up while its holder still believed it held it (as an observer "
        "polling `inspect()` every 20 ms saw it, or when the server lost its data), or gave it to another, to "
        "the holder's `on_lost` or a `held()` that says false, or else its `unlock()` (it gave the lock up "
        "untold: a server it cannot reach cannot tell it), in the holder's running time (a paused process cannot "
        "be told). `checker.py` measures it in every history, and a cell fails above its bound. Only cells where "
        "a holder lost its lock are listed; p50 and p99 are the highest of the repeats'.")
    add("")
    add("| backend | nemesis | bound ms | losses | told / released untold | p50 ms | p99 ms | max ms | depends on |")
    add("|---|---|---|---|---|---|---|---|---|")
    for (bid, n), r in detection_rows(results).items():
        if not r["n"]:
            continue
        bound = r["bound"]
        bound_text = ("%d" % bound if isinstance(bound, (int, float)) and not isinstance(bound, bool)
                      else "none (below)" if bound else "-")
        add("| %s | %s | %s | %d | %d / %d | %s | %s | %s | %s |" % (
            bid, n, bound_text, r["n"], r["told"], r["released"], fmt_ms(max(r["p50"])), fmt_ms(max(r["p99"])),
            fmt_ms(r["max"]), DETECTION_SETTINGS[BACKENDS[bid][0]]))
    add("")
    add("Columns: *double grants (unexcused)*: two holders at once, the earlier never told (no `on_lost`, no "
        "`held()` false) by the time its `unlock()` returned; *excused overlaps*: two holders at once where the "
        "earlier one was told, how many of them only at release (a paused holder's case), and the longest time "
        "from the later grant to that signal; *losses reported*: `on_lost` calls; *lost updates*: increments of "
        "the unfenced counter lost; *(expected)* marks a nonzero that the cell's expectations allow.")
    by_backend = {}
    for c in results:
        by_backend.setdefault(c["backend"], []).append(c)
    for bid in BACKENDS:
        rows = by_backend.get(bid, [])
        skip = [(n, why) for b, n, why in skipped if b == bid]
        if not rows and not skip:
            continue
        kind, fencing, _, _ = BACKENDS[bid]
        add("")
        add("## %s" % bid)
        add("")
        add("Held by %s; fencing token: %s." % (KIND_TEXT[kind], "yes" if fencing else "no (Redlock has none)"))
        add("")
        if rows:
            add("| " + " | ".join(HEADER) + " |")
            add("|" + "---|" * len(HEADER))
            for c in rows:
                add("| " + " | ".join(cell_row(c, (meta.get("repeat") or 1) > 1)) + " |")
        if skip:
            add("")
        for n, why in skip:
            add("- `%s`: not applicable: %s." % (n, why))
    add("")
    return "\n".join(lines)


def this_machine():
    return "%s, %d CPU(s)" % (platform.platform(terse=True), os.cpu_count() or 0)


def recheck(cell, head):
    """Checks a recorded cell's histories again with the expectations declared now, when they differ from
    those it ran with (the recorded report is kept as report.recorded.json); marks the cell so the page
    says so."""
    now = expectations(cell["backend"], cell["nemesis"])
    if now == cell.get("expectations"):
        return
    d = cell["dir"]
    recorded = os.path.join(d, "report.recorded.json")
    if not os.path.exists(recorded):
        os.replace(os.path.join(d, "report.json"), recorded)
    exp_file = os.path.join(d, "expectations.rechecked.json")
    with open(exp_file, "w") as f:
        json.dump(now, f, indent=1)
    r = subprocess.run([sys.executable, os.path.join(HERE, "checker.py"), d, "--json", "--expect", exp_file],
                       capture_output=True, text=True)
    with open(os.path.join(d, "report.json")) as f:
        new_report = json.load(f)
    was = verdict(cell)
    cell.update(report=new_report, rc=r.returncode, expectations=now,
                rechecked={"commit": head, "recorded_verdict": was})


def render(paths, report, commit=None, rechecking=False):
    """Writes the page of a recorded run to `report`: its matrix.json, or the matrix.json of each part of
    an interrupted run resumed with the cells it had not run (the first part's plan counts)."""
    parts = []
    for path in paths:
        with open(path) as f:
            parts.append(json.load(f))
    m = parts[0]
    cells = [c for p in parts for c in p["cells"]]
    runs = collections.Counter((c["backend"], c["nemesis"]) for c in cells)
    if any(n > (m.get("repeat") or 1) for n in runs.values()):
        raise SystemExit("matrix.py --render: the parts ran a cell more often than the run's --repeat")
    skipped = []
    for p in parts:
        skipped += [(x["backend"], x["nemesis"], x["why"]) for x in p.get("not_applicable", [])
                    if (x["backend"], x["nemesis"], x["why"]) not in skipped]
    commits = sorted({p.get("commit") or commit or "?" for p in parts})
    if len(commits) > 1:
        raise SystemExit("matrix.py --render: the parts were run at different commits: %s" % ", ".join(commits))
    meta = {k: m.get(k) for k in ("started", "commit", "machine", "seconds", "repeat", "workers")}
    meta["commit"] = commits[0]
    meta["machine"] = meta.get("machine") or this_machine()  # runs recorded before it was kept: rendered where run
    meta["planned"] = m.get("cells_planned", len(m["cells"]))
    meta["finished"] = parts[-1].get("finished") if len(cells) >= meta["planned"] else None
    if len(parts) == 1 and m.get("parts"):  # a run resumed in place (--resume)
        meta["parts"] = [tuple(x) for x in m["parts"]]
    else:
        meta["parts"] = [(p.get("started"), p.get("finished"), len(p["cells"])) for p in parts]
    meta["workers"] = meta.get("workers") or 6
    for c in cells:  # runs recorded before "actions" was kept
        c.setdefault("actions", nemesis_actions(c["dir"]))
    if rechecking:
        head = git_head() or "?"
        for c in cells:
            recheck(c, head)
    with open(report, "w") as f:
        f.write(markdown(cells, skipped, meta))


def cell_operations(cell):
    """Lock operations a cell's workers made: acquire calls (granted, timed out, failed) and releases."""
    t = (cell.get("report") or {}).get("totals") or {}
    releases = sum((w.get("cycles") or 0) for w in (t.get("per_worker") or {}).values())
    return sum(t.get(k, 0) or 0 for k in ("grants", "acquire_fails", "acquire_unknowns")) + releases


def git_head():
    """The commit runs are recorded at, "+dirty" when a tracked file differs from it (a page then
    says that it ran code no commit holds)."""
    head = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", REPO, "diff", "--quiet", "HEAD", "--"], capture_output=True).returncode
    return head + ("+dirty" if head and dirty else "")


def utc_now():
    return datetime.datetime.utcnow().strftime("%Y-%m-%d %H:%M")


# The soak's workers fault at a point (pause, kill) with this chance per grant, where a
# matrix cell's do with 0.15 / 0.08: a soak worker holds 2 ms, not half a lease, and
# the fastest backends hand the lock over some 450 times a second, so that is about
# one fault every few seconds there, as in the matrix, instead of the lock spending
# nearly all its time with a paused or dead holder (each cell still faults at least
# once: harness.py --first-fault).
SOAK_FAULT_PROB = 0.0005


def run_soak(args, only, nemeses, out):
    """The soak profile: per backend, cells of --seconds each, the nemeses that apply to it in turn (a
    rotating nemesis), workers that hold for --hold-ms only, until its cells made --ops lock operations and
    every nemesis had its turn, or --max-hours passed; every cell checked as any other. Backends of one server run in one lane, one cell at
    a time. Writes soak.json (every cell, and per backend: operations, cells, seconds, verdicts); --resume
    goes on with the soak.json in `out` (same commit and settings), each backend from where it stopped."""
    backends = [b for b in (only or BACKENDS) if b in BACKENDS]
    plan = []
    for b in backends:
        rotation = [n for n in (nemeses or NEMESES) if not not_applicable(b, n)]
        if rotation:
            plan.append((b, rotation))
    groups = collections.OrderedDict()
    for b, rotation in plan:
        groups.setdefault(server_of(b) or ("no-server", b), []).append((b, rotation))
    lanes_of = [[] for _ in range(max(1, args.lanes))]
    for group in sorted(groups.values(), key=len, reverse=True):
        min(lanes_of, key=len).extend(group)
    settings = {"ops_target": args.ops, "seconds": args.seconds, "hold_ms": args.hold_ms, "workers": args.workers,
                "fault_prob": SOAK_FAULT_PROB}
    head, path = git_head(), os.path.join(out, "soak.json")
    results, summary, parts, started = [], collections.OrderedDict(), [], utc_now()
    if args.resume:
        prev = resumable(path, head, settings)
        results, started, parts = prev["cells"], prev["started"], prev.get("parts") or []
        summary.update(prev["backends"])
    parts.append([utc_now(), None])
    lock = threading.Lock()
    extra = ["--workers", str(args.workers), "--hold-ms", str(args.hold_ms), "--pause-prob", str(SOAK_FAULT_PROB),
             "--kill-prob", str(SOAK_FAULT_PROB)]
    deadline = time.monotonic() + args.max_hours * 3600

    def save(finished=None):
        parts[-1][1] = finished
        with open(path, "w") as f:
            json.dump(dict(settings, profile="soak", commit=head, machine=this_machine(), started=started,
                           finished=finished, parts=parts, backends=summary, cells=results), f, indent=1)

    def lane(items):
        for b, rotation in items:
            with lock:
                entry = summary.setdefault(b, {"operations": 0, "grants": 0, "cells": 0, "seconds": 0.0,
                                               "verdicts": {}})
            k = entry["cells"]
            # Until the operations are made and every nemesis of the rotation had its turn.
            while (entry["operations"] < args.ops or k < len(rotation)) and time.monotonic() < deadline:
                n = rotation[k % len(rotation)]
                k += 1
                cell_dir = os.path.join(out, "%s.%s.%d" % (b, n, k))
                shutil.rmtree(cell_dir, ignore_errors=True)  # a cell cut short before a --resume
                c = run_cell(b, n, args.seconds, cell_dir, extra)
                v = verdict(c)
                with lock:
                    results.append(c)
                    entry["operations"] += cell_operations(c)
                    entry["grants"] += ((c.get("report") or {}).get("totals") or {}).get("grants", 0) or 0
                    entry["cells"] += 1
                    entry["seconds"] = round(entry["seconds"] + c["elapsed_s"], 1)
                    entry["verdicts"][v] = entry["verdicts"].get(v, 0) + 1
                    save()
                print("[soak] %-22s %-22s %-13s %6d ops (%d so far)  %s" % (
                    b, n, v, cell_operations(c), entry["operations"], c["dir"]), file=sys.stderr, flush=True)

    threads = [threading.Thread(target=lane, args=(items,)) for items in lanes_of if items]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    short = [b for b, rotation in plan if summary.get(b, {}).get("operations", 0) < args.ops
             or summary.get(b, {}).get("cells", 0) < len(rotation)]
    save(None if short else utc_now())
    bad = [c for c in results if verdict(c) in ("FAIL", "ERROR")]
    for b, e in summary.items():
        print("[soak] %-22s %8d operations (%d grants) in %d cells, %.0f s: %s" % (
            b, e["operations"], e["grants"], e["cells"], e["seconds"],
            ", ".join("%d %s" % (v, k) for k, v in sorted(e["verdicts"].items()))), file=sys.stderr)
    if short:
        print("[soak] below %d operations or the whole rotation (--max-hours passed): %s" % (
            args.ops, ", ".join(short)), file=sys.stderr)
    for c in bad:
        print("[soak] FAILED: %s %s (see %s)" % (c["backend"], c["nemesis"], c["dir"]), file=sys.stderr)
    return 1 if bad else 0


def soak_markdown(d):
    """The page of docs/soak.md from a soak record (soak.json)."""
    lines = []
    add = lines.append
    cells = d["cells"]
    add("# Soak: long histories under a rotating nemesis")
    add("")
    add("Generated by `scripts/faults.sh --soak` (`tests/faults/matrix.py --profile soak`) from one recorded run; "
        "do not edit by hand (re-render it with `matrix.py --render-soak DIR/soak.json --report docs/soak.md`). "
        "The fault matrix, cell by cell: [reliability.md](reliability.md).")
    add("")
    add("- Run: %s to %s (UTC), commit `%s`, %s." % (d.get("started"), d.get("finished") or "(not finished)",
                                                     d.get("commit") or "?", d.get("machine") or "?"))
    if len(d.get("parts") or []) > 1:
        add("- Recorded in %d parts (cut short, then resumed with `--resume` at the same commit and settings, "
            "each backend from where it stopped): %s." % (len(d["parts"]), "; ".join(
                "%s to %s" % (a, b or "cut short") for a, b in d["parts"])))
    add("- Per backend URL: cells of %g s of nemesis, the nemeses that apply to it in turn (each at least once), "
        "%d worker processes "
        "on one lock holding each grant %d ms (pausing or killing themselves there with a chance of %g per grant "
        "under those nemeses, and at least once a cell), until %d lock operations (acquire calls, granted or "
        "not, and releases) were made; every cell's histories checked by `checker.py` with the cell's "
        "expectations, as in the matrix." % (d["seconds"], d["workers"], d["hold_ms"], d.get("fault_prob", 0.15),
                                            d["ops_target"]))
    double, stale = safety_totals(cells)
    bad = [c for c in cells if verdict(c) in ("FAIL", "ERROR")]
    ops = sum(e["operations"] for e in d["backends"].values())
    add("- %d lock operations in %d cells: %d FAILED. Unexcused double grants: %d. Stale writes accepted by the "
        "fenced store on the backends with fencing tokens: %d." % (ops, len(cells), len(bad), double, stale))
    add("")
    add("| backend | lock operations | grants | cells | seconds | operations/s | nemeses in turn | results |")
    add("|---|---|---|---|---|---|---|---|")
    for b, e in d["backends"].items():
        rotation = []
        for c in cells:
            if c["backend"] == b and c["nemesis"] not in rotation:
                rotation.append(c["nemesis"])
        results = ", ".join("%d %s" % (n, v) for v, n in sorted(e["verdicts"].items(), key=lambda x: VERDICT_ORDER.index(x[0])))
        short = "" if e["operations"] >= d["ops_target"] else " (**below the target**)"
        add("| %s | %d%s | %d | %d | %.0f | %.0f | %s | %s |" % (
            b, e["operations"], short, e["grants"], e["cells"], e["seconds"],
            e["operations"] / e["seconds"] if e["seconds"] else 0, ", ".join(rotation), results))
    add("")
    add("*seconds*: the cells' whole time, the workers' start and stop and the check included; *operations/s*: "
        "over that time, with one lock contended by every worker (a hand-off rate, not a server's throughput: "
        "`distlock bench` measures that). *exp. fail* cells fail only checks their expectations allow, as in "
        "the matrix (a paused holder's lost update of the unfenced counter, Redlock's stale write).")
    if bad:
        add("")
        add("FAILED cells:")
        for c in bad:
            add("- %s / %s: %s" % (c["backend"], c["nemesis"], os.path.basename(c["dir"])))
    add("")
    return "\n".join(lines)


def resumable(path, commit, settings):
    """The record at `path` (a matrix.json or soak.json) that --resume goes on with; exits unless it was
    made at `commit` with the same `settings` (name -> value, as recorded) and is not finished."""
    try:
        with open(path) as f:
            prev = json.load(f)
    except (OSError, ValueError) as e:
        raise SystemExit("matrix.py --resume: no record at %s (%s)" % (path, e))
    if prev.get("commit") != commit:
        raise SystemExit("matrix.py --resume: %s was made at commit %s, this is %s: a page never mixes two "
                         "commits" % (path, prev.get("commit"), commit))
    for k, v in settings.items():
        if prev.get(k) != v:
            raise SystemExit("matrix.py --resume: %s has another %s (give the same arguments): %r, not %r" % (
                path, k, prev.get(k), v))
    if prev.get("finished"):
        raise SystemExit("matrix.py --resume: the run of %s is finished" % path)
    return prev


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--profile", choices=("short", "full", "soak"), default="short")
    ap.add_argument("--ops", type=int, default=100000, help="soak: lock operations per backend (default 100000)")
    ap.add_argument("--hold-ms", type=int, default=2, help="soak: how long a worker holds each grant (default 2)")
    ap.add_argument("--max-hours", type=float, default=24.0, help="soak: stop starting cells after this")
    ap.add_argument("--seconds", type=float, default=None, help="nemesis seconds per cell (short 8, full 60)")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--workers", type=int, default=6)
    ap.add_argument("--lanes", type=int, default=1, help="cells run at once, never two on one server")
    ap.add_argument("--only", default="", help="backend ids, comma-separated")
    ap.add_argument("--nemesis", default="", help="nemeses, comma-separated")
    ap.add_argument("--out", default=None)
    ap.add_argument("--report", default=None, help="write the Markdown page here (docs/reliability.md)")
    ap.add_argument("--list", action="store_true", help="list the cells and their expectations, run nothing")
    ap.add_argument("--render", default=None, nargs="+", metavar="MATRIX_JSON",
                    help="write --report from a recorded run's matrix.json (or those of the parts of an "
                         "interrupted run, resumed with --only/--nemesis), run nothing")
    ap.add_argument("--resume", action="store_true",
                    help="go on with the run recorded in --out (its matrix.json, cut short): the cells it has not "
                         "finished, at the same commit and with the same arguments; the page lists the parts")
    ap.add_argument("--commit", default=None, help="with --render: the commit the run was made at, if not recorded")
    ap.add_argument("--recheck", action="store_true",
                    help="with --render: check again, with the expectations declared now, the recorded histories "
                         "of cells that ran with other expectations (the page lists them)")
    ap.add_argument("--render-soak", default=None, metavar="SOAK_JSON",
                    help="write --report (docs/soak.md) from a recorded soak.json, run nothing")
    args = ap.parse_args(argv)
    if args.render_soak:
        if not args.report:
            ap.error("--render-soak needs --report")
        with open(args.render_soak) as f:
            page = soak_markdown(json.load(f))
        with open(args.report, "w") as f:
            f.write(page)
        return 0
    if args.render:
        if not args.report:
            ap.error("--render needs --report")
        render(args.render, args.report, args.commit, args.recheck)
        return 0
    if args.lanes < 1:
        ap.error("--lanes must be at least 1")
    if args.seconds is None:
        args.seconds = 8.0 if args.profile == "short" else 60.0
    only = [b for b in args.only.split(",") if b]
    nemeses = [n for n in args.nemesis.split(",") if n]
    for b in only:
        if b not in BACKENDS:
            ap.error("unknown backend id %r (known: %s)" % (b, ", ".join(BACKENDS)))
    for n in nemeses:
        if n not in NEMESES:
            ap.error("unknown nemesis %r (known: %s)" % (n, ", ".join(NEMESES)))
    if args.profile == "soak":
        out = args.out or os.path.join("/tmp", "distlock-faults-soak-%s" % time.strftime("%Y%m%d-%H%M%S"))
        os.makedirs(out, exist_ok=True)
        return run_soak(args, only, nemeses, out)
    todo, skipped = [], []
    for b, n in cells(args.profile, only, nemeses):
        why = not_applicable(b, n)
        if why:
            skipped.append((b, n, why))
        else:
            todo.append((b, n))
    if args.list:
        for b, n in todo:
            print("%-22s %-22s %s" % (b, n, json.dumps(expectations(b, n))))
        for b, n, why in skipped:
            print("%-22s %-22s n/a: %s" % (b, n, why))
        return 0
    if args.resume and not args.out:
        ap.error("--resume needs --out (the run to go on with)")
    out = args.out or os.path.join("/tmp", "distlock-faults-matrix-%s" % time.strftime("%Y%m%d-%H%M%S"))
    os.makedirs(out, exist_ok=True)
    now = utc_now()
    started = now
    commit = git_head()
    machine = this_machine()
    planned = [(rep, b, n) for rep in range(1, args.repeat + 1) for b, n in todo]
    plan = [list(x) for x in planned]
    cell_dir_of = {x: os.path.join(out, "%s.%s.%d" % (x[1], x[2], x[0])) for x in planned}
    results, parts = [], []
    if args.resume:
        prev = resumable(os.path.join(out, "matrix.json"), commit,
                         dict({k: getattr(args, k) for k in ("profile", "seconds", "repeat", "workers")}, plan=plan))
        started, results = prev["started"], prev["cells"]
        parts = prev.get("parts") or [[prev["started"], prev.get("finished"), len(results)]]
        done = {c["dir"] for c in results}
        for x in planned:  # a cell cut short: run again from the start
            if cell_dir_of[x] not in done:
                shutil.rmtree(cell_dir_of[x], ignore_errors=True)
        planned = [x for x in planned if cell_dir_of[x] not in done]
    parts.append([now, None, 0])
    before = len(results)
    extra = ["--workers", str(args.workers)]
    def save(finished):
        # After every cell, so that an interrupted run still leaves what it measured.
        parts[-1][1:] = [finished, len(results) - before]
        with open(os.path.join(out, "matrix.json"), "w") as f:
            json.dump({"profile": args.profile, "seconds": args.seconds, "repeat": args.repeat,
                       "workers": args.workers, "started": started, "finished": finished, "commit": commit,
                       "machine": machine, "cells": results, "cells_planned": len(plan), "plan": plan,
                       "parts": parts,
                       "not_applicable": [{"backend": b, "nemesis": n, "why": w} for b, n, w in skipped]}, f,
                      indent=1)
        if args.report:
            render([os.path.join(out, "matrix.json")], args.report)

    done_lock = threading.Lock()
    lane_errors = []

    def run_lane(lane):
        try:
            for rep, b, n in lane:
                cell_dir = cell_dir_of[(rep, b, n)]
                c = run_cell(b, n, args.seconds, cell_dir, extra)
                with done_lock:
                    results.append(c)
                    print("[matrix] %-22s %-22s %-13s %5.1f s  %s" % (b, n, verdict(c), c["elapsed_s"], cell_dir),
                          file=sys.stderr, flush=True)
                    save(None)
        except BaseException as e:  # the run fails, as it did with one lane
            with done_lock:
                lane_errors.append(e)

    threads = [threading.Thread(target=run_lane, args=(lane,)) for lane in lanes(planned, args.lanes) if lane]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if lane_errors:
        raise lane_errors[0]
    order = {os.path.join(out, "%s.%s.%d" % (b, n, rep)): i for i, (rep, b, n) in enumerate(plan)}
    results.sort(key=lambda c: order[c["dir"]])  # the page lists the cells in the profile's order
    save(utc_now())
    bad = [c for c in results if verdict(c) in ("FAIL", "ERROR")]
    print("[matrix] %d cells: %d pass, %d expected-fail, %d FAIL; %d not applicable; results in %s" % (
        len(results), sum(verdict(c) == "pass" for c in results),
        sum(verdict(c) == "expected-fail" for c in results), len(bad), len(skipped), out), file=sys.stderr)
    for c in bad:
        why = " (the nemesis never acted)" if c["report"] and c["nemesis"] != "none" and c["actions"] == 0 else ""
        print("[matrix] FAILED: %s %s%s (see %s and %s.log)" % (c["backend"], c["nemesis"], why, c["dir"], c["dir"]),
              file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
