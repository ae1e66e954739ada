#!/usr/bin/python3
"""Tests of the Consul HTTP API emulator against the server rules of PROTOCOLS.md.

Run: /usr/bin/python3 tests/consul-emulator/test_consul_emulator.py
Each test class starts its own emulator on a free port.
"""

import base64
import http.client
import json
import os
import subprocess
import sys
import threading
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
EMULATOR = os.path.join(HERE, "consul_emulator.py")
LOCK_FLAG = 3304740253564472344
SEMAPHORE_FLAG = 0xe0f69a2baa414de0  # api/semaphore.go SemaphoreFlagValue


def start_emulator(*extra):
    proc = subprocess.Popen([sys.executable, EMULATOR, "--port", "0", *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    line = proc.stdout.readline()
    if "listening on" not in line:
        proc.kill()
        raise RuntimeError("emulator did not start: " + line)
    port = int(line.strip().rsplit(":", 1)[1])
    return proc, port


class Client:
    def __init__(self, port, token=None):
        self.port = port
        self.token = token

    def call(self, method, path, body=None, timeout=30):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        headers = {"X-Consul-Token": self.token} if self.token else {}
        if isinstance(body, (dict, list)):
            body = json.dumps(body)
        conn.request(method, path, body=body, headers=headers)
        r = conn.getresponse()
        data = r.read()
        conn.close()
        index = r.getheader("X-Consul-Index")
        return r.status, data, int(index) if index else None

    def json(self, method, path, body=None, **kw):
        status, data, index = self.call(method, path, body, **kw)
        return status, (json.loads(data) if data and status == 200 else data), index

    def session(self, ttl="1s", lock_delay=None, behavior=None, name="test"):
        spec = {"Name": name, "TTL": ttl}
        if lock_delay is not None:
            spec["LockDelay"] = lock_delay
        if behavior:
            spec["Behavior"] = behavior
        status, body, _ = self.json("PUT", "/v1/session/create", spec)
        assert status == 200, body
        return body["ID"]

    def acquire(self, key, sid, value=b"", flags=LOCK_FLAG):
        status, body, _ = self.json("PUT", "/v1/kv/%s?flags=%d&acquire=%s" % (key, flags, sid), value)
        assert status == 200, body
        return body

    def release(self, key, sid, flags=LOCK_FLAG):
        status, body, _ = self.json("PUT", "/v1/kv/%s?flags=%d&release=%s" % (key, flags, sid))
        assert status == 200, body
        return body

    def get(self, key, index=None, wait=None):
        q = []
        if index is not None:
            q.append("index=%d" % index)
        if wait is not None:
            q.append("wait=" + wait)
        status, body, idx = self.json("GET", "/v1/kv/" + key + ("?" + "&".join(q) if q else ""))
        return status, (body[0] if status == 200 else None), idx


class EmulatorCase(unittest.TestCase):
    extra_args = ("--min-ttl", "100ms", "--ttl-multiplier", "1")

    @classmethod
    def setUpClass(cls):
        cls.proc, cls.port = start_emulator(*cls.extra_args)
        cls.c = Client(cls.port)

    @classmethod
    def tearDownClass(cls):
        cls.proc.kill()
        cls.proc.wait()
        cls.proc.stdout.close()

    def key(self):
        return "t/%s/%d" % (self.id().rsplit(".", 1)[1], time.monotonic_ns())


class Sessions(EmulatorCase):
    def test_create_renew_destroy(self):
        sid = self.c.session(ttl="5s")
        status, body, _ = self.c.json("PUT", "/v1/session/renew/" + sid)
        self.assertEqual(status, 200)
        self.assertEqual(body[0]["ID"], sid)
        self.assertEqual(body[0]["TTL"], "5s")
        status, body, _ = self.c.json("GET", "/v1/session/info/" + sid)
        self.assertEqual(len(body), 1)
        status, body, _ = self.c.json("PUT", "/v1/session/destroy/" + sid)
        self.assertEqual((status, body), (200, True))
        status, _, _ = self.c.call("PUT", "/v1/session/renew/" + sid)
        self.assertEqual(status, 404)
        self.assertEqual(self.c.json("GET", "/v1/session/info/" + sid)[1], [])

    def test_ttl_expiry_unless_renewed(self):
        # A TTL of 1 s renewed every 0.1 s: a renewal may come late by 0.9 s on a
        # loaded machine (a 300 ms TTL was not enough margin) before it counts.
        sid = self.c.session(ttl="1s")
        kept = self.c.session(ttl="1s")
        deadline = time.monotonic() + 2.5
        while time.monotonic() < deadline:
            self.assertEqual(self.c.call("PUT", "/v1/session/renew/" + kept)[0], 200)
            time.sleep(0.1)
        self.assertEqual(self.c.call("PUT", "/v1/session/renew/" + sid)[0], 404)
        self.assertEqual(self.c.call("PUT", "/v1/session/renew/" + kept)[0], 200)

    def test_ttl_below_minimum_is_rejected(self):
        status, body, _ = self.c.call("PUT", "/v1/session/create", json.dumps({"TTL": "50ms"}))
        self.assertEqual(status, 400)
        self.assertIn(b"Invalid Session TTL", body)

    def test_bad_behavior_is_rejected(self):
        status, _, _ = self.c.call("PUT", "/v1/session/create", json.dumps({"TTL": "1s", "Behavior": "explode"}))
        self.assertEqual(status, 400)

    def test_lock_delay_formats(self):
        for spec, ns in (("2s", 2_000_000_000), (3, 3_000_000_000), (500_000_000, 500_000_000), ("0s", 0)):
            sid = self.c.session(ttl="5s", lock_delay=spec)
            info = self.c.json("GET", "/v1/session/info/" + sid)[1][0]
            self.assertEqual(info["LockDelay"], ns, spec)
        sid = self.c.session(ttl="5s")
        self.assertEqual(self.c.json("GET", "/v1/session/info/" + sid)[1][0]["LockDelay"], 15_000_000_000)


class KeyValue(EmulatorCase):
    def test_put_get_delete_with_flags_and_indexes(self):
        k = self.key()
        status, _, idx0 = self.c.get(k)
        self.assertEqual(status, 404)
        self.assertIsNotNone(idx0)
        status, body, idx1 = self.c.json("PUT", "/v1/kv/%s?flags=42" % k, b"hello")
        self.assertEqual((status, body), (200, True))
        status, e, idx = self.c.get(k)
        self.assertEqual(status, 200)
        self.assertEqual(base64.b64decode(e["Value"]), b"hello")
        self.assertEqual(e["Flags"], 42)
        self.assertEqual(e["Key"], k)
        self.assertEqual(e["LockIndex"], 0)
        self.assertEqual(e["CreateIndex"], e["ModifyIndex"])
        self.assertEqual(idx, e["ModifyIndex"])
        self.c.json("PUT", "/v1/kv/" + k, b"again")
        _, e2, _ = self.c.get(k)
        self.assertGreater(e2["ModifyIndex"], e["ModifyIndex"])
        self.assertEqual(e2["CreateIndex"], e["CreateIndex"])
        self.assertEqual(e2["Flags"], 0)
        self.assertEqual(self.c.call("GET", "/v1/kv/%s?raw" % k)[1], b"again")
        self.assertEqual(self.c.json("DELETE", "/v1/kv/" + k)[1], True)
        status, _, idx_del = self.c.get(k)
        self.assertEqual(status, 404)
        self.assertGreater(idx_del, e2["ModifyIndex"])  # deletions move the index too

    def test_cas(self):
        k = self.key()
        self.assertEqual(self.c.json("PUT", "/v1/kv/%s?cas=0" % k, b"a")[1], True)
        self.assertEqual(self.c.json("PUT", "/v1/kv/%s?cas=0" % k, b"b")[1], False)
        _, e, _ = self.c.get(k)
        self.assertEqual(self.c.json("PUT", "/v1/kv/%s?cas=%d" % (k, e["ModifyIndex"] + 1), b"c")[1], False)
        self.assertEqual(self.c.json("PUT", "/v1/kv/%s?cas=%d" % (k, e["ModifyIndex"]), b"d")[1], True)
        _, e2, _ = self.c.get(k)
        self.assertEqual(self.c.json("DELETE", "/v1/kv/%s?cas=%d" % (k, e["ModifyIndex"]))[1], False)
        self.assertEqual(self.c.json("DELETE", "/v1/kv/%s?cas=%d" % (k, e2["ModifyIndex"]))[1], True)

    def test_recurse(self):
        k = self.key()
        for sub in ("a", "b", "c"):
            self.c.json("PUT", "/v1/kv/%s/%s" % (k, sub), sub.encode())
        status, body, _ = self.c.json("GET", "/v1/kv/%s/?recurse" % k)
        self.assertEqual([e["Key"] for e in body], [k + "/a", k + "/b", k + "/c"])
        self.c.json("DELETE", "/v1/kv/%s/?recurse" % k)
        self.assertEqual(self.c.call("GET", "/v1/kv/%s/?recurse" % k)[0], 404)


class Locks(EmulatorCase):
    def test_acquire_needs_a_live_session(self):
        k = self.key()
        status, _, _ = self.c.call("PUT", "/v1/kv/%s?acquire=%s" % (k, "00000000-0000-0000-0000-000000000000"))
        self.assertEqual(status, 500)

    def test_lock_index_session_and_modify_index(self):
        k = self.key()
        s1, s2 = self.c.session("5s", lock_delay="0s"), self.c.session("5s", lock_delay="0s")
        self.assertTrue(self.c.acquire(k, s1))
        _, e, _ = self.c.get(k)
        self.assertEqual((e["Session"], e["LockIndex"], e["Flags"]), (s1, 1, LOCK_FLAG))
        # Another session cannot take it; the holder re-acquiring keeps LockIndex.
        self.assertFalse(self.c.acquire(k, s2))
        self.assertTrue(self.c.acquire(k, s1, b"v2"))
        _, e2, _ = self.c.get(k)
        self.assertEqual(e2["LockIndex"], 1)
        self.assertEqual(e2["Session"], s1)
        self.assertGreaterEqual(e2["ModifyIndex"], e["ModifyIndex"])
        # Only the holder releases; release clears Session with no lock-delay.
        self.assertFalse(self.c.release(k, s2))
        self.assertTrue(self.c.release(k, s1))
        _, e3, _ = self.c.get(k)
        self.assertNotIn("Session", e3)
        self.assertTrue(self.c.acquire(k, s2))
        _, e4, _ = self.c.get(k)
        self.assertEqual((e4["Session"], e4["LockIndex"]), (s2, 2))
        self.assertGreater(e4["ModifyIndex"], e3["ModifyIndex"])

    def test_destroy_releases_keys_and_starts_the_lock_delay(self):
        k = self.key()
        s1 = self.c.session("5s", lock_delay="600ms")
        s2 = self.c.session("5s")
        self.assertTrue(self.c.acquire(k, s1))
        self.c.json("PUT", "/v1/session/destroy/" + s1)
        status, e, _ = self.c.get(k)
        self.assertEqual(status, 200)  # Behavior release: the key stays, unlocked
        self.assertNotIn("Session", e)
        self.assertFalse(self.c.acquire(k, s2))  # lock-delay in effect
        time.sleep(0.7)
        self.assertTrue(self.c.acquire(k, s2))

    def test_ttl_expiry_invalidates_the_session_with_behavior_delete(self):
        k = self.key()
        s1 = self.c.session("200ms", lock_delay="0s", behavior="delete")
        self.assertTrue(self.c.acquire(k, s1))
        time.sleep(0.5)
        self.assertEqual(self.c.get(k)[0], 404)
        self.assertEqual(self.c.call("PUT", "/v1/session/renew/" + s1)[0], 404)

    def test_release_by_the_holder_has_no_lock_delay(self):
        k = self.key()
        s1 = self.c.session("5s", lock_delay="30s")
        s2 = self.c.session("5s")
        self.assertTrue(self.c.acquire(k, s1))
        self.assertTrue(self.c.release(k, s1))
        self.assertTrue(self.c.acquire(k, s2))


class BlockingQueries(EmulatorCase):
    def test_returns_when_the_key_changes(self):
        k = self.key()
        self.c.json("PUT", "/v1/kv/" + k, b"1")
        _, e, idx = self.c.get(k)
        result = {}

        def waiter():
            t0 = time.monotonic()
            result["reply"] = self.c.get(k, index=idx, wait="10s")
            result["took"] = time.monotonic() - t0

        t = threading.Thread(target=waiter)
        t.start()
        time.sleep(0.3)
        self.c.json("PUT", "/v1/kv/" + k, b"2")
        t.join(5)
        self.assertFalse(t.is_alive())
        status, e2, idx2 = result["reply"]
        self.assertGreater(idx2, idx)
        self.assertEqual(base64.b64decode(e2["Value"]), b"2")
        self.assertGreaterEqual(result["took"], 0.25)

    def test_returns_after_wait_with_the_same_index(self):
        k = self.key()
        self.c.json("PUT", "/v1/kv/" + k, b"1")
        _, _, idx = self.c.get(k)
        t0 = time.monotonic()
        status, _, idx2 = self.c.get(k, index=idx, wait="400ms")
        took = time.monotonic() - t0
        self.assertEqual(status, 200)
        self.assertEqual(idx2, idx)
        self.assertGreaterEqual(took, 0.39)
        self.assertLess(took, 0.4 * 17 / 16 + 1.0)

    def test_a_lower_index_returns_at_once(self):
        k = self.key()
        self.c.json("PUT", "/v1/kv/" + k, b"1")
        _, _, idx = self.c.get(k)
        t0 = time.monotonic()
        self.c.get(k, index=idx - 1, wait="5s")
        self.assertLess(time.monotonic() - t0, 1.0)

    def test_wakes_on_session_invalidation_and_on_deletion(self):
        k = self.key()
        sid = self.c.session("5s", lock_delay="0s")
        self.assertTrue(self.c.acquire(k, sid))
        _, _, idx = self.c.get(k)
        threading.Timer(0.2, lambda: self.c.call("PUT", "/v1/session/destroy/" + sid)).start()
        status, e, idx2 = self.c.get(k, index=idx, wait="10s")
        self.assertGreater(idx2, idx)
        self.assertNotIn("Session", e)
        threading.Timer(0.2, lambda: self.c.call("DELETE", "/v1/kv/" + k)).start()
        status, _, idx3 = self.c.get(k, index=idx2, wait="10s")
        self.assertEqual(status, 404)
        self.assertGreater(idx3, idx2)


class SemaphoreRules(EmulatorCase):
    """What Consul's api/semaphore.go relies on: contender keys held by sessions,
    a .lock key written by check-and-set, listings of the prefix and blocking
    queries on them, and Behavior delete at invalidation (Consul's KV and
    session HTTP API documentation; state store kvsLockTxn / kvsListTxn)."""

    def listing(self, prefix, index=None, wait=None):
        q = "?recurse"
        if index is not None:
            q += "&index=%d&wait=%s" % (index, wait or "10s")
        return self.c.json("GET", "/v1/kv/" + prefix + q)

    def test_a_listing_shows_each_contender_s_session_and_flags_and_the_lock_s_value(self):
        p = self.key()
        sid = self.c.session("5s", behavior="delete")
        self.assertTrue(self.c.acquire("%s/%s" % (p, sid), sid, flags=SEMAPHORE_FLAG))
        doc = json.dumps({"Limit": 2, "Holders": {sid: True}}).encode()
        self.assertEqual(self.c.json("PUT", "/v1/kv/%s/.lock?cas=0&flags=%d" % (p, SEMAPHORE_FLAG), doc)[1], True)
        status, body, idx = self.listing(p + "/")
        self.assertEqual(status, 200)
        by_key = {e["Key"]: e for e in body}
        self.assertEqual(sorted(by_key), [p + "/.lock", "%s/%s" % (p, sid)])  # in key order
        self.assertEqual([e["Key"] for e in body], sorted(by_key))
        contender, lock = by_key["%s/%s" % (p, sid)], by_key[p + "/.lock"]
        self.assertEqual((contender["Session"], contender["Flags"], contender["LockIndex"]), (sid, SEMAPHORE_FLAG, 1))
        self.assertNotIn("Session", lock)  # written by check-and-set, not held
        self.assertEqual(lock["Flags"], SEMAPHORE_FLAG)
        self.assertEqual(json.loads(base64.b64decode(lock["Value"])), {"Limit": 2, "Holders": {sid: True}})
        self.assertEqual(idx, max(e["ModifyIndex"] for e in body))

    def test_check_and_set_lets_one_of_two_writers_of_the_same_index_win(self):
        k = self.key() + "/.lock"
        self.assertEqual(self.c.json("PUT", "/v1/kv/%s?cas=0&flags=%d" % (k, SEMAPHORE_FLAG), b"{}")[1], True)
        self.assertEqual(self.c.json("PUT", "/v1/kv/%s?cas=0&flags=%d" % (k, SEMAPHORE_FLAG), b"{}")[1], False)
        _, e, _ = self.c.get(k)
        seen = e["ModifyIndex"]
        first = self.c.json("PUT", "/v1/kv/%s?cas=%d&flags=%d" % (k, seen, SEMAPHORE_FLAG), b"first")[1]
        second = self.c.json("PUT", "/v1/kv/%s?cas=%d&flags=%d" % (k, seen, SEMAPHORE_FLAG), b"second")[1]
        self.assertEqual((first, second), (True, False))
        _, e2, _ = self.c.get(k)
        self.assertEqual(base64.b64decode(e2["Value"]), b"first")
        self.assertEqual(e2["Flags"], SEMAPHORE_FLAG)  # ?flags= is stored with the write
        self.assertGreater(e2["ModifyIndex"], seen)
        # A delete by check-and-set: refused on a stale index, done on the current one.
        self.assertEqual(self.c.json("DELETE", "/v1/kv/%s?cas=%d" % (k, seen))[1], False)
        self.assertEqual(self.c.get(k)[0], 200)
        self.assertEqual(self.c.json("DELETE", "/v1/kv/%s?cas=%d" % (k, e2["ModifyIndex"]))[1], True)
        self.assertEqual(self.c.get(k)[0], 404)
        # Absent again: only cas=0 creates it.
        self.assertEqual(self.c.json("PUT", "/v1/kv/%s?cas=%d" % (k, e2["ModifyIndex"]), b"x")[1], False)
        self.assertEqual(self.c.json("PUT", "/v1/kv/%s?cas=0" % k, b"x")[1], True)

    def test_the_holder_re_acquiring_its_key_moves_modify_index_only(self):
        k = self.key()
        sid = self.c.session("5s")
        self.assertTrue(self.c.acquire(k, sid, flags=SEMAPHORE_FLAG))
        _, e, _ = self.c.get(k)
        self.c.json("PUT", "/v1/kv/%s-elsewhere" % k, b"x")  # the global index moves on
        self.assertTrue(self.c.acquire(k, sid, flags=SEMAPHORE_FLAG))
        _, e2, _ = self.c.get(k)
        self.assertGreater(e2["ModifyIndex"], e["ModifyIndex"] + 1)  # a new write, after the one elsewhere
        self.assertEqual((e2["LockIndex"], e2["CreateIndex"], e2["Session"]), (e["LockIndex"], e["CreateIndex"], sid))

    def test_a_blocking_listing_wakes_for_a_write_under_its_prefix_not_beside_it(self):
        p = self.key()
        self.c.json("PUT", "/v1/kv/%s/a" % p, b"1")
        _, _, idx = self.listing(p + "/")
        # A write to a key that only starts like the prefix does not answer it.
        threading.Timer(0.1, lambda: self.c.json("PUT", "/v1/kv/%s-beside/a" % p, b"x")).start()
        t0 = time.monotonic()
        status, _, idx2 = self.listing(p + "/", idx, "600ms")
        self.assertGreaterEqual(time.monotonic() - t0, 0.59)
        self.assertEqual((status, idx2), (200, idx))
        # A new key under it does, with an index past the one waited on.
        threading.Timer(0.2, lambda: self.c.json("PUT", "/v1/kv/%s/b" % p, b"2")).start()
        t0 = time.monotonic()
        status, body, idx3 = self.listing(p + "/", idx, "10s")
        self.assertLess(time.monotonic() - t0, 5)
        self.assertGreater(idx3, idx)
        self.assertEqual([e["Key"] for e in body], [p + "/a", p + "/b"])
        # So does a deletion under it (the graveyard's index).
        threading.Timer(0.2, lambda: self.c.json("DELETE", "/v1/kv/%s/a" % p)).start()
        status, body, idx4 = self.listing(p + "/", idx3, "10s")
        self.assertGreater(idx4, idx3)
        self.assertEqual([e["Key"] for e in body], [p + "/b"])

    def test_invalidating_a_delete_session_removes_its_contender_key_and_wakes_the_listing(self):
        p = self.key()
        dead = self.c.session("5s", behavior="delete")
        live = self.c.session("5s", behavior="delete")
        for sid in (dead, live):
            self.assertTrue(self.c.acquire("%s/%s" % (p, sid), sid, flags=SEMAPHORE_FLAG))
        doc = json.dumps({"Limit": 2, "Holders": {dead: True, live: True}}).encode()
        self.assertEqual(self.c.json("PUT", "/v1/kv/%s/.lock?cas=0&flags=%d" % (p, SEMAPHORE_FLAG), doc)[1], True)
        _, before, idx = self.listing(p + "/")
        lock_before = [e for e in before if e["Key"] == p + "/.lock"][0]
        threading.Timer(0.2, lambda: self.c.call("PUT", "/v1/session/destroy/" + dead)).start()
        status, after, idx2 = self.listing(p + "/", idx, "10s")
        self.assertGreater(idx2, idx)
        self.assertEqual(sorted(e["Key"] for e in after), [p + "/.lock", "%s/%s" % (p, live)])
        # The server leaves .lock alone: pruning the dead holder is the clients' job.
        lock_after = [e for e in after if e["Key"] == p + "/.lock"][0]
        self.assertEqual(lock_after["ModifyIndex"], lock_before["ModifyIndex"])
        self.assertIn(dead, json.loads(base64.b64decode(lock_after["Value"]))["Holders"])

    def test_ttl_expiry_of_a_delete_session_removes_its_contender_key(self):
        p = self.key()
        sid = self.c.session("200ms", behavior="delete")
        self.assertTrue(self.c.acquire("%s/%s" % (p, sid), sid, flags=SEMAPHORE_FLAG))
        _, _, idx = self.listing(p + "/")
        status, _, idx2 = self.listing(p + "/", idx, "10s")  # woken by the expiry, not by a request
        self.assertEqual(status, 404)
        self.assertGreater(idx2, idx)

    def test_an_empty_prefix_is_404_with_the_kv_table_s_index(self):
        p = self.key()
        self.c.json("PUT", "/v1/kv/%s-other" % p, b"x")
        _, e, _ = self.c.get(p + "-other")
        status, _, idx = self.c.call("GET", "/v1/kv/%s/?recurse" % p)
        self.assertEqual(status, 404)
        self.assertGreaterEqual(idx, e["ModifyIndex"])


class PathCleaning(EmulatorCase):
    """Go's ServeMux (and Consul's printable-path filter) in front of every endpoint."""

    def location(self, method, path):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        conn.request(method, path)
        r = conn.getresponse()
        r.read()
        conn.close()
        return r.status, r.getheader("Location")

    def test_dot_segments_are_redirected_not_served(self):
        self.assertEqual(self.location("GET", "/v1/kv/a/../b"), (301, "/v1/kv/b"))
        self.assertEqual(self.location("GET", "/v1/kv/a/./b"), (301, "/v1/kv/a/b"))
        self.assertEqual(self.location("GET", "/v1/kv/a//b"), (301, "/v1/kv/a/b"))
        self.assertEqual(self.location("PUT", "/v1/kv/a/.."), (301, "/v1/kv"))

    def test_percent_encoded_dots_are_dot_segments_too(self):
        self.assertEqual(self.location("GET", "/v1/kv/a/%2e%2e/b"), (301, "/v1/kv/b"))
        self.assertEqual(self.location("GET", "/v1/kv/a/%2E"), (301, "/v1/kv/a"))

    def test_a_recursive_delete_through_dot_segments_deletes_nothing(self):
        c = self.c
        self.assertEqual(c.call("PUT", "/v1/kv/outside", b"x")[0], 200)
        self.assertEqual(c.call("PUT", "/v1/kv/p/inside", b"y")[0], 200)
        self.assertEqual(self.location("DELETE", "/v1/kv/p/..?recurse"), (301, "/v1/kv?recurse"))
        self.assertEqual(self.location("DELETE", "/v1/kv/p/../?recurse"), (301, "/v1/kv/?recurse"))
        self.assertEqual(c.call("GET", "/v1/kv/outside")[0], 200)
        self.assertEqual(c.call("GET", "/v1/kv/p/inside")[0], 200)

    def test_a_body_of_a_redirected_put_does_not_spoil_the_connection(self):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        conn.request("PUT", "/v1/kv/a/../b", body=b"GET /v1/kv/x HTTP/1.1\r\n\r\n")
        r = conn.getresponse()
        r.read()
        self.assertEqual(r.status, 301)
        conn.request("GET", "/v1/status/leader")
        r = conn.getresponse()
        self.assertEqual((r.status, r.read()), (200, b"127.0.0.1:8300"))
        conn.close()

    def test_escaped_percent_signs_make_literal_keys(self):
        c = self.c
        self.assertEqual(c.call("PUT", "/v1/kv/lit/%252E%252E", b"v")[0], 200)
        status, entries, _ = c.json("GET", "/v1/kv/lit/?recurse")
        self.assertEqual(status, 200)
        self.assertEqual([e["Key"] for e in entries], ["lit/%2E%2E"])

    def test_unprintable_characters_are_refused(self):
        self.assertEqual(self.location("GET", "/v1/kv/a%01b")[0], 400)
        self.assertEqual(self.location("GET", "/v1/kv/a%7Fb")[0], 400)


class Stats(EmulatorCase):
    def test_requests_are_counted_per_path(self):
        k = self.key()
        for _ in range(3):
            self.c.get(k)
        self.c.json("PUT", "/v1/kv/" + k, b"x")
        status, body, _ = self.c.json("GET", "/emulator/stats?path=/v1/kv/" + k)
        self.assertEqual(body, {"GET": 3, "PUT": 1})


class Acl(EmulatorCase):
    extra_args = ("--min-ttl", "100ms", "--acl-token", "s3cret")

    def test_requests_need_the_token(self):
        status, body, _ = Client(self.port).call("GET", "/v1/kv/x")
        self.assertEqual((status, body), (403, b"Permission denied"))
        status, body, _ = Client(self.port, "wrong").call("GET", "/v1/kv/x")
        self.assertEqual((status, body), (403, b"ACL not found"))
        self.assertEqual(Client(self.port, "s3cret").call("GET", "/v1/kv/x")[0], 404)
        self.assertEqual(Client(self.port).call("GET", "/v1/kv/x?token=s3cret")[0], 404)


class Defaults(EmulatorCase):
    extra_args = ()

    def test_without_flags_ttl_below_10s_is_rejected_like_consul(self):
        status, body, _ = self.c.call("PUT", "/v1/session/create", json.dumps({"TTL": "2s"}))
        self.assertEqual(status, 400)
        self.assertIn(b"10s", body)
        self.assertEqual(self.c.call("PUT", "/v1/session/create", json.dumps({"TTL": "10s"}))[0], 200)


if __name__ == "__main__":
    unittest.main(verbosity=2)
