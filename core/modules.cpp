// The module loader: include/distlock/spi/module.hpp says what a module is,
// docs/packaging.md where they live and what is refused.
#include "modules.hpp"

#include <dlfcn.h>
#include <grp.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <set>

#include "distlock/error.hpp"
#include "distlock/spi/module.hpp"

namespace distlock::detail {
namespace {

constexpr const char* path_variable = "DISTLOCK_MODULE_PATH";

struct loaded_module {
    std::string name;
    std::string path;
    std::string version;
    std::vector<std::string> schemes;
};

std::mutex load_mutex;                // one load at a time, and guards `loaded`
std::vector<loaded_module> loaded;    // never unloaded: their code backs live objects
std::vector<std::string> refused;     // modules that failed (by name): not tried again
std::vector<std::string> last_error;  // their errors, in the same order

std::string file_of(const std::string& name) { return "libdistlock-" + name + ".so"; }

[[noreturn, maybe_unused]] void refuse(const std::string& message) { throw_error(errc::unsupported, "", message); }

// <the directory of the file that holds this code>/distlock/modules: beside
// libdistlock.so.0, wherever it is installed (or built).
std::string beside_the_library() {
    Dl_info info{};
    if (::dladdr(reinterpret_cast<void*>(&beside_the_library), &info) == 0 || info.dli_fname == nullptr) return {};
    std::string lib = info.dli_fname;
    // As the dynamic linker found it (bin/../lib/...): without the detour.
    if (char* real = ::realpath(info.dli_fname, nullptr)) {
        lib = real;
        std::free(real);
    }
    const auto slash = lib.rfind('/');
    if (slash == std::string::npos) return {};
    return lib.substr(0, slash) + "/distlock/modules";
}

std::vector<std::string> search_path() {
    // secure_getenv: a set-user-ID program ignores it (it would load any code).
    const char* env = ::secure_getenv(path_variable);
    if (env == nullptr || *env == '\0') {
        auto dir = beside_the_library();
        return dir.empty() ? std::vector<std::string>{} : std::vector<std::string>{dir};
    }
    std::vector<std::string> dirs;
    std::string_view rest(env);
    while (!rest.empty()) {
        const auto colon = rest.find(':');
        const std::string dir(rest.substr(0, colon));
        rest = colon == std::string_view::npos ? std::string_view{} : rest.substr(colon + 1);
        if (dir.empty()) continue;
        // A relative directory would depend on the working directory.
        if (dir.front() != '/')
            throw_error(errc::invalid_argument, "",
                        std::string(path_variable) + " holds a relative directory ('" + dir +
                            "'): give absolute ones, separated by ':'");
        dirs.push_back(dir);
    }
    return dirs;
}

// The first file of that name in the search path, or empty.
std::string find_file(const std::string& file, const std::vector<std::string>& dirs) {
    for (const auto& d : dirs) {
        struct stat st {};
        const auto p = d + "/" + file;
        if (::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode)) return p;
    }
    return {};
}

#ifdef DISTLOCK_LOADS_MODULES
// Whether the file's group is its owner's own: the owner's primary group,
// with no other member listed (a "user private group", whose umask 002 makes
// a build tree group-writable without giving anyone else a say).
bool owners_own_group(const struct stat& st) {
    std::vector<char> buf(16384);
    struct passwd pw {};
    struct passwd* pwp = nullptr;
    if (::getpwuid_r(st.st_uid, &pw, buf.data(), buf.size(), &pwp) != 0 || pwp == nullptr) return false;
    if (pw.pw_gid != st.st_gid) return false;
    const std::string owner = pw.pw_name;
    struct group gr {};
    struct group* grp = nullptr;
    if (::getgrgid_r(st.st_gid, &gr, buf.data(), buf.size(), &grp) != 0 || grp == nullptr) return false;
    for (char** m = gr.gr_mem; m && *m; ++m)
        if (owner != *m) return false;
    return true;
}

// Trusted as libdistlock itself: owned by root or by this process's user, and
// writable by nobody else (by its group only when that is the owner's own).
// Else another user could put code into this process.
void check_trusted(const std::string& path, const char* what) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) refuse("cannot inspect the " + std::string(what) + " " + path);
    if (st.st_uid != 0 && st.st_uid != ::geteuid())
        refuse("will not load a module from " + path + ": the " + what + " belongs to another user (uid " +
               std::to_string(st.st_uid) + ")");
    if ((st.st_mode & S_IWOTH) != 0 || ((st.st_mode & S_IWGRP) != 0 && !owners_own_group(st)))
        refuse("will not load a module from " + path + ": the " + what + " is writable by its group or others");
}

