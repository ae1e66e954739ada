#include "common.hpp"

#include "distlock/distlock.hpp"
#include "distlock/error.hpp"
#include "distlock/spi/url.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <stdexcept>

namespace distlock::tool {

std::vector<std::string> run_in_processes(int n, const std::function<std::string(int)>& work,
                                          const std::function<void()>& tick) {
    struct kid {
        pid_t pid;
        int fd;
        std::string data;
        bool open = true;
    };
    std::vector<kid> kids;
    for (int i = 0; i < n; ++i) {
        int fds[2];
        if (::pipe(fds) != 0) throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
        std::cout.flush();
        std::cerr.flush();
        pid_t pid = ::fork();
        if (pid < 0) throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
        if (pid == 0) {
            ::close(fds[0]);
            int status = 0;
            try {
                std::string out = work(i);
                for (std::size_t off = 0; off < out.size();) {
                    ssize_t w = ::write(fds[1], out.data() + off, out.size() - off);
                    if (w <= 0) {
                        status = 3;
                        break;
                    }
                    off += static_cast<std::size_t>(w);
                }
            } catch (const std::exception& e) {
                // One write: the lines of workers failing at once never mix.
                const std::string line = "distlock: worker " + std::to_string(i) + ": " + printable(e.what()) + "\n";
                (void)!::write(2, line.data(), line.size());
                status = exit_status(e);
            }
            ::close(fds[1]);
            std::cerr.flush();
            ::_exit(status);
        }
        ::close(fds[1]);
        kids.push_back({pid, fds[0], {}});
    }
    auto last_tick = std::chrono::steady_clock::now();
    for (;;) {
        std::vector<pollfd> pfds;
        for (auto& k : kids)
            if (k.open) pfds.push_back({k.fd, POLLIN, 0});
        if (pfds.empty()) break;
        ::poll(pfds.data(), pfds.size(), 250);
        for (auto& k : kids) {
            if (!k.open) continue;
            pollfd p{k.fd, POLLIN, 0};
            if (::poll(&p, 1, 0) <= 0) continue;
            char buf[65536];
            ssize_t r = ::read(k.fd, buf, sizeof buf);
            if (r > 0) k.data.append(buf, static_cast<std::size_t>(r));
            else if (r == 0 || errno != EINTR) {
                ::close(k.fd);
                k.open = false;
            }
        }
        if (std::chrono::steady_clock::now() - last_tick >= std::chrono::seconds(1)) {
            last_tick = std::chrono::steady_clock::now();
            if (tick) tick();
        }
    }
    std::string failures;
    int first_status = 0;
    std::vector<std::string> out;
    for (std::size_t i = 0; i < kids.size(); ++i) {
        int status = 0;
        ::waitpid(kids[i].pid, &status, 0);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
            failures += std::string(failures.empty() ? "" : ", ") + std::to_string(i) + " (status " +
                        std::to_string(code) + ")";
            if (first_status == 0) first_status = WIFEXITED(status) ? code : 1;
        }
        out.push_back(std::move(kids[i].data));
    }
    if (!failures.empty()) throw workers_failed(first_status, "worker process(es) failed: " + failures);
    return out;
}

int exit_status(const std::exception& e) noexcept {
    const auto* de = dynamic_cast<const distlock::error*>(&e);
    if (de == nullptr) return 1;
    switch (de->code_value()) {
        case errc::invalid_argument: return 64;  // EX_USAGE
        case errc::unavailable: return 69;       // EX_UNAVAILABLE
        case errc::access_denied: return 77;     // EX_NOPERM
        default: return 1;
    }
}

bool connection_refused(const std::exception& e) noexcept {
    if (const auto* de = dynamic_cast<const distlock::error*>(&e); de != nullptr && de->native_code() == ECONNREFUSED)
        return true;
    // The client libraries' own words for it (libpq, libcurl, the MariaDB connector).
    const std::string_view what = e.what();
    for (const char* said :
         {"Connection refused", "refused the connection", "Couldn't connect to server", "Can't connect to server"})
        if (what.find(said) != std::string_view::npos) return true;
    return false;
}

