#!/usr/bin/env python3
"""One cell of the fault harness (tests/faults/README.md, "The controller").

    harness.py --backend ID --nemesis NEMESIS [--seconds S] [--workers N] [--lease-ms L]
               [--out DIR] [--worker-bin PATH] [--expect JSON|FILE] [more: --help]

Starts the store (a Unix SOCK_SEQPACKET server, logging store.jsonl), a TCP proxy
per worker and server host when the nemesis needs one (the worker's URL rewritten
to its proxies), N workers (distlock-fault-worker; memory:// runs them as threads
of one process), then the nemesis for S seconds, then SIGTERM to the workers (one
still alive after the grace period is SIGKILLed and recorded as hung), then
checker.py RUN_DIR --json when it exists; exits with the checker's status (2 when
the harness itself failed).

Python 3 standard library only. Every process it starts is stopped by its PID,
also on Ctrl-C and on exceptions; a worker stopped by SIGSTOP is always SIGCONTed.
Passwords never appear in its output, logs or run.json.
"""

import argparse
import collections
import datetime
import errno
import json
import os
import random
import re
import selectors
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))

NEMESES = [
    "none", "pause-holder", "pause-before-write", "kill-holder", "delay-replies", "freeze-client",
    "restart-server", "restart-server-empty", "kill-leader", "clock-jump-client", "clock-jump-server", "break-lock",
    "partition-leader", "partition-minority", "partition-bridge",
]
# Cuts between the members of a cluster whose members run on hosts of their own
# (integration/backends.sh: ctl.sh cut, isolate, heal), while clients reach every member.
PARTITIONS = ("partition-leader", "partition-minority", "partition-bridge")
EMBEDDED = ("file", "memory")
NEEDS_PROXY = ("delay-replies", "freeze-client")
LIBFAKETIME = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"
# Servers whose wall clock moves by tests/faults/wallclock_shift.c instead (redis-server
# cannot start under libfaketime: that file says why).
WALLCLOCK_SHIFT_SERVERS = ("redis", "redlock")


def mono():
    # CLOCK_MONOTONIC in ns, the clock of every history (the controller never
    # runs under libfaketime).
    return time.monotonic_ns()


# ---- secrets -----------------------------------------------------------------

_SECRETS = set()


_USERINFO_PW = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://[^/@\s:]*:)[^@\s/]*@")
_SECRET_PARAM = re.compile(r"(\b(?:%s)=)[^&\s'\"]+" % "|".join(("password", "token", "secret", "pw")), re.I)


def scrub(text):
    """Hides passwords: the one of every URL's userinfo (scheme://user:***@), secret
    query parameters, and every password seen in a URL where it follows ':' and
    precedes '@' (a URL cut short)."""
    text = str(text)
    for s in sorted(_SECRETS, key=len, reverse=True):
        if s:
            text = text.replace(":" + s + "@", ":***@")
    text = _USERINFO_PW.sub(r"\1***@", text)
    return _SECRET_PARAM.sub(r"\1***", text)


def say(*parts):
    print("[harness]", scrub(" ".join(str(p) for p in parts)), file=sys.stderr, flush=True)


class HarnessError(Exception):
    pass


# ---- URLs --------------------------------------------------------------------

SECRET_PARAMS = ("password", "token", "secret", "pw")


class Url:
    """scheme://[userinfo@]h1:p1,h2:p2[/path][?query]"""

    def __init__(self, text):
        if "://" not in text:
            raise HarnessError("not a URL: %s" % scrub(text))
        self.scheme, rest = text.split("://", 1)
        self.query = []
        if "?" in rest:
            rest, q = rest.split("?", 1)
            for part in q.split("&"):
                if part:
                    k, _, v = part.partition("=")
                    self.query.append([k, v])
        slash = rest.find("/")
        auth, self.path = (rest[:slash], rest[slash:]) if slash >= 0 else (rest, "")
        self.userinfo = None
        if "@" in auth:
            self.userinfo, auth = auth.rsplit("@", 1)
            if ":" in self.userinfo:
                _SECRETS.add(self.userinfo.split(":", 1)[1])
        for k, v in self.query:
            if k.lower() in SECRET_PARAMS and v:
                _SECRETS.add(v)
        self.auth = auth  # memory://space keeps its space here
        self.hosts = []
        if self.scheme not in EMBEDDED:
            for h in auth.split(","):
                if not h:
                    continue
                host, sep, port = h.rpartition(":")
                if not sep or not port.isdigit():
                    raise HarnessError("host without a port in URL: %s" % h)
                self.hosts.append((host.strip("[]"), int(port)))

    def set_param(self, key, value):
        for kv in self.query:
            if kv[0] == key:
                kv[1] = value
                return
        self.query.append([key, value])

    def text(self, hosts=None, redact=False):
        out = self.scheme + "://"
        if self.userinfo is not None:
            ui = self.userinfo
            if redact and ":" in ui:
                ui = ui.split(":", 1)[0] + ":***"
            out += ui + "@"
        if self.scheme in EMBEDDED:
            out += self.auth
        else:
            out += ",".join("%s:%d" % hp for hp in (hosts if hosts is not None else self.hosts))
        out += self.path
        if self.query:
            q = []
            for k, v in self.query:
                q.append("%s=%s" % (k, "***" if redact and k.lower() in SECRET_PARAMS and v else v))
            out += "?" + "&".join(q)
        return out

    def redacted(self):
        return self.text(redact=True)


# ---- backends ------------------------------------------------------------------

def run_dir():
    return os.environ.get("DISTLOCK_RUN_DIR") or os.path.join(REPO, "integration", ".run")


def read_env(path):
    env = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("#") or "=" not in line:
                continue
            k, _, v = line.partition("=")
            try:
                parts = shlex.split(v)
            except ValueError:
                parts = [v]
            env[k.strip()] = parts[0] if parts else ""
    return env


def backend_ids(env):
    ids = []
    for k in env:
        m = re.fullmatch(r"DISTLOCK_TEST_(.+)_URL", k)
        if m:
            ids.append(m.group(1).lower().replace("_", "-"))
    return sorted(ids) + list(EMBEDDED)


def env_var(bid, suffix):
    return "DISTLOCK_TEST_%s_%s" % (bid.upper().replace("-", "_"), suffix)


def server_name(bid):
    """The integration/backends.sh server behind backend id `bid`."""
    if bid in ("zk", "zookeeper"):
        return "zookeeper"
    for name in ("zk-ensemble", "etcd-cluster", "consul-emulator", "redis-sentinel", "redis-cluster", "redlock", "etcd",
                 "redis",
                 "mysql", "postgres"):
        if bid == name or bid.startswith(name + "-"):
            return name
    return None


# ---- JSON-lines logs ---------------------------------------------------------------

