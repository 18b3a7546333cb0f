// bench_milter.cpp -- retryguard-milter through the milter protocol, against a
// no-op libmilter milter (bench/noop_milter.c) built in the same run: messages
// per second and end-of-message latency, with a ledger holding
// RETRYGUARD_BENCH_LEDGER_MESSAGES (default 100000) deferred messages: SQLite,
// or with RETRYGUARD_BENCH_LEDGER=redis a redis-server of its own on
// 127.0.0.1 (a free port, no persistence), stopped at the end.
// The client side of the milter protocol is written here (what Postfix's
// smtpd/cleanup do), so nothing but the two milters is measured.
// Never used outside the benchmark; binds nothing but unix sockets in a temp dir.
#include <arpa/inet.h>
#include <benchmark/benchmark.h>
#include <fmt/format.h>
#include <libmilter/mfdef.h>
#include <netinet/in.h>
#include <pwd.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "retryguard/ledger/ledger.hpp"

namespace fs = std::filesystem;
using namespace retryguard;

namespace {

struct Milter {
    std::string name;
    std::string socket;
    pid_t pid = -1;
};
std::vector<Milter> g_milters;  // [0] = no-op reference, [1] = retryguard
pid_t g_redis = -1;             // the Redis mode's server
std::atomic<std::uint64_t> g_seq{0};
std::string g_dir;

// ------------------------------------------------------------ protocol client
class Client {
  public:
    explicit Client(const std::string& path) {
        fd_ = ::socket(AF_UNIX, SOCK_STREAM, 0);
        sockaddr_un a{};
        a.sun_family = AF_UNIX;
        std::snprintf(a.sun_path, sizeof a.sun_path, "%s", path.c_str());
        if (::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0)
            throw std::runtime_error("connect " + path + ": " + std::strerror(errno));
        // offer everything; the filter answers with the steps it wants skipped
        std::string neg(12, '\0');
        put32(neg, 0, 6);
        put32(neg, 4, 0x1ff);
        put32(neg, 8, 0x001fffff);
        send('O', neg);
        auto [cmd, data] = read();
        if (cmd != 'O' || data.size() < 12) throw std::runtime_error("bad option negotiation");
        proto_ = get32(data, 8);
        // connect as a TCP client, the SMTP path
        send_macro('C', {{"j", "sender.bench.test"}, {"{daemon_name}", "sender"}});
        std::string c = "client.bench.test";
        c += '\0';
        c += '4';
        c += static_cast<char>(0xc3);  // port 50000, network order
        c += static_cast<char>(0x50);
        c += "127.0.0.1";
        c += '\0';
        step('C', c, SMFIP_NOCONNECT, SMFIP_NR_CONN);
    }
    ~Client() {
        send('Q', "");
        ::close(fd_);
    }

    // One message; returns the EOM round-trip in nanoseconds.
    std::int64_t message(std::uint64_t n) {
        char qid[32];
        std::snprintf(qid, sizeof qid, "B%011llX", static_cast<unsigned long long>(n));
        send_macro('M', {{"i", qid}});
        step('M', z("<alice@example.org>"), SMFIP_NOMAIL, SMFIP_NR_MAIL);
        send_macro('R', {{"i", qid}});
        step('R', z("<bob" + std::to_string(n % 97) + "@defer.example>"), SMFIP_NORCPT, SMFIP_NR_RCPT);
        step('T', "", SMFIP_NODATA, SMFIP_NR_DATA);
        header("From", "Alice <alice@example.org>");
        header("To", "bob@defer.example");
        header("Subject", "Quarterly figures " + std::to_string(n));
        header("Message-ID", "<bench-" + std::to_string(n) + "@client.example>");
        header("Date", "Mon, 30 Nov 2026 10:00:00 +0000");
        header("Content-Type", "text/plain; charset=us-ascii");
        step('N', "", SMFIP_NOEOH, SMFIP_NR_EOH);
        std::string body = "Hello Bob,\r\n\r\nthe figures for message " + std::to_string(n) + " follow.\r\n";
        for (int i = 0; i < 15; ++i)
            body += "Line of ordinary text that makes the body about a kilobyte.\r\n";
        step('B', body, SMFIP_NOBODY, SMFIP_NR_BODY);
        auto t0 = std::chrono::steady_clock::now();
        send('E', "");
        for (;;) {
            auto [cmd, data] = read();
            if (cmd == 'a' || cmd == 'r' || cmd == 'y' || cmd == 'd' || cmd == 't' || cmd == 'c') break;
        }
        return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0)
            .count();
    }

