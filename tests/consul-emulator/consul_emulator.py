#!/usr/bin/python3
"""A Consul HTTP API EMULATOR for the distlock tests. It is NOT Consul.

No Consul server can be installed on the test machines, so the consul://
backend is tested against this emulator of the part of Consul's HTTP API that a
lock uses, written from the server rules listed in PROTOCOLS.md (Consul's
documented behaviour). Python standard library only; run it with /usr/bin/python3.

Implemented:
  PUT  /v1/session/create            JSON Name, TTL, LockDelay, Behavior (release|delete)
  PUT  /v1/session/renew/<id>         404 once the session is gone
  PUT  /v1/session/destroy/<id>
  GET  /v1/session/info/<id>, /v1/session/list
  GET  /v1/kv/<key>[?recurse][&raw][&index=N&wait=D]   blocking queries, X-Consul-Index
  PUT  /v1/kv/<key>[?flags=F][&acquire=S|&release=S|&cas=I]   body = value
  DELETE /v1/kv/<key>[?recurse][&cas=I]
  GET  /v1/status/leader              (the cheapest request: a round-trip floor)
  GET  /emulator/stats?path=P         (emulator only, not Consul) {"GET": n, "PUT": m, ...}:
                                      requests seen on path P, so tests can tell
                                      blocking queries from polling

Request paths, before any of the above, as Consul's HTTP server (Go net/http)
treats them, so that a client that sends a path with dot segments is seen to:
  - a path with an unprintable character (after percent-decoding) is 400, as
    Consul's go-cleanhttp PrintablePathCheckHandler answers (unless its
    disable_http_unprintable_char_filter is set);
  - a path that is not clean (a "." or ".." segment, or an empty one: "//") is
    not served: 301 to the cleaned path, query kept, as Go's ServeMux answers
    every method but CONNECT. Go up to 1.21 cleans the percent-decoded path
    (%2e%2e is ".."), Go 1.22 and later the path as sent: the emulator does
    both, the stricter union. path.Clean keeps a trailing '/'.
  - the key of /v1/kv/<key> is the rest of the percent-decoded path (Go's
    URL.Path: %2F is '/', %252E is the three characters "%2E"), never cleaned
    further.

Server rules: acquire needs a live session, fails while another session holds
the key or while the key's lock-delay runs; a new holder increments LockIndex;
the holder re-acquiring keeps LockIndex and CreateIndex (value, flags and
ModifyIndex update: Consul's kvsLockTxn); ?cas=I writes or deletes only while
the key's ModifyIndex is I (0: create only if absent); a listing (?recurse)
reports the highest ModifyIndex or deletion under its prefix (the KV table's
index when there is none) and a blocking listing of a prefix with entries
wakes only for a write or a deletion under it (what Consul's api/semaphore.go
waits on);
release clears Session with no lock-delay; invalidating a session (TTL expiry,
destroy) releases its keys (Behavior release) or deletes them (Behavior delete)
and starts each key's lock-delay (the session's LockDelay, default 15 s, capped
at 60 s); a session expires when not renewed for TTL x --ttl-multiplier (Consul
waits up to 2 x TTL; default 2); one global Raft-like index orders every write.

Flags that differ from a real Consul, for fast tests:
  --min-ttl DURATION    smallest session TTL accepted (Consul: 10s). The tests
                        use --min-ttl 100ms so that lease=2s URLs work.
  --ttl-multiplier X    expiry after TTL*X without renewal (Consul: 2)
  --acl-token TOKEN     require this X-Consul-Token (or ?token=) on every request:
                        none = 403 "Permission denied", wrong = 403 "ACL not found"
  --deny-release        answer every KV release (?release=) with 403 "Permission denied", as
                        for a token allowed to acquire but not to release (a fault for tests)
  --port N (0 = any free port; the chosen one is printed as "listening on HOST:PORT")
"""

import argparse
import base64
import json
import re
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, quote, unquote, urlsplit

MAX_LOCK_DELAY = 60.0
DEFAULT_LOCK_DELAY = 15.0
MAX_TTL = 86400.0
DEFAULT_WAIT = 300.0  # Consul: 5 minutes
MAX_WAIT = 600.0      # Consul: 10 minutes

