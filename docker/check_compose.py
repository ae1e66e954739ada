#!/usr/bin/python3
"""Checks docker/compose.yml without Docker: it parses, every backend is there
with the ports and credentials of integration/servers/*.sh, and docker/test.env
points at exactly those ports.

usage: check_compose.py compose.yml test.env integration/servers
"""

import glob
import os
import re
import sys

import yaml

# service -> (host port, container port); the ports of integration/servers/*.sh.
EXPECTED_PORTS = {
    "redis": (16379, 6379),
    "redlock-1": (16380, 6379),
    "redlock-2": (16381, 6379),
    "redlock-3": (16382, 6379),
    "mariadb": (13306, 3306),
    "postgres": (15432, 5432),
    "zookeeper": (12181, 2181),
    "etcd": (12379, 2379),
    "consul": (8500, 8500),
}
# service -> the server script whose port it mirrors
SCRIPTS = {
    "redis": "redis.sh", "redlock-1": "redlock.sh", "redlock-2": "redlock.sh", "redlock-3": "redlock.sh",
    "mariadb": "mysql.sh", "postgres": "postgres.sh", "zookeeper": "zookeeper.sh", "etcd": "etcd.sh",
}
CREDENTIALS = {
    "mariadb": {"MARIADB_DATABASE": "distlock", "MARIADB_USER": "distlock", "MARIADB_PASSWORD": "distlock"},
    "postgres": {"POSTGRES_DB": "distlock", "POSTGRES_USER": "distlock", "POSTGRES_PASSWORD": "distlock"},
}

failures = []


def check(cond, message):
    if not cond:
        failures.append(message)


def published(service):
    """(host_ip, host_port, container_port) of each short-syntax port mapping."""
    out = []
    for p in service.get("ports", []):
        parts = str(p).split(":")
        if len(parts) == 3:
            out.append((parts[0], int(parts[1]), int(parts[2])))
        elif len(parts) == 2:
            out.append(("0.0.0.0", int(parts[0]), int(parts[1])))
        else:
            failures.append("unsupported port syntax %r" % p)
    return out


def main(compose_path, env_path, servers_dir):
    with open(compose_path) as f:
        doc = yaml.safe_load(f)
    check(isinstance(doc, dict) and isinstance(doc.get("services"), dict), "no services mapping")
    services = doc["services"]

    host_ports = {}
    for name, svc in services.items():
        image = svc.get("image", "")
        check(":" in image and not image.endswith(":latest"), "%s: image %r is not pinned to a version" % (name, image))
        for ip, host, container in published(svc):
            check(ip == "127.0.0.1", "%s: port %d is published beyond loopback" % (name, host))
            check(host not in host_ports, "host port %d published twice" % host)
            host_ports[host] = name

    for name, (host, container) in EXPECTED_PORTS.items():
        check(name in services, "service %s is missing" % name)
        if name in services:
            check(any(h == host and c == container for _, h, c in published(services[name])),
                  "%s: expected 127.0.0.1:%d:%d" % (name, host, container))
        script = SCRIPTS.get(name)
        path = os.path.join(servers_dir, script) if script else None
        if path and os.path.exists(path):
            with open(path) as f:
                check(str(host) in f.read(), "%s: port %d does not appear in integration/servers/%s" % (name, host, script))

    for name, want in CREDENTIALS.items():
        env = services.get(name, {}).get("environment", {})
        if isinstance(env, list):
            env = dict(item.split("=", 1) for item in env)
        for k, v in want.items():
            check(str(env.get(k)) == v, "%s: %s should be %s" % (name, k, v))

    # docker/test.env: every URL points at a published port, and every variable
    # name (except the real Consul's) is one that integration/servers/*.sh writes.
    scripts_text = "".join(open(p).read() for p in glob.glob(os.path.join(servers_dir, "*.sh")))
    with open(env_path) as f:
        lines = [l.strip() for l in f if l.strip() and not l.startswith("#")]
    check(lines, "test.env is empty")
    for line in lines:
        var, _, url = line.partition("=")
        check(url.startswith("'") and url.endswith("'"), "%s: quote the value (URLs contain '&')" % var)
        url = url.strip("'")
        check(var.startswith("DISTLOCK_TEST_") and var.endswith("_URL"), "odd variable %r" % var)
        for host, port in re.findall(r"(?:@|//|,)([0-9.]+):(\d+)", url):
            check(int(port) in host_ports, "%s: port %s is not published by compose.yml" % (var, port))
        if var != "DISTLOCK_TEST_CONSUL_URL" and scripts_text:
            check(var in scripts_text, "%s is not a variable integration/servers/*.sh writes" % var)
        if "distlock:distlock@" not in url and url.startswith(("mysql:", "postgres:")):
            failures.append("%s: credentials differ from distlock/distlock" % var)

    if failures:
        for m in failures:
            print("FAIL:", m)
        return 1
    print("compose.yml: %d services, ports and credentials as integration/servers/*.sh" % len(services))
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:4]))