  private:
    static std::string z(std::string s) { return s + '\0'; }
    static void put32(std::string& s, std::size_t at, std::uint32_t v) {
        v = htonl(v);
        std::memcpy(s.data() + at, &v, 4);
    }
    static std::uint32_t get32(const std::string& s, std::size_t at) {
        std::uint32_t v;
        std::memcpy(&v, s.data() + at, 4);
        return ntohl(v);
    }
    void header(const std::string& name, const std::string& value) {
        step('L', z(name) + z(value), SMFIP_NOHDRS, SMFIP_NR_HDR);
    }
    void send_macro(char for_cmd, const std::vector<std::pair<std::string, std::string>>& macros) {
        std::string d(1, for_cmd);
        for (const auto& [k, v] : macros) d += z(k) + z(v);
        send('D', d);
    }
    // Sends a command unless the filter asked to skip it; reads its reply unless
    // the filter asked for none.
    void step(char cmd, const std::string& data, std::uint32_t skip_bit, std::uint32_t noreply_bit) {
        if (proto_ & skip_bit) return;
        send(cmd, data);
        if (proto_ & noreply_bit) return;
        read();
    }
    void send(char cmd, const std::string& data) {
        std::string pkt(4, '\0');
        put32(pkt, 0, static_cast<std::uint32_t>(data.size() + 1));
        pkt += cmd;
        pkt += data;
        for (std::size_t off = 0; off < pkt.size();) {
            ssize_t w = ::write(fd_, pkt.data() + off, pkt.size() - off);
            if (w <= 0) throw std::runtime_error("write to milter failed");
            off += static_cast<std::size_t>(w);
        }
    }
    void read_exact(char* p, std::size_t n) {
        while (n) {
            ssize_t r = ::read(fd_, p, n);
            if (r <= 0) throw std::runtime_error("milter closed the connection");
            p += r;
            n -= static_cast<std::size_t>(r);
        }
    }
    std::pair<char, std::string> read() {
        char len[4];
        read_exact(len, 4);
        std::uint32_t n;
        std::memcpy(&n, len, 4);
        n = ntohl(n);
        if (n == 0 || n > (1u << 20)) throw std::runtime_error("bad packet length");
        std::string buf(n, '\0');
        read_exact(buf.data(), n);
        return {buf[0], buf.substr(1)};
    }

    int fd_ = -1;
    std::uint32_t proto_ = 0;
};