double percentile(std::vector<double> samples, double p) {
    if (samples.empty()) return 0;
    std::sort(samples.begin(), samples.end());
    double rank = p / 100.0 * static_cast<double>(samples.size() - 1);
    auto lo = static_cast<std::size_t>(std::floor(rank));
    auto hi = std::min(lo + 1, samples.size() - 1);
    return samples[lo] + (samples[hi] - samples[lo]) * (rank - static_cast<double>(lo));
}

void put_u64(std::string& out, unsigned long long v) { out.append(reinterpret_cast<const char*>(&v), sizeof v); }

unsigned long long get_u64(const std::string& in, std::size_t& pos) {
    unsigned long long v = 0;
    if (pos + sizeof v > in.size()) throw std::runtime_error("truncated worker report");
    std::memcpy(&v, in.data() + pos, sizeof v);
    pos += sizeof v;
    return v;
}

void put_doubles(std::string& out, const std::vector<double>& v) {
    put_u64(out, v.size());
    if (!v.empty()) out.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(double));
}

std::vector<double> get_doubles(const std::string& in, std::size_t& pos) {
    auto n = get_u64(in, pos);
    if (pos + n * sizeof(double) > in.size()) throw std::runtime_error("truncated worker report");
    std::vector<double> v(n);
    if (n != 0) std::memcpy(v.data(), in.data() + pos, n * sizeof(double));
    pos += n * sizeof(double);
    return v;
}

std::string redact(const std::string& url) { return spi::redact_url(url); }

void require_cross_process(const std::string& url, int processes, const char* command) {
    if (processes <= 1) return;
    auto why = run_in_processes(
        1,
        [&](int) {
            auto p = distlock::connect(url);
            return std::string(p.caps().why_not(feature::cross_process));
        },
        [] {})[0];
    if (!why.empty())
        throw_error(errc::invalid_argument, command,
                    std::to_string(processes) + " processes cannot share " + redact(url) + ": " + why +
                        " (use --processes 1, or a backend that excludes processes)");
}

namespace {

// A directory (not a symlink) owned by this user that neither group nor others
// may write (`private_too`: nor enter); "" when it is, else what it is not.
std::string not_private(const std::string& dir, bool private_too) {
    struct stat st {};
    if (::lstat(dir.c_str(), &st) != 0) return std::string("cannot be read (") + std::strerror(errno) + ")";
    if (!S_ISDIR(st.st_mode)) return "is not a directory";
    if (st.st_uid != ::geteuid()) return "belongs to another user (uid " + std::to_string(st.st_uid) + ")";
    const mode_t others = private_too ? 077 : 022;
    if ((st.st_mode & others) != 0) {
        char mode[8];
        std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
        return std::string("has mode ") + mode + (private_too ? " (not 0700)" : " (writable by others)");
    }
    return {};
}

}  // namespace

