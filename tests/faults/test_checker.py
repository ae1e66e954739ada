#!/usr/bin/env python3
"""The checker's own tests: run directories made by hand, each with a known answer.

    python3 tests/faults/test_checker.py

Every check has histories that must be flagged and calm ones that must not.
Times in these tests are written in milliseconds and stored as nanoseconds.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
CHECKER = HERE / "checker.py"
sys.path.insert(0, str(HERE))
import checker  # noqa: E402

MS = 1_000_000


class RunDir:
    """Builds a run directory: run.json, history/<w>.jsonl, store.jsonl, nemesis.jsonl.

    The store is simulated like the controller's: a fenced write is accepted
    when token >= highest. Times are in ms.
    """

    def __init__(self, root: Path, backend="redis", fencing=True, lease_ms=1000, **meta):
        self.root = Path(root)
        self.fencing = fencing
        self.meta = {"backend": backend, "url": f"{backend}://redacted", "nemesis": "none",
                     "workers": 0, "seconds": 10, "lease_ms": lease_ms, "pause_ms": 3 * lease_ms,
                     "capabilities": {"fencing": fencing}}
        self.meta.update(meta)
        self.histories: dict[str, list] = {}
        self.raw_tail: dict[str, str] = {}
        self.store: list[dict] = []
        self.nemesis: list[dict] = []
        self.highest = 0
        self.counter = 0

    # -- history events
    def ev(self, w, t, ev, **fields):
        self.histories.setdefault(w, []).append({"t": int(t * MS), "w": w, "ev": ev, **fields})

    def start(self, w, t=0, pid=None, fencing=None):
        fencing = self.fencing if fencing is None else fencing
        self.ev(w, t, "start", pid=pid if pid is not None else 1000 + len(self.histories),
                url="x://redacted", lock="fault-lock", lease_ms=self.meta["lease_ms"],
                caps={"fencing": fencing, "lease_expiry": True, "crash_release": True,
                      "loss_detection": True})

    def acquire(self, w, t_invoke, t_ok, token=None):
        """acquire invoke + ok (token 0 without fencing)."""
        self.ev(w, t_invoke, "acquire", phase="invoke")
        self.ev(w, t_ok, "acquire", phase="ok", token=0 if token is None else token)

    def fenced_write(self, w, t, token, step="announce"):
        """write invoke/ok in the history and W in the store (store decides)."""
        self.ev(w, t, "write", phase="invoke", token=token, step=step)
        accepted = token >= self.highest
        if accepted:
            self.highest = token
        self.store.append({"t": int((t + 0.1) * MS), "op": "W", "w": w, "token": token,
                           "accepted": accepted, "highest": self.highest})
        self.ev(w, t + 0.2, "write", phase="ok", accepted=accepted, highest=self.highest)
        return accepted

    def read(self, w, t):
        self.ev(w, t, "read", phase="invoke")
        self.store.append({"t": int((t + 0.1) * MS), "op": "G", "w": w, "value": self.counter})
        self.ev(w, t + 0.2, "read", phase="ok", value=self.counter)
        return self.counter

    def set(self, w, t, value):
        self.ev(w, t, "set", phase="invoke", value=value)
        self.counter = value
        self.store.append({"t": int((t + 0.1) * MS), "op": "S", "w": w, "value": value})
        self.ev(w, t + 0.2, "set", phase="ok")

    def release(self, w, t):
        self.ev(w, t, "release", phase="invoke")
        self.ev(w, t + 0.5, "release", phase="ok")

    def cycle(self, w, t_invoke, t_ok, token, t_release):
        """One whole grant as a worker runs it, every step in order, writes included."""
        self.acquire(w, t_invoke, t_ok, token)
        self.fenced_write(w, t_ok + 1, token, "announce")
        self.ev(w, t_ok + 2, "held", held=True, step="check")
        value = self.read(w, t_ok + 3)
        self.set(w, t_ok + 4, value + 1)
        self.fenced_write(w, t_ok + 5, token, "final")
        self.release(w, t_release)

    def exit(self, w, t, cycles, status=0):
        self.ev(w, t, "exit", cycles=cycles)
        self.nem(t + 1, "exit", w=w, status=status, signal=None)

    # -- nemesis and files
    def nem(self, t, ev, **fields):
        self.nemesis.append({"t": int(t * MS), "ev": ev, **fields})

    def write(self) -> Path:
        (self.root / "history").mkdir(parents=True, exist_ok=True)
        self.meta["workers"] = len(self.histories)
        (self.root / "run.json").write_text(json.dumps(self.meta))
        for w, events in self.histories.items():
            text = "".join(json.dumps(e) + "\n" for e in events) + self.raw_tail.get(w, "")
            (self.root / "history" / f"{w}.jsonl").write_text(text)
        (self.root / "store.jsonl").write_text("".join(json.dumps(r) + "\n" for r in self.store))
        (self.root / "nemesis.jsonl").write_text("".join(json.dumps(r) + "\n" for r in self.nemesis))
        return self.root


def run_cli(run_dir, *args):
    """Runs checker.py as a program: (exit status, stdout, stderr)."""
    p = subprocess.run([sys.executable, str(CHECKER), str(run_dir), *args],
                       capture_output=True, text=True, timeout=60)
    return p.returncode, p.stdout, p.stderr


class CheckerTest(unittest.TestCase):
    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory(prefix="checker-test-")
        self.addCleanup(self._tmp.cleanup)
        self.tmp = Path(self._tmp.name)

    def new_run(self, **kw) -> RunDir:
        return RunDir(self.tmp / "run", **kw)

    def analyse(self, rd: RunDir, expect_file=None) -> dict:
        return checker.analyse(rd.write(), expect_file)

    def value(self, rep, name):
        return rep["checks"][name]["value"]

    def status(self, rep, name):
        return rep["checks"][name]["status"]

    def assert_only_failures(self, rep, *names):
        """Exactly the named checks FAIL; every other applicable one is 0 and ok."""
        for name in checker.CHECKS:
            c = rep["checks"][name]
            if name in names:
                self.assertEqual(c["status"], "FAIL", f"{name}: {c}")
                self.assertNotEqual(c["value"], 0, name)
            elif c["status"] != "n/a":
                self.assertEqual((c["value"], c["status"]), (0, "ok"), f"{name}: {c}")
        self.assertEqual(sorted(rep["failed"]), sorted(names))

    # ---- a calm run ---------------------------------------------------------

    def calm(self, fencing=True) -> RunDir:
        """Three workers taking turns, 9 grants, every write in order, clean exits."""
        rd = self.new_run(fencing=fencing)
        ws = ["1.1", "2.1", "3.1"]
        for w in ws:
            rd.start(w, 0)
        t = 10
        for i in range(9):
            # each waits from 20 ms before its grant, while the previous one holds
            rd.cycle(ws[i % 3], t - 5 if i == 0 else t - 20, t, (i + 1) if fencing else 0, t + 20)
            t += 21
        for w in ws:
            rd.exit(w, t + 10, cycles=3)
        return rd

    def test_calm_run_passes_with_zeros(self):
        rep = self.analyse(self.calm())
        self.assert_only_failures(rep)
        self.assertEqual(self.status(rep, "token_order_violations"), "ok")
        self.assertEqual(rep["totals"]["grants"], 9)
        self.assertEqual(rep["totals"]["writes_accepted"], 18)
        self.assertEqual(rep["totals"]["writes_rejected"], 0)
        self.assertEqual(rep["totals"]["counter_sets"], 9)
        self.assertEqual(rep["totals"]["per_worker"]["2.1"]["cycles"], 3)
        self.assertEqual(rep["totals"]["per_worker"]["2.1"]["end"], "exit")
        self.assertEqual(rep["figures"]["double_grants_excused"]["count"], 0)
        self.assertEqual(rep["figures"]["losses_reported"]["count"], 0)
        self.assertEqual(rep["input"]["truncated_lines"], 0)
        self.assertEqual(rep["exit_status"], 0)
        code, out, err = run_cli(self.tmp / "run")
        self.assertEqual(code, 0, out + err)
        self.assertIn("PASS", out)

    def test_calm_run_without_fencing_passes(self):
        rep = self.analyse(self.calm(fencing=False))
        self.assert_only_failures(rep)
        self.assertEqual(self.status(rep, "token_order_violations"), "n/a")

    # ---- double grants ------------------------------------------------------

    def overlap(self, fencing=True) -> RunDir:
        """1.1 holds 10..100 (released at 100); 2.1 is granted at 50."""
        rd = self.new_run(fencing=fencing)
        rd.start("1.1")
        rd.start("2.1")
        rd.acquire("1.1", 5, 10, 1 if fencing else 0)
        rd.acquire("2.1", 20, 50, 2 if fencing else 0)
        rd.release("2.1", 150)
        rd.exit("1.1", 200, 1)
        rd.exit("2.1", 200, 1)
        return rd

    def test_double_grant_without_signal_is_flagged(self):
        rd = self.overlap()
        rd.release("1.1", 100)
        rep = self.analyse(rd)
        self.assert_only_failures(rep, "double_grants")
        self.assertEqual(self.value(rep, "double_grants"), 1)
        ex = rep["checks"]["double_grants"]["examples"][0]
        self.assertEqual((ex["earlier"]["w"], ex["later"]["w"]), ("1.1", "2.1"))
        self.assertEqual(rep["checks"]["double_grants"]["detail"],
                         "pairs; 1 earlier grant(s) never signalled")
        self.assertEqual(ex["overlap_ms"], 50.0)
        self.assertEqual(rep["exit_status"], 1)
        code, out, _ = run_cli(rd.root)
        self.assertEqual(code, 1)
        self.assertIn("1.1 (token 1, 10.0..100.0 ms) and 2.1 (token 2, 50.0..150.0 ms): "
                      "overlap 50.0 ms", out)
        self.assertIn("FAIL: double_grants", out)

    def test_overlap_excused_by_lost_event_before_release(self):
        rd = self.overlap()
        rd.ev("1.1", 80, "lost", token=1, reason="lease expired")
        rd.release("1.1", 100)
        rep = self.analyse(rd)
        self.assert_only_failures(rep)
        exc = rep["figures"]["double_grants_excused"]
        self.assertEqual(exc["count"], 1)
        self.assertEqual(exc["examples"][0]["signal"], "lost")
        self.assertEqual(exc["loss_latency"]["p50_ms"], 30.0)  # 80 - 50
        self.assertEqual(exc["loss_latency"]["max_ms"], 30.0)
        lost = rep["figures"]["losses_reported"]
        self.assertEqual((lost["count"], lost["after_release"]), (1, 0))
        self.assertEqual(lost["latency"]["p50_ms"], 30.0)

    def test_overlap_excused_by_held_false(self):
        rd = self.overlap()
        rd.ev("1.1", 90, "held", held=False, step="check")
        rd.release("1.1", 100)
        rep = self.analyse(rd)
        self.assert_only_failures(rep)
        exc = rep["figures"]["double_grants_excused"]
        self.assertEqual(exc["count"], 1)
        self.assertEqual(exc["examples"][0]["signal"], "held")
        self.assertEqual(exc["loss_latency"]["max_ms"], 40.0)
        self.assertEqual(rep["figures"]["losses_reported"]["count"], 0)

    def test_held_true_does_not_excuse(self):
        rd = self.overlap()
        rd.ev("1.1", 90, "held", held=True, step="check")
        rd.release("1.1", 100)
        rep = self.analyse(rd)
        self.assert_only_failures(rep, "double_grants")

    def test_lost_event_after_unlock_returned_does_not_excuse(self):
        rd = self.overlap()
        rd.release("1.1", 100)  # release ok at 100.5
        # from the callback thread, after unlock() returned; the checker orders by time
        rd.ev("1.1", 101, "lost", token=1, reason="renewal failed")
        rep = self.analyse(rd)
        self.assert_only_failures(rep, "double_grants")
        lost = rep["figures"]["losses_reported"]
        self.assertEqual((lost["count"], lost["after_release"], lost["unmatched"]), (1, 1, 0))
        self.assertEqual(rep["figures"]["double_grants_excused"]["count"], 0)

    def test_loss_found_by_the_release_excuses_and_is_counted_as_told_at_release(self):
        """unlock() that finds the grant gone reports it (on_lost) before it
        returns: the holder was told, late (after its last write)."""
        rd = self.overlap()
        rd.ev("1.1", 100, "release", phase="invoke")
        rd.ev("1.1", 100.2, "lost", token=1, reason="no longer ours when released")
        rd.ev("1.1", 100.5, "release", phase="ok")
        rep = self.analyse(rd)
        self.assert_only_failures(rep)
        exc = rep["figures"]["double_grants_excused"]
        self.assertEqual((exc["count"], exc["told_at_release"]), (1, 1))
        self.assertTrue(exc["examples"][0]["at_release"])

    def test_loss_found_by_a_release_that_never_returned_still_excuses(self):
        rd = self.overlap()
        rd.ev("1.1", 100, "release", phase="invoke")
        rd.ev("1.1", 100.2, "lost", token=1, reason="no longer ours when released")
        rep = self.analyse(rd)
        self.assertEqual(self.value(rep, "double_grants"), 0)
        self.assertEqual(rep["figures"]["double_grants_excused"]["told_at_release"], 1)

    def replies_out_of_order(self, fencing=True):
        """1.1 and 2.1 acquire at once; the server granted 2.1 first (token 22),
        then, its clock having jumped, took the lock over for 1.1 (token 23);
        2.1's reply arrived last. 2.1 is the stale one: told at its release."""
        rd = self.new_run(fencing=fencing)
        rd.start("1.1")
        rd.start("2.1")
        rd.acquire("1.1", 5, 10, 23 if fencing else 0)
        rd.acquire("2.1", 4, 11, 22 if fencing else 0)
        rd.fenced_write("1.1", 12, 23 if fencing else 0)
        rd.fenced_write("2.1", 13, 22 if fencing else 0)  # rejected: it is stale
        rd.fenced_write("1.1", 60, 23 if fencing else 0, "final")
        rd.ev("2.1", 70, "release", phase="invoke")
        rd.ev("2.1", 70.2, "lost", token=22 if fencing else 0, reason="no longer ours when released")
        rd.ev("2.1", 70.5, "release", phase="ok")
        rd.release("1.1", 80)
        rd.exit("1.1", 200, 1)
        rd.exit("2.1", 200, 1)
        return rd

    def test_concurrent_acquires_are_ordered_by_token(self):
        rep = self.analyse(self.replies_out_of_order())
        self.assert_only_failures(rep)  # the stale one (token 22) was told; its write was rejected
        exc = rep["figures"]["double_grants_excused"]
        self.assertEqual((exc["count"], exc["told_at_release"]), (1, 1))
        self.assertEqual(exc["examples"][0]["earlier"]["w"], "2.1")

    def test_concurrent_acquires_without_tokens_are_ordered_by_reply(self):
        """No tokens: the checker can only go by the replies' order (1.1 first),
        and 1.1 was never told: flagged."""
        rep = self.analyse(self.replies_out_of_order(fencing=False))
        self.assertEqual(self.value(rep, "double_grants"), 1)

    def test_lost_event_written_out_of_order_still_counts_by_time(self):
        rd = self.overlap()
        rd.release("1.1", 100)
        # a lost event with an earlier t appended after the release lines
        rd.ev("1.1", 70, "lost", token=1, reason="lease expired")
        rep = self.analyse(rd)
        self.assert_only_failures(rep)
        self.assertEqual(rep["figures"]["double_grants_excused"]["count"], 1)

    def test_lost_event_matched_by_token_not_by_time(self):
        """A late `lost` for 1.1's first grant (token 1) arrives during its
        second grant (token 3), which overlaps 2.1's grant: it must not excuse it."""
        rd = self.new_run()
        for w in ("1.1", "2.1"):
            rd.start(w)
        rd.acquire("1.1", 5, 10, 1)
        rd.release("1.1", 20)
        rd.acquire("1.1", 25, 30, 3)
        rd.acquire("2.1", 35, 60, 4)
        rd.ev("1.1", 70, "lost", token=1, reason="late")
        rd.release("1.1", 100)
        rd.release("2.1", 150)
        rd.exit("1.1", 200, 2)
        rd.exit("2.1", 200, 1)
        rep = self.analyse(rd)
        self.assert_only_failures(rep, "double_grants")
        self.assertEqual(self.value(rep, "double_grants"), 1)
        self.assertEqual(rep["figures"]["losses_reported"]["after_release"], 1)

    def test_lost_event_without_token_matched_by_interval(self):
        """No fencing: tokens are 0, the lost event belongs to the grant whose
        interval contains it (the second one), which it excuses."""
        rd = self.new_run(fencing=False)
        for w in ("1.1", "2.1"):
            rd.start(w)
        rd.acquire("1.1", 5, 10)
        rd.release("1.1", 20)
        rd.acquire("1.1", 25, 30)
        rd.acquire("2.1", 35, 60)
        rd.ev("1.1", 70, "lost", token=0, reason="lease expired")
        rd.release("1.1", 100)
        rd.release("2.1", 150)
        rd.exit("1.1", 200, 2)
        rd.exit("2.1", 200, 1)
        rep = self.analyse(rd)
        self.assert_only_failures(rep)
        self.assertEqual(rep["figures"]["double_grants_excused"]["count"], 1)
        self.assertEqual(rep["figures"]["double_grants_excused"]["examples"][0]["earlier"]["ok_ms"],
                         30.0)

    def test_killed_holder_believes_until_its_last_event(self):
        """A self-killed holder's interval ends at its kill event: a grant
        after that is no double grant; one before it is."""
        for later_ok, expected in ((60, 0), (40, 1)):
            with self.subTest(later_ok=later_ok):
                rd = RunDir(self.tmp / f"run{later_ok}")
                rd.start("1.1")
                rd.start("2.1")
                rd.acquire("1.1", 5, 10, 1)
                rd.ev("1.1", 50, "kill", point="hold")
                rd.nem(51, "exit", w="1.1", signal=9)
                rd.acquire("2.1", 20, later_ok, 2)
                rd.release("2.1", 150)
                rd.exit("2.1", 200, 1)
                rep = checker.analyse(rd.write())
                self.assertEqual(self.value(rep, "double_grants"), expected)
                self.assertEqual(self.value(rep, "crashed_workers"), 0)

    def test_history_that_just_ends_closes_its_grant_at_the_last_event(self):
        rd = self.new_run()
        rd.start("1.1")
        rd.start("2.1")
        rd.acquire("1.1", 5, 10, 1)
        rd.ev("1.1", 30, "held", held=True, step="check")  # then SIGKILLed by the nemesis
        rd.nem(31, "kill", w="1.1")
        rd.nem(32, "exit", w="1.1", signal=9)
        rd.acquire("2.1", 20, 40, 2)
        rd.release("2.1", 150)
        rd.exit("2.1", 200, 1)
        rep = self.analyse(rd)
        self.assert_only_failures(rep)
        self.assertEqual(rep["totals"]["per_worker"]["1.1"]["end"], "nemesis-kill")

    def test_callback_line_written_late_does_not_cut_the_interval_short(self):
        """History lines are ordered by time: an on_error line with an earlier
        t written after the kill line must not end 1.1's belief at 15 ms."""
        rd = self.new_run()
        rd.start("1.1")
        rd.start("2.1")
        rd.acquire("1.1", 5, 10, 1)
        rd.ev("1.1", 50, "kill", point="hold")
        rd.ev("1.1", 15, "error", token=1, reason="renewal failed (not a loss)")
        rd.acquire("2.1", 20, 40, 2)
        rd.release("2.1", 150)
        rd.exit("2.1", 200, 1)
        rep = self.analyse(rd)
        self.assert_only_failures(rep, "double_grants")
        self.assertEqual(rep["checks"]["double_grants"]["examples"][0]["earlier"]["end_ms"], 50.0)
        self.assertEqual(rep["totals"]["errors"], 1)

    def test_unknown_acquire_opens_no_interval(self):
        rd = self.new_run()
        rd.start("1.1")
        rd.start("2.1")
        rd.ev("1.1", 5, "acquire", phase="invoke")
        rd.ev("1.1", 30, "acquire", phase="unknown", errc=5, error="in doubt")
        rd.acquire("2.1", 6, 20, 1)
        rd.release("2.1", 100)
        rd.exit("1.1", 200, 1)
        rd.exit("2.1", 200, 1)
        rep = self.analyse(rd)
        self.assert_only_failures(rep)
        self.assertEqual(rep["totals"]["acquire_unknowns"], 1)
        self.assertEqual(rep["totals"]["grants"], 1)

    def test_memory_backend_threads_are_distinct_workers(self):
        """Threads of one process (one pid, one exit record by pid) still have
        their own ids: an overlap between two of them is a double grant."""
        rd = self.new_run(backend="memory")
        rd.start("1.1", pid=4242)
        rd.start("2.1", pid=4242)
        rd.acquire("1.1", 5, 10, 1)
        rd.acquire("2.1", 6, 20, 2)
        rd.release("1.1", 50)
        rd.release("2.1", 60)
        rd.ev("1.1", 100, "exit", cycles=1)
        rd.ev("2.1", 100, "exit", cycles=1)
        rd.nem(101, "exit", pid=4242, status=0)
        rep = self.analyse(rd)
        self.assert_only_failures(rep, "double_grants")
        self.assertEqual(rep["totals"]["per_worker"]["1.1"]["end_detail"], "exit status 0")

    # ---- writes -------------------------------------------------------------

    def paused_writer(self, fencing) -> RunDir:
        """1.1 is granted, announces, pauses past its lease; 2.1 is granted and
        announces; 1.1 resumes and makes its final write."""
        rd = self.new_run(fencing=fencing)
        rd.start("1.1")
        rd.start("2.1")
        t1, t2 = (1, 2) if fencing else (0, 0)
        rd.acquire("1.1", 5, 10, t1)
        rd.fenced_write("1.1", 11, t1, "announce")
        rd.ev("1.1", 12, "held", held=True, step="check")
        rd.ev("1.1", 13, "pause", point="before-write", phase="stop")
        rd.acquire("2.1", 20, 1100, t2)
        rd.fenced_write("2.1", 1101, t2, "announce")
        rd.ev("1.1", 3013, "pause", point="before-write", phase="cont")
        rd.fenced_write("1.1", 3014, t1, "final")
        rd.release("1.1", 3020)
        rd.release("2.1", 3100)
        rd.exit("1.1", 3200, 1)
        rd.exit("2.1", 3200, 1)
        return rd

    def test_stale_write_accepted_without_fencing(self):
        rep = self.analyse(self.paused_writer(fencing=False))
        self.assertEqual(self.value(rep, "stale_writes_accepted"), 1)
        ex = rep["checks"]["stale_writes_accepted"]["examples"][0]
        self.assertEqual((ex["writer"]["w"], ex["after_write_of"]["w"]), ("1.1", "2.1"))
        self.assertEqual(self.value(rep, "legitimate_writes_rejected"), 0)
        self.assertEqual(self.status(rep, "stale_writes_accepted"), "FAIL")

    def test_stale_write_rejected_by_fencing_is_not_flagged(self):
        rep = self.analyse(self.paused_writer(fencing=True))
        self.assertEqual(self.value(rep, "stale_writes_accepted"), 0)
        self.assertEqual(self.value(rep, "legitimate_writes_rejected"), 0)
        self.assertEqual(rep["totals"]["writes_rejected"], 1)
        self.assertEqual(self.value(rep, "double_grants"), 1)  # never told: unexcused

    def test_stale_write_accepted_with_broken_fencing(self):
        """The store accepted an older grant's write after a later grant wrote."""
        rd = self.new_run()
        rd.start("1.1")
        rd.start("2.1")
        rd.acquire("1.1", 5, 10, 7)
        rd.acquire("2.1", 20, 30, 8)
        rd.store.append({"t": 31 * MS, "op": "W", "w": "2.1", "token": 8, "accepted": True,
                         "highest": 8})
        rd.store.append({"t": 40 * MS, "op": "W", "w": "1.1", "token": 7, "accepted": True,
                         "highest": 8})
        rd.release("1.1", 50)
        rd.release("2.1", 60)
        rd.exit("1.1", 100, 1)
        rd.exit("2.1", 100, 1)
        rep = self.analyse(rd)
        self.assertEqual(self.value(rep, "stale_writes_accepted"), 1)

    def test_legitimate_write_rejected(self):
        """The store's highest is 5 from an earlier grant; the next grant gets
        token 3 (say the server lost its counter): its write is rejected
        although no later grant wrote. Also a token order violation."""
        rd = self.new_run()
        rd.start("1.1")
        rd.start("2.1")
        rd.cycle("1.1", 5, 10, 5, 30)
        rd.acquire("2.1", 35, 40, 3)
        self.assertFalse(rd.fenced_write("2.1", 41, 3, "announce"))
        rd.release("2.1", 60)
        rd.exit("1.1", 100, 1)
        rd.exit("2.1", 100, 1)
        rep = self.analyse(rd)
        self.assert_only_failures(rep, "legitimate_writes_rejected", "token_order_violations")
        self.assertEqual(self.value(rep, "legitimate_writes_rejected"), 1)
        self.assertEqual(rep["checks"]["legitimate_writes_rejected"]["examples"][0]["writer"]["w"],
                         "2.1")

    # ---- token order --------------------------------------------------------

    def token_run(self, fencing) -> RunDir:
        rd = self.new_run(fencing=fencing)
        rd.start("1.1")
        rd.start("2.1")
        rd.start("3.1")
        rd.acquire("1.1", 5, 10, 10)
        rd.release("1.1", 100)
        # 2.1 began waiting before 1.1's grant: a lower token is no violation
        rd.acquire("2.1", 8, 110, 9 if fencing else 0)
        rd.release("2.1", 120)
        # 3.1 began after both grants: token 10 <= 10 (and 10 > 9: one pair only)
        rd.acquire("3.1", 115, 130, 10 if fencing else 0)
        rd.release("3.1", 140)
        for w in ("1.1", "2.1", "3.1"):
            rd.exit(w, 200, 1)
        return rd

    def test_token_order_violation(self):
        rep = self.analyse(self.token_run(fencing=True))
        self.assert_only_failures(rep, "token_order_violations")
        # (1.1 tok 10, 3.1 tok 10); 2.1's 9 comes from an acquire invoked before 1.1's ok
        self.assertEqual(self.value(rep, "token_order_violations"), 1)
        ex = rep["checks"]["token_order_violations"]["examples"][0]
        self.assertEqual((ex["grant"]["w"], ex["earlier_with_higher_or_equal_token"]["w"]),
                         ("3.1", "1.1"))

    def test_token_order_counts_pairs(self):
        rd = self.token_run(fencing=True)
        rd.acquire("2.1", 150, 160, 1)  # after three grants with tokens 10, 9, 10
        rd.release("2.1", 170)
        rep = self.analyse(rd)
        self.assertEqual(self.value(rep, "token_order_violations"), 1 + 3)

    def test_no_token_check_without_fencing(self):
        rd = self.token_run(fencing=False)
        rep = self.analyse(rd)
        c = rep["checks"]["token_order_violations"]
        self.assertEqual(c["status"], "n/a")
        self.assertEqual(c["reason"], "not applicable: no fencing token")
        self.assertIsNone(c["value"])
        self.assert_only_failures(rep)
        code, out, _ = run_cli(rd.root)
        self.assertEqual(code, 0)
        self.assertIn("n/a (not applicable: no fencing token)", out)

    def test_fencing_follows_the_start_events_not_run_json(self):
        rd = self.token_run(fencing=True)
        rd.meta["capabilities"] = {"fencing": False}
        rep = self.analyse(rd)
        self.assertEqual(self.status(rep, "token_order_violations"), "FAIL")

    # ---- lost updates -------------------------------------------------------

    def test_lost_updates(self):
        """Both read 0 (one paused before its write, past its lease), both set 1."""
        rd = self.new_run(fencing=False)
        rd.start("1.1")
        rd.start("2.1")
        rd.acquire("1.1", 5, 10)
        rd.read("1.1", 12)
        rd.acquire("2.1", 6, 1100)
        rd.read("2.1", 1101)
        rd.set("2.1", 1102, 1)
        rd.set("1.1", 3000, 1)
        rd.release("2.1", 1110)
        rd.release("1.1", 3010)
        rd.exit("1.1", 3100, 1)
        rd.exit("2.1", 3100, 1)
        rep = self.analyse(rd)
        self.assertEqual(self.value(rep, "lost_updates"), 1)
        self.assertEqual(self.status(rep, "lost_updates"), "FAIL")
        self.assertEqual(rep["checks"]["lost_updates"]["examples"],
                         [{"sets": 2, "final_value": 1}])

    # ---- no holder ----------------------------------------------------------

    def gap_run(self) -> RunDir:
        """1.1 holds 10..100; 2.1 waits from 50 and is granted only at 5100."""
        rd = self.new_run()
        rd.start("1.1")
        rd.start("2.1")
        rd.acquire("1.1", 5, 10, 1)
        rd.release("1.1", 100)
        rd.acquire("2.1", 50, 5100, 2)
        rd.release("2.1", 5200)
        rd.exit("1.1", 5300, 1)
        rd.exit("2.1", 5300, 1)
        return rd

    def test_long_no_holder_gap_is_measured(self):
        rep = self.analyse(self.gap_run())
        gap = rep["figures"]["longest_no_holder_gap"]
        self.assertEqual(gap["ms"], 5000.0)
        t0 = 0  # the first event is at t=0
        self.assertEqual((gap["from_ms"], gap["to_ms"]), (100.0 - t0, 5100.0 - t0))
        self.assertNotIn(checker.GAP_CHECK, rep["checks"])  # no bound given: a figure

    def test_no_holder_gap_beyond_its_bound_fails(self):
        rd = self.gap_run()
        rd.meta["expectations"] = {"longest_no_holder_gap_ms": 1000}
        rep = self.analyse(rd)
        self.assertEqual(rep["checks"][checker.GAP_CHECK]["status"], "FAIL")
        self.assertEqual(run_cli(rd.root)[0], 1)
        rd.meta["expectations"] = {"longest_no_holder_gap_ms": 6000}
        rep = self.analyse(rd)
        self.assertEqual(rep["checks"][checker.GAP_CHECK]["status"], "ok")
        self.assertEqual(run_cli(rd.root)[0], 0)

    def test_idle_time_without_waiters_is_no_gap(self):
        """Nobody holds and nobody waits for 2 s: not a gap with waiters."""
        rd = self.new_run()
        rd.start("1.1")
        rd.start("2.1")
        rd.acquire("1.1", 5, 10, 1)
        rd.release("1.1", 20)
        rd.acquire("2.1", 2020, 2023, 2)
        rd.release("2.1", 2030)
        rd.exit("1.1", 2100, 1)
        rd.exit("2.1", 2100, 1)
        rep = self.analyse(rd)
        gap = rep["figures"]["longest_no_holder_gap"]
        self.assertEqual((gap["ms"], gap["from_ms"], gap["to_ms"]), (5.0, 5.0, 10.0))

    def test_waiting_while_someone_holds_is_no_gap(self):
        rd = self.new_run()
        rd.start("1.1")
        rd.start("2.1")
        rd.acquire("1.1", 5, 10, 1)
        rd.acquire("2.1", 11, 5000.5, 2)  # waits 5 s while 1.1 holds
        rd.release("1.1", 5000)
        rd.release("2.1", 5010)
        rd.exit("1.1", 5100, 1)
        rd.exit("2.1", 5100, 1)
        rep = self.analyse(rd)
        self.assertEqual(rep["figures"]["longest_no_holder_gap"]["ms"], 5.0)  # 0..5 only

    # ---- hung and crashed workers ------------------------------------------

    def two_quiet_workers(self) -> RunDir:
        rd = self.new_run()
        rd.start("1.1")
        rd.start("2.1")
        rd.cycle("1.1", 5, 10, 1, 30)
        return rd

    def test_hung_worker_killed_by_the_controller(self):
        rd = self.two_quiet_workers()
        rd.exit("1.1", 100, 1)
        rd.ev("2.1", 40, "acquire", phase="invoke")
        rd.nem(1000, "hung", w="2.1")
        rd.nem(1001, "exit", w="2.1", signal=9)
        rep = self.analyse(rd)
        self.assert_only_failures(rep, "hung_workers")
        self.assertEqual(self.value(rep, "hung_workers"), 1)
        self.assertEqual(rep["checks"]["hung_workers"]["examples"][0]["w"], "2.1")
        self.assertEqual(rep["totals"]["per_worker"]["2.1"]["end"], "hung")

    def test_hung_worker_silent_too_long(self):
        rd = self.two_quiet_workers()
        rd.exit("1.1", 100, 1)
        rd.ev("2.1", 40, "acquire", phase="invoke")
        rd.ev("2.1", 40 + 20_000, "acquire", phase="fail")  # 20 s > max(15 s, 10 leases)
        rd.exit("2.1", 20_100, 0)
        rep = self.analyse(rd)
        self.assert_only_failures(rep, "hung_workers")
        self.assertIn("silent 20000 ms", rep["checks"]["hung_workers"]["examples"][0]["why"])

    def test_one_lingering_grant_counts_once_per_later_grant(self):
        """A paused holder overlapped by three successive grants: three pairs,
        one grant never signalled."""
        rd = self.new_run()
        for w in ("1.1", "2.1", "3.1"):
            rd.start(w)
        rd.acquire("1.1", 5, 10, 1)
        rd.acquire("2.1", 20, 1100, 2)
        rd.release("2.1", 1300)
        rd.acquire("3.1", 30, 1301, 3)
        rd.release("3.1", 1500)
        rd.acquire("2.1", 1310, 1501, 4)
        rd.release("2.1", 1700)
        rd.release("1.1", 3000)
        rd.acquire("3.1", 1510, 3001, 5)
        rd.release("3.1", 3100)
        for w in ("1.1", "2.1", "3.1"):
            rd.exit(w, 3200, 2)
        rep = self.analyse(rd)
        self.assert_only_failures(rep, "double_grants")
        self.assertEqual(self.value(rep, "double_grants"), 3)
        self.assertEqual(rep["checks"]["double_grants"]["detail"],
                         "pairs; 1 earlier grant(s) never signalled")

    def test_silence_limit_grows_with_the_wait(self):
        rd = self.two_quiet_workers()
        rd.meta["wait_ms"] = 8_000  # try_lock_for(8 s): 3 waits = 24 s
        rd.exit("1.1", 100, 1)
        rd.ev("2.1", 40, "acquire", phase="invoke")
        rd.ev("2.1", 40 + 20_000, "acquire", phase="fail")
        rd.exit("2.1", 20_100, 0)
        rep = self.analyse(rd)
        self.assertEqual(rep["figures"]["silence_limit_ms"], 24_000)
        self.assert_only_failures(rep)

    def test_silence_limit_from_run_json(self):
        rd = self.two_quiet_workers()
        rd.meta["silence_limit_ms"] = 30_000
        rd.exit("1.1", 100, 1)
        rd.ev("2.1", 40, "acquire", phase="invoke")
        rd.ev("2.1", 40 + 20_000, "acquire", phase="fail")
        rd.exit("2.1", 20_100, 0)
        rep = self.analyse(rd)
        self.assert_only_failures(rep)

    def test_paused_worker_is_not_hung(self):
        """Silent 20 s, but stopped by the nemesis for 19 of them."""
        rd = self.two_quiet_workers()
        rd.exit("1.1", 100, 1)
        rd.acquire("2.1", 40, 41, 2)
        rd.ev("2.1", 42, "pause", point="hold", phase="stop")
        rd.nem(19_042, "cont", w="2.1")
        rd.ev("2.1", 20_042, "pause", point="hold", phase="cont")  # written 1 s after SIGCONT
        rd.release("2.1", 20_050)
        rd.exit("2.1", 20_100, 1)
        rep = self.analyse(rd)
        self.assertEqual(self.value(rep, "hung_workers"), 0)
        # and without the nemesis record the worker's own cont event bounds the pause
        rd.nemesis = [r for r in rd.nemesis if r["ev"] != "cont"]
        rep = self.analyse(rd)
        self.assertEqual(self.value(rep, "hung_workers"), 0)

    def test_overlapping_stop_records_are_not_subtracted_twice(self):
        """A thread of the memory backend waits 26 s while another thread's
        self-pause stops the whole process for 10 s, recorded by two
        overlapping stop records: 16 s silent, more than 15 s."""
        rd = self.new_run(backend="memory")
        rd.start("1.1", pid=7)
        rd.start("1.2", pid=7)
        rd.cycle("1.1", 5, 10, 1, 30)
        rd.ev("1.1", 4_999, "acquire", phase="invoke")
        rd.ev("1.1", 5_000, "acquire", phase="ok", token=3)
        rd.ev("1.1", 5_001, "pause", point="hold", phase="stop")
        rd.nem(5_010, "stop", w="1.2", pid=7)
        rd.nem(5_020, "stop", w="1.2", pid=7)
        rd.nem(15_001, "cont", w="1.2", pid=7)
        rd.ev("1.1", 15_002, "pause", point="hold", phase="cont")
        rd.release("1.1", 15_010)
        rd.ev("1.2", 40, "acquire", phase="invoke")
        rd.ev("1.2", 26_040, "acquire", phase="fail")
        rd.ev("1.1", 26_100, "exit", cycles=2)
        rd.ev("1.2", 26_100, "exit", cycles=0)
        rd.nem(26_200, "exit", pid=7, status=0)
        rep = self.analyse(rd)
        self.assert_only_failures(rep, "hung_workers")
        ex = rep["checks"]["hung_workers"]["examples"]
        self.assertEqual(len(ex), 1)
        self.assertIn("1.2: silent 16009 ms", f"{ex[0]['w']}: {ex[0]['why']}")

    def test_crashed_worker_versus_self_killed_and_nemesis_killed(self):
        rd = self.new_run()
        for w in ("1.1", "2.1", "3.1", "4.1"):
            rd.start(w)
        rd.cycle("1.1", 5, 10, 1, 30)
        rd.exit("1.1", 100, 1)
        # 2.1: SIGSEGV, nothing excuses it
        rd.acquire("2.1", 40, 45, 2)
        rd.nem(50, "exit", w="2.1", signal=11)
        # 3.1: killed itself at point hold (kill-holder)
        rd.acquire("3.1", 60, 65, 3)
        rd.ev("3.1", 70, "kill", point="hold")
        rd.nem(71, "exit", w="3.1", signal=9)
        # 4.1: SIGKILLed by the nemesis
        rd.ev("4.1", 75, "acquire", phase="invoke")
        rd.nem(80, "kill", w="4.1")
        rd.nem(81, "exit", w="4.1", returncode=-9)
        rep = self.analyse(rd)
        self.assert_only_failures(rep, "crashed_workers")
        self.assertEqual(self.value(rep, "crashed_workers"), 1)
        ex = rep["checks"]["crashed_workers"]["examples"]
        self.assertEqual([(e["w"], e["why"]) for e in ex], [("2.1", "killed by SIGSEGV")])
        ends = {w: p["end"] for w, p in rep["totals"]["per_worker"].items()}
        self.assertEqual(ends, {"1.1": "exit", "2.1": "crash", "3.1": "self-kill",
                                "4.1": "nemesis-kill"})

    def test_nonzero_exit_status_is_a_crash(self):
        rd = self.two_quiet_workers()
        rd.exit("1.1", 100, 1, status=3)
        rd.exit("2.1", 100, 0)
        rep = self.analyse(rd)
        self.assert_only_failures(rep, "crashed_workers")
        self.assertEqual(rep["checks"]["crashed_workers"]["examples"][0]["why"], "exit status 3")

    def test_exit_records_in_each_form(self):
        rd = self.new_run()
        forms = {"1.1": {"returncode": -11}, "2.1": {"signal": "SIGABRT"},
                 "3.1": {"returncode": 0}, "4.1": {"code": 2}}
        for i, (w, form) in enumerate(forms.items()):
            rd.start(w)
            rd.cycle(w, 10 + 40 * i, 15 + 40 * i, i + 1, 40 + 40 * i)
            rd.ev(w, 200, "exit", cycles=1)
            rd.nem(201, "exit", w=w, **form)
        rep = self.analyse(rd)
        self.assert_only_failures(rep, "crashed_workers")
        why = {e["w"]: e["why"] for e in rep["checks"]["crashed_workers"]["examples"]}
        self.assertEqual(why, {"1.1": "killed by SIGSEGV", "2.1": "killed by SIGABRT",
                               "4.1": "exit status 2"})

    def test_history_ending_without_exit_or_record_is_a_crash(self):
        rd = self.two_quiet_workers()
        rd.exit("2.1", 100, 0)  # 1.1: no exit event, no controller record
        rep = self.analyse(rd)
        self.assert_only_failures(rep, "crashed_workers")
        self.assertEqual(rep["checks"]["crashed_workers"]["examples"][0]["w"], "1.1")

    # ---- input --------------------------------------------------------------

    def test_truncated_final_line_is_tolerated_and_counted(self):
        rd = self.two_quiet_workers()
        rd.exit("1.1", 100, 1)
        rd.acquire("2.1", 40, 41, 2)
        rd.raw_tail["2.1"] = '{"t": 42000000, "w": "2.1", "ev": "wri'  # SIGKILL mid-line
        rd.nem(43, "kill", w="2.1")
        rd.nem(44, "exit", w="2.1", signal=9)
        rep = self.analyse(rd)
        self.assert_only_failures(rep)
        self.assertEqual(rep["input"]["truncated_lines"], 1)
        self.assertEqual(rep["input"]["truncated_files"], {"history/2.1.jsonl": 1})
        code, out, err = run_cli(rd.root)
        self.assertEqual(code, 0, err)
        self.assertIn("history/2.1.jsonl: 1", out)

    def test_absent_nemesis_file_means_nothing_recorded(self):
        root = self.calm().write()
        (root / "nemesis.jsonl").unlink()
        rep = checker.analyse(root)
        self.assert_only_failures(rep)
        self.assertEqual(rep["input"]["nemesis_records"], 0)
        self.assertEqual(rep["totals"]["per_worker"]["1.1"]["end"], "exit")

    def test_corrupt_line_before_the_end_is_unreadable(self):
        rd = self.calm()
        root = rd.write()
        path = root / "history" / "1.1.jsonl"
        lines = path.read_text().splitlines(keepends=True)
        lines[2] = lines[2][:10] + "\n"
        path.write_text("".join(lines))
        code, _, err = run_cli(root)
        self.assertEqual(code, 2)
        self.assertIn("1.1.jsonl:3", err)

    def test_missing_run_json_or_histories_is_unreadable(self):
        root = self.calm().write()
        (root / "run.json").unlink()
        self.assertEqual(run_cli(root)[0], 2)
        root2 = self.tmp / "empty"
        (root2 / "history").mkdir(parents=True)
        (root2 / "run.json").write_text("{}")
        (root2 / "store.jsonl").write_text("")
        self.assertEqual(run_cli(root2)[0], 2)
        self.assertEqual(run_cli(self.tmp / "no-such-dir")[0], 2)

    # ---- expectations and exit status --------------------------------------

    def test_expectation_in_run_json_turns_a_nonzero_into_expected_fail(self):
        rd = self.overlap()
        rd.release("1.1", 100)
        rd.meta["expectations"] = {"double_grants": "expected"}
        rep = self.analyse(rd)
        self.assertEqual(self.value(rep, "double_grants"), 1)
        self.assertEqual(self.status(rep, "double_grants"), "expected-fail")
        self.assertEqual(rep["failed"], [])
        code, out, _ = run_cli(rd.root)
        self.assertEqual(code, 0)
        self.assertIn("expected-fail", out)

    def test_expect_file_replaces_run_json_expectations(self):
        rd = self.overlap()
        rd.release("1.1", 100)
        rd.meta["expectations"] = {"double_grants": "expected"}
        rd.write()
        exp = self.tmp / "expect.json"
        exp.write_text(json.dumps({"lost_updates": {"expected": True, "why": "unfenced counter"}}))
        code, out, _ = run_cli(rd.root, "--expect", str(exp))
        self.assertEqual(code, 1)
        self.assertIn("FAIL: double_grants", out)
        exp.write_text(json.dumps({"double_grants": {"expected": "expected",
                                                     "why": "lease backend, no loss signal"}}))
        code, out, _ = run_cli(rd.root, "--expect", str(exp))
        self.assertEqual(code, 0)
        self.assertIn("expected-fail (expected: lease backend, no loss signal)", out)

    def test_unexpected_nonzero_exits_1_even_next_to_an_expected_one(self):
        rd = self.overlap()
        rd.release("1.1", 100)
        rd.set("1.1", 60, 1)
        rd.set("2.1", 70, 1)  # two sets, final value 1: one lost update
        rd.meta["expectations"] = {"lost_updates": "expected"}
        rep = self.analyse(rd)
        self.assertEqual(self.status(rep, "lost_updates"), "expected-fail")
        self.assertEqual(rep["failed"], ["double_grants"])
        self.assertEqual(run_cli(rd.root)[0], 1)

    def test_numeric_expectation_is_an_upper_bound(self):
        rd = self.overlap()
        rd.release("1.1", 100)
        for bound, status in ((1, "expected-fail"), (0, "FAIL")):
            rd.meta["expectations"] = {"double_grants": bound}
            self.assertEqual(self.status(self.analyse(rd), "double_grants"), status)
        rd = self.token_run(fencing=True)
        rd.acquire("2.1", 150, 160, 1)
        rd.release("2.1", 170)
        rd.meta["expectations"] = {"token_order_violations": 2}  # there are 4
        self.assertEqual(self.status(self.analyse(rd), "token_order_violations"), "FAIL")

    def test_zero_with_an_expectation_is_ok_and_unknown_names_are_noted(self):
        rd = self.calm()
        rd.meta["expectations"] = {"double_grants": "expected", "doubel_grants": "expected"}
        rep = self.analyse(rd)
        self.assertEqual(self.status(rep, "double_grants"), "ok")
        self.assertTrue(any("doubel_grants" in n for n in rep["notes"]), rep["notes"])

    def test_json_output_goes_to_stdout_and_report_json(self):
        rd = self.overlap()
        rd.release("1.1", 100)
        root = rd.write()
        code, out, _ = run_cli(root, "--json")
        self.assertEqual(code, 1)
        printed = json.loads(out)
        self.assertEqual(printed, json.loads((root / "report.json").read_text()))
        self.assertEqual(printed["checks"]["double_grants"]["value"], 1)
        self.assertEqual(printed["exit_status"], 1)
        self.assertEqual(set(printed["checks"]), set(checker.CHECKS))

    def test_workers_listed_in_natural_order(self):
        rd = self.new_run()
        for w in ("10.1", "2.1", "2.10", "2.2"):
            rd.start(w)
            rd.exit(w, 100, 0)
        rep = self.analyse(rd)
        self.assertEqual(list(rep["totals"]["per_worker"]), ["2.1", "2.2", "2.10", "10.1"])

    # ---- lost-lock detection ---------------------------------------------------

    def server(self, rd: RunDir, rows):
        """server.jsonl, the observer's answers: (t_invoke ms, held, token)."""
        rd.write()
        lines = []
        for t, held, token in rows:
            rec = {"t": int((t + 1) * MS), "ev": "server", "t_invoke": int(t * MS), "held": held}
            if token is not None:
                rec["token"] = token
            lines.append(json.dumps(rec) + "\n")
        (rd.root / "server.jsonl").write_text("".join(lines))

    def test_detection_from_another_grant_to_the_lost_event(self):
        rd = self.overlap()
        rd.ev("1.1", 80, "lost", token=1, reason="lease expired")
        rd.release("1.1", 100)
        det = self.analyse(rd)["figures"]["loss_detection"]
        self.assertEqual((det["n"], det["told"], det["max_ms"]), (1, 1, 30.0))  # 80 - 50
        self.assertFalse(det["observed"])

    def test_detection_starts_when_the_observer_saw_the_grant_gone(self):
        rd = self.new_run()
        rd.start("1.1")
        rd.acquire("1.1", 5, 10, 1)
        rd.ev("1.1", 70, "lost", token=1, reason="lease expired")
        rd.release("1.1", 100)
        rd.exit("1.1", 200, 1)
        # The server shows token 1 from 12 ms, and nothing from 40 ms (nobody else was granted).
        self.server(rd, [(0, False, None), (12, True, 1), (40, False, None)])
        rep = checker.analyse(rd.root)
        det = rep["figures"]["loss_detection"]
        self.assertEqual((det["n"], det["max_ms"]), (1, 30.0))  # 70 - 40
        self.assertEqual(det["slowest"][0]["loss"], "server")
        self.assertTrue(det["observed"])

    def test_detection_does_not_count_the_time_the_holder_was_stopped(self):
        rd = self.new_run()
        rd.start("1.1")
        rd.acquire("1.1", 5, 10, 1)
        rd.ev("1.1", 20, "pause", point="hold", phase="stop")
        rd.ev("1.1", 520, "pause", point="hold", phase="cont")
        rd.ev("1.1", 530, "lost", token=1, reason="lease expired")
        rd.release("1.1", 540)
        rd.exit("1.1", 600, 1)
        self.server(rd, [(12, True, 1), (100, False, None)])
        det = checker.analyse(rd.root)["figures"]["loss_detection"]
        self.assertEqual(det["max_ms"], 10.0)  # 530 - 100 - (520 - 100) stopped

    def test_a_holder_that_released_untold_ends_its_belief_there(self):
        rd = self.new_run(nemesis="restart-server-empty")
        rd.start("1.1")
        rd.acquire("1.1", 5, 10, 1)
        rd.nem(30, "server-kill", server="redis", rc=0)
        rd.release("1.1", 100)
        rd.exit("1.1", 200, 1)
        det = self.analyse(rd)["figures"]["loss_detection"]
        self.assertEqual((det["n"], det["released"], det["max_ms"]), (1, 1, 70.0))
        self.assertEqual(det["slowest"][0]["loss"], "server data lost")

    def test_detection_bound_fails_the_cell_above_it(self):
        rd = self.overlap()
        rd.ev("1.1", 80, "lost", token=1, reason="lease expired")
        rd.release("1.1", 100)
        path = self.tmp / "expect.json"
        path.write_text(json.dumps({"loss_detection_ms": 20}))
        rep = self.analyse(rd, str(path))
        self.assertEqual(rep["checks"]["loss_detection_ms"]["status"], "FAIL")
        path.write_text(json.dumps({"loss_detection_ms": 30}))
        rep = checker.analyse(rd.root, str(path))
        self.assertEqual(rep["checks"]["loss_detection_ms"]["status"], "ok")

    def test_detection_bound_without_a_loss_is_ok_and_printed(self):
        rd = self.calm()
        path = self.tmp / "expect.json"
        path.write_text(json.dumps({"loss_detection_ms": 20}))
        rep = self.analyse(rd, str(path))
        self.assertEqual((rep["checks"]["loss_detection_ms"]["value"], rep["checks"]["loss_detection_ms"]["status"]),
                         (None, "ok"))
        code, out, _ = run_cli(rd.root, "--expect", str(path))
        self.assertEqual(code, 0)
        self.assertIn("slowest lost-lock detection", out)

    def test_text_report_names_every_figure(self):
        rd = self.calm()
        code, out, _ = run_cli(rd.write())
        self.assertEqual(code, 0)
        for title in [checker.CHECK_TITLES[c] for c in checker.CHECKS] + [
                "double grants excused", "losses reported", "lost-lock detection",
                "longest time with waiters but no holder", "acquire fails", "writes accepted",
                "cycles"]:
            self.assertIn(title, out)
        self.assertFalse((rd.root / "report.json").exists())  # only with --json


if __name__ == "__main__":
    unittest.main(verbosity=2)