// CPU time (user + system) of every thread the process ever ran, in seconds:
// /proc/PID/stat counts the threads that have exited too (clock ticks).
double process_cpu_seconds(pid_t pid) {
    FILE* f = std::fopen(fmt::format("/proc/{}/stat", pid).c_str(), "r");
    if (!f) return 0;
    char buf[1024] = {};
    std::size_t n = std::fread(buf, 1, sizeof buf - 1, f);
    std::fclose(f);
    const char* p = std::strrchr(buf, ')');  // the command name may hold spaces
    if (!p || static_cast<std::size_t>(p - buf) >= n) return 0;
    unsigned long long utime = 0, stime = 0;
    // fields after the name: state(3) ... utime(14) stime(15)
    if (std::sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &utime, &stime) != 2)
        return 0;
    return static_cast<double>(utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

// The process's write(2)-family calls so far (/proc/PID/io syscw): the
// ledger writer's WAL and checkpoint writes, counted rather than timed.
double process_write_calls(pid_t pid) {
    FILE* f = std::fopen(fmt::format("/proc/{}/io", pid).c_str(), "r");
    if (!f) return 0;
    char key[32];
    unsigned long long v = 0;
    double calls = 0;
    while (std::fscanf(f, "%31s %llu", key, &v) == 2)
        if (std::strcmp(key, "syscw:") == 0) calls = static_cast<double>(v);
    std::fclose(f);
    return calls;
}

void BM_MilterMessage(benchmark::State& state) {
    const Milter& m = g_milters.at(static_cast<std::size_t>(state.range(0)));
    Client client(m.socket);
    double eom_ns = 0;
    const double cpu0 = state.thread_index() == 0 ? process_cpu_seconds(m.pid) : 0;
    const double writes0 = state.thread_index() == 0 ? process_write_calls(m.pid) : 0;
    for (auto _ : state) eom_ns += static_cast<double>(client.message(g_seq++));
    state.SetItemsProcessed(state.iterations());
    state.counters["eom_us"] = benchmark::Counter(eom_ns / 1000.0, benchmark::Counter::kAvgIterations);
    // the milter's CPU per message: thread 0 reads the process's CPU time around
    // its loop (the other threads run theirs at the same time) and divides by
    // every thread's messages; the other threads add 0 to the sum
    state.counters["milter_cpu_us"] = state.thread_index() == 0
                                          ? (process_cpu_seconds(m.pid) - cpu0) * 1e6 /
                                                static_cast<double>(state.iterations() * state.threads())
                                          : 0.0;
    // write calls per message: both milters make the same replies to the MTA,
    // so the difference is retryguard's verdict line and its ledger writes
    state.counters["milter_writes"] = state.thread_index() == 0
                                          ? (process_write_calls(m.pid) - writes0) /
                                                static_cast<double>(state.iterations() * state.threads())
                                          : 0.0;
    state.SetLabel(m.name);
}
// Registered in main(): rounds of (no-op, retryguard) pairs back to back, so
// each ratio compares two runs a second apart on the same (noisy, shared)
// machine; the median of the rounds is reported.

// ------------------------------------------------------------ setup
pid_t spawn(const std::vector<std::string>& argv, const std::string& err) {
    pid_t pid = fork();
    if (pid == 0) {
        std::freopen(err.c_str(), "a", stderr);
        std::vector<char*> a;
        for (const auto& s : argv) a.push_back(const_cast<char*>(s.c_str()));
        a.push_back(nullptr);
        execv(a[0], a.data());
        _exit(127);
    }
    return pid;
}

void wait_socket(const std::string& path) {
    for (int i = 0; i < 200; ++i) {
        struct stat st {};
        if (stat(path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode)) return;
        usleep(25000);
    }
    throw std::runtime_error("no socket " + path);
}

// The ledger as a busy sender's would look: N messages recorded by the milter,
// each deferred once by its receiver.
void populate(const std::string& spec, std::size_t n) {
    LedgerOptions o;
    o.spec = spec;
    o.command_timeout = std::chrono::seconds(30);  // a batch of 5000 events is one Redis script
    auto ledger = open_ledger(o);
    if (!ledger) throw std::runtime_error(ledger.error().message);
    auto t0 = std::chrono::steady_clock::now();
    TimePoint base =
        std::chrono::time_point_cast<Duration>(std::chrono::system_clock::now()) - std::chrono::hours(2);
    std::vector<IngestItem> batch;
    for (std::size_t i = 0; i < n; ++i) {
        MessageIdentity id;
        id.queue_id = "P" + std::to_string(i);
        id.message_id = "pop-" + std::to_string(i) + "@client.example";
        id.fingerprint = std::to_string(i * 2654435761u);
        id.sender = "alice@example.org";
        id.recipients = {"user" + std::to_string(i % 1000) + "@d" + std::to_string(i % 500) + ".example"};
        id.time = base;
        if (auto st = (*ledger)->record_identity(id); !st) throw std::runtime_error(st.error().message);
        IngestItem it;
        it.event.kind = EventKind::delivery;
        it.event.time = base + std::chrono::seconds(1);
        it.event.host = "sender";
        it.event.program = "postfix/smtp";
        it.event.process = "smtp";
        it.event.pid = 4242;
        it.event.queue_id = id.queue_id;
        it.event.recipient = id.recipients[0];
        it.event.status = DeliveryStatus::deferred;
        it.event.dsn = "4.3.5";
        it.event.reason =
            "host mx[192.0.2.1] said: 451 4.3.5 System config error (in reply to RCPT TO command)";
        it.event.text = id.queue_id + ": to=<" + id.recipients[0] + ">, status=deferred";
        batch.push_back(std::move(it));
        if (batch.size() == 5000 || i + 1 == n) {
            auto r = (*ledger)->ingest(batch, std::nullopt);
            if (!r) throw std::runtime_error(r.error().message);
            batch.clear();
        }
    }
    auto s = (*ledger)->stats();
    std::printf("ledger: %zu messages recorded and deferred in %.1f s (%lld messages in the ledger)\n", n,
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
                s ? static_cast<long long>(s->messages) : -1LL);
}

// A loopback port nobody holds now (redis-server cannot be given port 0).
int free_loopback_port() {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = 0;
    socklen_t len = sizeof a;
    if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0)
        throw std::runtime_error("no free loopback port");
    ::close(fd);
    return ntohs(a.sin_port);
}