std::string default_file_base(std::string* why) {
    std::string problem;
    if (const char* xdg = std::getenv("XDG_RUNTIME_DIR"); xdg != nullptr && *xdg == '/') {
        problem = not_private(xdg, true);
        if (problem.empty()) return std::string(xdg) + "/distlock";
        problem = "XDG_RUNTIME_DIR " + std::string(xdg) + " " + problem + ", so it is not used";
    } else {
        problem = "XDG_RUNTIME_DIR is not set";
    }
    if (::geteuid() == 0) return "/run/distlock";  // /run is root's alone, unlike /run/lock (mode 1777)
    if (const char* home = std::getenv("HOME"); home != nullptr && *home == '/') {
        struct stat st {};
        if (::stat(home, &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == ::geteuid())
            return std::string(home) + "/.local/state/distlock";
        problem += "; HOME " + std::string(home) + " is not a directory of this user";
    } else {
        problem += "; HOME is not set";
    }
    if (why != nullptr) *why = problem;
    return {};
}

void prepare_private_directory(const std::string& dir) {
    // Each missing component is made 0700; one that exists is left as it is
    // (~/.local, /run), and only `dir` itself is checked.
    for (std::size_t at = dir.find('/', 1);; at = dir.find('/', at + 1)) {
        const std::string part = dir.substr(0, at);
        if (::mkdir(part.c_str(), 0700) != 0 && errno != EEXIST)
            throw access_denied_error(
                errc::access_denied, "",
                "cannot create the default lock directory " + part + ": " + std::strerror(errno) + " (give --backend)");
        if (at == std::string::npos) break;
    }
    if (const auto problem = not_private(dir, false); !problem.empty())
        throw access_denied_error(errc::access_denied, "",
                                  "the default lock directory " + dir + " " + problem +
                                      ": another user could create or change its locks (remove it, or give --backend)");
}

void backend_choice::use_default(const std::string& leaf) {
    fallback_dir = default_file_base(&fallback_problem);
    fallback = fallback_dir.empty() ? std::string() : "file://" + fallback_dir + "/" + leaf;
}

std::string backend_choice::resolve(const char* who) const {
    if (url_given && file_given)
        throw invalid_argument_error(errc::invalid_argument, who, "give --backend or --backend-file, not both");
    if (url_given) return url;
    if (file_given) return read_backend_file(file, who);
    // The environment, when the command line says nothing.
    const char* env_url = std::getenv("DISTLOCK_BACKEND");
    const char* env_file = std::getenv("DISTLOCK_BACKEND_FILE");
    if (env_url != nullptr && *env_url == '\0') env_url = nullptr;
    if (env_file != nullptr && *env_file == '\0') env_file = nullptr;
    if (env_url != nullptr && env_file != nullptr)
        throw invalid_argument_error(errc::invalid_argument, who,
                                     "both DISTLOCK_BACKEND and DISTLOCK_BACKEND_FILE are set: unset one, or give "
                                     "--backend or --backend-file");
    if (env_url != nullptr) return env_url;
    if (env_file != nullptr) return read_backend_file(env_file, who);
    if (!fallback.empty()) {
        prepare_private_directory(fallback_dir);
        return fallback;
    }
    throw invalid_argument_error(
        errc::invalid_argument, who,
        "no backend: give --backend URL or --backend-file PATH (or set DISTLOCK_BACKEND or DISTLOCK_BACKEND_FILE)" +
            (fallback_problem.empty() ? std::string() : "; there is no safe default directory: " + fallback_problem));
}

std::string untrusted_file(const struct stat& st, bool root_too, bool one_link) {
    if (st.st_uid != ::geteuid() && !(root_too && st.st_uid == 0))
        return "belongs to another user (uid " + std::to_string(st.st_uid) + "): only this user's" +
               (root_too ? " or root's" : "") + " file is trusted";
    if ((st.st_mode & 022) != 0) {
        char mode[8];
        std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
        return std::string("is writable by group or others (mode ") + mode + "): chmod go-w it";
    }
    if (one_link && st.st_nlink != 1)
        return "has " + std::to_string(st.st_nlink) + " links: another name could point at a file it must not change";
    return {};
}

int open_own_file(const std::string& path, const std::string& what, const char* who) {
    // O_NOFOLLOW: a planted symlink is refused (ELOOP), its target never
    // created nor written. O_NONBLOCK: a FIFO never blocks the open.
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY | O_NONBLOCK, 0600);
    if (fd < 0) {
        const int err = errno;
        if (err == ELOOP) throw access_denied_error(errc::access_denied, who, what + " is a symbolic link: refused");
        const std::string why = "cannot open " + what + ": " + std::strerror(err);
        if (err == EACCES || err == EPERM) throw access_denied_error(errc::access_denied, who, why);
        throw invalid_argument_error(errc::invalid_argument, who, why);
    }
    struct stat st {};
    std::string why;
    if (::fstat(fd, &st) != 0) why = std::string("cannot be examined (") + std::strerror(errno) + ")";
    else if (!S_ISREG(st.st_mode)) why = "is not a regular file";
    else why = untrusted_file(st, false, true);
    if (!why.empty()) {
        ::close(fd);
        throw access_denied_error(errc::access_denied, who, what + " " + why);
    }
    const int flags = ::fcntl(fd, F_GETFL);
    if (flags >= 0) ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
    return fd;
}

