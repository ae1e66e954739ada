// Offline tests of the zk:// layout: lock names as path segments, Curator's node
// names and ordering.
#include <catch2/catch.hpp>
#include <clocale>
#include <set>

#include "zk_names.hpp"

using namespace distlock::backends::zookeeper;

TEST_CASE("plain lock names are their own path segment", "[zookeeper][names]") {
    CHECK(encode_segment("orders-42") == "orders-42");
    CHECK(encode_segment("stock:product_01") == "stock:product_01");
    CHECK(encode_segment("a.b~c@d") == "a.b~c@d");
}

TEST_CASE("slashes, NUL, percent, spaces and non-ASCII bytes are percent-encoded", "[zookeeper][names]") {
    CHECK(encode_segment("a/b") == "a%2Fb");
    CHECK(encode_segment(std::string("a\0b", 3)) == "a%00b");
    CHECK(encode_segment("100%") == "100%25");
    CHECK(encode_segment("a b\tc\n") == "a%20b%09c%0A");
    CHECK(encode_segment("\xe9\x94\x81") == "%E9%94%81");
    CHECK(encode_segment("\x7f") == "%7F");
}

TEST_CASE("dot segments cannot escape the base path", "[zookeeper][names]") {
    CHECK(encode_segment(".") == "%2E");
    CHECK(encode_segment("..") == "%2E%2E");
    CHECK(encode_segment("...") == "...");
}

TEST_CASE("distinct names map to distinct segments", "[zookeeper][names]") {
    std::set<std::string> seen;
    const std::vector<std::string> names = {"a/b", "a%2Fb", "a%252Fb", ".", "%2E", "..", std::string("\0", 1),
                                            "%00", "a b",   "a%20b"};
    for (const auto& n : names) CHECK(seen.insert(encode_segment(n)).second);
}

TEST_CASE("the encoding is byte-exact whatever the locale: each byte by its value alone, no hashing, injective",
          "[zookeeper][names]") {
    // No <cctype> predicate is involved (a UTF-8 or Latin-1 locale would make
    // bytes >= 0x80 "alphanumeric" to isalnum): the same bytes come out in C
    // and in the environment's locale.
    auto encode_all = [] {
        std::vector<std::string> out;
        for (int a = 0; a < 256; ++a)
            for (int b = 0; b < 256; ++b) out.push_back(encode_segment(std::string{char(a), char(b)}));
        return out;
    };
    const auto in_c = encode_all();
    const std::string previous = std::setlocale(LC_ALL, nullptr);
    std::setlocale(LC_ALL, "");
    const auto in_env = encode_all();
    std::setlocale(LC_ALL, "C.UTF-8");
    const auto in_utf8 = encode_all();
    std::setlocale(LC_ALL, previous.c_str());
    CHECK(in_c == in_env);
    CHECK(in_c == in_utf8);
    CHECK(std::set<std::string>(in_c.begin(), in_c.end()).size() == in_c.size());  // 65536 names, 65536 segments
    for (int c = 0; c < 256; ++c) {
        const auto e = encode_segment(std::string(1, char(c)));
        const bool kept = c >= 0x21 && c <= 0x7E && c != '/' && c != '%' && c != '.';
        INFO("byte " << c << " -> " << e);
        CHECK((e.size() == 1) == kept);
        CHECK(e.find('/') == std::string::npos);
    }
    // Names are never hashed: the longest name is its full encoding (3 bytes
    // per byte at most), so no literal name can collide with a digest of another.
    const std::string longest(1024, '\xff');
    CHECK(encode_segment(longest).size() == 3 * 1024);
    CHECK(encode_segment("sha256-" + std::string(64, 'a')) == "sha256-" + std::string(64, 'a'));
}

TEST_CASE("base paths are checked", "[zookeeper][names]") {
    CHECK(base_path_problem("/distlock").empty());
    CHECK(base_path_problem("/a/b/c").empty());
    CHECK_FALSE(base_path_problem("").empty());
    CHECK_FALSE(base_path_problem("/").empty());
    CHECK_FALSE(base_path_problem("/a/").empty());
    CHECK_FALSE(base_path_problem("/a//b").empty());
    CHECK_FALSE(base_path_problem("/a/../b").empty());
    CHECK_FALSE(base_path_problem("/zookeeper").empty());
    CHECK_FALSE(base_path_problem("relative").empty());
}

