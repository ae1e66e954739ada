// Shared pieces of the distlock tool: processes that report back to the parent,
// latency statistics, progress lines.
#pragma once

#include <chrono>
#include <exception>
#include <functional>
#include <iosfwd>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

struct stat;

namespace distlock::tool {

// The documented exit status of a failure: 64 bad arguments, 69 backend
// unavailable, 77 access denied, 1 anything else.
int exit_status(const std::exception& e) noexcept;
// Whether `e` says that nothing accepted the connection (a wrong host or
// port, or the server down): the tool then says to check them.
bool connection_refused(const std::exception& e) noexcept;

// Worker processes failed; `status` is the exit status the tool ends with (the
// first failed worker's, each mapped by exit_status()), each worker having
// printed its own reason, one line each.
class workers_failed : public std::runtime_error {
public:
    workers_failed(int status, const std::string& what) : std::runtime_error(what), status_(status) {}
    int status() const noexcept { return status_; }

private:
    int status_;
};

// Forks `n` children; child i runs work(i) and its returned bytes reach the
// parent. While they run, the parent calls tick() about every second (progress).
// A child that throws prints "distlock: worker i: <what>" as one line and exits
// with exit_status(); then this throws workers_failed. Call before this process
// starts any thread.
std::vector<std::string> run_in_processes(int n, const std::function<std::string(int)>& work,
                                          const std::function<void()>& tick);

// Percentile (0..100) of unsorted samples; 0 for none.
double percentile(std::vector<double> samples, double p);

// Little helpers to pass numbers through the byte blobs above.
void put_doubles(std::string& out, const std::vector<double>& v);
std::vector<double> get_doubles(const std::string& in, std::size_t& pos);
void put_u64(std::string& out, unsigned long long v);
unsigned long long get_u64(const std::string& in, std::size_t& pos);

// The URL with any password or token replaced by "***", for printing.
std::string redact(const std::string& url);

// `text` made safe for a terminal or a log line: every control byte (below
// 0x20, and 0x7F), every C1 control (U+0080..U+009F), every bidirectional
// override or isolate (U+202A..U+202E, U+2066..U+2069) and every byte that is
// not part of valid UTF-8 is shown as \xNN; `keep_newlines` keeps '\n'. For
// everything the tool prints that is not its own fixed text: holder labels,
// loss reasons and error messages (they quote servers and other tenants),
// names and URLs echoed back. A label "x\e]0;t\a\ny: 0" must not retitle the
// terminal nor forge a line. (--json output is escaped by the JSON encoder.)
std::string printable(std::string_view text, bool keep_newlines = false);

// Throws invalid_argument_error, with the backend's reason, when `processes` > 1
// processes of `command` cannot exclude each other through `url` (memory://).
// Asks the backend in a child process: this one starts no thread before fork.
void require_cross_process(const std::string& url, int processes, const char* command);

double ms_since(std::chrono::steady_clock::time_point t0);

// bench's names on file:// live in a directory of their own under the URL's,
// <dir>/bench-<run id>, removed with their lock files when the run ends: the
// files of names nobody else knows, which would otherwise stay behind (one per
// name: --async makes thousands). Other schemes: the URL as given.
class scratch_names {
public:
    scratch_names(const std::string& url, const std::string& run_id);
    ~scratch_names();
    scratch_names(const scratch_names&) = delete;
    scratch_names& operator=(const scratch_names&) = delete;
    const std::string& url() const noexcept { return url_; }

private:
    std::string url_, dir_;  // dir_: "" when nothing is to be removed
};

// The directory of the default file:// backends of the tool's subcommands:
// $XDG_RUNTIME_DIR/distlock when XDG_RUNTIME_DIR is a directory of this user
// that nobody else may enter (mode 0700; root through su or sudo -E inherits
// another user's, which is ignored); else /run/distlock for root (/run/lock is
// mode 1777: any local user could create /run/lock/distlock first); else
// ~/.local/state/distlock when $HOME is this user's. Never under /tmp, whose
// cleaners delete files. "" when there is none, with the reason in `why`.
std::string default_file_base(std::string* why = nullptr);

// Creates `dir` (and the parents it lacks) mode 0700 and checks that it is a
// directory of this user that nobody else may write; access_denied_error
// naming it and the reason when not.
void prepare_private_directory(const std::string& dir);

// Where a subcommand's backend URL comes from: --backend URL or --backend-file
// PATH on the command line, else $DISTLOCK_BACKEND or $DISTLOCK_BACKEND_FILE,
// else the default file:// directory (flash-sale, bench; see use_default()).
struct backend_choice {
    std::string url, file;  // the options' values
    bool url_given = false, file_given = false;
    std::string fallback;          // the default URL, "" when none
    std::string fallback_dir;      // its base directory, made when it is used
    std::string fallback_problem;  // why there is no default
    // A default of file://<default_file_base()>/<leaf>.
    void use_default(const std::string& leaf);
    // The URL to connect to. Throws invalid_argument_error (64) or
    // access_denied_error (77); never shows the content of a backend file.
    std::string resolve(const char* who) const;
};

// The content of a backend file (--backend-file, $DISTLOCK_BACKEND_FILE): a
// regular file of this user or root that neither group nor others may write,
// and that others may not read when the URL holds a secret (a password or a
// secret parameter); at most 16 KiB, one line (trailing newlines dropped).
std::string read_backend_file(const std::string& path, const char* who);

// Why the file of `st` may not be trusted with what the tool reads from or
// writes to it, "" when it may: it must belong to this user (or root, when
// `root_too`), be writable by neither group nor others, and, when `one_link`,
// have no other name (a hard link planted to another file of ours). The caller
// checks that it is a regular file (and opened it with O_NOFOLLOW when writing).
std::string untrusted_file(const struct stat& st, bool root_too, bool one_link);

// Opens (creating it, mode 0600, when missing) a file the tool writes: never
// through a symlink, and only a regular file that untrusted_file() accepts with
// one link; access_denied_error (77) naming `what` and the reason when not.
// The descriptor is close-on-exec.
int open_own_file(const std::string& path, const std::string& what, const char* who);

// `text` (a message that may repeat what the user typed) with each of `args`
// that holds a secret, and every word holding "://", shown by redact().
std::string redact_message(std::string text, const std::vector<std::string>& args);

}  // namespace distlock::tool

namespace distlock::tool {

// distlock --version: the library's version, the SPI's, and the backend
// modules of this build (found where, loaded or not).
std::string version_text();

// distlock schemes: one scheme a line; --verbose says where each comes from
// and where modules are looked for. Exit status 0 (a relative directory in
// DISTLOCK_MODULE_PATH throws invalid_argument_error).
int print_schemes(std::ostream& out);
int print_schemes_verbose(std::ostream& out);

}  // namespace distlock::tool
