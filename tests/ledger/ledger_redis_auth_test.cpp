// ledger_redis_auth_test.cpp -- a secured Redis, as docs/ledger.md "Running a
// fleet" configures it: the whole ledger contract runs as the ACL user of the
// committed tests/e2e/fleet-redis.conf (only the fleet's key prefix, only the
// commands retryguard sends), and ledger.redis.password_file is read through
// the configuration as the programs read it: the right password works, a wrong
// one is an error the caller fails open on, a file others may read is refused.
// Label: redis (binary retryguard_redis_auth_tests).
#include <sys/stat.h>

#include <fstream>
#include <sstream>

#include "ledger/ledger_contract.hpp"
#include "ledger/redis_server.hpp"
#include "retryguard/config/config.hpp"
#include "retryguard/runtime/runtime.hpp"

namespace retryguard::ledger_test {
namespace {

namespace fs = std::filesystem;

constexpr const char* kFleetUser = "rg-fleet1";
constexpr const char* kFleetPrefix = "rg:fleet1:";
constexpr const char* kFleetPassword = "fleet-acl-pw";

struct StopServer : testing::Environment {
    void TearDown() override { RedisServer::stop_shared(); }
};
[[maybe_unused]] auto* const kStop = testing::AddGlobalTestEnvironment(new StopServer);

// The ACL rules of the `user rg-fleet1 ...` line in tests/e2e/fleet-redis.conf,
// its placeholder password replaced by this test's.
std::vector<std::string> fleet_acl_rules() {
    std::ifstream in(std::string(RETRYGUARD_SOURCE_DIR) + "/tests/e2e/fleet-redis.conf");
    std::string line;
    while (std::getline(in, line)) {
        std::istringstream words(line);
        std::string directive, user;
        words >> directive >> user;
        if (directive != "user" || user != kFleetUser) continue;
        std::vector<std::string> rules;
        for (std::string w; words >> w;)
            rules.push_back(w == ">change-this-password" ? std::string(">") + kFleetPassword : w);
        return rules;
    }
    return {};
}

struct RawRedis {
    redisContext* c = nullptr;
    explicit RawRedis(int port) {
        timeval tv{1, 0};
        c = redisConnectWithTimeout("127.0.0.1", port, tv);
    }
    ~RawRedis() {
        if (c) redisFree(c);
    }
    std::string command(const std::vector<std::string>& argv) {
        std::vector<const char*> ptrs;
        std::vector<size_t> lens;
        for (const auto& a : argv) {
            ptrs.push_back(a.data());
            lens.push_back(a.size());
        }
        auto* r = static_cast<redisReply*>(
            redisCommandArgv(c, static_cast<int>(argv.size()), ptrs.data(), lens.data()));
        if (!r) return "(no reply)";
        std::string out = r->str ? std::string(r->str, r->len) : std::to_string(r->integer);
        if (r->type == REDIS_REPLY_ERROR) out = "ERR:" + out;
        freeReplyObject(r);
        return out;
    }
};

// Creates the fleet user on the shared server once (the default user stays
// open there: the harness's own PING needs it).
bool ensure_fleet_user(const RedisServer& server) {
    static bool done = [&] {
        auto rules = fleet_acl_rules();
        if (rules.empty()) return false;
        RawRedis raw(server.port());
        if (!raw.c || raw.c->err) return false;
        std::vector<std::string> argv{"ACL", "SETUSER", kFleetUser};
        argv.insert(argv.end(), rules.begin(), rules.end());
        return raw.command(argv) == "OK";
    }();
    return done;
}

LedgerBackend redis_fleet_acl_backend() {
    LedgerBackend b;
    b.name = "redis_fleet_acl";
    b.open = [](const std::string& tag) -> Result<std::unique_ptr<Ledger>> {
        auto* server = RedisServer::shared();
        if (!server) return make_error(ErrorKind::unavailable, "no redis-server");
        // Here, not only in `precondition`: LedgerContract does not call that.
        if (!ensure_fleet_user(*server))
            return make_error(ErrorKind::config,
                              std::string("no `user ") + kFleetUser +
                                  "` line in tests/e2e/fleet-redis.conf, or ACL SETUSER refused it");
        LedgerOptions o;
        o.spec = server->spec();
        o.key_prefix = std::string(kFleetPrefix) + tag + ":";
        o.connect_timeout = std::chrono::milliseconds(500);
        o.command_timeout = std::chrono::milliseconds(2000);
        o.redis_username = kFleetUser;
        o.redis_password = kFleetPassword;
        return open_ledger(o);
    };
    b.precondition = [] {
        RETRYGUARD_REQUIRE_REDIS(RedisServer::shared());
        ASSERT_TRUE(ensure_fleet_user(*RedisServer::shared()))
            << "no `user " << kFleetUser << "` line in tests/e2e/fleet-redis.conf, or ACL SETUSER refused it";
    };
    return b;
}

INSTANTIATE_TEST_SUITE_P(RedisFleetAcl, LedgerContract, testing::Values(redis_fleet_acl_backend()),
                         backend_name);

TEST(LedgerRedisAuth, TheFleetUserReachesOnlyItsPrefixAndCommands) {
    RETRYGUARD_REQUIRE_REDIS(RedisServer::shared());
    auto& server = *RedisServer::shared();
    ASSERT_TRUE(ensure_fleet_user(server));
    RawRedis raw(server.port());
    ASSERT_EQ(raw.command({"AUTH", kFleetUser, kFleetPassword}), "OK");
    EXPECT_EQ(raw.command({"SET", std::string(kFleetPrefix) + "probe", "1"}), "OK");
    EXPECT_EQ(raw.command({"SET", "elsewhere:probe", "1"}).rfind("ERR:NOPERM", 0), 0u);
    EXPECT_EQ(raw.command({"FLUSHALL"}).rfind("ERR:NOPERM", 0), 0u);
    EXPECT_EQ(raw.command({"KEYS", "*"}).rfind("ERR:NOPERM", 0), 0u);
    EXPECT_EQ(raw.command({"CONFIG", "GET", "requirepass"}).rfind("ERR:NOPERM", 0), 0u);
}

// A private server with requirepass and the fleet's ACL user, and password
// files read through the configuration, as the milter, the policy daemon and
// the CLI read them.
class PasswordFile : public testing::Test {
  protected:
    void SetUp() override {
        RETRYGUARD_REQUIRE_REDIS(RedisServer::shared());
        server_ = std::make_unique<RedisServer>();
        ASSERT_TRUE(server_->running());
        RawRedis raw(server_->port());
        std::vector<std::string> argv{"ACL", "SETUSER", kFleetUser};
        auto rules = fleet_acl_rules();
        ASSERT_FALSE(rules.empty());
        argv.insert(argv.end(), rules.begin(), rules.end());
        ASSERT_EQ(raw.command(argv), "OK");
        ASSERT_EQ(raw.command({"CONFIG", "SET", "requirepass", "s3cret"}), "OK");
        dir_ = fs::temp_directory_path() / ("rg-redis-auth-" + std::to_string(::getpid()));
        fs::create_directories(dir_);
    }
    void TearDown() override {
        std::error_code ec;
        fs::remove_all(dir_, ec);
    }
    std::string write_file(const std::string& name, const std::string& text, mode_t mode) {
        const std::string path = (dir_ / name).string();
        std::ofstream(path, std::ios::trunc) << text;
        ::chmod(path.c_str(), mode);
        return path;
    }
    Result<std::unique_ptr<Ledger>> open_with(const std::string& password_file) {
        auto loaded = config::load_string(
            "", "<test>",
            {"ledger.backend=redis", "ledger.redis.address=127.0.0.1:" + std::to_string(server_->port()),
             std::string("ledger.redis.key_prefix=") + kFleetPrefix,
             "ledger.redis.password_file=" + password_file, "ledger.redis.timeout=1s"});
        if (!loaded.ok()) {
            for (const auto& e : loaded.errors) ADD_FAILURE() << e.to_string();
            return make_error(ErrorKind::config, "configuration refused");
        }
        return open_configured_ledger(*loaded.config);
    }
    // One write and one read: what the follower and the milter do first.
    static Status use(Ledger& l) {
        auto w = l.ingest(std::vector<IngestItem>{deferred("AUTHQ1", 1, "a@b.test")}, std::nullopt);
        if (!w) return w.error();
        auto r = l.get_message("AUTHQ1");
        if (!r) return r.error();
        if (!r->has_value()) return make_error(ErrorKind::internal, "ingested message not found");
        return {};
    }
    std::unique_ptr<RedisServer> server_;
    fs::path dir_;
};

TEST_F(PasswordFile, RequirepassAndAclUserWorkWithTheRightPassword) {
    for (const auto& [name, text] : std::vector<std::pair<std::string, std::string>>{
             {"requirepass", "s3cret\n"}, {"acl", std::string(kFleetUser) + ":" + kFleetPassword + "\n"}}) {
        auto l = open_with(write_file(name + ".pw", text, 0640));
        ASSERT_TRUE(l) << name << ": " << l.error().message;
        Status st = use(**l);
        EXPECT_TRUE(st) << name << ": " << (st ? "" : st.error().message);
    }
}

// Every message of failed uses until one names `expected` (the ledger backs off
// after a failed AUTH and answers "waiting before reconnecting" meanwhile).
std::string failures_until(Ledger& l, Status (*use)(Ledger&), const std::string& expected) {
    std::string seen;
    for (int i = 0; i < 50; ++i) {
        Status st = use(l);
        if (st) return seen + "(succeeded)";
        seen += st.error().message + "\n";
        if (st.error().message.find(expected) != std::string::npos) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return seen;
}

TEST_F(PasswordFile, AWrongPasswordIsAnErrorToFailOpenOnNotACrash) {
    for (const auto& [name, text] : std::vector<std::pair<std::string, std::string>>{
             {"requirepass", "wrong\n"}, {"acl", std::string(kFleetUser) + ":wrong\n"}}) {
        // The daemons start with a wrong password (they fail open per message)...
        auto l = open_with(write_file(name + ".pw", text, 0600));
        ASSERT_TRUE(l) << name << ": " << l.error().message;
        // ...every operation fails, and once the back-off allows a new
        // connection, the failure says why.
        const std::string seen = failures_until(**l, use, "WRONGPASS");
        EXPECT_NE(seen.find("WRONGPASS"), std::string::npos) << name << ": " << seen;
        EXPECT_NE(seen.find("check ledger.redis.password_file"), std::string::npos) << name << ": " << seen;
        EXPECT_EQ(seen.find("(succeeded)"), std::string::npos) << name << ": " << seen;
    }
    // No password at all against a server that wants one: Redis refuses the
    // unauthenticated script upload before it would say NOAUTH.
    LedgerOptions o;
    o.spec = server_->spec();
    o.key_prefix = kFleetPrefix;
    o.reconnect_max = std::chrono::milliseconds(200);
    o.warn = [](std::string_view) {};
    auto none = open_ledger(o);
    ASSERT_TRUE(none);
    Status st = use(**none);
    ASSERT_FALSE(st);
    const std::string& m = st.error().message;
    EXPECT_TRUE(m.find("NOAUTH") != std::string::npos || m.find("unauthenticated") != std::string::npos) << m;
}

TEST_F(PasswordFile, AFileOthersMayReadOrTheGroupMayChangeIsRefused) {
    for (mode_t mode : {0644, 0604, 0606, 0660, 0670}) {
        auto l = open_with(write_file("bad.pw", "s3cret\n", mode));
        ASSERT_FALSE(l) << std::oct << mode;
        EXPECT_EQ(l.error().kind, ErrorKind::config);
        EXPECT_NE(l.error().message.find("ledger.redis.password_file " + (dir_ / "bad.pw").string()),
                  std::string::npos)
            << l.error().message;
    }
    // root:<service group> 0640, 0600 and 0400 are fine.
    for (mode_t mode : {0640, 0600, 0400, 0440}) {
        auto l = open_with(write_file("good.pw", "s3cret\n", mode));
        ASSERT_TRUE(l) << std::oct << mode << ": " << l.error().message;
    }
    EXPECT_FALSE(open_with((dir_ / "missing.pw").string()));
}

}  // namespace
}  // namespace retryguard::ledger_test