std::string spi_text(unsigned major, unsigned minor) { return std::to_string(major) + "." + std::to_string(minor); }

// Opens `path`, checks what it says of itself, and returns its schemes with
// their factories (not yet added anywhere).
std::vector<std::pair<std::string, spi::factory>> open_module(const std::string& name, const std::string& path,
                                                              const std::string& package, loaded_module& record) {
    check_trusted(path.substr(0, path.rfind('/')), "directory");
    check_trusted(path, "file");
    const std::string install = package.empty() ? std::string{} : " (install the package " + package + ")";
    void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
        const char* why = ::dlerror();
        refuse("cannot load the backend module " + path + ": " + (why ? why : "dlopen failed") + install);
    }
    // From here on, the handle is never closed: a module may have started
    // threads or registered handlers in its constructors.
    using entry_fn = const spi::module_info* (*)();
    auto entry = reinterpret_cast<entry_fn>(::dlsym(handle, DISTLOCK_MODULE_ENTRY_SYMBOL));
    if (entry == nullptr)
        refuse(path + " is not a distlock backend module: it has no " + DISTLOCK_MODULE_ENTRY_SYMBOL + "()");
    const spi::module_info* info = entry();
    if (info == nullptr || info->magic != spi::module_magic)
        refuse(path + " is not a distlock backend module of a layout this library reads (no module_info magic)");
    const auto ours = spi_text(DISTLOCK_SPI_VERSION_MAJOR, DISTLOCK_SPI_VERSION_MINOR);
    if (info->spi_major != DISTLOCK_SPI_VERSION_MAJOR || info->spi_minor > DISTLOCK_SPI_VERSION_MINOR)
        refuse("the backend module " + path + " was built against distlock's SPI " +
               spi_text(info->spi_major, info->spi_minor) + "; this libdistlock " + DISTLOCK_VERSION_STRING +
               " has SPI " + ours + " (a module needs the same major version and at most the same minor one)" +
               install);
    if (info->name == nullptr || name != info->name || info->register_backends == nullptr)
        refuse(path + " calls itself '" + std::string(info->name ? info->name : "") + "', not '" + name + "'");
    struct recorder final : spi::registry {
        std::vector<std::pair<std::string, spi::factory>> added;
        void add(std::string scheme, spi::factory f) override { added.emplace_back(std::move(scheme), std::move(f)); }
    } rec;
    try {
        info->register_backends(rec);
    } catch (const std::exception& e) {
        refuse("the backend module " + path + " failed to register its schemes: " + e.what());
    } catch (...) {
        refuse("the backend module " + path + " failed to register its schemes (an exception of no known type)");
    }
    record = {name, path, info->version ? info->version : "", {}};
    for (const auto& [s, f] : rec.added) record.schemes.push_back(s);
    return std::move(rec.added);
}
#endif

}  // namespace

const module_entry* module_of_scheme(const std::string& scheme) {
    static const std::vector<module_entry> table = build_modules();
    for (const auto& m : table)
        if (std::find(m.schemes.begin(), m.schemes.end(), scheme) != m.schemes.end()) return &m;
    return nullptr;
}