class JsonLog:
    """Appends one JSON object per line with one write(2) on an O_APPEND fd."""

    def __init__(self, path):
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
        self.lock = threading.Lock()

    def write(self, obj):
        line = (json.dumps(obj) + "\n").encode()
        with self.lock:
            os.write(self.fd, line)

    def event(self, ev, **fields):
        obj = {"t": mono(), "ev": ev}
        obj.update(fields)
        self.write(obj)
        return obj

    def close(self):
        with self.lock:
            if self.fd >= 0:
                os.close(self.fd)
                self.fd = -1


# ---- the store ---------------------------------------------------------------------

class Store:
    """The fenced/unfenced store of the README, on AF_UNIX SOCK_SEQPACKET."""

    def __init__(self, path, log_path):
        self.path = path
        self.log = JsonLog(log_path)
        self.lock = threading.Lock()
        self.highest = 0
        self.value = 0
        self.stopping = False
        self.conns = []
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        self.sock.bind(path)
        self.sock.listen(64)
        self.sock.settimeout(0.2)
        self.threads = [threading.Thread(target=self._accept, name="store-accept", daemon=True)]
        self.threads[0].start()

    def _accept(self):
        while not self.stopping:
            try:
                c, _ = self.sock.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            c.settimeout(None)
            self.conns.append(c)
            t = threading.Thread(target=self._serve, args=(c,), name="store-conn", daemon=True)
            self.threads.append(t)
            t.start()

    def _serve(self, c):
        while True:
            try:
                msg = c.recv(4096)
            except OSError:
                return
            if not msg:
                return
            try:
                reply = self.apply(msg.decode("utf-8", "replace"))
            except Exception as e:  # a malformed request: tell the worker, keep serving
                reply = "E %s" % e
            try:
                c.send(reply.encode())
            except OSError:
                return

    def apply(self, msg):
        parts = msg.split(" ")
        op = parts[0]
        with self.lock:
            t = mono()
            if op == "W" and len(parts) == 3:
                token = int(parts[2])
                accepted = token >= self.highest
                if accepted:
                    self.highest = token
                self.log.write({"t": t, "op": "W", "w": parts[1], "token": token, "accepted": accepted,
                                "highest": self.highest})
                return "%s %d" % ("A" if accepted else "R", self.highest)
            if op == "G" and len(parts) == 2:
                self.log.write({"t": t, "op": "G", "w": parts[1], "value": self.value})
                return "V %d" % self.value
            if op == "S" and len(parts) == 3:
                self.value = int(parts[2])
                self.log.write({"t": t, "op": "S", "w": parts[1], "value": self.value})
                return "OK"
        raise ValueError("bad request %r" % msg)

    def stop(self):
        self.stopping = True
        try:
            self.sock.close()
        except OSError:
            pass
        for c in self.conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            c.close()
        for t in self.threads:
            t.join(timeout=2)
        self.log.close()
        try:
            os.unlink(self.path)
        except OSError:
            pass


# ---- TCP proxies ---------------------------------------------------------------------

class Proxy:
    """Listens on 127.0.0.1:<port>, forwards to one server. mode: pass | delay | freeze."""

    def __init__(self, target, label):
        self.target = target
        self.label = label
        self.mode = "pass"
        self.delay_ns = 0
        self.accepted = 0
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.sock.setblocking(False)
        self.port = self.sock.getsockname()[1]


class Conn:
    def __init__(self, proxy, client, server):
        self.proxy = proxy
        self.c = client
        self.s = server
        self.connected = False
        # data waiting to be sent TO each socket: deque of [release_ns, bytes | None (EOF)]
        self.q = {client: collections.deque(), server: collections.deque()}
        self.blocked = {client: False, server: False}
        self.eof_from = set()
        self.shut_wr = set()
        self.events = {client: 0, server: 0}

    def other(self, sock):
        return self.s if sock is self.c else self.c


class ProxyHub:
    """All proxies of a cell on one selector thread. Delay line: what the server
    sends is released to the client `delay_ns` after it was read, in order (head of
    line), so replies keep their order; freeze holds both directions (nothing is
    lost: it flows again when the freeze ends, as over a partition that heals)."""

    def __init__(self):
        self.sel = selectors.DefaultSelector()
        self.proxies = []
        self.conns = set()
        self.running = True
        self.rfd, self.wfd = os.pipe()
        os.set_blocking(self.rfd, False)
        os.set_blocking(self.wfd, False)
        self.sel.register(self.rfd, selectors.EVENT_READ, ("wake", None))
        self.pending = collections.deque()  # proxies to register (from other threads)
        self.thread = threading.Thread(target=self._loop, name="proxies", daemon=True)
        self.thread.start()

    def add(self, target, label):
        p = Proxy(target, label)
        self.proxies.append(p)
        self.pending.append(p)
        self.wake()
        return p

    def set_mode(self, proxies, mode, delay_ns=0):
        for p in proxies:
            p.delay_ns = delay_ns
            p.mode = mode
        self.wake()

    def wake(self):
        try:
            os.write(self.wfd, b"x")
        except OSError:
            pass

    def stop(self):
        self.running = False
        self.wake()
        self.thread.join(timeout=5)
        for c in list(self.conns):
            self._abort(c)
        for p in self.proxies:
            p.sock.close()
        os.close(self.rfd)
        os.close(self.wfd)

    def _loop(self):
        while self.running:
            while self.pending:
                p = self.pending.popleft()
                self.sel.register(p.sock, selectors.EVENT_READ, ("listen", p))
            for key, mask in self.sel.select(self._timeout()):
                kind, obj = key.data
                if kind == "wake":
                    try:
                        while os.read(self.rfd, 4096):
                            pass
                    except OSError:
                        pass
                elif kind == "listen":
                    self._accept(obj)
                elif obj in self.conns:
                    self._io(obj, key.fileobj, mask)
            now = mono()
            for c in list(self.conns):
                self._flush(c, now)

    def _timeout(self):
        now = mono()
        best = 0.05
        for c in self.conns:
            if c.proxy.mode == "freeze":
                continue
            for q in c.q.values():
                if q:
                    best = min(best, max(0.0, (q[0][0] - now) / 1e9))
        return best

    def _accept(self, p):
        while True:
            try:
                client, _ = p.sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return
            p.accepted += 1
            client.setblocking(False)
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            server.setblocking(False)
            server.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            c = Conn(p, client, server)
            self.conns.add(c)
            err = server.connect_ex(p.target)
            if err not in (0, errno.EINPROGRESS):
                self._abort(c)
                continue
            self.sel.register(client, selectors.EVENT_READ, ("conn", c))
            self.sel.register(server, selectors.EVENT_WRITE, ("conn", c))
            c.events[client] = selectors.EVENT_READ
            c.events[server] = selectors.EVENT_WRITE

    def _io(self, c, sock, mask):
        if sock is c.s and not c.connected:
            if mask & selectors.EVENT_WRITE:
                if c.s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) != 0:
                    self._abort(c)
                    return
                c.connected = True
            return self._update(c)
        if mask & selectors.EVENT_WRITE:
            c.blocked[sock] = False
        if mask & selectors.EVENT_READ:
            try:
                data = sock.recv(65536)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                self._abort(c)
                return
            now = mono()
            release = now + (c.proxy.delay_ns if sock is c.s and c.proxy.mode == "delay" else 0)
            q = c.q[c.other(sock)]
            if q and q[-1][0] > release:  # order-preserving: never overtake what is queued
                release = q[-1][0]
            if not data:
                c.eof_from.add(sock)
                q.append([release, None])
            else:
                q.append([release, data])
        self._update(c)

    def _flush(self, c, now):
        if c not in self.conns:
            return
        if c.proxy.mode != "freeze":
            for dst in (c.c, c.s):
                if dst is c.s and not c.connected:
                    continue
                q = c.q[dst]
                while q and q[0][0] <= now and not c.blocked[dst]:
                    data = q[0][1]
                    if data is None:
                        try:
                            dst.shutdown(socket.SHUT_WR)
                        except OSError:
                            pass
                        c.shut_wr.add(dst)
                        q.popleft()
                        continue
                    try:
                        n = dst.send(data)
                    except (BlockingIOError, InterruptedError):
                        c.blocked[dst] = True
                        break
                    except OSError:
                        self._abort(c)
                        return
                    if n < len(data):
                        q[0][1] = data[n:]
                        c.blocked[dst] = True
                        break
                    q.popleft()
        if len(c.eof_from) == 2 and not c.q[c.c] and not c.q[c.s]:
            self._close(c)
            return
        self._update(c)

    def _update(self, c):
        if c not in self.conns:
            return
        for sock in (c.c, c.s):
            want = 0
            if sock is c.s and not c.connected:
                want = selectors.EVENT_WRITE
            else:
                if sock not in c.eof_from:
                    want |= selectors.EVENT_READ
                if c.blocked[sock]:
                    want |= selectors.EVENT_WRITE
            if want != c.events[sock]:
                try:
                    if c.events[sock] == 0:
                        self.sel.register(sock, want, ("conn", c))
                    elif want == 0:
                        self.sel.unregister(sock)
                    else:
                        self.sel.modify(sock, want, ("conn", c))
                    c.events[sock] = want
                except (KeyError, ValueError, OSError):
                    pass

    def _close(self, c, reset=False):
        self.conns.discard(c)
        for sock in (c.c, c.s):
            if c.events.get(sock):
                try:
                    self.sel.unregister(sock)
                except (KeyError, ValueError, OSError):
                    pass
            if reset:
                try:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
                except OSError:
                    pass
            try:
                sock.close()
            except OSError:
                pass

    def _abort(self, c):
        self._close(c, reset=True)


