// consul:// — the read-write lock. Consul has no read-write recipe (its Go API
// has api/lock.go and api/semaphore.go only), so this one is distlock's own,
// built on the semaphore's pattern (a contender, consul_contender.hpp, with
// this file's policy):
//
//   prefix     <URL prefix>/<encoded name>~rw/ ('~' never appears in an encoded
//              name, so no other name's keys fall under it)
//   contender  <prefix><session>?acquire=<session>, one session per grant
//              (Behavior "delete"), flags 0x6469737472776c6b ("distrwlk")
//   document   <prefix>.rwlock = {"Writer":"<session>","Readers":{"<session>":true,...},
//              "Waiting":"<session>"} ("" = none), written by check-and-set only
//   read       admitted when there is no writer and no waiting writer: its
//              session joins Readers
//   write      admitted when there is no writer and no reader: Writer = its
//              session; else, when no other writer waits, it records itself as
//              Waiting, which holds back readers that come later (writer
//              preference: a stream of readers cannot starve it)
//   pruning    a Writer, Waiting or reader whose session holds no key under the
//              prefix any more (its contender key went with its session) is
//              dropped, as api/semaphore.go prunes dead holders
#include <nlohmann/json.hpp>

#include "consul_contender.hpp"
#include "consul_lock.hpp"
#include "http/http_json.hpp"

namespace distlock::backends::consul {
namespace {

constexpr std::uint64_t kReadWriteFlag = 0x6469737472776c6bULL;  // "distrwlk"
constexpr const char* kDocumentKey = ".rwlock";

struct state {
    std::string problem;  // why the value is not a read-write lock's; "" = it is
    std::string writer, waiting;
    std::set<std::string> readers;
};

// The document's state without the dead sessions.
state read_state(const document& d) {
    state s;
    if (!d.exists || d.value.empty()) return s;
    // Written by anyone with KV write on the prefix: bounded in depth like a reply.
    json j = http::parse_reply(d.value);
    if (j.is_discarded() || !j.is_object()) {
        s.problem = "its value is not a JSON object (of at most " + std::to_string(http::max_json_depth) + " levels)";
        return s;
    }
    auto text = [&](const char* field) -> std::string {
        if (!j.contains(field) || j[field].is_null()) return {};
        if (!j[field].is_string()) {
            s.problem = std::string("its ") + field + " is not a string";
            return {};
        }
        auto v = j[field].get<std::string>();
        return d.live.count(v) ? v : std::string{};
    };
    s.writer = text("Writer");
    s.waiting = text("Waiting");
    if (j.contains("Readers") && !j["Readers"].is_null()) {
        if (!j["Readers"].is_object()) s.problem = "its Readers is not an object";
        else
            for (const auto& [reader, flag] : j["Readers"].items())
                if (d.live.count(reader)) s.readers.insert(reader);
    }
    return s;
}

std::string encode(const state& s) {
    nlohmann::ordered_json readers = nlohmann::ordered_json::object();
    for (const auto& r : s.readers) readers[r] = true;
    nlohmann::ordered_json doc;
    doc["Writer"] = s.writer;
    doc["Readers"] = std::move(readers);
    doc["Waiting"] = s.waiting;
    return doc.dump();
}

class rwlock_policy final : public policy {
public:
    rwlock_policy(std::string key, bool writer) : key_(std::move(key)), writer_(writer) {}

    step decide(const document& d, const std::string& me) const override {
        auto s = read_state(d);
        if (!s.problem.empty())
            throw_error(errc::invalid_argument, kBackend, "key " + key_ + " is not a read-write lock's: " + s.problem);
        if (!writer_) {
            if (s.readers.count(me)) return {step::kind::held, {}};
            if (!s.writer.empty() || !s.waiting.empty()) return {step::kind::wait, {}};
            s.readers.insert(me);
            return {step::kind::write, encode(s)};
        }
        if (s.writer == me) return {step::kind::held, {}};
        if (s.writer.empty() && s.readers.empty() && (s.waiting.empty() || s.waiting == me)) {
            s.writer = me;
            s.waiting.clear();
            return {step::kind::write, encode(s)};
        }
        if (s.waiting.empty()) {  // the first writer to wait holds back readers that come later
            s.waiting = me;
            return {step::kind::record, encode(s)};
        }
        return {step::kind::wait, {}};
    }

    bool holds(const document& d, const std::string& me) const override {
        auto s = read_state(d);
        return s.problem.empty() && (writer_ ? s.writer == me : s.readers.count(me) == 1);
    }

    std::optional<std::string> without(const document& d, const std::string& me) const override {
        auto s = read_state(d);
        if (!s.problem.empty() || !d.exists) return std::nullopt;
        const bool listed = writer_ ? s.writer == me : s.readers.count(me) == 1;
        if (!listed && s.waiting != me) return std::nullopt;
        if (writer_ && s.writer == me) s.writer.clear();
        s.readers.erase(me);
        if (s.waiting == me) s.waiting.clear();
        if (s.writer.empty() && s.readers.empty() && s.waiting.empty()) return std::string{};
        return encode(s);
    }

private:
    std::string key_;
    bool writer_;
};

layout layout_of(agent& a, std::string_view name, bool writer) {
    return {a.key_of(name) + "~rw/", kDocumentKey, kReadWriteFlag, "read-write lock",
            writer ? "distlock writer: " : "distlock reader: "};
}

}  // namespace

std::unique_ptr<spi::lock_handle> make_rwlock(agent& a, const spi::lock_request& r) {
    const bool writer = r.kind == spi::lock_kind::write;
    return make_contender(a, r, layout_of(a, r.name, writer),
                          [&](std::string key) { return std::make_unique<rwlock_policy>(std::move(key), writer); });
}

// One listing of the prefix: the document (pruned of dead sessions, as a
// contender reads it) names the writer, the readers and the first waiting
// writer; each one's contender key gives its label and token.
read_write_info inspect_read_write(agent& a, std::string_view name) {
    read_write_info info;
    const auto v = look(a, layout_of(a, name, true));
    auto s = read_state(v.doc);
    if (auto why = v.foreign(); !why.empty() || !s.problem.empty()) {
        if (why.empty()) why = "key " + v.where.doc_key() + " is not a read-write lock's: " + s.problem;
        for (const char* field : {"write_held", "readers", "writers_waiting"}) info.unknown.emplace(field, why);
        return info;
    }
    info.write_held = !s.writer.empty();
    if (*info.write_held) info.writer = v.grant_of(s.writer, info.unknown, "writer");
    info.readers = v.grants_of(s.readers, info.unknown, "readers");
    info.unknown.emplace("writers_waiting",
                         "Consul keeps no queue: the document records only the first writer to wait (which holds "
                         "back later readers); the others wait in blocking queries, which the server does not count");
    return info;
}

}  // namespace distlock::backends::consul