// Starts redis-server on 127.0.0.1:port, without persistence; returns when a
// ledger can talk to it.
void start_redis(int port) {
    std::string bin = "/usr/bin/redis-server";
    if (const char* e = std::getenv("RETRYGUARD_REDIS_SERVER")) bin = e;
    g_redis = spawn({bin, "--port", std::to_string(port), "--bind", "127.0.0.1", "--save", "", "--appendonly",
                     "no", "--dir", g_dir, "--logfile", g_dir + "/redis.log"},
                    g_dir + "/redis.log");
    for (int i = 0; i < 200; ++i) {
        auto l = open_ledger(fmt::format("redis://127.0.0.1:{}", port));
        if (l && (*l)->stats()) return;
        usleep(25000);
    }
    throw std::runtime_error("redis-server did not start (see " + g_dir + "/redis.log)");
}

void stop_processes() {
    // the milters first: the retryguard milter writes its queued records at stop
    for (auto& m : g_milters)
        if (m.pid > 0) {
            kill(m.pid, SIGTERM);
            int st;
            waitpid(m.pid, &st, 0);
            m.pid = -1;
        }
    if (g_redis > 0) {
        kill(g_redis, SIGTERM);
        int st;
        waitpid(g_redis, &st, 0);
        g_redis = -1;
    }
}

void stop_all() {
    stop_processes();
    if (!g_dir.empty()) fs::remove_all(g_dir);
}

class RatioReporter : public benchmark::ConsoleReporter {
  public:
    void ReportRuns(const std::vector<Run>& runs) override {
        ConsoleReporter::ReportRuns(runs);
        for (const auto& r : runs) {
            auto it = r.counters.find("items_per_second");
            auto eom = r.counters.find("eom_us");
            auto cpu = r.counters.find("milter_cpu_us");
            auto wr = r.counters.find("milter_writes");
            std::string key = r.report_label + "/threads:" + std::to_string(r.threads);
            if (it != r.counters.end()) rate[key].push_back(it->second.value);
            if (eom != r.counters.end()) eom_us[key].push_back(eom->second.value);
            if (cpu != r.counters.end()) cpu_us[key].push_back(cpu->second.value);
            if (wr != r.counters.end()) writes[key].push_back(wr->second.value);
        }
    }
    std::map<std::string, std::vector<double>> rate, eom_us, cpu_us, writes;
};

double median(std::vector<double> v) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

}  // namespace

