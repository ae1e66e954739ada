#!/usr/bin/env bash
# Compiles CuratorLock.java and CuratorLatch.java into OUT_DIR (the build tree), installing Debian's
# Apache Curator and slf4j-nop (and python3-kazoo, the other peer of the interop
# tests) first when they are missing, and writes
# OUT_DIR/classpath for running it:  java -cp "$(cat OUT_DIR/classpath)" CuratorLock ...
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
OUT=${1:?usage: build.sh OUT_DIR}
need=(libcurator-recipes-java libslf4j-java python3-kazoo)
command -v javac >/dev/null || need+=(default-jdk-headless)
"$HERE/../../../scripts/apt-ensure" "${need[@]}"
J=/usr/share/java
CP="$J/curator-recipes.jar:$J/curator-framework.jar:$J/curator-client.jar:$J/zookeeper.jar:$J/zookeeper-jute.jar"
CP="$CP:$J/guava.jar:$J/slf4j-api.jar:$J/slf4j-nop.jar"
[ -f "$J/failureaccess.jar" ] && CP="$CP:$J/failureaccess.jar"
mkdir -p "$OUT"
javac -nowarn -d "$OUT" -cp "$CP" "$HERE/CuratorLock.java" "$HERE/CuratorLatch.java"
echo "$OUT:$CP" > "$OUT/classpath"
