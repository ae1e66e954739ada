#!/usr/bin/env python3
"""distlock(1), from the tool's own --help: one source, so the page cannot
drift from what the tool says.

    make_man.py DISTLOCK_BINARY OUT.1[.gz]

Runs `distlock --help` and `distlock SUBCOMMAND --help` for every subcommand
it lists, and writes one page with a section per subcommand (its description,
usage, options and notes as --help prints them), then the environment, exit
status and files, which tools/man/footer.man holds. Written gzip -9n when OUT
ends in .gz (Debian's form: reproducible, no name or time in the header).
"""
import gzip
import os
import re
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def run_help(binary, *args):
    env = dict(os.environ, COLUMNS="200")
    out = subprocess.run([binary, *args, "--help"], check=True, capture_output=True, text=True, env=env).stdout
    return out.replace(binary, "distlock")


def esc(text):
    """Text as troff shows it: backslashes escaped, a leading . or ' protected,
    hyphens in option names as \\- (minus signs, which man can search for)."""
    text = text.replace("\\", "\\e")
    text = re.sub(r"(?<![\w-])-", r"\\-", text)
    text = re.sub(r"(?<=\\-)-", r"\\-", text)
    if text.startswith((".", "'")):
        text = "\\&" + text
    return "".join(c if ord(c) < 128 else "\\[u%04X]" % ord(c) for c in text)


def parse(help_text):
    """(description, usage, [(option, text)], [subcommand, text], notes)."""
    lines = help_text.splitlines()
    description = lines[0].strip() if lines else ""
    usage, options, subs, notes = "", [], [], []
    section = None
    for line in lines[1:]:
        if line.startswith("Usage:"):
            if usage:
                notes.append(line)
            else:
                usage = line[len("Usage:"):].strip()
            section = None
            continue
        if line.rstrip() in ("Options:", "Subcommands:", "Positionals:"):
            section = line.rstrip()[:-1]
            continue
        if not line.strip():
            section = None if section is None else section
            continue
        if section in ("Options", "Positionals"):
            m = re.match(r"^  (\S.*?)(?:\s{2,}(.*))?$", line)
            if line.startswith("  ") and not line.startswith("   ") and m:
                options.append([m.group(1).strip(), (m.group(2) or "").strip()])
            elif options:
                options[-1][1] = (options[-1][1] + " " + line.strip()).strip()
            continue
        if section == "Subcommands":
            m = re.match(r"^  (\S+)\s+(.*)$", line)
            if m:
                subs.append((m.group(1), m.group(2).strip()))
            continue
        notes.append(line)
    return description, usage, options, subs, notes


def option_block(options):
    out = []
    for opt, text in options:
        out += [".TP", "\\fB" + esc(opt) + "\\fR", esc(text)]
    return out


def page(binary):
    top = run_help(binary)
    description, usage, options, subs, _ = parse(top)
    version = subprocess.run([binary, "--version"], check=True, capture_output=True, text=True).stdout.split("\n")[0]
    out = [
        '.TH DISTLOCK 1 "" "%s" "User Commands"' % esc(version),
        ".SH NAME",
        "distlock \\- " + esc(description.split(": ", 1)[-1]),
        ".SH SYNOPSIS",
        "\\fBdistlock\\fR [\\fIOPTIONS\\fR] \\fISUBCOMMAND\\fR [\\fISUBCOMMAND OPTIONS\\fR]",
        ".SH DESCRIPTION",
        "\\fBdistlock\\fR takes, holds and inspects locks (mutexes, read\\-write locks, semaphores, elections) "
        "through one interface over many coordination backends, chosen by a URL (\\fBdistlock schemes\\fR lists "
        "them).",
        "Each subcommand below is as \\fBdistlock \\fISUBCOMMAND\\fB \\-\\-help\\fR prints it.",
        ".SH OPTIONS",
    ]
    out += option_block(options)
    out.append(".SH SUBCOMMANDS")
    for name, summary in subs:
        d, u, o, _, notes = parse(run_help(binary, name))
        out += [".SS \"distlock %s\"" % name, esc(d or summary), ".PP", "Usage: \\fB" + esc(u) + "\\fR"]
        out += option_block(o)
        note_lines = [n.strip() for n in notes if n.strip()]
        if note_lines:
            out.append(".PP")
            for n in note_lines:
                out += [esc(n), ".br"]
    out.append((HERE / "footer.man").read_text().rstrip("\n"))
    return "\n".join(out) + "\n"


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    binary, target = sys.argv[1], sys.argv[2]
    text = page(binary).encode()
    if target.endswith(".gz"):
        with open(target, "wb") as raw:
            with gzip.GzipFile(filename="", mode="wb", compresslevel=9, fileobj=raw, mtime=0) as z:
                z.write(text)
    else:
        Path(target).write_bytes(text)


if __name__ == "__main__":
    main()