TEST_CASE("lock nodes are named as Curator names them", "[zookeeper][names]") {
    const std::string uuid = "53345f98-9423-4e0c-a7b5-9f819e3ec2e1";
    CHECK(node_prefix(uuid) == "_c_53345f98-9423-4e0c-a7b5-9f819e3ec2e1-lock-");
    CHECK(protected_id(uuid) == "_c_53345f98-9423-4e0c-a7b5-9f819e3ec2e1-");
}

TEST_CASE("children sort by the text after the last lock-, not by uuid", "[zookeeper][names]") {
    std::vector<std::string> kids = {
        "_c_ffffffff-0000-4000-8000-000000000000-lock-0000000003",
        "_c_00000000-0000-4000-8000-000000000000-lock-0000000005",
        "_c_88888888-0000-4000-8000-000000000000-lock-0000000001",
        "lock-0000000002",  // Curator without protection
    };
    sort_children(kids);
    CHECK(sort_key(kids[0]) == "0000000001");
    CHECK(sort_key(kids[1]) == "0000000002");
    CHECK(sort_key(kids[2]) == "0000000003");
    CHECK(sort_key(kids[3]) == "0000000005");
}

TEST_CASE("kazoo's nodes are ordered by their sequence too", "[zookeeper][names]") {
    std::vector<std::string> kids = {
        "_c_11111111-0000-4000-8000-000000000000-lock-0000000004",
        "2f1e0bd6a2e34c8d9d8e7f6a5b4c3d2e__lock__0000000003",
        "0a1b2c3d4e5f40718293a4b5c6d7e8f9__rlock__0000000006",
    };
    sort_children(kids);
    CHECK(kids[0].find("__lock__0000000003") != std::string::npos);
    CHECK(kids[1].find("-lock-0000000004") != std::string::npos);
    CHECK(kids[2].find("__rlock__0000000006") != std::string::npos);
}

TEST_CASE("read-write and lease nodes are named as Curator names them, one sequence orders both sides",
          "[zookeeper][names][rw]") {
    const std::string uuid = "53345f98-9423-4e0c-a7b5-9f819e3ec2e1";
    CHECK(node_prefix(uuid, kReadName) == "_c_53345f98-9423-4e0c-a7b5-9f819e3ec2e1-__READ__");
    CHECK(node_prefix(uuid, kWriteName) == "_c_53345f98-9423-4e0c-a7b5-9f819e3ec2e1-__WRIT__");
    CHECK(node_prefix(uuid, kLeaseName) == "_c_53345f98-9423-4e0c-a7b5-9f819e3ec2e1-lease-");
    std::vector<std::string> kids = {
        "_c_00000000-0000-4000-8000-000000000000-__WRIT__0000000004",
        "_c_ffffffff-0000-4000-8000-000000000000-__READ__0000000002",
        "leases",  // a semaphore of the same name: no part of the queue
        "_c_11111111-0000-4000-8000-000000000000-__READ__0000000007",
    };
    sort_children(kids);
    CHECK(sort_key(kids[0]) == "0000000002");
    CHECK(sort_key(kids[1]) == "0000000004");
    CHECK(sort_key(kids[2]) == "0000000007");
    CHECK(kids[3] == "leases");
    CHECK(is_read_node(kids[0]));
    CHECK_FALSE(is_read_node(kids[1]));
    CHECK(is_queue_node(kids[1]));
    CHECK_FALSE(is_queue_node("leases"));
    CHECK_FALSE(is_queue_node("locks"));
}

TEST_CASE("a reader waits only for a write node before it, and watches the nearest one; a writer its predecessor",
          "[zookeeper][names][rw]") {
    const std::vector<std::string> q = {"a-__READ__0000000001", "b-__WRIT__0000000002", "c-__READ__0000000003",
                                        "d-__WRIT__0000000004", "e-__READ__0000000005", "f-__READ__0000000006"};
    auto t = turn_of(q, "a-__READ__0000000001", true);
    CHECK(t.what == turn::state::held);
    t = turn_of(q, "c-__READ__0000000003", true);  // behind the writer b
    CHECK(t.what == turn::state::wait);
    CHECK(t.watch == "b-__WRIT__0000000002");
    t = turn_of(q, "f-__READ__0000000006", true);  // behind d (the nearest), not the reader e
    CHECK(t.what == turn::state::wait);
    CHECK(t.watch == "d-__WRIT__0000000004");
    t = turn_of(q, "d-__WRIT__0000000004", false);  // a writer watches the node just before it
    CHECK(t.what == turn::state::wait);
    CHECK(t.watch == "c-__READ__0000000003");
    CHECK(turn_of(q, "b-__WRIT__0000000002", false).watch == "a-__READ__0000000001");
    CHECK(turn_of({"x-__WRIT__0000000009"}, "x-__WRIT__0000000009", false).what == turn::state::held);
    CHECK(turn_of(q, "zzz", true).what == turn::state::missing);
    // Readers only before it: a reader holds at once.
    CHECK(turn_of({"a-__READ__0000000001", "c-__READ__0000000003"}, "c-__READ__0000000003", true).what ==
          turn::state::held);
    // A mutex node of the same name counts as a writer for a reader.
    t = turn_of({"m-lock-0000000001", "r-__READ__0000000002"}, "r-__READ__0000000002", true);
    CHECK(t.what == turn::state::wait);
    CHECK(t.watch == "m-lock-0000000001");
    // The holders: a writer alone, or the readers before the first writer.
    CHECK(holders_of(q) == std::vector<std::string>{"a-__READ__0000000001"});
    CHECK(holders_of({"b-__WRIT__0000000002", "c-__READ__0000000003"}) ==
          std::vector<std::string>{"b-__WRIT__0000000002"});
    CHECK(holders_of({"leases", "locks"}).empty());
}

