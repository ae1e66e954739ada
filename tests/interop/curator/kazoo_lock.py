#!/usr/bin/python3
# python3-kazoo's Lock recipe driven line by line from stdin, for the distlock
# interop tests (the same protocol as CuratorLock.java):
#   kazoo_lock.py <hosts> <lock path> [--curator-patterns]
# --curator-patterns passes extra_lock_patterns=["-lock-"], so that kazoo also
# counts Curator's (and distlock's) "_c_<uuid>-lock-<seq>" nodes as contenders.
# Commands: lock | try <ms> | unlock | nodes | count <file> <n> | quit ; answers
# "locked <czxid>", "timeout", "unlocked", "nodes ...", "counted", "error".
import logging
import sys
import time

from kazoo.client import KazooClient
from kazoo.exceptions import LockTimeout
from kazoo.recipe.lock import Lock

logging.basicConfig(level=logging.CRITICAL)


def main():
    hosts, path = sys.argv[1], sys.argv[2]
    patterns = ["-lock-"] if "--curator-patterns" in sys.argv[3:] else []
    zk = KazooClient(hosts=hosts, timeout=2.0)
    zk.start(timeout=15)
    lock = Lock(zk, path, "kazoo", extra_lock_patterns=patterns)
    print("ready", flush=True)
    for line in sys.stdin:
        w = line.split()
        if not w:
            continue
        try:
            if w[0] == "lock" or w[0] == "try":
                timeout = float(w[1]) / 1000 if w[0] == "try" else None
                try:
                    got = lock.acquire(timeout=timeout)
                except LockTimeout:
                    got = False
                if got:
                    stat = zk.exists(path + "/" + lock.node)
                    print("locked %d" % stat.czxid, flush=True)
                else:
                    print("timeout", flush=True)
            elif w[0] == "unlock":
                lock.release()
                print("unlocked", flush=True)
            elif w[0] == "count":
                for _ in range(int(w[2])):
                    with lock:
                        with open(w[1]) as f:
                            v = int(f.read().strip())
                        time.sleep(0.001)  # widen the race window
                        with open(w[1], "w") as f:
                            f.write("%d\n" % (v + 1))
                print("counted", flush=True)
            elif w[0] == "nodes":
                print("nodes " + " ".join(sorted(zk.get_children(path))), flush=True)
            elif w[0] == "quit":
                break
            else:
                print("error", flush=True)
        except Exception as e:  # noqa: BLE001 - report anything to the test
            print("error", flush=True)
            print("error %r" % e, file=sys.stderr, flush=True)
    zk.stop()
    zk.close()


if __name__ == "__main__":
    main()
