// redis_server.hpp -- a private redis-server for tests and benchmarks: started on a free
// loopback port in a temporary directory, without persistence, and stopped by
// the destructor. Tests that need it call RedisServer::require(): without a
// redis-server binary they fail when CI=true and are skipped (loudly) otherwise.
#pragma once

#include <fcntl.h>
#include <sys/prctl.h>

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include <thread>
#include "retryguard/ledger/ledger.hpp"

#include <hiredis/hiredis.h>

namespace retryguard::ledger_test {

inline std::string find_redis_server() {
    if (const char* env = std::getenv("REDIS_SERVER")) return env;
    for (const char* p : {"/usr/bin/redis-server", "/usr/local/bin/redis-server", "/usr/sbin/redis-server"})
        if (access(p, X_OK) == 0) return p;
    return {};
}

inline int free_loopback_port() {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = 0;
    socklen_t len = sizeof a;
    if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
        getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
        if (fd >= 0) close(fd);
        return 0;
    }
    int port = ntohs(a.sin_port);
    close(fd);  // redis cannot take port 0; the race with another binder is accepted
    return port;
}

class RedisServer {
  public:
    explicit RedisServer(int port = 0) : port_(port ? port : free_loopback_port()) {
        dir_ = std::filesystem::temp_directory_path() /
               ("retryguard-redis-" + std::to_string(getpid()) + "-" + std::to_string(port_));
        std::filesystem::create_directories(dir_);
        start();
    }
    ~RedisServer() {
        stop();
        std::error_code ec;
        std::filesystem::remove_all(dir_, ec);
    }
    RedisServer(const RedisServer&) = delete;
    RedisServer& operator=(const RedisServer&) = delete;

    int port() const { return port_; }
    bool running() const { return pid_ > 0; }
    std::string spec() const { return "redis://127.0.0.1:" + std::to_string(port_); }

    // A ledger of this server under `prefix`, with a test's timeouts.
    LedgerOptions options(const std::string& prefix,
                          std::chrono::milliseconds command_timeout = std::chrono::milliseconds(2000)) const {
        LedgerOptions o;
        o.spec = spec();
        o.key_prefix = prefix;
        o.connect_timeout = std::chrono::milliseconds(500);
        o.command_timeout = command_timeout;
        return o;
    }

    bool start() {
        if (pid_ > 0) return true;
        auto binary = find_redis_server();
        if (binary.empty()) return false;
        pid_ = fork();
        if (pid_ == 0) {
            // The server must neither outlive the test process (a crashed test
            // would leave it running) nor hold the test's output pipes open
            // (ctest would wait for them until its timeout).
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            int devnull = open("/dev/null", O_RDWR);
            if (devnull >= 0) {
                dup2(devnull, 0);
                dup2(devnull, 1);
                dup2(devnull, 2);
                if (devnull > 2) close(devnull);
            }
            std::string port = std::to_string(port_);
            std::string dir = dir_.string();
            execl(binary.c_str(), binary.c_str(), "--port", port.c_str(), "--bind", "127.0.0.1", "--save", "",
                  "--appendonly", "no", "--dir", dir.c_str(), "--daemonize", "no", "--loglevel", "warning",
                  static_cast<char*>(nullptr));
            _exit(127);
        }
        for (int i = 0; i < 200; ++i) {  // up to ~4 s
            if (ping()) return true;
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
        stop();
        return false;
    }

    void stop() {
        if (pid_ <= 0) return;
        kill(pid_, SIGKILL);
        int status = 0;
        waitpid(pid_, &status, 0);
        pid_ = -1;
    }

    bool ping() const {
        timeval tv{0, 200000};
        redisContext* c = redisConnectWithTimeout("127.0.0.1", port_, tv);
        bool ok = false;
        if (c && !c->err) {
            auto* r = static_cast<redisReply*>(redisCommand(c, "PING"));
            ok = r && r->type == REDIS_REPLY_STATUS;
            if (r) freeReplyObject(r);
        }
        if (c) redisFree(c);
        return ok;
    }

    // The shared server of a test binary, or nullptr when there is none. Never
    // destroyed by static destructors: forked test children _exit() and must not
    // stop it; the parent calls stop_shared() once at the end.
    static RedisServer*& shared_slot() {
        static RedisServer* server = [] {
            if (find_redis_server().empty()) return static_cast<RedisServer*>(nullptr);
            auto* s = new RedisServer();
            if (!s->running()) {
                delete s;
                return static_cast<RedisServer*>(nullptr);
            }
            return s;
        }();
        return server;
    }
    static RedisServer* shared() { return shared_slot(); }
    static void stop_shared() {
        delete shared_slot();  // stops the server and removes its directory
        shared_slot() = nullptr;
    }

  private:
    int port_;
    pid_t pid_ = -1;
    std::filesystem::path dir_;
};

inline bool in_ci() {
    const char* ci = std::getenv("CI");
    return ci && std::string(ci) == "true";
}

// Fails (CI=true) or skips (include gtest first) with a loud message when Redis cannot run here.
#define RETRYGUARD_REQUIRE_REDIS(server)                                                                  \
    do {                                                                                                  \
        if (!(server)) {                                                                                  \
            std::fprintf(stderr,                                                                          \
                         "\n*** REDIS NOT AVAILABLE: redis-server not found or did not start; the Redis " \
                         "ledger tests did NOT run. Install redis-server (Debian: apt-get install "       \
                         "redis-server) or set REDIS_SERVER. ***\n\n");                                   \
            if (::retryguard::ledger_test::in_ci()) FAIL() << "redis-server is required when CI=true";    \
            GTEST_SKIP() << "redis-server not available (outside CI)";                                    \
        }                                                                                                 \
    } while (0)

}  // namespace retryguard::ledger_test