# ---- processes ---------------------------------------------------------------------

def proc_state(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def describe_status(rc):
    return {"signal": -rc} if rc < 0 else {"status": rc}


class Slot:
    def __init__(self, index):
        self.index = index
        self.incarnation = 0
        self.proc = None
        self.ws = []           # logical worker ids of the current process
        self.proxies = []
        self.url = None        # the URL this slot's workers get (secret inside: never printed)
        self.stopped_since = None
        self.faketime_file = None
        self.offset_s = 0
        self.logfile = None


# ---- the cell ---------------------------------------------------------------------

class Cell:
    def __init__(self, args):
        self.a = args
        self.lease_ns = args.lease_ms * 1_000_000
        self.slots = []
        self.extra = []          # other processes of ours: [(role, Popen)]
        self.hub = None
        self.store = None
        self.nem = None
        self.phase = "setup"
        self.errors = []
        self.lock = threading.RLock()
        self.supervising = False
        self.supervisor = None
        self.servers_down = False
        self.run = {}

    # -- set-up -------------------------------------------------------------------
    def resolve_backend(self):
        a = self.a
        self.env = {}
        env_file = os.path.join(run_dir(), "backends.env")
        if os.path.exists(env_file):
            self.env = read_env(env_file)
        if a.backend == "file":
            self.url = Url("file://" + os.path.join(self.out, "locks"))
        elif a.backend == "memory":
            self.url = Url("memory://faults-%d" % os.getpid())
        else:
            var = env_var(a.backend, "URL")
            if var not in self.env:
                raise HarnessError("unknown backend id %r (known: %s; from %s)" % (
                    a.backend, ", ".join(backend_ids(self.env)), env_file))
            self.url = Url(self.env[var])
        self.server = server_name(a.backend)

    def check_applicable(self):
        a, n = self.a, self.a.nemesis
        emb = a.backend in EMBEDDED
        if n in NEEDS_PROXY + ("restart-server", "restart-server-empty", "kill-leader", "clock-jump-server") and emb:
            raise HarnessError("nemesis %s needs a server backend, not %s" % (n, a.backend))
        if n == "kill-leader" and env_var(a.backend, "CTL") not in self.env:
            raise HarnessError("kill-leader needs a cluster with a ctl.sh (zk-ensemble, etcd-cluster), not %s"
                               % a.backend)
        if n in PARTITIONS:
            if emb or env_var(a.backend, "CTL") not in self.env:
                raise HarnessError("%s needs a cluster with a ctl.sh, not %s" % (n, a.backend))
            rc, out, _ = self.ctl("heal", timeout=30)
            if rc != 0:
                raise HarnessError("%s needs a cluster whose members run on hosts of their own (ctl.sh heal: %s)"
                                   % (n, scrub(out).strip()))
        if n == "clock-jump-server" and env_var(a.backend, "CTL") in self.env:
            raise HarnessError("clock-jump-server restarts a single server under libfaketime, not a cluster")
        if n == "break-lock" and not emb:
            raise HarnessError("break-lock is for file and memory (an in-process nemesis)")
        if a.backend == "memory" and n not in ("none", "break-lock"):
            raise HarnessError("memory:// runs its workers in one process: only none and break-lock apply")
        if n in ("pause-holder", "pause-before-write", "kill-holder", "clock-jump-client") and a.workers < 2:
            raise HarnessError("%s needs at least 2 workers" % n)

    def worker_url(self, slot):
        u = Url(self.url.text())
        if self.a.backend not in EMBEDDED and self.a.set_lease:
            u.set_param("lease", "%dms" % self.a.lease_ms)
            if u.scheme == "zk":
                u.set_param("session_timeout", "%dms" % self.a.lease_ms)
        hosts = None
        if slot.proxies:
            hosts = [("127.0.0.1", p.port) for p in slot.proxies]
        return u.text(hosts=hosts)

    def setup(self):
        a = self.a
        os.makedirs(os.path.join(self.out, "history"), exist_ok=True)
        os.makedirs(os.path.join(self.out, "logs"), exist_ok=True)
        self.nem = JsonLog(os.path.join(self.out, "nemesis.jsonl"))
        sock_path = os.path.join(self.out, "store.sock")
        if len(sock_path.encode()) > 100:  # sun_path is 108 bytes
            self.sock_dir = os.path.join("/tmp", "distlock-store-%d-%d" % (os.getpid(), mono()))
            os.makedirs(self.sock_dir)
            sock_path = os.path.join(self.sock_dir, "store.sock")
        else:
            self.sock_dir = None
        self.sock_path = sock_path
        self.store = Store(sock_path, os.path.join(self.out, "store.jsonl"))
        use_proxies = a.backend not in EMBEDDED and (a.nemesis in NEEDS_PROXY or a.proxies)
        if use_proxies:
            self.hub = ProxyHub()
        nslots = 1 if a.backend == "memory" else a.workers
        for i in range(1, nslots + 1):
            s = Slot(i)
            if use_proxies:
                s.proxies = [self.hub.add(hp, "%d:%s:%d" % (i, hp[0], hp[1])) for hp in self.url.hosts]
            if a.nemesis == "clock-jump-client":
                d = os.path.join(self.out, "faketime")
                os.makedirs(d, exist_ok=True)
                s.faketime_file = os.path.join(d, "%d.rc" % i)
                with open(s.faketime_file, "w") as f:
                    f.write("+0\n")
            s.url = self.worker_url(s)
            self.slots.append(s)
        self.lock_name = a.lock or "faults-%s-%s-%d-%d" % (a.backend, a.nemesis, os.getpid(), int(time.time()))
        if a.nemesis in ("clock-jump-client", "clock-jump-server"):
            ensure_faketime()
        if a.nemesis == "clock-jump-server":
            # The server(s) again, now with a wall clock that the nemesis moves: only
            # the wall clock (what an NTP step moves), so that their own timers keep
            # working. Under libfaketime, or for Redis under distlock-wallclock-shift.so.
            d = os.path.join(self.out, "faketime")
            os.makedirs(d, exist_ok=True)
            self.server_clock = os.path.join(d, "server.rc")
            self.server_offset_s = 0
            self.shift_clock = self.server in WALLCLOCK_SHIFT_SERVERS
            if self.shift_clock:
                if not os.path.exists(a.wallclock_shift):
                    raise HarnessError("%s is missing (build the target distlock-wallclock-shift)" % a.wallclock_shift)
                self.server_env = dict(os.environ, LD_PRELOAD=a.wallclock_shift,
                                       WALLCLOCK_SHIFT_FILE=self.server_clock)
            else:
                self.server_env = dict(os.environ, LD_PRELOAD=LIBFAKETIME, FAKETIME_TIMESTAMP_FILE=self.server_clock,
                                       FAKETIME_CACHE_DURATION="1", FAKETIME_DONT_FAKE_MONOTONIC="1")
            self.write_server_clock(0)
            if not (self.server_action("kill") and self.server_action("spawn", env=self.server_env)):
                raise HarnessError("cannot restart %s with a clock of its own" % self.server)
            self.server_faked = True

    def worker_cmd(self, slot, w):
        a = self.a
        cmd = [a.worker_bin, "--url", slot.url, "--lock", self.lock_name, "--id", w,
               "--history", os.path.join(self.out, "history", "{w}.jsonl"), "--store", self.sock_path,
               "--seconds", str(a.seconds + a.grace + 60),  # a safety net if the controller dies
               "--lease-ms", str(a.lease_ms), "--hold-ms", str(a.hold_ms), "--wait-ms", str(a.wait_ms)]
        if a.election:
            cmd += ["--election", "1"]
        if a.asynchronous:
            cmd += ["--async", "1"]
        if a.nemesis in ("pause-holder", "pause-before-write"):
            cmd += ["--pause-point", "hold" if a.nemesis == "pause-holder" else "before-write",
                    "--pause-prob", str(a.pause_prob)]
        if a.nemesis == "kill-holder":
            cmd += ["--kill-prob", str(a.kill_prob)]
        if a.nemesis in ("pause-holder", "pause-before-write", "kill-holder"):
            # The first worker to reach the point faults there whatever the
            # probability: every cell injects at least one fault.
            cmd += ["--first-fault", os.path.join(self.out, "first-fault")]
        if a.backend == "memory":
            cmd += ["--threads", str(a.workers)]
            if a.nemesis == "break-lock":
                cmd += ["--break-lock-every", str(a.break_every_ms),
                        "--nemesis-log", os.path.join(self.out, "nemesis.jsonl")]
        return cmd

    def worker_env(self, slot):
        env = dict(os.environ)
        if slot.faketime_file:
            env["LD_PRELOAD"] = LIBFAKETIME
            env["FAKETIME_TIMESTAMP_FILE"] = slot.faketime_file
            env["FAKETIME_CACHE_DURATION"] = str(self.a.faketime_cache_s)
            if not self.a.fake_monotonic:
                env["FAKETIME_DONT_FAKE_MONOTONIC"] = "1"
        return env

    def start_worker(self, slot, reason="start"):
        slot.incarnation += 1
        base = "%d" % slot.index if self.a.backend == "memory" else "%d.%d" % (slot.index, slot.incarnation)
        if self.a.backend == "memory":
            ws = ["%s.%d" % (base, k) for k in range(1, self.a.workers + 1)]
        else:
            ws = [base]
        cmd = self.worker_cmd(slot, base)
        logf = open(os.path.join(self.out, "logs", base + ".log"), "ab")
        try:
            proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=logf, stderr=subprocess.STDOUT,
                                    env=self.worker_env(slot), close_fds=True)
        finally:
            logf.close()
        with self.lock:
            slot.proc, slot.ws, slot.stopped_since = proc, ws, None
        shown = [Url(x).redacted() if x == slot.url else scrub(x) for x in cmd]
        for w in ws:
            self.nem.event("spawn", w=w, pid=proc.pid, slot=slot.index, incarnation=slot.incarnation,
                           reason=reason, cmd=shown if w == ws[0] else None)
        return proc

    def start_extra(self, role, cmd):
        logf = open(os.path.join(self.out, "logs", role + ".log"), "ab")
        try:
            proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=logf, stderr=subprocess.STDOUT,
                                    close_fds=True)
        finally:
            logf.close()
        self.extra.append((role, proc))
        self.nem.event("spawn", role=role, pid=proc.pid, cmd=[scrub(x) for x in cmd])
        return proc

    # -- the supervisor: exits, restarts, SIGCONT after pauses ------------------------------
    def supervise(self):
        pause_ns = self.a.pause_ms * 1_000_000
        while self.supervising:
            with self.lock:
                for s in self.slots:
                    self._watch(s, pause_ns)
                for i, (role, p) in enumerate(self.extra):
                    if p is not None and p.poll() is not None:
                        self.nem.event("exit", role=role, pid=p.pid, phase=self.phase, **describe_status(p.returncode))
                        self.extra[i] = (role, None)
            time.sleep(0.01)

    def _watch(self, s, pause_ns):
        p = s.proc
        if p is None:
            return
        rc = p.poll()
        if rc is not None:
            for w in s.ws:
                self.nem.event("exit", w=w, pid=p.pid, phase=self.phase, **describe_status(rc))
            s.proc, s.stopped_since = None, None
            # (The workers of kill-holder kill themselves from their first grant on,
            # which can come before every worker has started.)
            if self.phase in ("setup", "run") and self.a.nemesis == "kill-holder" and rc == -signal.SIGKILL:
                self.start_worker(s, reason="restart after kill")
            return
        st = proc_state(p.pid)
        now = mono()
        if st in ("T", "t"):
            if s.stopped_since is None:
                s.stopped_since = now
                for w in s.ws:
                    self.nem.event("stop", w=w, pid=p.pid)
            elif now - s.stopped_since >= pause_ns:
                os.kill(p.pid, signal.SIGCONT)
                for w in s.ws:
                    self.nem.event("cont", w=w, pid=p.pid, stopped_ms=(now - s.stopped_since) // 1_000_000)
                s.stopped_since = None
        elif s.stopped_since is not None:
            s.stopped_since = None

    # -- helpers for nemeses --------------------------------------------------------------
    def holder_slots(self):
        """Slots whose current worker's history ends inside a grant."""
        out = []
        for s in self.slots:
            if s.proc is None:
                continue
            for w in s.ws:
                if grant_open(os.path.join(self.out, "history", w + ".jsonl")):
                    out.append(s)
                    break
        return out

    def pick_target(self, prefer_holder):
        """A live slot: the current holder when asked and there is one, else any."""
        with self.lock:
            live = [s for s in self.slots if s.proc is not None]
        pool = (self.holder_slots() if prefer_holder else []) or live
        return random.choice(pool) if pool else None

    def period(self, leases):
        """`leases` leases, jittered uniformly by +-50% (a fixed period would lock onto
        the grant cycle and always strike at the same point of a grant)."""
        return int(leases * self.lease_ns * random.uniform(0.5, 1.5))

    def sleep_until(self, t_ns):
        while True:
            left = t_ns - mono()
            if left <= 0:
                return
            time.sleep(min(left / 1e9, 0.1))

    def backends_sh(self, *argv, timeout=120, env=None):
        cmd = [os.path.join(REPO, "integration", "backends.sh")] + list(argv)
        return self.run_cmd(cmd, timeout, env)

    def run_cmd(self, cmd, timeout=120, env=None):
        t0 = mono()
        try:
            r = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout,
                               env=env)
            rc, out = r.returncode, (r.stdout + r.stderr).strip()
        except subprocess.TimeoutExpired as e:  # run() killed its child (by PID) already
            rc, out = "timeout", str(e)
        return rc, scrub(out[-2000:]), (mono() - t0) // 1_000_000

    def server_action(self, action, *extra, env=None):
        rc, out, ms = self.backends_sh(action, self.server, *extra, env=env)
        self.nem.event("server-" + action, server=self.server, rc=rc, took_ms=ms, output=out or None)
        if rc != 0:
            self.errors.append("backends.sh %s %s failed (%s): %s" % (action, self.server, rc, out))
            say("backends.sh %s %s failed (%s): %s" % (action, self.server, rc, out))
        return rc == 0

    def ctl(self, *argv, timeout=120):
        ctl = self.env[env_var(self.a.backend, "CTL")]
        return self.run_cmd([ctl] + list(argv), timeout)

    def clock_offsets(self):
        """The offsets (s) a clock jumps among: 0 and 3 and 5 leases either way."""
        lease_s = self.a.lease_ms / 1000.0
        steps = [int(round(k * lease_s)) or 1 for k in (3, 5)]
        return sorted({0} | set(steps) | {-x for x in steps})

    def write_server_clock(self, offset_s):
        """The server's offset file: libfaketime's "+Ns", or the shift library's milliseconds."""
        tmp = self.server_clock + ".tmp"
        with open(tmp, "w") as f:
            if self.shift_clock:
                f.write("%d\n" % (offset_s * 1000))
            else:
                f.write("%+ds\n" % offset_s if offset_s else "+0\n")
        os.replace(tmp, self.server_clock)

    def set_server_offset(self, offset_s):
        self.write_server_clock(offset_s)
        self.server_offset_s = offset_s
        self.nem.event("server-clock", server=self.server, offset_ms=offset_s * 1000)

    def set_offset(self, s, offset_s):
        tmp = s.faketime_file + ".tmp"
        with open(tmp, "w") as f:
            f.write("%+ds\n" % offset_s if offset_s else "+0\n")
        os.replace(tmp, s.faketime_file)
        s.offset_s = offset_s
        for w in s.ws:
            self.nem.event("clock", w=w, offset_ms=offset_s * 1000)

    # -- the nemeses ------------------------------------------------------------------------
    def nemesis(self, end):
        n, L = self.a.nemesis, self.lease_ns
        if n in ("none", "pause-holder", "pause-before-write", "kill-holder", "break-lock"):
            # Calm, or acted by the workers themselves (the supervisor SIGCONTs and restarts).
            self.sleep_until(end)
        elif n in ("delay-replies", "freeze-client"):
            episode = int((4 if n == "delay-replies" else 3) * L)
            delay_ns = int(1.5 * L)
            while mono() + L < end:
                self.sleep_until(mono() + self.period(1))
                # delay: any worker (a delayed grant reply is the interesting case, and
                # most workers are waiting); freeze: the holder, cut off from the servers.
                s = self.pick_target(prefer_holder=(n == "freeze-client"))
                if s is None:
                    continue
                mode = "delay" if n == "delay-replies" else "freeze"
                self.hub.set_mode(s.proxies, mode, delay_ns)
                w = s.ws[0] if s.ws else None
                self.nem.event(mode, w=w, phase="start", delay_ms=delay_ns // 1_000_000 if mode == "delay" else None,
                               for_ms=episode // 1_000_000, holder=s in self.holder_slots())
                self.sleep_until(min(end, mono() + episode))
                self.hub.set_mode(s.proxies, "pass")
                self.nem.event(mode, w=w, phase="end")
        elif n in ("restart-server", "restart-server-empty"):
            while mono() + 3 * L < end:
                self.sleep_until(mono() + self.period(3))
                self.servers_down = True
                if not self.server_action("kill"):
                    break
                self.sleep_until(mono() + L)
                if n == "restart-server-empty" and not self.server_action("wipe"):
                    break
                if not self.server_action("spawn"):
                    break
                self.servers_down = False
        elif n == "kill-leader":
            while mono() + 3 * L < end:
                self.sleep_until(mono() + self.period(3))
                leader = self.find_leader()
                if leader is None:
                    continue
                rc, out, ms = self.ctl("kill", leader)
                self.nem.event("leader-kill", member=int(leader), rc=rc, took_ms=ms)
                self.down_member = leader
                self.sleep_until(mono() + 2 * L)
                rc, out, ms = self.ctl("start", leader)
                self.nem.event("leader-start", member=int(leader), rc=rc, took_ms=ms)
                rc, out, ms = self.ctl("wait", leader)
                self.nem.event("leader-serving", member=int(leader), rc=rc, took_ms=ms, output=out or None)
                self.down_member = None
        elif n in PARTITIONS:
            self.partitions(n, end)
        elif n == "clock-jump-server":
            choices = self.clock_offsets()
            while mono() + 2 * L < end:
                self.sleep_until(mono() + self.period(2))
                self.set_server_offset(random.choice([c for c in choices if c != self.server_offset_s]))
        elif n == "clock-jump-client":
            choices = self.clock_offsets()
            while mono() + 2 * L < end:
                self.sleep_until(mono() + self.period(2))
                with self.lock:
                    live = [s for s in self.slots if s.proc is not None]
                for s in live:  # every worker's wall clock moves, independently, both ways
                    self.set_offset(s, random.choice([c for c in choices if c != s.offset_s]))
        else:
            raise HarnessError("unknown nemesis " + n)

    def find_leader(self):
        """The cluster's leader (member number as a string), or None after 20 s (recorded as an error)."""
        deadline = mono() + 20_000_000_000
        while mono() < deadline:
            # The leader for this lock: a Redis Cluster has a master per slot (ctl.sh leader NAME);
            # a deployment with one leader ignores the name.
            rc, out, _ = self.ctl("leader", self.lock_name, timeout=10)
            if rc == 0 and out.strip().isdigit():
                return out.strip()
            time.sleep(0.2)
        self.errors.append("no leader found")
        self.nem.event("leader", found=False)
        return None

    def partitions(self, n, end):
        """Every 2 L (jittered) a partition for 3 L (Sentinel, Cluster: 6 L), then every link back:
        partition-leader: the leader cut from every other member (clients still reach it);
        partition-minority: a member other than the leader cut from everyone, clients included;
        partition-bridge: two members cut from each other, both still linked to the third (the bridge)."""
        L = self.lease_ns
        # Sentinel fails a master over only after down-after-milliseconds (1 s here) and
        # an election: its partitions last 6 L, so that the replica is promoted during them.
        # A Redis Cluster's replica is promoted after the node timeout (2 s here) and a vote.
        hold = (6 if self.a.backend.startswith(("redis-sentinel", "redis-cluster")) else 3) * L
        while mono() + hold + L < end:
            self.sleep_until(mono() + self.period(2))
            leader = self.find_leader()
            if leader is None:
                continue
            others = [m for m in ("1", "2", "3") if m != leader]
            if n == "partition-leader":
                cuts, fields = [("cut-off", leader)], {"isolated": int(leader)}
            elif n == "partition-minority":
                m = random.choice(others)
                cuts, fields = [("isolate", m)], {"isolated": int(m), "clients_cut": True}
            else:
                bridge = random.choice(("1", "2", "3"))
                a, b = [m for m in ("1", "2", "3") if m != bridge]
                cuts, fields = [("cut", a, b)], {"bridge": int(bridge), "cut": [int(a), int(b)]}
            self.partitioned = True
            t0 = mono()
            bad = [(c, rc) for c in cuts for rc in [self.ctl(*c, timeout=30)[0]] if rc != 0]
            self.nem.event("partition", phase="start", kind=n, leader=int(leader), rc=bad[0][1] if bad else 0,
                           took_ms=(mono() - t0) // 1_000_000, **fields)
            if bad:
                self.errors.append("ctl.sh %s failed (%s)" % (" ".join(bad[0][0]), bad[0][1]))
            self.sleep_until(min(end, mono() + hold))
            rc, _, ms = self.ctl("heal", timeout=30)
            self.partitioned = False
            self.nem.event("partition", phase="end", rc=rc, took_ms=ms)
            if rc != 0:
                self.errors.append("ctl.sh heal failed")

    def heal(self):
        if getattr(self, "partitioned", False):
            rc, _, ms = self.ctl("heal", timeout=30)
            self.nem.event("partition", phase="end", rc=rc, took_ms=ms)
            self.partitioned = False
        if self.hub:
            self.hub.set_mode(self.hub.proxies, "pass")
        if getattr(self, "server_clock", None) and self.server_offset_s:
            self.set_server_offset(0)
        for s in self.slots:
            if s.faketime_file and s.offset_s:
                self.set_offset(s, 0)
        if self.servers_down:
            self.server_action("spawn")
            self.servers_down = False
        if getattr(self, "down_member", None):
            m = self.down_member
            self.ctl("start", m)
            rc, _, ms = self.ctl("wait", m)
            self.nem.event("leader-serving", member=int(m), rc=rc, took_ms=ms)
            self.down_member = None

    # -- the end -----------------------------------------------------------------------------
    def finish_workers(self):
        with self.lock:
            procs = [(s, s.proc) for s in self.slots if s.proc is not None]
            for s, p in procs:
                if s.stopped_since is not None:  # a pause in progress ends now
                    for w in s.ws:
                        self.nem.event("cont", w=w, pid=p.pid,
                                       stopped_ms=(mono() - s.stopped_since) // 1_000_000, end=True)
                    s.stopped_since = None
                try_kill(p.pid, signal.SIGCONT)
                try_kill(p.pid, signal.SIGTERM)
                for w in s.ws:
                    self.nem.event("sigterm", w=w, pid=p.pid)
            for role, p in self.extra:
                if p is not None:
                    try_kill(p.pid, signal.SIGTERM)
                    self.nem.event("sigterm", role=role, pid=p.pid)
        deadline = mono() + int(self.a.grace * 1e9)
        while mono() < deadline:
            with self.lock:
                if all(s.proc is None for s in self.slots) and all(p is None for _, p in self.extra):
                    return
            time.sleep(0.05)
        with self.lock:
            for s in self.slots:
                p = s.proc
                if p is None:
                    continue
                st = proc_state(p.pid)
                try_kill(p.pid, signal.SIGCONT)
                try_kill(p.pid, signal.SIGKILL)
                for w in s.ws:
                    self.nem.event("hung", w=w, pid=p.pid, state=st)
                say("worker %s (pid %d) still alive %ss after SIGTERM: SIGKILLed (hung)" % (
                    ",".join(s.ws), p.pid, self.a.grace))
            for role, p in self.extra:
                if p is not None:
                    try_kill(p.pid, signal.SIGKILL)
                    self.nem.event("hung", role=role, pid=p.pid)
        deadline = mono() + 5_000_000_000
        while mono() < deadline:
            with self.lock:
                if all(s.proc is None for s in self.slots) and all(p is None for _, p in self.extra):
                    return
            time.sleep(0.05)

    def kill_everything(self):
        """Last resort (exceptions, Ctrl-C): every process of ours, by PID."""
        for s in self.slots:
            p = s.proc
            if p is not None and p.poll() is None:
                try_kill(p.pid, signal.SIGCONT)
                try_kill(p.pid, signal.SIGKILL)
                for w in s.ws:
                    self.nem.event("kill", w=w, pid=p.pid, reason="the harness stopped early")
                try:
                    p.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    pass
        for role, p in self.extra:
            if p is not None and p.poll() is None:
                try_kill(p.pid, signal.SIGKILL)
                self.nem.event("kill", role=role, pid=p.pid, reason="the harness stopped early")
                try:
                    p.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    pass

    def caps(self):
        for s in self.slots:
            for w in s.ws:
                ev = first_event(os.path.join(self.out, "history", w + ".jsonl"))
                if ev and ev.get("ev") == "start":
                    return ev.get("caps"), ev.get("url")
        hist = os.path.join(self.out, "history")
        for f in sorted(os.listdir(hist)):
            ev = first_event(os.path.join(hist, f))
            if ev and ev.get("ev") == "start":
                return ev.get("caps"), ev.get("url")
        return None, None

    def wait_started(self, timeout_s=30):
        deadline = mono() + int(timeout_s * 1e9)
        while mono() < deadline:
            missing = []
            with self.lock:
                for s in self.slots:
                    not_started = []
                    for w in s.ws:
                        ev = first_event(os.path.join(self.out, "history", w + ".jsonl"))
                        if not ev or ev.get("ev") != "start":
                            not_started.append(w)
                    # A worker killed by kill-holder is started again at once
                    # (_watch): only a slot left without a process is a failure.
                    if s.proc is None:
                        raise HarnessError("worker %s exited during start-up; see %s" % (
                            ",".join(s.ws), os.path.join(self.out, "logs")))
                    missing.extend(not_started)
            if not missing:
                return
            time.sleep(0.05)
        raise HarnessError("workers %s wrote no start event within %ss" % (missing, timeout_s))

    def write_run(self, **extra):
        a = self.a
        caps, worker_url = self.caps() if os.path.isdir(os.path.join(self.out, "history")) else (None, None)
        self.run.update({
            "backend": a.backend,
            "url": self.url.redacted(),
            "worker_url": worker_url,
            "server": self.server,
            "nemesis": a.nemesis,
            "election": a.election,
            "async": a.asynchronous,
            "workers": a.workers,
            "threads": a.backend == "memory",
            "seconds": a.seconds,
            "lease_ms": a.lease_ms,
            "pause_ms": a.pause_ms,
            "hold_ms": a.hold_ms,
            "wait_ms": a.wait_ms,
            "grace_s": a.grace,
            "lock": getattr(self, "lock_name", None),
            "store_socket": getattr(self, "sock_path", None),
            "proxies": bool(self.hub),
            "capabilities": caps,
            "expectations": a.expectations,
            "errors": [scrub(e) for e in self.errors],
        })
        if a.nemesis in ("pause-holder", "pause-before-write"):
            self.run["pause_prob"] = a.pause_prob
        if a.nemesis == "kill-holder":
            self.run["kill_prob"] = a.kill_prob
        if a.nemesis == "delay-replies":
            self.run["delay_ms"] = int(1.5 * a.lease_ms)
        if a.nemesis == "break-lock":
            self.run["break_every_ms"] = a.break_every_ms
        if a.nemesis == "clock-jump-client":
            self.run["faketime"] = {"library": LIBFAKETIME, "cache_duration_s": a.faketime_cache_s,
                                    "fake_monotonic": a.fake_monotonic}
        self.run.update(extra)
        tmp = os.path.join(self.out, "run.json.tmp")
        with open(tmp, "w") as f:
            json.dump(self.run, f, indent=2)
            f.write("\n")
        os.replace(tmp, os.path.join(self.out, "run.json"))

    # -- everything ---------------------------------------------------------------------------
    def main(self):
        a = self.a
        self.out = os.path.abspath(a.out)
        os.makedirs(self.out, exist_ok=True)
        self.resolve_backend()
        self.check_applicable()
        self.setup()
        t_start = mono()
        self.write_run(t_setup=t_start)
        t0 = t1 = t2 = None
        say("cell %s / %s: %d workers, %ss, lease %d ms -> %s" % (
            a.backend, a.nemesis, a.workers, a.seconds, a.lease_ms, self.out))
        try:
            for s in self.slots:
                self.start_worker(s)
            if a.nemesis == "break-lock" and a.backend == "file":
                self.start_extra("break-lock", [
                    a.worker_bin, "--url", self.url.text(), "--lock", self.lock_name, "--id", "break-lock",
                    "--threads", "0", "--break-lock-every", str(a.break_every_ms),
                    "--nemesis-log", os.path.join(self.out, "nemesis.jsonl"),
                    "--seconds", str(a.seconds + a.grace + 60)])
            if a.observe_ms > 0 and a.backend != "memory" and not a.election:
                # The server's view for the loss detection measure (checker.py): an
                # observer that asks the server directly (never through a proxy).
                self.start_extra("observer", [
                    a.worker_bin, "--url", self.worker_url(Slot(0)), "--lock", self.lock_name, "--id", "observer",
                    "--threads", "0", "--observe-every", str(a.observe_ms),
                    "--nemesis-log", os.path.join(self.out, "server.jsonl"),
                    "--seconds", str(a.seconds + a.grace + 60)])
            self.supervising = True
            self.supervisor = threading.Thread(target=self.supervise, name="supervisor", daemon=True)
            self.supervisor.start()
            self.wait_started()
            self.phase = "run"
            t0 = mono()
            end = t0 + int(a.seconds * 1e9)
            self.nem.event("nemesis-start", nemesis=a.nemesis, seconds=a.seconds)
            try:
                self.nemesis(end)
            finally:
                self.phase = "end"
                self.nem.event("nemesis-end", nemesis=a.nemesis)
                self.heal()
            t1 = mono()
            self.finish_workers()
            t2 = mono()
        finally:
            self.supervising = False
            if self.supervisor:
                self.supervisor.join(timeout=5)
            self.kill_everything()
            try:
                self.heal()
                if getattr(self, "server_faked", False):  # the server(s) as before, without libfaketime
                    self.server_action("kill")
                    self.server_action("spawn")
                    self.server_faked = False
            except Exception as e:  # keep cleaning up
                self.errors.append("heal: %s" % e)
            if self.hub:
                self.hub.stop()
            if self.store:
                self.store.stop()
            if getattr(self, "sock_dir", None):
                shutil.rmtree(self.sock_dir, ignore_errors=True)
        self.write_run(t_setup=t_start, t_nemesis_start=t0, t_nemesis_end=t1, t_end=t2)
        self.nem.close()
        return 2 if self.errors else 0


def try_kill(pid, sig):
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def first_event(path):
    try:
        with open(path, "rb") as f:
            line = f.readline()
        return json.loads(line) if line.endswith(b"\n") else None
    except (OSError, ValueError):
        return None


def grant_open(path):
    """True when the history's last grant event is an `acquire ok` not yet released."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 8192))
            lines = f.read().splitlines()
    except OSError:
        return False
    for line in reversed(lines):
        try:
            ev = json.loads(line)
        except ValueError:
            continue
        e, ph = ev.get("ev"), ev.get("phase")
        if e == "acquire" and ph == "ok":
            return True
        if (e == "release") or e in ("exit", "kill") or (e == "acquire" and ph == "invoke"):
            return False
    return False


def ensure_faketime():
    if os.path.exists(LIBFAKETIME):
        return
    apt_ensure = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts", "apt-ensure")
    subprocess.run([apt_ensure, "faketime"], capture_output=True)
    if not os.path.exists(LIBFAKETIME):
        raise HarnessError("libfaketime is missing (%s) and could not be installed" % LIBFAKETIME)


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend", required=True, help="an id of integration/.run/backends.env, or file, memory")
    ap.add_argument("--nemesis", required=True, choices=NEMESES)
    ap.add_argument("--seconds", type=float, default=15.0, help="how long the nemesis runs (default 15)")
    ap.add_argument("--workers", type=int, default=6)
    ap.add_argument("--lease-ms", type=int, default=1000)
    ap.add_argument("--hold-ms", type=int, default=None, help="sleep at point hold (default half a lease: "
                    "one renewal falls inside it)")
    ap.add_argument("--wait-ms", type=int, default=None, help="try_lock_for per attempt (default 2 leases)")
    ap.add_argument("--pause-ms", type=int, default=None, help="self-pause length (default 3 leases)")
    ap.add_argument("--pause-prob", type=float, default=0.15, help="per grant, pause nemeses (default 0.15)")
    ap.add_argument("--kill-prob", type=float, default=0.08, help="per grant, kill-holder (default 0.08)")
    ap.add_argument("--break-every-ms", type=int, default=None, help="break-lock period (default 2 leases)")
    ap.add_argument("--wallclock-shift", default=None,
                    help="distlock-wallclock-shift.so (default: beside the worker, ../lib/)")
    ap.add_argument("--observe-ms", type=int, default=20,
                    help="the server observer's inspect() period, for the loss detection measure (0: none)")
    ap.add_argument("--fake-monotonic", action="store_true",
                    help="clock-jump-client: let libfaketime move CLOCK_MONOTONIC too (its default); "
                         "without it only the wall clock jumps, as with NTP")
    ap.add_argument("--faketime-cache-s", type=int, default=1)
    ap.add_argument("--grace", type=float, default=15.0, help="seconds between SIGTERM and SIGKILL (default 15)")
    ap.add_argument("--proxies", action="store_true", help="proxies even when the nemesis needs none")
    ap.add_argument("--no-set-lease", dest="set_lease", action="store_false",
                    help="keep the URL's lease= (and zk session_timeout=) instead of --lease-ms")
    ap.add_argument("--lock", default=None, help="lock name (default: unique per cell)")
    ap.add_argument("--election", action="store_true",
                    help="each grant is a term of leadership of an election (provider::election), not a mutex")
    ap.add_argument("--async", dest="asynchronous", action="store_true",
                    help="the workers acquire and release through the asynchronous API (async_lock, async_unlock)")
    ap.add_argument("--out", default=None, help="run directory (default /tmp/distlock-faults/<cell>.<time>)")
    ap.add_argument("--worker-bin", default=os.environ.get("DISTLOCK_FAULT_WORKER") or
                    os.path.join(REPO, "build", "bin", "distlock-fault-worker"))
    ap.add_argument("--expect", default=None, help="expectations (JSON, or a file holding it) for run.json")
    ap.add_argument("--no-check", action="store_true", help="do not run checker.py")
    ap.add_argument("--seed", type=int, default=None)
    a = ap.parse_args(argv)
    if a.hold_ms is None:
        a.hold_ms = a.lease_ms // 2
    if a.wait_ms is None:
        a.wait_ms = 2 * a.lease_ms
    if a.pause_ms is None:
        a.pause_ms = 3 * a.lease_ms
    if a.break_every_ms is None:
        a.break_every_ms = 2 * a.lease_ms
    if a.out is None:
        stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
        a.out = os.path.join("/tmp", "distlock-faults", "%s.%s.%s.%d" % (a.backend, a.nemesis, stamp, os.getpid()))
    a.expectations = None
    if a.expect:
        text = a.expect
        if not text.lstrip().startswith(("{", "[")) and os.path.exists(text):
            with open(text) as f:
                text = f.read()
        try:
            a.expectations = json.loads(text)
        except ValueError as e:
            ap.error("--expect is not JSON: %s" % e)
    if a.seed is not None:
        random.seed(a.seed)
    if not os.access(a.worker_bin, os.X_OK):
        ap.error("worker binary not found: %s (cmake --build build --target distlock-fault-worker)" % a.worker_bin)
    if a.wallclock_shift is None:
        a.wallclock_shift = os.path.join(os.path.dirname(os.path.abspath(a.worker_bin)), "..", "lib",
                                         "distlock-wallclock-shift.so")
    return a


def main(argv):
    a = parse_args(argv)

    def on_term(signum, frame):
        raise KeyboardInterrupt("signal %d" % signum)

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):  # SIGINT too when started ignoring it (&)
        signal.signal(sig, on_term)
    cell = Cell(a)
    try:
        status = cell.main()
    except HarnessError as e:
        say("error:", e)
        return 2
    except KeyboardInterrupt:
        say("interrupted: every process of this cell was stopped")
        return 130
    checker = os.path.join(HERE, "checker.py")
    if a.no_check or not os.path.exists(checker):
        say("run directory:", cell.out, "(checker %s)" % ("skipped" if a.no_check else "not present yet"))
        return status
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    r = subprocess.run([sys.executable, checker, cell.out, "--json"])
    say("run directory:", cell.out, "checker exit status", r.returncode)
    return r.returncode if r.returncode != 0 else status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
