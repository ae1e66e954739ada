#!/usr/bin/env python3
"""Compiles every C++ code block of README.md and docs/**/*.md, as a reader
would paste it (issue 27: the README's read-write snippet lacked
#include <shared_mutex> and nobody noticed).

    check_snippets.py SOURCE_DIR CXX INCLUDE_DIR... [--list]

A block is fenced ```cpp (or ```c++), and its info string says how it is meant:

  ```cpp            statements: its #include and using lines go first, the
                    rest becomes the body of a function
  ```cpp coroutine  the same, the body of a coroutine (any framework's task)
  ```cpp file       a whole translation unit (it defines functions or main)
  ```cpp fragment   not meant to compile alone (a part of a larger program
                    that the text around it describes); listed, never compiled

Every compiled block must include a distlock header itself. What the block
calls that is the reader's own (write_stock(), sell(), a backend class) is
declared by the stand-ins below, after the block's own #include lines: they
declare no standard header, so a block that forgets one fails as it would for
the reader. Each block is compiled with -fsyntax-only (nothing is linked, so
the stand-ins need no definition). Exit status: 0 when every block compiled,
1 otherwise, with the compiler's messages and where the block is.
"""
import pathlib
import re
import subprocess
import sys
import tempfile

# The reader's own names that the docs' snippets use, declared for the compiler.
STAND_INS = r"""
// ---- stand-ins for the reader's own code (tests/docs/check_snippets.py) ----
template <class... A> void write_stock(A&&...);
template <class... A> void sell(A&&...);
template <class... A> void read(A&&...);
template <class... A> void write(A&&...);
template <class... A> void run_job(A&&...);
template <class... A> void stop_leading(A&&...);
template <class... A> void run_while(A&&...);
extern int x;
extern std::string hostname;
extern distlock::provider locks;
namespace spdlog {
namespace level { enum level_enum { err, warn }; }
template <class... A> void log(A&&...);
}  // namespace spdlog
namespace my_backend {
void register_scheme();
struct backend final : distlock::spi::backend {
    explicit backend(distlock::spi::url&);
    std::string_view name() const noexcept override;
    const distlock::capabilities& caps() const noexcept override;
    std::unique_ptr<distlock::spi::lock_handle> make_lock(const distlock::spi::lock_request&) override;
};
}  // namespace my_backend
namespace spi = distlock::spi;
extern distlock::spi::url u;
"""

# A task type for ```cpp coroutine blocks: any framework's would do.
TASK = r"""
#include <coroutine>
#include <exception>
struct snippet_task {
    struct promise_type {
        snippet_task get_return_object() { return {}; }
        std::suspend_never initial_suspend() noexcept { return {}; }
        std::suspend_never final_suspend() noexcept { return {}; }
        void return_void() {}
        void unhandled_exception() { std::terminate(); }
    };
};
"""

FENCE = re.compile(r"^```(cpp|c\+\+)(?:[ \t]+(\w+))?[ \t]*$")
KINDS = ("statements", "coroutine", "file", "fragment")


def blocks(path):
    """(line, kind, text) of every C++ block of one Markdown file."""
    lines = path.read_text(encoding="utf-8").split("\n")
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        kind = m.group(2) or "statements"
        start = i + 1
        i += 1
        while i < len(lines) and not lines[i].startswith("```"):
            i += 1
        yield start, kind, "\n".join(lines[start:i])
        i += 1


def translation_unit(kind, text):
    head, body = [], []
    for line in text.split("\n"):
        if not body and (line.startswith("#include") or line.startswith("using ") or not line.strip()):
            head.append(line)
        else:
            body.append(line)
    # The stand-ins need the SPI's types; the block's own headers come first.
    prelude = ["#include <distlock/distlock.hpp>", "#include <distlock/spi/backend.hpp>", STAND_INS]
    if kind == "file":
        return "\n".join(head + prelude + body) + "\n"
    if kind == "coroutine":
        return "\n".join(head + prelude + [TASK, "snippet_task snippet(std::stop_token stop_token) {"] + body +
                         ["}"]) + "\n"
    return "\n".join(head + prelude + ["[[maybe_unused]] static void snippet() {"] + body + ["}"]) + "\n"


def main():
    args = [a for a in sys.argv[1:] if a != "--list"]
    if len(args) < 3:
        sys.exit(__doc__)
    source, cxx, includes = pathlib.Path(args[0]), args[1], args[2:]
    files = [source / "README.md"] + sorted((source / "docs").rglob("*.md"))
    failures, compiled, fragments = [], 0, []
    flags = ["-std=c++20", "-fsyntax-only", "-Wall", "-Wno-unused"] + ["-I" + d for d in includes]
    with tempfile.TemporaryDirectory() as tmp:
        # The headers every block gets (the stand-ins include them after the
        # block's own), parsed once: a precompiled header, included first.
        # What a block includes itself still comes from the block, and a
        # standard header that distlock's do not bring in is still missing.
        pch = pathlib.Path(tmp) / "prelude.hpp"
        pch.write_text("#include <distlock/distlock.hpp>\n#include <distlock/spi/backend.hpp>\n", encoding="utf-8")
        made = subprocess.run([cxx, "-x", "c++-header"] + [f for f in flags if f != "-fsyntax-only"] +
                              [str(pch), "-o", str(pch) + ".gch"], capture_output=True, text=True)
        if made.returncode != 0:
            print("FAILED: the prelude does not compile:\n" + made.stderr)
            return 1
        flags += ["-include", str(pch)]
        for path in files:
            for line, kind, text in blocks(path):
                where = "%s:%d" % (path.relative_to(source), line)
                if kind not in KINDS:
                    failures.append("%s: unknown block kind '%s' (known: %s)" % (where, kind, ", ".join(KINDS)))
                    continue
                if kind == "fragment":
                    fragments.append(where)
                    continue
                if "#include <distlock/" not in text:
                    failures.append("%s: includes no distlock header (a reader could not compile it)" % where)
                    continue
                tu = pathlib.Path(tmp) / ("snippet%d.cpp" % (compiled + len(failures)))
                tu.write_text(translation_unit(kind, text), encoding="utf-8")
                cmd = [cxx] + flags + [str(tu)]
                done = subprocess.run(cmd, capture_output=True, text=True)
                if done.returncode != 0:
                    failures.append("%s (```cpp %s):\n%s" % (where, kind, done.stderr.strip()))
                else:
                    compiled += 1
                    if "--list" in sys.argv:
                        print("compiled: %s (%s)" % (where, kind))
    for f in fragments:
        print("not compiled (a fragment, marked so): %s" % f)
    for f in failures:
        print("FAILED: %s" % f)
    print("%d blocks compiled, %d fragments, %d failed" % (compiled, len(fragments), len(failures)))
    if compiled == 0:
        print("FAILED: no block was found to compile")
        return 1
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