TEST_CASE("the semaphore's size is kept as text that Curator's empty data never matches", "[zookeeper][names]") {
    CHECK(permits_data(3) == "distlock permits=3");
    CHECK(permits_in("distlock permits=3") == 3u);
    CHECK(permits_in(permits_data(4294967295u)) == 4294967295u);
    CHECK_FALSE(permits_in(""));
    CHECK_FALSE(permits_in("10.0.0.7"));  // Curator's default data: the host's address
    CHECK_FALSE(permits_in("distlock permits="));
    CHECK_FALSE(permits_in("distlock permits=0"));
    CHECK_FALSE(permits_in("distlock permits=12x"));
    CHECK_FALSE(permits_in("distlock permits=4294967296"));
}

TEST_CASE("latch nodes sort as LeaderLatch sorts them: by the text after \"latch-\", other recipes' nodes after",
          "[zookeeper][names][election]") {
    std::vector<std::string> kids{"_c_ffffffff-0000-4000-8000-000000000000-latch-0000000003",
                                  "_c_00000000-0000-4000-8000-000000000000-latch-0000000007",
                                  "_c_11111111-0000-4000-8000-000000000000-lock-0000000001",
                                  "_c_aaaaaaaa-0000-4000-8000-000000000000-latch-0000000005"};
    sort_latch_children(kids);
    CHECK(kids[0] == "_c_ffffffff-0000-4000-8000-000000000000-latch-0000000003");
    CHECK(kids[1] == "_c_aaaaaaaa-0000-4000-8000-000000000000-latch-0000000005");
    CHECK(kids[2] == "_c_00000000-0000-4000-8000-000000000000-latch-0000000007");
    CHECK(kids[3] == "_c_11111111-0000-4000-8000-000000000000-lock-0000000001");  // no "latch-": whole name, last
    CHECK(latch_sort_key(kids[0]) == "0000000003");
    CHECK(is_latch_node(kids[0]));
    CHECK_FALSE(is_latch_node(kids[3]));
    // The mutex's order puts latch nodes after its own.
    sort_children(kids);
    CHECK(kids[0] == "_c_11111111-0000-4000-8000-000000000000-lock-0000000001");
    // The nodes inspect counts for a mutex: Curator's and kazoo's, not the
    // other recipes' (latch, read-write, semaphore children).
    CHECK(is_mutex_node("_c_11111111-0000-4000-8000-000000000000-lock-0000000001"));
    CHECK(is_mutex_node("0123abcd__lock__0000000002"));
    CHECK_FALSE(is_mutex_node("_c_00000000-0000-4000-8000-000000000000-latch-0000000007"));
    CHECK_FALSE(is_mutex_node("_c_00000000-0000-4000-8000-000000000000-__WRIT__0000000007"));
    CHECK_FALSE(is_mutex_node("0123abcd__rlock__0000000002"));
    CHECK_FALSE(is_mutex_node("locks"));
    CHECK_FALSE(is_mutex_node("leases"));
    // The leader is the first latch node, and a candidate watches the one before it.
    std::vector<std::string> latches{"_c_b-latch-0000000001", "_c_a-latch-0000000002"};
    sort_latch_children(latches);
    auto t = turn_of(latches, "_c_a-latch-0000000002", false);
    CHECK(t.what == turn::state::wait);
    CHECK(t.watch == "_c_b-latch-0000000001");
}
