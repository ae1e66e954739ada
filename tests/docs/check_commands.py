#!/usr/bin/env python3
"""The shell commands of README.md and docs/ run as written: every `distlock SUB ...`
line's options are options of that subcommand (its --help lists them), every
`scripts/X` named is there and executable, every `cmake` line's options are
cmake's, and the README's install is the one the package tests run (they
install the build and build consumers against it: package.find_package).

    check_commands.py SOURCE_DIR DISTLOCK

Blocks: ```sh, ```bash, ```console and ```shell. A line continued with `\\` is
read whole; `# ...` comments and a leading `$ ` are dropped; `[`, `]`, `|`,
`(`, `)` and `...` of usage lines are read as separators. Exit 1 with every
wrong line listed (file, line, what is wrong).
"""

import glob
import os
import re
import subprocess
import sys

FENCES = ("sh", "bash", "console", "shell")
OPTION = re.compile(r"^(--?[A-Za-z][-A-Za-z0-9]*)")


def blocks(path):
    """(line number, command) of every shell block line of `path`, continuations joined."""
    out, inside, pending, start = [], False, "", 0
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            s = line.rstrip("\n")
            if s.startswith("```"):
                info = s[3:].strip().split()
                if not inside and info and info[0] in FENCES:
                    inside = True
                elif inside:
                    inside, pending = False, ""
                continue
            if not inside:
                continue
            if not pending:
                start = n
            s = re.sub(r"(^|\s)#.*$", "", s)  # a comment
            if s.endswith("\\"):
                pending += s[:-1] + " "
                continue
            command = (pending + s).strip()
            pending = ""
            if command.startswith("$ "):
                command = command[2:]
            if command:
                out.append((start, command))
    return out


def words(command):
    for ch in "[]|()":
        command = command.replace(ch, " ")
    return [w.strip("'\"") for w in command.split() if w != "..."]


def help_text(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    return r.stdout + r.stderr


def main(argv):
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    root, distlock = argv
    pages = [os.path.join(root, "README.md")] + sorted(glob.glob(os.path.join(root, "docs", "**", "*.md"),
                                                                 recursive=True))
    subcommands = re.findall(r"^  ([a-z][-a-z]*)\s", help_text([distlock, "--help"]), re.M)
    if not subcommands:
        print("check_commands: `%s --help` lists no subcommand" % distlock, file=sys.stderr)
        return 1
    helps = {}
    cmake_help = None
    problems, checked = [], 0
    for page in pages:
        rel = os.path.relpath(page, root)
        for n, command in blocks(page):
            w = words(command)
            if not w:
                continue
            where = "%s:%d: %s" % (rel, n, command)
            if w[0] == "distlock":
                checked += 1
                if len(w) < 2 or w[1].startswith("-"):
                    continue  # `distlock --help`, `distlock --version`
                sub = w[1]
                if sub not in subcommands:
                    problems.append("%s\n    no subcommand %r (distlock --help lists %s)" % (
                        where, sub, ", ".join(subcommands)))
                    continue
                if sub not in helps:
                    helps[sub] = help_text([distlock, sub, "--help"])
                for word in w[2:]:
                    if word == "--":
                        break  # the command's own arguments follow
                    m = OPTION.match(word)
                    if m and not re.search(r"(^|[\s,])%s([\s,=]|$)" % re.escape(m.group(1)), helps[sub], re.M):
                        problems.append("%s\n    %s is not an option of `distlock %s` (its --help)" % (
                            where, m.group(1), sub))
            elif w[0].startswith("scripts/"):
                checked += 1
                script = os.path.join(root, w[0])
                if not (os.path.isfile(script) and os.access(script, os.X_OK)):
                    problems.append("%s\n    %s is not an executable file of the tree" % (where, w[0]))
            elif w[0] == "cmake":
                checked += 1
                if cmake_help is None:
                    cmake_help = help_text(["cmake", "--help"])
                for word in w[1:]:
                    m = re.match(r"^(--[a-z][-a-z]*)", word)
                    if m and m.group(1) not in cmake_help and m.group(1) not in ("--install", "--prefix"):
                        problems.append("%s\n    %s is not a cmake option (cmake --help)" % (where, m.group(1)))
    # The README's install is what the package tests run (tests/package/run.cmake:
    # `cmake --install <build> --prefix <dir>`, then a consumer built against it).
    readme = open(os.path.join(root, "README.md"), encoding="utf-8").read()
    run_cmake = open(os.path.join(root, "tests", "package", "run.cmake"), encoding="utf-8").read()
    if "cmake --install build --prefix" in readme and "--install ${BUILD_DIR} --prefix" not in run_cmake:
        problems.append("README.md: its `cmake --install build --prefix` is not what tests/package/run.cmake runs")
    for p in problems:
        print(p, file=sys.stderr)
    print("check_commands: %d command line(s) of %d page(s) checked, %d problem(s)" % (
        checked, len(pages), len(problems)))
    return 1 if problems or checked == 0 else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