int main(int argc, char** argv) {
    benchmark::Initialize(&argc, argv);
    std::size_t n = 100000;
    if (const char* e = std::getenv("RETRYGUARD_BENCH_LEDGER_MESSAGES")) n = std::strtoul(e, nullptr, 10);
    fs::path self = fs::canonical("/proc/self/exe");
    fs::path milter_dir = self.parent_path().parent_path() / "milter";
    std::string rg = (milter_dir / "retryguard-milter").string(),
                noop = (milter_dir / "retryguard-bench-noop-milter").string();
    if (const char* e = std::getenv("RETRYGUARD_MILTER")) rg = e;
    if (const char* e = std::getenv("RETRYGUARD_NOOP_MILTER")) noop = e;

    char tmpl[] = "/tmp/retryguard-bench-milter.XXXXXX";
    g_dir = mkdtemp(tmpl);
    chmod(g_dir.c_str(), 0755);
    std::string user = "";
    if (geteuid() == 0) user = "nobody";
    const char* backend = std::getenv("RETRYGUARD_BENCH_LEDGER");
    const bool redis = backend && std::string_view(backend) == "redis";
    try {
        std::string spec = "sqlite:" + g_dir + "/ledger.db";
        std::vector<std::string> ledger_args = {"-o", "ledger.sqlite.path=" + g_dir + "/ledger.db"};
        if (redis) {
            const int port = free_loopback_port();
            start_redis(port);
            spec = fmt::format("redis://127.0.0.1:{}", port);
            ledger_args = {"-o", "ledger.backend=redis", "-o",
                           fmt::format("ledger.redis.address=127.0.0.1:{}", port)};
        }
        populate(spec, n);
        if (!user.empty()) {
            passwd* pw = getpwnam(user.c_str());
            for (const auto& e : fs::directory_iterator(g_dir))
                chown(e.path().c_str(), pw->pw_uid, pw->pw_gid);
            chown(g_dir.c_str(), pw->pw_uid, pw->pw_gid);
        }
        g_milters.push_back({"noop", g_dir + "/noop.sock", -1});
        g_milters.push_back({"retryguard", g_dir + "/rg.sock", -1});
        g_milters[0].pid = spawn({noop, "unix:" + g_milters[0].socket}, g_dir + "/noop.stderr");
        std::vector<std::string> args = {rg,
                                         "-c",
                                         "/dev/null",
                                         "-o",
                                         "milter.socket=unix:" + g_milters[1].socket,
                                         "-o",
                                         "milter.socket_mode=0666",
                                         "-o",
                                         "log.target=stderr"};
        args.insert(args.end(), ledger_args.begin(), ledger_args.end());
        if (!user.empty())
            args.insert(args.end(), {"-o", "milter.user=" + user, "-o", "milter.group=nogroup"});
        g_milters[1].pid = spawn(args, g_dir + "/retryguard-milter.stderr");
        wait_socket(g_milters[0].socket);
        wait_socket(g_milters[1].socket);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "bench_milter: setup failed: %s\n", e.what());
        stop_all();
        return 1;
    }
    int rounds = 5;
    if (const char* e = std::getenv("RETRYGUARD_BENCH_ROUNDS")) rounds = std::max(1, std::atoi(e));
    for (int round = 1; round <= rounds; ++round)
        for (int threads : {1, 4})
            for (int m : {0, 1})
                benchmark::RegisterBenchmark(fmt::format("BM_MilterMessage/round:{}/{}", round,
                                                         g_milters[static_cast<std::size_t>(m)].name)
                                                 .c_str(),
                                             BM_MilterMessage)
                    ->Arg(m)
                    ->Threads(threads)
                    ->UseRealTime()
                    ->MinTime(1.0);
    RatioReporter reporter;
    try {
        benchmark::RunSpecifiedBenchmarks(&reporter);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "bench_milter: %s\n", e.what());
        stop_all();
        return 1;
    }
    // what the milter said about its ledger and filter (its start and stop lines,
    // warnings, and a sanitizer's report when RETRYGUARD_MILTER is a sanitizer build)
    stop_processes();
    if (FILE* f = std::fopen((g_dir + "/retryguard-milter.stderr").c_str(), "r")) {
        char line[1024];
        while (std::fgets(line, sizeof line, f))
            if (std::strstr(line, "identity filter") || std::strstr(line, "lookups_filtered") ||
                std::strstr(line, "warning") || std::strstr(line, "ledger (redis)") ||
                std::strstr(line, "Sanitizer") || std::strstr(line, "runtime error") ||
                std::strstr(line, "starting"))
                std::printf("milter: %s", line);
        std::fclose(f);
    }
    stop_all();
    std::printf(
        "\nretryguard-milter against the no-op milter (ledger: %s, %zu deferred messages), %d rounds\n",
        redis ? "redis" : "sqlite", n, rounds);
    for (int t : {1, 4}) {
        std::string k = "/threads:" + std::to_string(t);
        const auto& a = reporter.rate["retryguard" + k];
        const auto& b = reporter.rate["noop" + k];
        std::vector<double> ratios;
        std::string each;
        for (std::size_t i = 0; i < a.size() && i < b.size(); ++i)
            if (b[i] > 0) {
                ratios.push_back(100.0 * a[i] / b[i]);
                each += fmt::format(" {:.0f}", ratios.back());
            }
        if (ratios.empty()) continue;
        std::printf(
            "  %d connection(s): median %8.0f msg/s vs %8.0f msg/s = %5.1f %% of the no-op throughput "
            "(rounds:%s %%); EOM %6.1f us vs %6.1f us; milter CPU per message %5.1f us vs %5.1f us; "
            "write calls per message %4.1f vs %4.1f\n",
            t, median(a), median(b), median(ratios), each.c_str(), median(reporter.eom_us["retryguard" + k]),
            median(reporter.eom_us["noop" + k]), median(reporter.cpu_us["retryguard" + k]),
            median(reporter.cpu_us["noop" + k]), median(reporter.writes["retryguard" + k]),
            median(reporter.writes["noop" + k]));
    }
    return 0;
}
