#!/usr/bin/env bash
# ctest docker.compose-file: Docker does not run on the test machines, so
# docker/compose.yml is checked by parsing it (python3-yaml under Debian's
# /usr/bin/python3, installed here when missing and when run as root).
# Exit 77 (skipped) only when PyYAML is missing and cannot be installed.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if ! /usr/bin/python3 -c 'import yaml' 2>/dev/null; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        echo "installing python3-yaml" >&2
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends python3-yaml >/dev/null 2>&1 ||
            { apt-get update -q >/dev/null 2>&1 &&
              DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends python3-yaml >/dev/null 2>&1; } || true
    fi
    /usr/bin/python3 -c 'import yaml' 2>/dev/null || { echo "python3-yaml is missing and cannot be installed: skipped" >&2; exit 77; }
fi
exec /usr/bin/python3 "$here/check_compose.py" "$here/compose.yml" "$here/test.env" "$here/../integration/servers"