bool load_module_for(const std::string& scheme, const std::function<void(scheme_list)>& add) {
#ifndef DISTLOCK_LOADS_MODULES
    (void)scheme;
    (void)add;
    return false;  // a static libdistlock: a module would bring a second one
#else
    const module_entry* ours = module_of_scheme(scheme);
    // Another scheme names a file: only the characters a scheme may register
    // (a lowercase letter, then letters, digits, '+', '-', '.'; no ".."), so
    // that a URL's scheme ("x/y", "../x") never reaches another directory.
    if (!ours && (scheme.empty() || scheme.size() > 32 || scheme.find("..") != std::string::npos ||
                  !spi::ascii_alpha(scheme.front()) || !std::all_of(scheme.begin(), scheme.end(), [](char c) {
                      return (c >= 'a' && c <= 'z') || spi::ascii_digit(c) || c == '+' || c == '-' || c == '.';
                  })))
        return false;
    const std::string name = ours ? ours->name : scheme;
    const std::string package = ours ? ours->package : std::string{};
    std::lock_guard lk(load_mutex);
    for (const auto& m : loaded)
        if (m.name == name) return std::find(m.schemes.begin(), m.schemes.end(), scheme) != m.schemes.end();
    for (std::size_t i = 0; i < refused.size(); ++i)
        if (refused[i] == name) refuse(last_error[i]);
    const auto dirs = search_path();
    const auto path = find_file(file_of(name), dirs);
    if (path.empty()) {
        if (!ours) return false;
        std::string where;
        for (const auto& d : dirs) where += (where.empty() ? "" : ", ") + d;
        refuse("the scheme '" + scheme + "://' is provided by the backend module " + file_of(name) +
               ", which is not installed (looked in " + (where.empty() ? std::string("no directory") : where) +
               "): install the package " + package);
    }
    try {
        loaded_module record;
        auto schemes = open_module(name, path, package, record);
        std::set<std::string> got;
        for (const auto& [s, f] : schemes) got.insert(s);
        if (ours) {
            const std::set<std::string> expected(ours->schemes.begin(), ours->schemes.end());
            if (got != expected) refuse("the backend module " + path + " does not register the schemes of its build");
        } else if (!got.contains(scheme)) {
            refuse("the backend module " + path + " does not register the scheme '" + scheme + "'");
        }
        for (const auto& [s, f] : schemes)
            if (s != scheme && module_of_scheme(s) != nullptr && module_of_scheme(s)->name != name)
                refuse("the backend module " + path + " registers '" + s + "', which is another module's");
        add(std::move(schemes));  // all or none
        loaded.push_back(std::move(record));
    } catch (const distlock::error& e) {
        refused.push_back(name);
        last_error.emplace_back(e.reason());
        throw;
    }
    return true;
#endif
}

std::vector<std::string> installed_module_schemes() {
    std::vector<std::string> out;
    std::vector<std::string> dirs;
    try {
        dirs = search_path();
    } catch (const distlock::error&) {
        return out;  // connect() says why
    }
    for (const auto& m : build_modules())
        if (!find_file(file_of(m.name), dirs).empty()) out.insert(out.end(), m.schemes.begin(), m.schemes.end());
    return out;
}

}  // namespace distlock::detail

namespace distlock {

std::vector<std::string> module_path() { return detail::search_path(); }

std::vector<backend_module> backend_modules() {
    std::vector<backend_module> out;
    const auto dirs = detail::search_path();
    std::lock_guard lk(detail::load_mutex);
    for (const auto& m : detail::build_modules()) {
        backend_module b{m.name, detail::file_of(m.name), m.package, m.schemes, {}, false, {}};
        b.path = detail::find_file(b.file, dirs);
        out.push_back(std::move(b));
    }
    for (const auto& l : detail::loaded) {
        auto it = std::find_if(out.begin(), out.end(), [&](const backend_module& b) { return b.name == l.name; });
        if (it == out.end())
            it = out.insert(out.end(), {l.name, detail::file_of(l.name), {}, l.schemes, {}, false, {}});
        it->path = l.path;
        it->loaded = true;
        it->version = l.version;
    }
    return out;
}

}  // namespace distlock