std::string read_backend_file(const std::string& path, const char* who) {
    constexpr std::size_t limit = 16 * 1024;
    const std::string what = "--backend-file " + path;
    // O_NONBLOCK: opening a FIFO must not wait for a writer (it is refused below).
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (fd < 0) {
        const int err = errno;
        const std::string why = "cannot read " + what + ": " + std::strerror(err);
        if (err == EACCES || err == EPERM) throw access_denied_error(errc::access_denied, who, why);
        throw invalid_argument_error(errc::invalid_argument, who, why);
    }
    struct closer {
        int fd;
        ~closer() { ::close(fd); }
    } close_it{fd};
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
        throw invalid_argument_error(errc::invalid_argument, who, what + " is not a regular file");
    // Whoever may change the file chooses the server of every lock (as ssh
    // requires of its configuration).
    if (const auto why = untrusted_file(st, true, false); !why.empty())
        throw access_denied_error(errc::access_denied, who, what + " " + why);
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    std::string text;
    char buf[4096];
    for (;;) {
        const ssize_t r = ::read(fd, buf, sizeof buf);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0)
            throw invalid_argument_error(errc::invalid_argument, who,
                                         "cannot read " + what + ": " + std::strerror(errno));
        if (r == 0) break;
        text.append(buf, static_cast<std::size_t>(r));
        if (text.size() > limit)
            throw invalid_argument_error(
                errc::invalid_argument, who,
                what + " is longer than " + std::to_string(limit) + " bytes: it holds one URL");
    }
    while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
    if (text.empty()) throw invalid_argument_error(errc::invalid_argument, who, what + " is empty");
    for (std::size_t i = 0; i < text.size(); ++i)
        if (static_cast<unsigned char>(text[i]) < 0x20 || text[i] == 0x7f)
            throw invalid_argument_error(
                errc::invalid_argument, who,
                what + " holds a control character at byte " + std::to_string(i) + " (one URL on one line)");
    if (redact(text) != text && (st.st_mode & 004) != 0)
        throw access_denied_error(errc::access_denied, who,
                                  what + " holds a secret and is readable by others (mode " + mode + "): chmod o-r it");
    return text;
}