_UNITS = {"ns": 1e-9, "us": 1e-6, "\u00b5s": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_go_duration(text):
    """Go's time.ParseDuration subset: "15s", "1500ms", "1m30s", "0"."""
    text = text.strip()
    if text in ("0", ""):
        return 0.0
    total, pos = 0.0, 0
    for m in re.finditer(r"(\d+(?:\.\d*)?)(ns|us|\u00b5s|ms|s|m|h)", text):
        if m.start() != pos:
            raise ValueError(text)
        total += float(m.group(1)) * _UNITS[m.group(2)]
        pos = m.end()
    if pos != len(text):
        raise ValueError(text)
    return total


def parse_lock_delay(value):
    """Consul accepts a duration string, or a number: seconds when < 1000, else nanoseconds."""
    if isinstance(value, (int, float)):
        return float(value) if value < 1000 else value / 1e9
    return parse_go_duration(str(value))


def go_duration(seconds):
    if seconds == int(seconds):
        return "%ds" % int(seconds)
    return "%gms" % (seconds * 1000)


class State:
    def __init__(self, min_ttl, ttl_multiplier):
        self.cond = threading.Condition()
        self.index = 1
        self.kv = {}            # key -> entry dict
        self.tombstones = {}    # key -> index of its deletion
        self.sessions = {}      # id -> session dict
        self.lock_delay = {}    # key -> monotonic time until which acquire fails
        self.session_index = 1  # index of the last session-table write
        self.requests = {}      # (method, path) -> count, for /emulator/stats
        self.min_ttl = min_ttl
        self.ttl_multiplier = ttl_multiplier

    # All methods below run with self.cond held.
    def next_index(self):
        self.index += 1
        return self.index

    def changed(self):
        self.cond.notify_all()

    def invalidate(self, sid):
        s = self.sessions.pop(sid, None)
        if s is None:
            return False
        idx = self.next_index()
        self.session_index = idx
        now = time.monotonic()
        for key in [k for k, e in self.kv.items() if e["Session"] == sid]:
            if s["LockDelay"] > 0:
                self.lock_delay[key] = now + s["LockDelay"]
            if s["Behavior"] == "delete":
                del self.kv[key]
                self.tombstones[key] = idx
            else:
                e = self.kv[key]
                e["Session"] = ""
                e["ModifyIndex"] = idx
        self.changed()
        return True

    def expire_sessions(self):
        now = time.monotonic()
        for sid in [sid for sid, s in self.sessions.items() if s["TTL"] > 0 and now >= s["expires"]]:
            self.invalidate(sid)

    def kv_table_index(self):
        """The index of the last KV write or deletion anywhere."""
        return max([e["ModifyIndex"] for e in self.kv.values()] + list(self.tombstones.values()) + [0])

    def kv_index(self, key, recurse):
        """X-Consul-Index of a KV read: the last write (or deletion) that touched it.
        A listing of a prefix that nothing ever touched gets the KV table's index,
        as Consul's kvsListTxn does when the entries and the graveyard give 0."""
        best = 0
        for k, e in self.kv.items():
            if k == key or (recurse and k.startswith(key)):
                best = max(best, e["ModifyIndex"])
        for k, idx in self.tombstones.items():
            if k == key or (recurse and k.startswith(key)):
                best = max(best, idx)
        if best == 0 and recurse:
            best = self.kv_table_index()
        return max(best, 1)


def go_clean_path(p):
    """Go's net/http cleanPath: path.Clean with a leading '/', keeping a trailing '/'."""
    if not p:
        return "/"
    if not p.startswith("/"):
        p = "/" + p
    out = []
    for seg in p.split("/"):
        if seg in ("", "."):
            continue
        if seg == "..":
            if out:
                out.pop()
            continue
        out.append(seg)
    clean = "/" + "/".join(out)
    if p.endswith("/") and clean != "/":
        clean += "/"
    return clean


def entry_json(e):
    return {
        "LockIndex": e["LockIndex"],
        "Key": e["Key"],
        "Flags": e["Flags"],
        "Value": base64.b64encode(e["Value"]).decode() if e["Value"] else None,
        "Session": e["Session"] or None,
        "CreateIndex": e["CreateIndex"],
        "ModifyIndex": e["ModifyIndex"],
    } if e["Session"] else {
        "LockIndex": e["LockIndex"],
        "Key": e["Key"],
        "Flags": e["Flags"],
        "Value": base64.b64encode(e["Value"]).decode() if e["Value"] else None,
        "CreateIndex": e["CreateIndex"],
        "ModifyIndex": e["ModifyIndex"],
    }


def session_json(s):
    return {
        "ID": s["ID"],
        "Name": s["Name"],
        "Node": "consul-emulator",
        "LockDelay": int(s["LockDelay"] * 1e9),
        "Behavior": s["Behavior"],
        "TTL": s["TTLText"],
        "NodeChecks": ["serfHealth"],
        "ServiceChecks": None,
        "CreateIndex": s["CreateIndex"],
        "ModifyIndex": s["CreateIndex"],
    }


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out as two writes: no 40 ms delayed-ACK stalls
    server_version = "consul-emulator"
    state = None       # set by main
    acl_token = None
    deny_release = False

    def log_message(self, fmt, *args):  # quiet
        pass

    # ---- plumbing ---------------------------------------------------------
    def reply(self, status, body, index=None, content_type="application/json"):
        if isinstance(body, (dict, list, bool)) or body is None:
            data = json.dumps(body).encode()
        elif isinstance(body, bytes):
            data = body
        else:
            data = str(body).encode()
            content_type = "text/plain; charset=utf-8"
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("X-Consul-Default-Acl-Policy", "deny" if self.acl_token else "allow")
        if index is not None:
            self.send_header("X-Consul-Index", str(index))
            self.send_header("X-Consul-KnownLeader", "true")
            self.send_header("X-Consul-LastContact", "0")
        self.end_headers()
        self.wfile.write(data)

    def body(self):
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n > 0 else b""

    def parsed(self):
        parts = urlsplit(self.path)
        query = parse_qs(parts.query, keep_blank_values=True)
        return unquote(parts.path), {k: v[-1] for k, v in query.items()}

    def allowed(self, query):
        if not self.acl_token:
            return True
        token = self.headers.get("X-Consul-Token") or query.get("token")
        auth = self.headers.get("Authorization", "")
        if not token and auth.startswith("Bearer "):
            token = auth[7:]
        if token == self.acl_token:
            return True
        self.reply(403, "ACL not found" if token else "Permission denied")
        return False

    def unclean_path(self):
        """Consul's answer to a path Go's server would not route (True when answered):
        400 for an unprintable character, 301 to the cleaned path for dot or empty segments."""
        parts = urlsplit(self.path)
        decoded = unquote(parts.path)
        answer = any(not c.isprintable() for c in decoded) or \
            go_clean_path(parts.path) != parts.path or go_clean_path(decoded) != decoded
        if not answer:
            return False
        self.body()  # read and dropped: the connection stays usable
        if any(not c.isprintable() for c in decoded):
            self.reply(400, "Request path contains unprintable characters")  # what a client sees; Go sends no body
            return True
        location = quote(go_clean_path(decoded)) + ("?" + parts.query if parts.query else "")
        self.send_response(301)
        self.send_header("Location", location)
        body = ('<a href="%s">Moved Permanently</a>.\n\n' % location).encode() if self.command in ("GET", "HEAD") else b""
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        return True

    def dispatch(self, method):
        if self.unclean_path():
            return
        path, query = self.parsed()
        if path == "/emulator/stats":
            with self.state.cond:
                want = query.get("path", "")
                counts = {m.upper(): n for (m, p), n in self.state.requests.items() if p == want}
            return self.reply(200, counts)
        with self.state.cond:
            k = (self.command.lower(), path)
            self.state.requests[k] = self.state.requests.get(k, 0) + 1
        if not self.allowed(query):
            return
        try:
            if path.startswith("/v1/kv/"):
                return getattr(self, "kv_" + method)(path[len("/v1/kv/"):], query)
            if path.startswith("/v1/session/"):
                return self.session(method, path[len("/v1/session/"):], query)
            if path == "/v1/status/leader" and method == "get":
                return self.reply(200, "127.0.0.1:8300")
            if path == "/v1/status/peers" and method == "get":
                return self.reply(200, ["127.0.0.1:8300"])
            self.reply(404, "")
        except ValueError as e:
            self.reply(400, "Bad request: %s" % e)

    def do_GET(self):
        self.dispatch("get")

    def do_PUT(self):
        self.dispatch("put")

    def do_POST(self):
        self.dispatch("put")

    def do_DELETE(self):
        self.dispatch("delete")

    # ---- blocking queries ----------------------------------------------------
    def block(self, query, current_index):
        """Waits (state.cond held) while the query's index is <= ?index, up to ?wait."""
        st = self.state
        if "index" not in query:
            return
        try:
            min_index = int(query["index"] or 0)
        except ValueError:
            raise ValueError("invalid index")
        if min_index <= 0:
            return
        wait = parse_go_duration(query["wait"]) if query.get("wait") else DEFAULT_WAIT
        wait = min(max(wait, 0.0), MAX_WAIT)
        wait += wait / 16.0 * (hash(threading.get_ident()) % 1000) / 1000.0  # Consul's jitter, up to wait/16
        deadline = time.monotonic() + wait
        while current_index() <= min_index:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            st.cond.wait(min(left, 0.05))
            st.expire_sessions()

    # ---- KV ----------------------------------------------------------------------
    def kv_get(self, key, query):
        st = self.state
        recurse = "recurse" in query
        with st.cond:
            st.expire_sessions()
            self.block(query, lambda: st.kv_index(key, recurse))
            idx = st.kv_index(key, recurse)
            if recurse:
                found = [st.kv[k] for k in sorted(st.kv) if k.startswith(key)]
            else:
                found = [st.kv[key]] if key in st.kv else []
            if not found:
                return self.reply(404, b"", index=idx, content_type="text/plain")
            if "raw" in query:
                return self.reply(200, found[0]["Value"], index=idx, content_type="application/octet-stream")
            return self.reply(200, [entry_json(e) for e in found], index=idx)

    def kv_put(self, key, query):
        st = self.state
        if not key:
            raise ValueError("missing key")
        value = self.body()
        flags = int(query["flags"]) if query.get("flags") else None
        if flags is not None and not 0 <= flags < 2 ** 64:
            raise ValueError("invalid flags")
        acquire, release, cas = query.get("acquire"), query.get("release"), query.get("cas")
        if acquire is not None and release is not None:
            raise ValueError("Conflicting flags: acquire and release")
        if release is not None and self.deny_release:
            return self.reply(403, "Permission denied")
        with st.cond:
            st.expire_sessions()
            e = st.kv.get(key)
            if cas is not None:
                want = int(cas)
                if (want == 0 and e is not None) or (want != 0 and (e is None or e["ModifyIndex"] != want)):
                    return self.reply(200, False, index=st.index)
            if acquire is not None:
                if acquire not in st.sessions:
                    return self.reply(500, 'invalid session "%s"' % acquire)
                if e is not None and e["Session"] and e["Session"] != acquire:
                    return self.reply(200, False, index=st.index)
                if e is None or e["Session"] != acquire:
                    if st.lock_delay.get(key, 0) > time.monotonic():
                        return self.reply(200, False, index=st.index)
            if release is not None:
                if e is None or e["Session"] != release:
                    return self.reply(200, False, index=st.index)
            idx = st.next_index()
            if e is None:
                e = {"Key": key, "Flags": 0, "Value": b"", "Session": "", "LockIndex": 0, "CreateIndex": idx}
                st.kv[key] = e
                st.tombstones.pop(key, None)
            e["Value"] = value
            e["Flags"] = flags if flags is not None else 0
            e["ModifyIndex"] = idx
            if acquire is not None and e["Session"] != acquire:
                e["Session"] = acquire
                e["LockIndex"] += 1
            elif release is not None:
                e["Session"] = ""
            st.changed()
            return self.reply(200, True, index=idx)

    def kv_delete(self, key, query):
        st = self.state
        with st.cond:
            st.expire_sessions()
            recurse = "recurse" in query
            keys = [k for k in st.kv if k.startswith(key)] if recurse else ([key] if key in st.kv else [])
            if query.get("cas") is not None and not recurse:
                e = st.kv.get(key)
                if e is None or e["ModifyIndex"] != int(query["cas"]):
                    return self.reply(200, False, index=st.index)
            idx = st.next_index()
            for k in keys:
                del st.kv[k]
                st.tombstones[k] = idx
            st.changed()
            return self.reply(200, True, index=idx)

    # ---- sessions --------------------------------------------------------------------
    def session(self, method, rest, query):
        st = self.state
        if rest == "create" and method == "put":
            raw = self.body()
            spec = json.loads(raw) if raw.strip() else {}
            ttl_text = spec.get("TTL") or ""
            ttl = parse_go_duration(ttl_text) if ttl_text else 0.0
            if ttl_text and ttl != 0 and not st.min_ttl <= ttl <= MAX_TTL:
                return self.reply(400, "Invalid Session TTL '%s', must be between [%s=%s]" %
                                  (ttl_text, go_duration(st.min_ttl), "24h0m0s"))
            behavior = spec.get("Behavior") or "release"
            if behavior not in ("release", "delete"):
                return self.reply(400, "Invalid Behavior setting '%s'" % behavior)
            delay = parse_lock_delay(spec["LockDelay"]) if "LockDelay" in spec else DEFAULT_LOCK_DELAY
            delay = min(max(delay, 0.0), MAX_LOCK_DELAY)
            with st.cond:
                idx = st.next_index()
                st.session_index = idx
                sid = str(uuid.uuid4())
                st.sessions[sid] = {
                    "ID": sid, "Name": spec.get("Name", ""), "TTL": ttl, "TTLText": ttl_text, "LockDelay": delay,
                    "Behavior": behavior, "CreateIndex": idx,
                    "expires": time.monotonic() + ttl * st.ttl_multiplier,
                }
                st.changed()
                return self.reply(200, {"ID": sid}, index=idx)
        if rest.startswith("renew/") and method == "put":
            sid = rest[len("renew/"):]
            with st.cond:
                st.expire_sessions()
                s = st.sessions.get(sid)
                if s is None:
                    return self.reply(404, "Session id '%s' not found" % sid)
                s["expires"] = time.monotonic() + s["TTL"] * st.ttl_multiplier
                return self.reply(200, [session_json(s)], index=st.session_index)
        if rest.startswith("destroy/") and method == "put":
            with st.cond:
                st.invalidate(rest[len("destroy/"):])
                return self.reply(200, True, index=st.index)
        if rest.startswith("info/") and method == "get":
            sid = rest[len("info/"):]
            with st.cond:
                st.expire_sessions()
                self.block(query, lambda: st.session_index)
                s = st.sessions.get(sid)
                return self.reply(200, [session_json(s)] if s else [], index=st.session_index)
        if rest == "list" and method == "get":
            with st.cond:
                st.expire_sessions()
                self.block(query, lambda: st.session_index)
                return self.reply(200, [session_json(s) for s in st.sessions.values()], index=st.session_index)
        self.reply(404, "")


class Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        # A client that gave up on a blocking query closes its connection: not an error.
        if isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            return
        super().handle_error(request, client_address)


def reaper(state):
    """Expires sessions whose TTL ran out even when no request comes in."""
    while True:
        time.sleep(0.05)
        with state.cond:
            state.expire_sessions()


def main():
    ap = argparse.ArgumentParser(description="Consul HTTP API emulator for the distlock tests (not Consul)")
    ap.add_argument("--bind", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=18500)
    ap.add_argument("--min-ttl", default="10s", help="smallest session TTL accepted (Consul: 10s)")
    ap.add_argument("--ttl-multiplier", type=float, default=2.0, help="expire after TTL*X (Consul: 2)")
    ap.add_argument("--acl-token", default=None, help="require this ACL token on every request")
    ap.add_argument("--deny-release", action="store_true", help="answer every KV release with 403")
    args = ap.parse_args()
    Handler.state = State(parse_go_duration(args.min_ttl), args.ttl_multiplier)
    Handler.acl_token = args.acl_token
    Handler.deny_release = args.deny_release
    server = Server((args.bind, args.port), Handler)
    threading.Thread(target=reaper, args=(Handler.state,), daemon=True).start()
    host, port = server.server_address[:2]
    print("consul-emulator listening on %s:%d" % (host, port), flush=True)
    try:
        server.serve_forever(poll_interval=0.1)
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
