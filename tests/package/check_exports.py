#!/usr/bin/env python3
"""The shared library exports its public headers, and nothing else.

    check_exports.py LIBDISTLOCK.so INCLUDE_DIR

Reads the dynamic symbols libdistlock.so defines (nm -D --defined-only) and
the names include/distlock/ marks with DISTLOCK_API, and fails when:
  - a symbol of namespace distlock is exported whose class or function is not
    one of those names (core/ and backends/ stay hidden: distlock::detail,
    distlock::backends, or any class the headers do not mark);
  - a symbol of another namespace or none is exported, other than the C++
    standard library's template instantiations (std::, __gnu_cxx::), which the
    compiler emits with their own visibility;
  - a name marked DISTLOCK_API has no exported symbol (a mark that does nothing,
    or a declaration whose definition went missing).
Prints every offending symbol, demangled.

    check_exports.py --module LIBDISTLOCK-NAME.so...

A backend module exports its entry point, distlock_module_entry, and no
symbol of namespace distlock but the weak typeinfo and vtables of the public
classes it throws or derives from (nor any other but the C++ standard
library's template instantiations and the linker's own).
"""
import re
import subprocess
import sys
from pathlib import Path


def exported(lib):
    """[(mangled, demangled, weak)] of the C++ symbols the library defines and exports."""
    out = subprocess.run(["nm", "-D", "--defined-only", lib], check=True, capture_output=True, text=True).stdout
    rows = [line.split() for line in out.splitlines()]
    rows = [(r[-1], r[-2] in ("V", "W", "v", "w", "u")) for r in rows if len(r) >= 3 and r[-1].startswith("_Z")]
    demangled = subprocess.run(["c++filt"], input="\n".join(m for m, _ in rows), check=True, capture_output=True,
                               text=True).stdout.splitlines()
    return [(m, d, weak) for (m, weak), d in zip(rows, demangled)]


def marked(include_dir):
    """{namespace path: set of names} marked DISTLOCK_API in the headers."""
    names = set()
    functions = set()
    for header in sorted(Path(include_dir).rglob("*.hpp")):
        text = header.read_text()
        for m in re.finditer(r"\b(?:class|struct)\s+DISTLOCK_API\s+(\w+)", text):
            names.add(m.group(1))
        # DISTLOCK_API <return type> name(   (the return type may hold ::, <>, &, *)
        for m in re.finditer(r"DISTLOCK_API\s+(?!class\b|struct\b)[\w:<>,&*\s]*?[\s&*](\w+)\s*\(", text):
            names.add(m.group(1))
            functions.add(m.group(1))
    return names, functions


# Marked in include/distlock/ but defined outside libdistlock.
ELSEWHERE = {"run_conformance"}  # the conformance library (distlock::conformance)

SPECIAL = re.compile(r"^(typeinfo for |typeinfo name for |vtable for |VTT for |non-virtual thunk to |"
                     r"virtual thunk to |guard variable for |construction vtable for )")


def scope_of(demangled):
    """The qualified name a symbol defines: 'distlock::mutex::lock' for
    'distlock::mutex::lock()', with any leading return type and the special
    prefixes taken off, template arguments and parameters dropped."""
    name = re.sub(r"\[abi:\w+\]", "", SPECIAL.sub("", demangled))
    # Drop the parameter list and anything after it, then template arguments.
    depth, cut = 0, len(name)
    for i, c in enumerate(name):
        if c == "<":
            depth += 1
        elif c == ">":
            depth -= 1
        elif c == "(" and depth == 0 and i > 0:
            cut = i
            break
    name = name[:cut]
    while "<" in name:
        name = re.sub(r"<[^<>]*>", "", name)
    # A leading return type: keep the last space-separated word (operators keep theirs).
    name = name.strip()
    if " " in name and "operator" not in name:
        name = name.split(" ")[-1]
    return name


LINKER_SYMBOLS = {"_init", "_fini", "__bss_start", "_edata", "_end"}


def check_module(lib):
    out = subprocess.run(["nm", "-D", "--defined-only", lib], check=True, capture_output=True, text=True).stdout
    plain = {line.split()[-1] for line in out.splitlines() if len(line.split()) >= 3}
    problems = []
    if "distlock_module_entry" not in plain:
        problems.append("no distlock_module_entry")
    for name in sorted(plain - LINKER_SYMBOLS - {"distlock_module_entry"}):
        if not name.startswith("_Z"):
            problems.append("exports " + name)
    for mangled, demangled, weak in exported(lib):
        parts = [p for p in scope_of(demangled).split("::") if p]
        if parts and parts[0] == "distlock":
            # The typeinfo and vtables of the public classes (errors, the SPI's
            # bases) are emitted weak, with their default visibility, in every
            # object that throws or derives from them: one type across the
            # library and its modules. Anything else of distlock's is not.
            if not (weak and SPECIAL.match(demangled)):
                problems.append("exports distlock's " + demangled)
        elif not weak and not (parts and parts[0] in ("std", "__gnu_cxx", "__cxxabiv1")):
            problems.append("exports " + demangled)
    for p in problems:
        print(f"{lib}: {p}")
    return problems


def main():
    if sys.argv[1] == "--module":
        problems = [p for lib in sys.argv[2:] for p in check_module(lib)]
        print(f"{len(problems)} problem(s) in {len(sys.argv) - 2} module(s)")
        return 1 if problems else 0
    lib, include_dir = sys.argv[1], sys.argv[2]
    names, functions = marked(include_dir)
    problems = []
    seen = set()
    for mangled, demangled, weak in exported(lib):
        scope = scope_of(demangled)
        parts = [p for p in scope.split("::") if p]
        if not parts or parts[0] != "distlock":
            # Vague linkage the compiler emits with the visibility of what it
            # names: the standard library's template instantiations, the
            # typeinfo of a client library's exception class it throws.
            if weak or (parts and parts[0] in ("std", "__gnu_cxx", "__cxxabiv1")):
                continue
            problems.append("outside namespace distlock: " + demangled)
            continue
        rest = parts[1:]
        if rest and rest[0] in ("spi", "testing"):
            rest = rest[1:]
        if not rest:
            problems.append("no name: " + demangled)
            continue
        if rest[0] in ("detail", "backends", "tool") or rest[0] not in names:
            problems.append("not in the public headers: " + demangled)
            continue
        seen.add(rest[0])
    for f in sorted(functions - seen - ELSEWHERE):
        problems.append("marked DISTLOCK_API but not exported: " + f)
    for p in problems:
        print(p)
    print(f"{len(problems)} problem(s); names marked: {len(names)}, of them seen exported: {len(seen & names)}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