namespace {

// The length of the valid UTF-8 sequence at `at` (no overlong form, no
// surrogate, at most U+10FFFF) and its code point; 0 when there is none.
std::size_t utf8_sequence(std::string_view text, std::size_t at, char32_t& cp) {
    const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(text[i]); };
    const unsigned char lead = byte(at);
    std::size_t n = 0;
    char32_t min = 0;
    if (lead >= 0xC2 && lead <= 0xDF) n = 2, min = 0x80, cp = lead & 0x1F;
    else if (lead >= 0xE0 && lead <= 0xEF) n = 3, min = 0x800, cp = lead & 0x0F;
    else if (lead >= 0xF0 && lead <= 0xF4) n = 4, min = 0x10000, cp = lead & 0x07;
    else return 0;
    if (text.size() - at < n) return 0;
    for (std::size_t i = 1; i < n; ++i) {
        if ((byte(at + i) & 0xC0) != 0x80) return 0;
        cp = (cp << 6) | (byte(at + i) & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
    return n;
}

// A code point a terminal obeys or that reorders what is shown.
bool is_format_control(char32_t cp) {
    return (cp >= 0x80 && cp <= 0x9F) || (cp >= 0x202A && cp <= 0x202E) || (cp >= 0x2066 && cp <= 0x2069);
}

}  // namespace

std::string printable(std::string_view text, bool keep_newlines) {
    std::string out;
    out.reserve(text.size());
    const auto escape = [&out](unsigned char c) {
        static constexpr char hex[] = "0123456789abcdef";
        out += "\\x";
        out += hex[c >> 4];
        out += hex[c & 0xF];
    };
    for (std::size_t i = 0; i < text.size();) {
        const auto c = static_cast<unsigned char>(text[i]);
        if (c < 0x80) {
            if ((c < 0x20 && !(keep_newlines && c == '\n')) || c == 0x7F) escape(c);
            else out += static_cast<char>(c);
            ++i;
            continue;
        }
        char32_t cp = 0;
        const std::size_t n = utf8_sequence(text, i, cp);
        if (n == 0) {
            escape(c);
            ++i;
            continue;
        }
        for (std::size_t k = 0; k < n; ++k) {
            if (is_format_control(cp)) escape(static_cast<unsigned char>(text[i + k]));
            else out += text[i + k];
        }
        i += n;
    }
    return out;
}

std::string redact_message(std::string text, const std::vector<std::string>& args) {
    // Whole arguments first (a URL may hold a space), the value of --opt=VALUE too.
    std::vector<std::string> secrets;
    for (const auto& a : args) {
        secrets.push_back(a);
        if (const auto eq = a.find('='); a.rfind("-", 0) == 0 && eq != std::string::npos)
            secrets.push_back(a.substr(eq + 1));
    }
    std::sort(secrets.begin(), secrets.end(), [](const auto& x, const auto& y) { return x.size() > y.size(); });
    for (const auto& secret : secrets) {
        const auto shown = redact(secret);
        if (secret.empty() || shown == secret) continue;
        for (auto at = text.find(secret); at != std::string::npos; at = text.find(secret, at + shown.size()))
            text.replace(at, secret.size(), shown);
    }
    // Then every word that looks like a URL, whatever the parser made of the arguments.
    std::string out;
    for (std::size_t at = 0; at < text.size();) {
        const auto end = std::min(text.find_first_of(" \t\n", at), text.size());
        const auto word = text.substr(at, end - at);
        out += word.find("://") == std::string::npos ? word : redact(word);
        if (end < text.size()) out += text[end];
        at = end + 1;
    }
    return out;
}

double ms_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

scratch_names::scratch_names(const std::string& url, const std::string& run_id) : url_(url) {
    if (url.rfind("file://", 0) != 0) return;
    // The run's directory goes at the end of the path, before any query: the
    // URL's own text (its escapes) is kept; the file backend makes it 0700.
    auto query = url.find('?');
    if (query == std::string::npos) query = url.size();
    auto path_end = query;
    while (path_end > 7 && url[path_end - 1] == '/') --path_end;
    url_ = url.substr(0, path_end) + "/bench-" + run_id + url.substr(query);
    dir_ = spi::url::parse(url_).path();
}

// Each file in the directory, then the directory; through a descriptor of the
// directory opened without following a symlink, so that nothing outside it is
// touched. Best effort: what cannot be removed stays, said on stderr.
scratch_names::~scratch_names() {
    if (dir_.empty()) return;
    const int fd = ::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return;  // never made (the run failed first), or not ours to enter
    if (DIR* d = ::fdopendir(fd)) {
        std::vector<std::string> files;
        while (const dirent* e = ::readdir(d)) {
            const std::string entry = e->d_name;
            if (entry != "." && entry != "..") files.push_back(entry);
        }
        for (const auto& f : files) (void)::unlinkat(fd, f.c_str(), 0);
        ::closedir(d);  // closes fd
    } else {
        ::close(fd);
    }
    if (::rmdir(dir_.c_str()) != 0 && errno != ENOENT)
        std::cerr << "distlock bench: could not remove its lock directory " << printable(dir_) << ": "
                  << std::strerror(errno) << "\n";
}

}  // namespace distlock::tool
