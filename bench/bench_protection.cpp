// bench_protection.cpp -- how fast protection starts: the time from Postfix
// logging `status=deferred` for a message to the moment a resend of that
// message is refused, on the host that logged it and (Redis) on another host
// of the fleet. Runs a real retryguard-policyd following a log file this
// program appends to; probes the ledger as the milter does (identity filter,
// then find_pending_copies, then counts_as_retrying), for SQLite and for a
// redis-server of its own on 127.0.0.1. Each sample: the message is recorded
// as host A's milter records it, its qmgr and deferred lines are appended to
// A's log, and both probes ask every 0.5 ms until the copy counts. On Redis it
// also measures how long A's record takes to reach B's filter (the stream).
// Not included: the milter protocol's round trip (bench_milter: ~0.1 ms).
// Never used outside the benchmark; binds nothing but loopback and a temp dir.
#include <arpa/inet.h>
#include <fmt/chrono.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "retryguard/identity/identity_filter.hpp"
#include "retryguard/identity/resend.hpp"
#include "retryguard/ledger/ledger.hpp"

namespace fs = std::filesystem;
using namespace retryguard;
using Clock = std::chrono::steady_clock;

namespace {

std::string g_dir;
std::vector<pid_t> g_children;

pid_t spawn(const std::vector<std::string>& argv, const std::string& err) {
    pid_t pid = fork();
    if (pid == 0) {
        std::freopen(err.c_str(), "a", stderr);
        std::freopen(err.c_str(), "a", stdout);
        std::vector<char*> a;
        for (const auto& s : argv) a.push_back(const_cast<char*>(s.c_str()));
        a.push_back(nullptr);
        execv(a[0], a.data());
        _exit(127);
    }
    g_children.push_back(pid);
    return pid;
}

void stop(pid_t pid) {
    kill(pid, SIGTERM);
    int st;
    waitpid(pid, &st, 0);
    g_children.erase(std::remove(g_children.begin(), g_children.end(), pid), g_children.end());
}

int free_loopback_port() {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0)
        throw std::runtime_error("no free loopback port");
    ::close(fd);
    return ntohs(a.sin_port);
}

// One host's milter as far as refusing goes: its identity filter (fed by its
// own records, scans and, on Redis, the change stream) in front of the ledger.
class Probe {
  public:
    explicit Probe(const std::string& spec) {
        auto l = open_ledger(spec);
        if (!l) throw std::runtime_error(l.error().message);
        ledger_ = std::move(*l);
        if (auto s = ledger_->open_identity_stream()) stream_ = std::move(*s);
        if (stream_ && !stream_->mark()) throw std::runtime_error("identity stream: mark failed");
        auto r = filter_.rebuild(
            [this](const IdentityFilter::Visitor& v) { return ledger_->for_each_open_identity(v); });
        if (!r) throw std::runtime_error(r.error().message);
        if (stream_) reader_ = std::thread([this] { read_stream(); });
    }
    ~Probe() {
        stop_ = true;
        if (reader_.joinable()) reader_.join();
    }
    Ledger& ledger() { return *ledger_; }
    IdentityFilter& filter() { return filter_; }
    // Whether a resend of (message_id, recipient) is refused now.
    bool refuses(const std::string& message_id, const std::string& recipient) {
        if (!filter_.may_have_copy(message_id, "")) return false;
        PendingCopyQuery q;
        q.message_id = message_id;
        q.recipients = {recipient};
        q.exclude_queue_id = "RESEND";
        auto r = ledger_->find_pending_copies(q);
        if (!r) return false;
        return std::any_of(r->begin(), r->end(), [](const PendingCopy& c) { return counts_as_retrying(c); });
    }

  private:
    void read_stream() {
        while (!stop_) {
            auto st = stream_->read(
                std::chrono::milliseconds(100),
                [this](std::string_view m, std::string_view f) { filter_.add_normalised(m, f); });
            if (!st) {
                std::fprintf(stderr, "identity stream: %s\n", st.error().message.c_str());
                filter_.invalidate();
                std::this_thread::sleep_for(std::chrono::milliseconds(100));
                if (stream_->mark())
                    (void)filter_.rebuild([this](const IdentityFilter::Visitor& v) {
                        return ledger_->for_each_open_identity(v);
                    });
            }
        }
    }
    std::unique_ptr<Ledger> ledger_;
    std::unique_ptr<IdentityStream> stream_;
    IdentityFilter filter_;
    std::atomic<bool> stop_{false};
    std::thread reader_;
};

