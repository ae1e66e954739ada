#!/usr/bin/env python3
"""Starts the metrics example (one request allowed), fetches /metrics once and
checks the reply: HTTP 200, the Prometheus content type, and the example's
locks counted (its two contended threads and its semaphore). A connection that
sends nothing is opened first, as any local user could: the scrape must still
be answered within a few seconds (the example drops a silent client after 2 s)."""
import re
import socket
import subprocess
import sys
import time
import urllib.request

# --help answers with the usage (status 0), a bad URL or port is a usage error (64), never an uncaught exception.
for args, status, where in ((["--help"], 0, "usage:"), (["nosuch://x"], 64, "nosuch"), (["memory://x", "port"], 64, "usage:")):
    done = subprocess.run([sys.argv[1]] + args, capture_output=True, text=True, timeout=30)
    if done.returncode != status or where not in done.stdout + done.stderr:
        sys.exit("%s: status %s, said %r" % (args, done.returncode, done.stdout + done.stderr))

proc = subprocess.Popen([sys.argv[1], "memory://example-test", "0"], stdout=subprocess.PIPE, text=True)
try:
    line = proc.stdout.readline()
    m = re.match(r"listening on 127\.0\.0\.1:(\d+)", line)
    if not m:
        sys.exit("unexpected first line: %r" % line)
    idle = socket.create_connection(("127.0.0.1", int(m.group(1))), timeout=10)  # sends nothing
    time.sleep(0.5)  # some traffic first; the idle connection is accepted first
    t0 = time.monotonic()
    try:
        with urllib.request.urlopen("http://127.0.0.1:%s/metrics" % m.group(1), timeout=6) as r:
            body = r.read().decode()
    except OSError as e:
        sys.exit("no answer to a scrape while an idle connection is open: %s" % e)
    finally:
        idle.close()
    if time.monotonic() - t0 > 5:
        sys.exit("the scrape took %.1f s behind an idle connection" % (time.monotonic() - t0))
        if r.status != 200 or not r.headers["Content-Type"].startswith("text/plain; version=0.0.4"):
            sys.exit("bad reply: %s %s" % (r.status, r.headers["Content-Type"]))
    granted = re.search(r'^distlock_acquisitions_total\{backend="memory",kind="exclusive",outcome="granted"\} (\d+)$',
                        body, re.M)
    permits = re.search(r'^distlock_acquisitions_total\{backend="memory",kind="permit",outcome="granted"\} (\d+)$',
                        body, re.M)
    if not granted or int(granted.group(1)) < 2 or not permits or int(permits.group(1)) < 1:
        sys.exit("the example's locks are not counted:\n" + body)
    if proc.wait(timeout=10) != 0:
        sys.exit("the example exited with %s" % proc.returncode)
    print("ok: %s exclusive grants, %s permits" % (granted.group(1), permits.group(1)))
finally:
    if proc.poll() is None:
        proc.kill()