std::string syslog_time() {
    auto now = std::chrono::system_clock::now();
    std::time_t t = std::chrono::system_clock::to_time_t(now);
    std::tm tm{};
    localtime_r(&t, &tm);
    char buf[32];
    std::strftime(buf, sizeof buf, "%b %e %H:%M:%S", &tm);
    return buf;
}

struct Figures {
    std::vector<double> ms;
    int missed = 0;
    int first_probe = 0;  // samples refused by the first probe after the write
};

double pct(std::vector<double> v, double p) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    auto i = static_cast<std::size_t>(p / 100.0 * static_cast<double>(v.size() - 1) + 0.5);
    return v[std::min(i, v.size() - 1)];
}

void print(const std::string& what, const Figures& f) {
    std::printf(
        "  %-37s samples %4zu  p50 %6.2f ms  p90 %6.2f ms  p99 %6.2f ms  max %6.2f ms  missed %d  at the "
        "first "
        "probe %d\n",
        what.c_str(), f.ms.size(), pct(f.ms, 50), pct(f.ms, 90), pct(f.ms, 99),
        f.ms.empty() ? 0.0 : *std::max_element(f.ms.begin(), f.ms.end()), f.missed, f.first_probe);
}

// One backend: policyd follows A's log; probe A (same host) and, on Redis,
// probe B (another host: its own connections, its filter fed by the stream).
void run(const std::string& name, const std::string& spec, const std::string& ledger_yaml,
         const std::string& policyd, int samples, const std::string& batch_delay) {
    const std::string dir = g_dir + "/" + name;
    fs::create_directories(dir);
    const std::string log = dir + "/mail.log";
    std::ofstream(log).close();
    const std::string conf = dir + "/retryguard.yaml";
    {
        std::ofstream c(conf);
        c << ledger_yaml << "\n"
          << "sources:\n  - {type: file, name: \"a:maillog\", path: \"" << log << "\", start: beginning}\n"
          << "ingest: {batch_max_delay: " << batch_delay << "}\n"
          << "metrics: {enabled: false}\n"
          << "policy: {socket: \"unix:" << dir << "/policy.sock\", user: nobody, group: nogroup}\n"
          << "log: {target: stderr}\n";
    }
    fs::permissions(dir, fs::perms::all);
    fs::permissions(log, fs::perms::all);
    pid_t pd = spawn({policyd, "-c", conf, "--foreground"}, dir + "/policyd.stderr");
    // the daemon creates the SQLite files as the user it runs as: the probes open them after
    for (int i = 0; i < 200 && !spec.starts_with("redis") && !fs::exists(dir + "/ledger.db-wal"); ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    Probe a(spec);
    std::unique_ptr<Probe> b;
    if (spec.starts_with("redis")) b = std::make_unique<Probe>(spec);
    std::ofstream out(log, std::ios::app);
    Figures same, other, streamed;
    std::mt19937 rng(42);
    // the first sample waits for the daemon to start following
    for (int i = -1; i < samples; ++i) {
        const std::string qid = fmt::format("{:X}", 0xA000000000ULL + static_cast<unsigned>(i + 1));
        const std::string mid = fmt::format("lat-{}-{}@client.example", name, i + 1);
        const std::string rcpt = fmt::format("user{}@defer.example", i + 1);
        MessageIdentity id;
        id.queue_id = qid;
        id.message_id = mid;
        id.fingerprint = "fp-" + mid;
        id.sender = "alice@example.org";
        id.time = std::chrono::time_point_cast<Duration>(std::chrono::system_clock::now());
        if (auto st = a.ledger().record_identity(id); !st) throw std::runtime_error(st.error().message);
        a.filter().add(mid, id.fingerprint);
        if (b) {  // the filter update: A's record reaching B's filter through the stream
            const auto r0 = Clock::now();
            while (!(b->filter().ready() && b->filter().may_have_copy(mid, "")) &&
                   Clock::now() - r0 < std::chrono::seconds(5))
                std::this_thread::sleep_for(std::chrono::microseconds(100));
            if (i >= 0) {
                if (b->filter().may_have_copy(mid, ""))
                    streamed.ms.push_back(
                        std::chrono::duration<double, std::milli>(Clock::now() - r0).count());
                else
                    ++streamed.missed;
            }
        }
        // away from the follower's batch timer's phase
        std::this_thread::sleep_for(std::chrono::milliseconds(20 + rng() % 80));
        // the probes must not refuse before the deferral is logged: a probe that
        // did would measure nothing
        if (a.refuses(mid, rcpt) || (b && b->refuses(mid, rcpt)))
            throw std::runtime_error("a resend was refused before its original's deferral was logged");
        const std::string t = syslog_time();
        out << t << " a postfix/qmgr[1001]: " << qid
            << ": from=<alice@example.org>, size=1200, nrcpt=1 (queue active)\n"
            << t << " a postfix/smtp[1002]: " << qid << ": to=<" << rcpt
            << ">, relay=mx.defer.example[192.0.2.1]:25, delay=0.2, delays=0.1/0/0.05/0.05, dsn=4.3.5, "
               "status=deferred (host mx.defer.example[192.0.2.1] said: 451 4.3.5 System config error (in "
               "reply to RCPT TO command))\n";
        out.flush();
        const auto t0 = Clock::now();
        const auto limit = t0 + (i < 0 ? std::chrono::seconds(30) : std::chrono::seconds(10));
        bool done_a = false, done_b = !b;
        int probes = 0;
        while ((!done_a || !done_b) && Clock::now() < limit) {
            ++probes;
            if (!done_a && a.refuses(mid, rcpt)) {
                done_a = true;
                same.first_probe += i >= 0 && probes == 1;
                if (i >= 0)
                    same.ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
            }
            if (!done_b && b->refuses(mid, rcpt)) {
                done_b = true;
                other.first_probe += i >= 0 && probes == 1;
                if (i >= 0)
                    other.ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
            }
            std::this_thread::sleep_for(std::chrono::microseconds(500));
        }
        if (i < 0 && !(done_a && done_b))
            throw std::runtime_error("the policy daemon did not carry the first deferral (see " + dir +
                                     "/policyd.stderr)");
        if (i >= 0) {
            same.missed += !done_a;
            other.missed += !done_b;
        }
    }
    stop(pd);
    std::printf("%s (ingest.batch_max_delay %s):\n", name.c_str(), batch_delay.c_str());
    print("refused on the same host", same);
    if (b) print("refused on another host", other);
    if (b) print("record reaches another host's filter", streamed);
    std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
    int samples = 300;
    std::string batch_delay = "200ms";
    for (int i = 1; i + 1 < argc; i += 2) {
        if (std::string_view(argv[i]) == "--samples") samples = std::max(1, std::atoi(argv[i + 1]));
        if (std::string_view(argv[i]) == "--batch-max-delay") batch_delay = argv[i + 1];
    }
    fs::path self = fs::canonical("/proc/self/exe");
    std::string policyd = (self.parent_path().parent_path() / "policyd" / "retryguard-policyd").string();
    if (const char* e = std::getenv("RETRYGUARD_POLICYD")) policyd = e;
    std::string redis_bin = "/usr/bin/redis-server";
    if (const char* e = std::getenv("RETRYGUARD_REDIS_SERVER")) redis_bin = e;
    char tmpl[] = "/tmp/retryguard-bench-protection.XXXXXX";
    g_dir = mkdtemp(tmpl);
    chmod(g_dir.c_str(), 0777);
    int rc = 0;
    try {
        run("sqlite", "sqlite:" + g_dir + "/sqlite/ledger.db",
            "ledger: {backend: sqlite, sqlite: {path: \"" + g_dir + "/sqlite/ledger.db\"}}", policyd, samples,
            batch_delay);
        const int port = free_loopback_port();
        pid_t redis = spawn({redis_bin, "--port", std::to_string(port), "--bind", "127.0.0.1", "--save", "",
                             "--appendonly", "no", "--dir", g_dir, "--logfile", g_dir + "/redis.log"},
                            g_dir + "/redis.log");
        const std::string spec = fmt::format("redis://127.0.0.1:{}", port);
        for (int i = 0; i < 200; ++i) {
            auto l = open_ledger(spec);
            if (l && (*l)->stats()) break;
            usleep(25000);
        }
        run("redis", spec,
            fmt::format("ledger: {{backend: redis, redis: {{address: \"127.0.0.1:{}\"}}}}", port), policyd,
            samples, batch_delay);
        stop(redis);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "bench_protection: %s (files kept in %s)\n", e.what(), g_dir.c_str());
        rc = 1;
    }
    while (!g_children.empty()) stop(g_children.back());
    if (rc == 0) fs::remove_all(g_dir);
    return rc;
}
