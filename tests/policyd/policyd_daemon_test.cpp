// policyd_daemon_test.cpp -- runs the real retryguard-policyd binary on a free
// loopback port and a temporary UNIX socket and talks the policy protocol to
// it: verdicts, pipelining, malformed/oversized/slow clients, stages,
// fail-open, SIGHUP reload, SIGTERM drain, metrics and systemd notify.
#include <fcntl.h>
#include <grp.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

// Started as root, the daemon drops to policy.user (nobody:nogroup in these
// tests): the directories it writes to (ready file, sockets, ledger) must be
// that user's.
// The shipped rules where the daemon can read them after dropping to nobody
// (a reload re-reads them), wherever the build tree is: a clone in /root is
// out of nobody's reach. Returns the directory for RETRYGUARD_DATADIR.
std::string stage_datadir(const fs::path& dir) {
    fs::create_directories(dir / "share");
    fs::copy_file(fs::path(RETRYGUARD_SOURCE_DIR) / "conf" / "classifier.yaml",
                  dir / "share" / "classifier.yaml", fs::copy_options::overwrite_existing);
    ::chmod((dir / "share").c_str(), 0755);
    ::chmod((dir / "share" / "classifier.yaml").c_str(), 0644);
    return (dir / "share").string();
}

void give_to_nobody(const fs::path& p) {
    if (::geteuid() != 0) return;
    const passwd* pw = ::getpwnam("nobody");
    const group* gr = ::getgrnam("nogroup");
    if (pw && gr && ::chown(p.c_str(), pw->pw_uid, gr->gr_gid) != 0) std::perror("chown");
}

// prlimit(RLIMIT_NOFILE) on a daemon. One started as root runs as
// nobody:nogroup; root without CAP_SYS_RESOURCE (a container's) may not change
// another user's limits, so a child with nobody's ids does it. Returns 0 or -1.
[[maybe_unused]] int nofile_limit(pid_t pid, const rlimit* set, rlimit* get) {
    if (::prlimit(pid, RLIMIT_NOFILE, set, get) == 0) return 0;
    if (::geteuid() != 0) return -1;
    const passwd* pw = ::getpwnam("nobody");
    const group* gr = ::getgrnam("nogroup");
    int fds[2];
    if (!pw || !gr || ::pipe(fds) != 0) return -1;
    const pid_t child = ::fork();
    if (child == 0) {
        ::close(fds[0]);
        struct {
            int rc;
            rlimit got;
        } out{-1, {}};
        if (::setgroups(0, nullptr) == 0 && ::setresgid(gr->gr_gid, gr->gr_gid, gr->gr_gid) == 0 &&
            ::setresuid(pw->pw_uid, pw->pw_uid, pw->pw_uid) == 0)
            out.rc = ::prlimit(pid, RLIMIT_NOFILE, set, &out.got);
        [[maybe_unused]] const ssize_t n = ::write(fds[1], &out, sizeof out);
        ::_exit(0);
    }
    ::close(fds[1]);
    struct {
        int rc;
        rlimit got;
    } in{-1, {}};
    const bool read_all = ::read(fds[0], &in, sizeof in) == static_cast<ssize_t>(sizeof in);
    ::close(fds[0]);
    ::waitpid(child, nullptr, 0);
    if (!read_all || in.rc != 0) return -1;
    if (get) *get = in.got;
    return 0;
}

std::string read_file(const fs::path& p) {
    std::ifstream in(p);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

std::string request(const std::string& recipient, const std::string& stage = "RCPT",
                    const std::string& extra = "") {
    return "request=smtpd_access_policy\nprotocol_state=" + stage +
           "\nprotocol_name=ESMTP\nclient_address=192.0.2.1\nclient_name=mx.example\nhelo_name=mx.example\n"
           "queue_id=\nsender=s@example.org\nrecipient=" +
           recipient + "\nrecipient_count=0\ninstance=a.b.c.0\nsize=0\n" + extra + "\n";
}

// A blocking client socket with deadlines.
class Client {
  public:
    static Client tcp(int port) {
        Client c(::socket(AF_INET, SOCK_STREAM, 0));
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_port = htons(static_cast<uint16_t>(port));
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        c.ok_ = ::connect(c.fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
        int one = 1;
        ::setsockopt(c.fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        return c;
    }
    static Client unix_socket(const std::string& path) {
        Client c(::socket(AF_UNIX, SOCK_STREAM, 0));
        sockaddr_un a{};
        a.sun_family = AF_UNIX;
        std::strncpy(a.sun_path, path.c_str(), sizeof a.sun_path - 1);
        c.ok_ = ::connect(c.fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
        return c;
    }
    Client(Client&& o) noexcept : fd_(std::exchange(o.fd_, -1)), ok_(o.ok_), buf_(std::move(o.buf_)) {}
    ~Client() {
        if (fd_ >= 0) ::close(fd_);
    }
    bool connected() const { return ok_; }
    const std::string& received() const { return buf_; }
    bool send(const std::string& s) {
        std::size_t off = 0;
        while (off < s.size()) {
            const ssize_t n = ::send(fd_, s.data() + off, s.size() - off, MSG_NOSIGNAL);
            if (n <= 0) return false;
            off += static_cast<std::size_t>(n);
        }
        return true;
    }
    // One answer ("...\n\n"), or "" on EOF/timeout.
    std::string answer(std::chrono::milliseconds timeout = 5000ms) {
        const auto until = Clock::now() + timeout;
        for (;;) {
            const auto end = buf_.find("\n\n");
            if (end != std::string::npos) {
                std::string a = buf_.substr(0, end + 2);
                buf_.erase(0, end + 2);
                return a;
            }
            if (!fill(until)) return "";
        }
    }
    // True if the peer closes the connection within `timeout`.
    bool closed_within(std::chrono::milliseconds timeout) {
        const auto until = Clock::now() + timeout;
        while (fill(until)) {
        }
        return eof_;
    }

  private:
    explicit Client(int fd) : fd_(fd) {}
    bool fill(Clock::time_point until) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now()).count();
        if (left <= 0) return false;
        pollfd p{fd_, POLLIN, 0};
        if (::poll(&p, 1, static_cast<int>(left)) <= 0) return false;
        char b[4096];
        const ssize_t n = ::recv(fd_, b, sizeof b, 0);
        if (n <= 0) {
            eof_ = true;
            return false;
        }
        buf_.append(b, static_cast<std::size_t>(n));
        return true;
    }
    int fd_ = -1;
    bool ok_ = false;
    bool eof_ = false;
    std::string buf_;
};

std::string http_body(int port, const std::string& path) {
    // HTTP/1.1 with Connection: close: everything up to EOF.
    Client c = Client::tcp(port);
    if (!c.connected()) return "";
    c.send("GET " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
    c.closed_within(3000ms);
    return c.received();
}

// Value of one metric line ("name{labels} value"), or -1.
double metric(const std::string& text, const std::string& series) {
    const auto pos = text.find("\n" + series + " ");
    if (pos == std::string::npos) return -1;
    return std::stod(text.substr(pos + series.size() + 2));
}

class Daemon {
  public:
    // `wrapper`: a command the daemon is started through (its arguments follow).
    explicit Daemon(std::vector<std::string> extra = {}, std::map<std::string, std::string> env = {},
                    bool with_table = true, bool metrics_flag = true, std::vector<std::string> wrapper = {}) {
        dir_ = fs::temp_directory_path() /
               ("rg-policyd-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter_++));
        fs::remove_all(dir_);
        fs::create_directories(dir_);
        give_to_nobody(dir_);
        table_ = dir_ / "flagged";
        write_table(
            "# test table\n"
            "flagged.test REJECT 5.7.1 destination flagged by retryguard\n"
            "warned.test WARN retryguard: destination flagged\n"
            "held.test HOLD retryguard\n");
        unix_path_ = (dir_ / "policy.sock").string();
        // Everything but the table comes from the configuration: an empty file
        // (built-in defaults) unless the test gives its own -c, with -o overrides.
        std::vector<std::string> args = {RETRYGUARD_POLICYD,
                                         "--foreground",
                                         "-o",
                                         "policy.socket=inet:0@127.0.0.1",
                                         "-o",
                                         "policy.extra_sockets=[unix:" + unix_path_ + "]",
                                         "-o",
                                         "log.target=stderr",
                                         "--ready-file",
                                         (dir_ / "ready").string()};
        if (metrics_flag) args.insert(args.end(), {"-o", "metrics.listen=127.0.0.1:0"});
        if (with_table) args.insert(args.end(), {"--flagged", table_.string()});
        // Without a file of the test's own: built-in defaults, and (started as
        // root) the daemon drops to nobody, who can reach this directory.
        if (std::find(extra.begin(), extra.end(), "-c") == extra.end())
            args.insert(args.end(),
                        {"-c", "/dev/null", "-o", "policy.user=nobody", "-o", "policy.group=nogroup"});
        args.insert(args.end(), extra.begin(), extra.end());
        args.insert(args.begin(), wrapper.begin(), wrapper.end());
        start(args, env);
    }
    ~Daemon() {
        if (pid_ > 0) {
            ::kill(pid_, SIGKILL);
            ::waitpid(pid_, nullptr, 0);
        }
        fs::remove_all(dir_);
    }
    void write_table(const std::string& text) {
        const auto tmp = table_.string() + ".tmp";
        std::ofstream(tmp) << text;
        fs::rename(tmp, table_);
    }
    bool ready() const { return port_ > 0 && metrics_port_ > 0; }
    bool listening() const { return port_ > 0; }  // the policy socket, whether or not metrics are served
    std::string ready_file() const { return read_file(dir_ / "ready"); }
    int port() const { return port_; }
    int metrics_port() const { return metrics_port_; }
    const std::string& unix_path() const { return unix_path_; }
    pid_t pid() const { return pid_; }
    std::string log() const { return read_file(dir_ / "log"); }
    std::string metrics() const { return http_body(metrics_port_, "/metrics"); }
    void signal(int sig) const { ::kill(pid_, sig); }
    // Kills the daemon and waits for it: a test that removes a directory the
    // daemon writes into (its ledger, state, log) stops it first, or the
    // removal races with its writes ("Directory not empty").
    void stop() {
        if (pid_ > 0) {
            ::kill(pid_, SIGKILL);
            ::waitpid(pid_, nullptr, 0);
            pid_ = -1;
        }
    }
    // Waits for exit; returns the exit status, or -1 on timeout/signal.
    int wait_exit(std::chrono::milliseconds timeout) {
        const auto until = Clock::now() + timeout;
        while (Clock::now() < until) {
            int st = 0;
            const pid_t r = ::waitpid(pid_, &st, WNOHANG);
            if (r == pid_) {
                pid_ = -1;
                return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
            }
            std::this_thread::sleep_for(20ms);
        }
        return -1;
    }
    const fs::path& dir() const { return dir_; }

  private:
    void start(const std::vector<std::string>& args, const std::map<std::string, std::string>& env) {
        const std::string log = (dir_ / "log").string();
        const std::string datadir = stage_datadir(dir_);
        pid_ = ::fork();
        if (pid_ == 0) {
            if (!env.count("RETRYGUARD_DATADIR")) ::setenv("RETRYGUARD_DATADIR", datadir.c_str(), 1);
            const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
            ::dup2(fd, 2);
            ::dup2(fd, 1);
            for (const auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
            std::vector<char*> argv;
            for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
            argv.push_back(nullptr);
            ::execv(argv[0], argv.data());
            ::_exit(127);
        }
        const auto until = Clock::now() + 15s;
        while (Clock::now() < until) {
            const std::string r = read_file(dir_ / "ready");
            if (!r.empty()) {
                std::istringstream in(r);
                std::string line;
                while (std::getline(in, line)) {
                    const auto colon = line.rfind(':');
                    if (line.rfind("policy tcp:", 0) == 0) port_ = std::stoi(line.substr(colon + 1));
                    if (line.rfind("metrics ", 0) == 0) metrics_port_ = std::stoi(line.substr(colon + 1));
                }
                return;
            }
            int st = 0;
            if (::waitpid(pid_, &st, WNOHANG) == pid_) {
                pid_ = -1;
                return;
            }
            std::this_thread::sleep_for(20ms);
        }
    }
    static inline int counter_ = 0;
    fs::path dir_, table_;
    std::string unix_path_;
    pid_t pid_ = -1;
    int port_ = 0;
    int metrics_port_ = 0;
};

const std::string kDunno = "action=DUNNO\n\n";
const std::string kReject = "action=REJECT 5.7.1 destination flagged by retryguard\n\n";

}  // namespace

// --foreground only keeps the daemon attached: where lines go is log.target
// and log.verdicts. Verdicts sent to a file are not on stderr, and the
// daemon's own lines at log.level warning leave out the info lines.
TEST(PolicydDaemon, ForegroundLogsWhereTheConfigurationSays) {
    const fs::path verdicts =
        fs::temp_directory_path() / ("rg-policyd-verdicts-" + std::to_string(::getpid()));
    fs::remove(verdicts);
    Daemon d({"-o", "log.verdicts=file:" + verdicts.string()});
    ASSERT_TRUE(d.ready()) << d.log();
    Client c = Client::tcp(d.port());
    ASSERT_TRUE(c.send(request("user@flagged.test")));
    EXPECT_EQ(c.answer(), kReject);
    EXPECT_NE(read_file(verdicts).find("verdict=policy_reject"), std::string::npos) << read_file(verdicts);
    EXPECT_EQ(d.log().find("verdict=policy_reject"), std::string::npos) << d.log();
    EXPECT_NE(d.log().find("listening: policy"), std::string::npos) << d.log();
    fs::remove(verdicts);

    Daemon quiet({"-o", "log.level=warning"});
    ASSERT_TRUE(quiet.ready()) << quiet.log();
    Client q = Client::tcp(quiet.port());
    ASSERT_TRUE(q.send(request("user@flagged.test")));
    EXPECT_EQ(q.answer(), kReject);
    ASSERT_TRUE(q.send("garbage without equals sign\n\n"));
    EXPECT_TRUE(q.closed_within(3000ms));
    for (int i = 0; i < 150 && quiet.log().find("warning: malformed") == std::string::npos; ++i)
        std::this_thread::sleep_for(20ms);
    EXPECT_NE(quiet.log().find("warning: malformed"), std::string::npos) << quiet.log();
    EXPECT_EQ(quiet.log().find("listening: policy"), std::string::npos) << quiet.log();
}

// The verdict lines carry log.hostname in their host field, as the milter's
// lines and the daemon's own do.
TEST(PolicydDaemon, VerdictLinesCarryTheConfiguredHostName) {
    const fs::path verdicts =
        fs::temp_directory_path() / ("rg-policyd-verdicts-host-" + std::to_string(::getpid()));
    fs::remove(verdicts);
    Daemon d({"-o", "log.verdicts=file:" + verdicts.string(), "-o", "log.hostname=relay-7.example"});
    ASSERT_TRUE(d.ready()) << d.log();
    Client c = Client::tcp(d.port());
    ASSERT_TRUE(c.send(request("user@flagged.test")));
    EXPECT_EQ(c.answer(), kReject);
    const std::string written = read_file(verdicts);
    const auto at = written.find("verdict=policy_reject");
    ASSERT_NE(at, std::string::npos) << written;
    const std::string line = written.substr(0, written.find('\n', at));
    EXPECT_NE(line.find(" relay-7.example retryguard/policyd["), std::string::npos) << line;
    fs::remove(verdicts);
}

TEST(PolicydDaemon, UnknownDestinationGetsDunnoFlaggedGetsConfiguredActionOverTcpAndUnix) {
    Daemon d;
    ASSERT_TRUE(d.ready()) << d.log();
    for (bool use_unix : {false, true}) {
        Client c = use_unix ? Client::unix_socket(d.unix_path()) : Client::tcp(d.port());
        ASSERT_TRUE(c.connected());
        // One persistent connection, many requests, as Postfix's smtpd does.
        for (int i = 0; i < 3; ++i) {
            ASSERT_TRUE(c.send(request("user@unknown.test")));
            EXPECT_EQ(c.answer(), kDunno);
            ASSERT_TRUE(c.send(request("user@Flagged.Test")));
            EXPECT_EQ(c.answer(), kReject);
            ASSERT_TRUE(c.send(request("user@warned.test")));
            EXPECT_EQ(c.answer(), "action=WARN retryguard: destination flagged\n\n");
        }
    }
    EXPECT_NE(d.log().find("NOQUEUE: verdict=policy_reject action=\"REJECT 5.7.1 destination flagged by "
                           "retryguard\" recipient=user@Flagged.Test destination=Flagged.Test stage=RCPT"),
              std::string::npos)
        << d.log();
}

TEST(PolicydDaemon, PipelinedAndSplitRequestsAreAnsweredInOrder) {
    Daemon d;
    ASSERT_TRUE(d.ready()) << d.log();
    Client c = Client::tcp(d.port());
    const std::string batch = request("a@flagged.test") + request("b@x.test") + request("c@held.test");
    ASSERT_TRUE(c.send(batch));
    EXPECT_EQ(c.answer(), kReject);
    EXPECT_EQ(c.answer(), kDunno);
    EXPECT_EQ(c.answer(), "action=HOLD retryguard\n\n");
    // The same bytes in small pieces with pauses.
    for (std::size_t off = 0; off < batch.size(); off += 7) {
        ASSERT_TRUE(c.send(batch.substr(off, 7)));
        if (off % 140 == 0) std::this_thread::sleep_for(2ms);
    }
    EXPECT_EQ(c.answer(), kReject);
    EXPECT_EQ(c.answer(), kDunno);
    EXPECT_EQ(c.answer(), "action=HOLD retryguard\n\n");
}

TEST(PolicydDaemon, UnknownAttributesAreIgnoredAndCounted) {
    Daemon d;
    ASSERT_TRUE(d.ready()) << d.log();
    Client c = Client::tcp(d.port());
    ASSERT_TRUE(c.send(request("a@flagged.test", "RCPT", "some_future_attribute=1\nanother=2\n")));
    EXPECT_EQ(c.answer(), kReject);
    EXPECT_EQ(metric(d.metrics(), "retryguard_policy_unknown_attributes_total"), 2);
}

TEST(PolicydDaemon, MalformedRequestClosesThatConnectionOnly) {
    Daemon d;
    ASSERT_TRUE(d.ready()) << d.log();
    Client good = Client::tcp(d.port());
    ASSERT_TRUE(good.send(request("a@flagged.test")));
    EXPECT_EQ(good.answer(), kReject);

    Client bad = Client::tcp(d.port());
    // A valid request, then garbage: the first is still answered, then close.
    ASSERT_TRUE(bad.send(request("a@x.test") + "this line has no equals sign\n\n"));
    EXPECT_EQ(bad.answer(), kDunno);
    EXPECT_TRUE(bad.closed_within(3000ms));

    Client binary = Client::unix_socket(d.unix_path());
    ASSERT_TRUE(binary.send(std::string("\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03", 11)));
    EXPECT_TRUE(binary.closed_within(3000ms));

    ASSERT_TRUE(good.send(request("b@flagged.test")));
    EXPECT_EQ(good.answer(), kReject);
    const std::string m = d.metrics();
    EXPECT_EQ(metric(m, "retryguard_policy_malformed_total{reason=\"malformed_line\"}"), 1) << m;
    EXPECT_EQ(metric(m, "retryguard_policy_malformed_total{reason=\"binary_data\"}"), 1);
    EXPECT_NE(d.log().find("warning: malformed policy request"), std::string::npos) << d.log();
}

TEST(PolicydDaemon, OversizedRequestAndLongLineAreRejected) {
    Daemon d({"-o", "policy.max_request_size=2048B", "-o", "policy.max_line_length=512B"});
    ASSERT_TRUE(d.ready()) << d.log();
    Client big = Client::tcp(d.port());
    std::string extra;
    for (int i = 0; i < 60; ++i) extra += "filler_" + std::to_string(i) + "=" + std::string(40, 'x') + "\n";
    ASSERT_TRUE(big.send(request("a@flagged.test", "RCPT", extra)));
    EXPECT_EQ(big.answer(1000ms), "");
    EXPECT_TRUE(big.closed_within(3000ms));

    Client longline = Client::tcp(d.port());
    ASSERT_TRUE(longline.send("request=smtpd_access_policy\nsender=" + std::string(1000, 'a')));
    EXPECT_TRUE(longline.closed_within(3000ms));

    Client ok = Client::tcp(d.port());
    ASSERT_TRUE(ok.send(request("a@flagged.test")));
    EXPECT_EQ(ok.answer(), kReject);
    const std::string m = d.metrics();
    EXPECT_EQ(metric(m, "retryguard_policy_malformed_total{reason=\"request_too_large\"}"), 1) << m;
    EXPECT_EQ(metric(m, "retryguard_policy_malformed_total{reason=\"line_too_long\"}"), 1);
}

TEST(PolicydDaemon, OneBytePerSecondClientHitsTimeoutWithoutStallingOthers) {
    Daemon d({"-o", "policy.request_timeout=2s"});
    ASSERT_TRUE(d.ready()) << d.log();
    std::atomic<bool> slow_closed{false};
    std::atomic<int> bytes_sent{0};
    const auto started = Clock::now();
    std::thread slow([&] {
        Client s = Client::tcp(d.port());
        const std::string r = request("a@flagged.test");
        for (char ch : r) {
            if (!s.send(std::string(1, ch))) break;
            ++bytes_sent;
            if (s.closed_within(1000ms)) {
                slow_closed = true;
                return;
            }
        }
    });
    // Meanwhile another client is served promptly, again and again.
    Client fast = Client::tcp(d.port());
    int answered = 0;
    std::chrono::milliseconds worst{0};
    while (Clock::now() - started < 3500ms) {
        const auto t0 = Clock::now();
        ASSERT_TRUE(fast.send(request("b@flagged.test")));
        ASSERT_EQ(fast.answer(), kReject);
        worst = std::max(worst, std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0));
        ++answered;
        std::this_thread::sleep_for(10ms);
    }
    slow.join();
    EXPECT_TRUE(slow_closed);
    EXPECT_LE(bytes_sent.load(), 5);  // closed after about 2 s at 1 byte/s
    EXPECT_GT(answered, 50);
    EXPECT_LT(worst, 500ms);
    EXPECT_EQ(metric(d.metrics(), "retryguard_policy_idle_timeouts_total"), 1);
    EXPECT_NE(d.log().find("request timeout"), std::string::npos) << d.log();
}

TEST(PolicydDaemon, EachPartialRequestGetsItsOwnRequestDeadline) {
    Daemon d({"-o", "policy.request_timeout=2s"});
    ASSERT_TRUE(d.ready()) << d.log();
    Client c = Client::tcp(d.port());
    const std::string a = request("a@flagged.test");
    const std::string b = request("b@x.test");
    ASSERT_TRUE(c.send(a.substr(0, 40)));  // request A starts: deadline t0 + 2 s
    std::this_thread::sleep_for(1500ms);
    ASSERT_TRUE(c.send(a.substr(40) + b.substr(0, 40)));  // A ends, B starts: deadline t0 + 3.5 s
    EXPECT_EQ(c.answer(), kReject);
    std::this_thread::sleep_for(1000ms);  // t0 + 2.5 s: past A's deadline, within B's
    ASSERT_TRUE(c.send(b.substr(40)));
    EXPECT_EQ(c.answer(), kDunno);
}

TEST(PolicydDaemon, IdleConnectionIsClosedAfterIdleTimeout) {
    Daemon d({"-o", "policy.idle_timeout=1s"});
    ASSERT_TRUE(d.ready()) << d.log();
    Client c = Client::tcp(d.port());
    ASSERT_TRUE(c.send(request("a@x.test")));
    EXPECT_EQ(c.answer(), kDunno);
    const auto t0 = Clock::now();
    EXPECT_TRUE(c.closed_within(4000ms));
    EXPECT_GE(Clock::now() - t0, 800ms);
}

TEST(PolicydDaemon, StagesOtherThanRcptAnswerDunnoUnlessConfigured) {
    {
        Daemon d;
        ASSERT_TRUE(d.ready()) << d.log();
        Client c = Client::tcp(d.port());
        for (const char* stage : {"CONNECT", "MAIL", "DATA", "END-OF-MESSAGE"}) {
            ASSERT_TRUE(c.send(request("a@flagged.test", stage)));
            EXPECT_EQ(c.answer(), kDunno) << stage;
        }
        const std::string m = d.metrics();
        EXPECT_EQ(metric(m, "retryguard_policy_requests_total{stage=\"DATA\"}"), 1);
        EXPECT_EQ(metric(m, "retryguard_policy_actions_total{action=\"reject\"}"), 0);
    }
    Daemon d({"-o", "policy.stages=[rcpt, end_of_message]"});
    ASSERT_TRUE(d.ready()) << d.log();
    Client c = Client::tcp(d.port());
    ASSERT_TRUE(c.send(request("a@flagged.test", "END-OF-MESSAGE")));
    EXPECT_EQ(c.answer(), kReject);
    ASSERT_TRUE(c.send(request("a@flagged.test", "DATA")));
    EXPECT_EQ(c.answer(), kDunno);
}

TEST(PolicydDaemon, SlowDeciderFailsOpenWithDunnoAndCounts) {
    Daemon d({"--simulate-slow-decider", "300", "-o", "policy.deadline=50ms"});
    ASSERT_TRUE(d.ready()) << d.log();
    Client c = Client::tcp(d.port());
    const auto t0 = Clock::now();
    ASSERT_TRUE(c.send(request("a@flagged.test")));
    EXPECT_EQ(c.answer(), kDunno);
    EXPECT_LT(Clock::now() - t0, 250ms);  // the deadline, not the decider, set the pace
    const std::string m = d.metrics();
    EXPECT_EQ(metric(m, "retryguard_policy_fail_open_total{reason=\"timeout\"}"), 1) << m;
    EXPECT_NE(d.log().find("fail-open (timeout)"), std::string::npos) << d.log();
}

TEST(PolicydDaemon, OffLoopDeciderWithinDeadlineAnswersItsVerdict) {
    Daemon d({"--simulate-slow-decider", "20", "-o", "policy.deadline=2s"});
    ASSERT_TRUE(d.ready()) << d.log();
    // Several connections at once: a blocking decider must not serialize them
    // on the event loop.
    std::vector<Client> clients;
    for (int i = 0; i < 8; ++i) clients.push_back(Client::tcp(d.port()));
    const auto t0 = Clock::now();
    for (auto& c : clients) ASSERT_TRUE(c.send(request("a@flagged.test")));
    for (auto& c : clients) EXPECT_EQ(c.answer(), kReject);
    EXPECT_EQ(metric(d.metrics(), "retryguard_policy_fail_open_total{reason=\"timeout\"}"), 0);
    EXPECT_LT(Clock::now() - t0, 2000ms);
}

TEST(PolicydDaemon, SighupReloadsTableWithoutDroppingConnections) {
    Daemon d;
    ASSERT_TRUE(d.ready()) << d.log();
    Client c = Client::tcp(d.port());
    ASSERT_TRUE(c.send(request("a@newly.test")));
    EXPECT_EQ(c.answer(), kDunno);
    d.write_table("newly.test DEFER_IF_PERMIT 4.7.1 destination is deferring\n");
    d.signal(SIGHUP);
    std::string got;
    const auto until = Clock::now() + 5s;
    while (Clock::now() < until) {
        ASSERT_TRUE(c.send(request("a@newly.test")));
        got = c.answer();
        ASSERT_FALSE(got.empty()) << "connection dropped during reload";
        if (got != kDunno) break;
        std::this_thread::sleep_for(20ms);
    }
    EXPECT_EQ(got, "action=DEFER_IF_PERMIT 4.7.1 destination is deferring\n\n");
    ASSERT_TRUE(c.send(request("a@flagged.test")));
    EXPECT_EQ(c.answer(), kDunno);  // no longer in the table

    // A broken table keeps the previous one.
    d.write_table("newly.test NOT_AN_ACTION\n");
    d.signal(SIGHUP);
    const auto until2 = Clock::now() + 5s;
    std::string m;
    while (Clock::now() < until2) {
        m = d.metrics();
        if (metric(m, "retryguard_policy_reloads_total{result=\"failed\"}") == 1) break;
        std::this_thread::sleep_for(20ms);
    }
    EXPECT_EQ(metric(m, "retryguard_policy_reloads_total{result=\"failed\"}"), 1) << m;
    EXPECT_EQ(metric(m, "retryguard_policy_reloads_total{result=\"ok\"}"), 1);
    ASSERT_TRUE(c.send(request("a@newly.test")));
    EXPECT_EQ(c.answer(), "action=DEFER_IF_PERMIT 4.7.1 destination is deferring\n\n");
    EXPECT_EQ(metric(m, "retryguard_policy_connections_total"), 1);  // never reconnected
}

TEST(PolicydDaemon, SigtermFinishesRequestInFlightClosesIdleAndExitsCleanly) {
    Daemon d({"--simulate-slow-decider", "300", "-o", "policy.deadline=2s"});
    ASSERT_TRUE(d.ready()) << d.log();
    Client idle = Client::tcp(d.port());
    Client busy = Client::unix_socket(d.unix_path());
    ASSERT_TRUE(idle.send(request("a@x.test")));
    EXPECT_EQ(idle.answer(), kDunno);
    ASSERT_TRUE(busy.send(request("a@flagged.test")));
    std::this_thread::sleep_for(50ms);  // the decision is under way
    d.signal(SIGTERM);
    EXPECT_EQ(busy.answer(), kReject);
    EXPECT_TRUE(busy.closed_within(3000ms));
    EXPECT_TRUE(idle.closed_within(3000ms));
    EXPECT_EQ(d.wait_exit(5000ms), 0) << d.log();
    EXPECT_FALSE(fs::exists(d.unix_path()));
    EXPECT_NE(d.log().find("stopped"), std::string::npos);
}

TEST(PolicydDaemon, MetricsAndHealthEndpoints) {
    Daemon d;
    ASSERT_TRUE(d.ready()) << d.log();
    Client c = Client::tcp(d.port());
    ASSERT_TRUE(c.send(request("a@flagged.test") + request("b@x.test") + request("c@warned.test")));
    for (int i = 0; i < 3; ++i) EXPECT_FALSE(c.answer().empty());
    const std::string m = d.metrics();
    EXPECT_NE(m.find("HTTP/1.1 200"), std::string::npos) << m;
    EXPECT_NE(m.find("text/plain; version=0.0.4"), std::string::npos);
    EXPECT_EQ(metric(m, "retryguard_policy_requests_total{stage=\"RCPT\"}"), 3) << m;
    EXPECT_EQ(metric(m, "retryguard_policy_actions_total{action=\"reject\"}"), 1);
    EXPECT_EQ(metric(m, "retryguard_policy_actions_total{action=\"warn\"}"), 1);
    EXPECT_EQ(metric(m, "retryguard_policy_actions_total{action=\"dunno\"}"), 1);
    EXPECT_EQ(metric(m, "retryguard_policy_decision_seconds_count"), 3);
    EXPECT_EQ(metric(m, "retryguard_policy_open_connections"), 1);
    EXPECT_EQ(metric(m, "retryguard_policy_destinations"), 3);
    const std::string h = http_body(d.metrics_port(), "/health");
    EXPECT_NE(h.find("200 OK"), std::string::npos) << h;
    EXPECT_NE(h.find("ok\n"), std::string::npos);
    EXPECT_NE(http_body(d.metrics_port(), "/nope").find("404"), std::string::npos);
}

TEST(PolicydDaemon, ManyConcurrentConnections) {
    Daemon d;
    ASSERT_TRUE(d.ready()) << d.log();
    std::vector<Client> clients;
    for (int i = 0; i < 200; ++i) {
        clients.push_back(i % 2 ? Client::tcp(d.port()) : Client::unix_socket(d.unix_path()));
        ASSERT_TRUE(clients.back().connected()) << i;
    }
    for (int round = 0; round < 3; ++round) {
        for (std::size_t i = 0; i < clients.size(); ++i)
            ASSERT_TRUE(clients[i].send(request(i % 3 ? "a@x.test" : "a@flagged.test")));
        for (std::size_t i = 0; i < clients.size(); ++i)
            EXPECT_EQ(clients[i].answer(), i % 3 ? kDunno : kReject);
    }
    EXPECT_EQ(metric(d.metrics(), "retryguard_policy_open_connections"), 200);
}

TEST(PolicydDaemon, ConnectionsBeyondTheLimitAreRefusedAndCounted) {
    Daemon d({"-o", "policy.max_connections=2"});
    ASSERT_TRUE(d.ready()) << d.log();
    Client a = Client::tcp(d.port());
    Client b = Client::unix_socket(d.unix_path());
    ASSERT_TRUE(a.send(request("x@flagged.test")));
    ASSERT_TRUE(b.send(request("x@flagged.test")));
    EXPECT_EQ(a.answer(), kReject);
    EXPECT_EQ(b.answer(), kReject);
    Client c = Client::tcp(d.port());
    EXPECT_TRUE(c.closed_within(3000ms));
    // The two admitted connections are unaffected.
    ASSERT_TRUE(a.send(request("y@x.test")));
    EXPECT_EQ(a.answer(), kDunno);
    const std::string m = d.metrics();
    EXPECT_EQ(metric(m, "retryguard_policy_connections_refused_total"), 1) << m;
    EXPECT_EQ(metric(m, "retryguard_policy_open_connections"), 2);
    EXPECT_EQ(metric(m, "retryguard_verdict_log_failures_total"), 0);
}

TEST(PolicydDaemon, SystemdNotifyReadyReloadingStopping) {
    const fs::path sock = fs::temp_directory_path() / ("rg-notify-" + std::to_string(::getpid()));
    fs::remove(sock);
    const int fd = ::socket(AF_UNIX, SOCK_DGRAM, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::strncpy(a.sun_path, sock.c_str(), sizeof a.sun_path - 1);
    ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    // Started as root, the daemon notifies as policy.user, as under systemd.
    ::chmod(sock.c_str(), 0666);
    auto recv_msg = [&](std::chrono::milliseconds timeout) {
        pollfd p{fd, POLLIN, 0};
        if (::poll(&p, 1, static_cast<int>(timeout.count())) <= 0) return std::string();
        char b[512];
        const ssize_t n = ::recv(fd, b, sizeof b, 0);
        return n > 0 ? std::string(b, static_cast<std::size_t>(n)) : std::string();
    };
    {
        Daemon d({}, {{"NOTIFY_SOCKET", sock.string()}});
        ASSERT_TRUE(d.ready()) << d.log();
        EXPECT_EQ(recv_msg(3000ms), "READY=1");
        d.signal(SIGHUP);
        EXPECT_EQ(recv_msg(3000ms).rfind("RELOADING=1\nMONOTONIC_USEC=", 0), 0u);
        EXPECT_EQ(recv_msg(3000ms), "READY=1");
        d.signal(SIGTERM);
        EXPECT_EQ(recv_msg(3000ms), "STOPPING=1");
        EXPECT_EQ(d.wait_exit(5000ms), 0);
    }
    ::close(fd);
    fs::remove(sock);
}

TEST(PolicydDaemon, DaemonModeDetachesReloadsAndStops) {
    const fs::path dir = fs::temp_directory_path() / ("rg-policyd-bg-" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
    give_to_nobody(dir);  // the ready file is written after the drop
    std::ofstream(dir / "flagged") << "a.test REJECT 5.7.1 no\n";
    const std::string datadir = stage_datadir(dir);
    // Relative paths: the daemon runs in "/" and must still find its table on SIGHUP.
    const pid_t starter = ::fork();
    if (starter == 0) {
        if (::chdir(dir.c_str()) != 0) ::_exit(126);
        ::setenv("RETRYGUARD_DATADIR", datadir.c_str(), 1);
        ::execl(RETRYGUARD_POLICYD, RETRYGUARD_POLICYD, "-c", "/dev/null", "-o",
                "policy.socket=inet:0@127.0.0.1", "-o", "metrics.listen=127.0.0.1:0", "-o",
                "policy.user=nobody", "-o", "policy.group=nogroup", "--flagged", "flagged", "--ready-file",
                "ready", static_cast<char*>(nullptr));
        ::_exit(127);
    }
    int st = 0;
    ::waitpid(starter, &st, 0);
    ASSERT_TRUE(WIFEXITED(st));
    ASSERT_EQ(WEXITSTATUS(st), 0);  // returns once the daemon listens
    std::map<std::string, std::string> ready;
    {
        std::istringstream in(read_file(dir / "ready"));
        std::string key, value;
        while (in >> key >> value) ready[key] = value;
    }
    ASSERT_TRUE(ready.count("pid") && ready.count("metrics")) << read_file(dir / "ready");
    const pid_t daemon_pid = std::stoi(ready["pid"]);
    EXPECT_NE(daemon_pid, starter);
    const int port = std::stoi(ready["policy"].substr(ready["policy"].rfind(':') + 1));
    const int mport = std::stoi(ready["metrics"].substr(ready["metrics"].rfind(':') + 1));
    Client c = Client::tcp(port);
    ASSERT_TRUE(c.send(request("u@a.test")));
    EXPECT_EQ(c.answer(), "action=REJECT 5.7.1 no\n\n");
    std::ofstream(dir / "flagged", std::ios::trunc) << "a.test HOLD\n";
    ::kill(daemon_pid, SIGHUP);
    std::string got;
    for (int i = 0; i < 100 && got != "action=HOLD\n\n"; ++i) {
        std::this_thread::sleep_for(20ms);
        ASSERT_TRUE(c.send(request("u@a.test")));
        got = c.answer();
    }
    EXPECT_EQ(got, "action=HOLD\n\n");
    // The new table answers before the reload ends: the configuration is read
    // again after it, and only then is the reload counted.
    double reloads = -1;
    for (int i = 0; i < 250 && reloads != 1; ++i) {
        reloads = metric(http_body(mport, "/metrics"), "retryguard_policy_reloads_total{result=\"ok\"}");
        if (reloads != 1) std::this_thread::sleep_for(20ms);
    }
    EXPECT_EQ(reloads, 1);
    ::kill(daemon_pid, SIGTERM);
    EXPECT_TRUE(c.closed_within(3000ms));
    // The detached daemon's parent is whatever reaps orphans here; it may leave the exited
    // daemon a zombie for a while, and kill(pid, 0) still succeeds on a zombie. A zombie has
    // exited, so it counts as gone. The wait is generous for sanitizer builds (leak check at exit).
    auto exited = [daemon_pid] {
        if (::kill(daemon_pid, 0) != 0) return true;
        const std::string stat = read_file("/proc/" + std::to_string(daemon_pid) + "/stat");
        const auto close = stat.rfind(')');
        return close == std::string::npos ||
               (close + 2 < stat.size() && (stat[close + 2] == 'Z' || stat[close + 2] == 'X'));
    };
    bool gone = false;
    for (int i = 0; i < 500 && !gone; ++i) {
        gone = exited();
        if (!gone) std::this_thread::sleep_for(20ms);
    }
    EXPECT_TRUE(gone);
    if (!gone) ::kill(daemon_pid, SIGKILL);
    fs::remove_all(dir);
}

TEST(PolicydDaemon, RefusesBadConfiguration) {
    const fs::path dir = fs::temp_directory_path() / ("rg-policyd-bad-" + std::to_string(::getpid()));
    fs::create_directories(dir);
    std::ofstream(dir / "bad") << "example.com FROB\n";
    auto run = [&](std::vector<std::string> args) {
        args.insert(args.begin(), RETRYGUARD_POLICYD);
        args.push_back("--foreground");
        const pid_t pid = ::fork();
        if (pid == 0) {
            const int null = ::open("/dev/null", O_WRONLY);
            ::dup2(null, 2);
            std::vector<char*> argv;
            for (auto& s : args) argv.push_back(s.data());
            argv.push_back(nullptr);
            ::execv(argv[0], argv.data());
            ::_exit(127);
        }
        int st = 0;
        ::waitpid(pid, &st, 0);
        return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    };
    std::ofstream(dir / "good") << "example.com REJECT\n";
    const std::string good = (dir / "good").string();
    // policy.user: started as root, the refusals below must not be the drop's.
    const std::vector<std::string> base = {"-c", "/dev/null",          "-o", "metrics.enabled=false",
                                           "-o", "policy.user=nobody", "-o", "policy.group=nogroup"};
    auto with = [&](std::vector<std::string> more) {
        more.insert(more.begin(), base.begin(), base.end());
        return more;
    };
    EXPECT_EQ(run(with({"-o", "policy.socket=inet:0@0.0.0.0", "--flagged", good})), 2);  // not loopback
    EXPECT_EQ(run(with({"-o", "policy.socket=inet:0@127.0.0.1", "--flagged", (dir / "bad").string()})), 2);
    EXPECT_EQ(run(with({"-o", "policy.socket=inet:0@127.0.0.1", "--flagged", (dir / "missing").string()})),
              2);
    EXPECT_EQ(run(with({"-o", "policy.socket=inet:0@127.0.0.1", "-o", "policy.stages=[rcpt, nope]"})), 2);
    EXPECT_EQ(run(with({"-o", "policy.socket=bogus"})), 2);
    EXPECT_EQ(run(with({"-o", "policy.sokcet=inet:0@127.0.0.1"})), 2);  // unknown key
    EXPECT_EQ(run(with({"--listen", "tcp:127.0.0.1:0"})), 2);           // the old flags are gone
    fs::remove_all(dir);
}

// ---------------------------------------------------------------- live state

namespace {

// A daemon started with a configuration: it follows DIR/mail.log, keeps its
// ledger in DIR, and answers from what it has read.
std::string live_config(const fs::path& dir, const std::string& extra = {},
                        const std::string& policy = "user: nobody, group: nogroup") {
    give_to_nobody(dir);
    return "policy: {" + policy +
           "}\n"
           "ledger: {backend: sqlite, sqlite: {path: " +
           (dir / "ledger.db").string() +
           "}}\n"
           "sources:\n  - {type: file, path: " +
           (dir / "mail.log").string() +
           ", start: beginning}\n"
           "ingest: {batch_max_delay: 50ms}\n"
           "categories: {receiver_config: {watch_after_deferrals: 1, escalate_after: 1m}}\n"
           "actions:\n"
           "  escalated: \"REJECT 4.7.1 retryguard: {domain} escalated ({category}) since {since}\"\n" +
           extra;
}

std::vector<std::string> fixture_lines() {
    std::ifstream in(std::string(RETRYGUARD_FIXTURES) +
                     "/postfix-3.7/41-lifecycle-deferred-retries-delay-warning.sender.log");
    std::vector<std::string> out;
    for (std::string l; std::getline(in, l);)
        if (!l.empty() && l[0] != '#') out.push_back(l);
    return out;
}

std::string ask_rcpt(int port, const std::string& recipient) {
    Client c = Client::tcp(port);
    c.send("request=smtpd_access_policy\nprotocol_state=RCPT\nrecipient=" + recipient + "\n\n");
    return c.answer();
}

// Polls `fn` until it returns true or `timeout` passes.
template <typename F>
bool eventually(F fn, std::chrono::milliseconds timeout = 15s) {
    const auto until = Clock::now() + timeout;
    while (Clock::now() < until) {
        if (fn()) return true;
        std::this_thread::sleep_for(50ms);
    }
    return fn();
}

}  // namespace

TEST(PolicydLive, FollowedDeferralsEscalateTheDomainAndItsMailGetsTheConfiguredAction) {
    const fs::path dir = fs::temp_directory_path() / ("rg-policyd-live-" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
    std::ofstream(dir / "retryguard.yaml") << live_config(dir);
    std::ofstream(dir / "mail.log").flush();
    Daemon d({"-c", (dir / "retryguard.yaml").string()}, {}, false);
    ASSERT_TRUE(d.ready()) << d.log();
    EXPECT_EQ(ask_rcpt(d.port(), "user@cfgerr.lab.test"), kDunno);

    const auto lines = fixture_lines();
    ASSERT_GT(lines.size(), 10u);
    {
        std::ofstream log(dir / "mail.log", std::ios::app);
        for (const auto& l : lines) log << l << '\n';
    }
    std::string answer;
    EXPECT_TRUE(eventually([&] {
        answer = ask_rcpt(d.port(), "someone@CfgErr.Lab.Test");
        return answer != kDunno;
    })) << d.log();
    EXPECT_EQ(
        answer.rfind("action=REJECT 4.7.1 retryguard: cfgerr.lab.test escalated (receiver-config) since ", 0),
        0u)
        << answer;
    EXPECT_EQ(ask_rcpt(d.port(), "someone@unrelated.test"), kDunno);

    const std::string m = d.metrics();
    EXPECT_GE(metric(m, "retryguard_destinations{state=\"escalate\"}"), 1) << m;
    EXPECT_GE(metric(m, "retryguard_deferrals_total{category=\"receiver-config\"}"), 5) << m;
    EXPECT_GE(
        metric(m, "retryguard_follower_lines_total{source=\"file:" + (dir / "mail.log").string() + "\"}"),
        static_cast<double>(lines.size()))
        << m;
    EXPECT_GE(metric(m, "retryguard_ingest_batches_total"), 1) << m;

    // SIGHUP with a broken file keeps the running configuration and says where.
    std::ofstream(dir / "retryguard.yaml") << live_config(dir) << "actions: [broken\n";
    d.signal(SIGHUP);
    EXPECT_TRUE(eventually([&] { return d.log().find("reload failed") != std::string::npos; })) << d.log();
    EXPECT_NE(d.log().find("retryguard.yaml:"), std::string::npos) << d.log();
    EXPECT_EQ(ask_rcpt(d.port(), "a@cfgerr.lab.test"), answer);

    // SIGHUP with a new action applies it on the open connection's next request.
    {
        std::string text = live_config(dir);
        const auto pos = text.find("REJECT 4.7.1 retryguard:");
        text.replace(pos, std::string("REJECT 4.7.1 retryguard:").size(), "WARN retryguard:");
        std::ofstream(dir / "retryguard.yaml") << text;
    }
    Client c = Client::tcp(d.port());
    d.signal(SIGHUP);
    EXPECT_TRUE(eventually([&] {
        c.send("request=smtpd_access_policy\nprotocol_state=RCPT\nrecipient=b@cfgerr.lab.test\n\n");
        return c.answer().rfind("action=WARN retryguard: cfgerr.lab.test escalated", 0) == 0;
    })) << d.log();

    // SIGTERM saves the engine state: a restarted daemon answers at once.
    d.signal(SIGTERM);
    EXPECT_EQ(d.wait_exit(10s), 0) << d.log();
    {
        Daemon again({"-c", (dir / "retryguard.yaml").string()}, {}, false);
        ASSERT_TRUE(again.ready()) << again.log();
        EXPECT_EQ(
            ask_rcpt(again.port(), "c@cfgerr.lab.test").rfind("action=WARN retryguard: cfgerr.lab.test", 0),
            0u)
            << again.log();
    }  // stopped before its directory goes: it writes there until it exits
    d.stop();
    fs::remove_all(dir);
}

// ingest.batch_max_events bounds the lines of one ledger transaction: a
// follower catching up on a file that was there before the start writes
// one batch per line with a limit of 1 (with the shipped 2,000 the whole
// fixture fits in one).
TEST(PolicydLive, BatchMaxEventsBoundsTheLinesOfOneBatch) {
    const fs::path dir = fs::temp_directory_path() / ("rg-policyd-batch-" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
    const auto lines = fixture_lines();
    ASSERT_GT(lines.size(), 10u);
    {
        std::ofstream log(dir / "mail.log");
        for (const auto& l : lines) log << l << '\n';
    }
    std::ofstream(dir / "retryguard.yaml") << live_config(dir);
    Daemon d({"-c", (dir / "retryguard.yaml").string(), "-o", "ingest.batch_max_events=1"}, {}, false);
    ASSERT_TRUE(d.ready()) << d.log();
    const auto n = static_cast<double>(lines.size());
    std::string m;
    EXPECT_TRUE(eventually([&] {
        m = d.metrics();
        return metric(m, "retryguard_ingest_lines_total") >= n;
    })) << m;
    EXPECT_EQ(metric(m, "retryguard_ingest_lines_total"), n) << m;
    EXPECT_EQ(metric(m, "retryguard_ingest_batches_total"), n) << m;
    d.stop();
    fs::remove_all(dir);
}

// errors.timeout: tempfail turns the fail-open DUNNO of a decision past its
// deadline into DEFER_IF_PERMIT (counted as a fail-open and as the action);
// a reload back to accept answers DUNNO again.
TEST(PolicydLive, ErrorsTimeoutTempfailDefersInsteadOfDunnoAndFollowsReload) {
    const fs::path dir = fs::temp_directory_path() / ("rg-policyd-errors-" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
    std::ofstream(dir / "retryguard.yaml") << live_config(dir, "errors: {timeout: tempfail}\n");
    std::ofstream(dir / "mail.log").flush();
    Daemon d({"-c", (dir / "retryguard.yaml").string(), "--simulate-slow-decider", "300", "-o",
              "policy.deadline=50ms"},
             {}, false);
    ASSERT_TRUE(d.ready()) << d.log();
    const std::string answer = ask_rcpt(d.port(), "user@example.test");
    EXPECT_EQ(answer.rfind("action=DEFER_IF_PERMIT retryguard: policy check not completed in time", 0), 0u)
        << answer;
    std::string m = d.metrics();
    EXPECT_EQ(metric(m, "retryguard_policy_fail_open_total{reason=\"timeout\"}"), 1) << m;
    EXPECT_EQ(metric(m, "retryguard_policy_actions_total{action=\"defer_if_permit\"}"), 1) << m;

    std::ofstream(dir / "retryguard.yaml", std::ios::trunc)
        << live_config(dir, "errors: {timeout: accept}\n");
    ::kill(d.pid(), SIGHUP);
    EXPECT_TRUE(eventually([&] { return d.log().find("reload done") != std::string::npos; })) << d.log();
    EXPECT_EQ(ask_rcpt(d.port(), "user@example.test"), kDunno);
    d.stop();
    fs::remove_all(dir);
}

// errors.internal: a decision that fails as a bug of ours would
// (--simulate-decider-error) is answered DEFER_IF_PERMIT with tempfail, and
// the warning says which answer went out; a reload to accept answers DUNNO.
TEST(PolicydLive, ErrorsInternalDecidesTheAnswerToAFailedDecision) {
    const fs::path dir = fs::temp_directory_path() / ("rg-policyd-internal-" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
    std::ofstream(dir / "retryguard.yaml") << live_config(dir, "errors: {internal: tempfail}\n");
    std::ofstream(dir / "mail.log").flush();
    Daemon d({"-c", (dir / "retryguard.yaml").string(), "--simulate-decider-error"}, {}, false);
    ASSERT_TRUE(d.ready()) << d.log();
    const std::string answer = ask_rcpt(d.port(), "user@example.test");
    EXPECT_EQ(answer.rfind("action=DEFER_IF_PERMIT retryguard: policy check failed", 0), 0u) << answer;
    EXPECT_TRUE(eventually([&] {
        return d.log().find(
                   "fail-open (decider_error) for recipient=<user@example.test>: answered "
                   "DEFER_IF_PERMIT") != std::string::npos;
    })) << d.log();
    const std::string m = d.metrics();
    EXPECT_EQ(metric(m, "retryguard_policy_fail_open_total{reason=\"decider_error\"}"), 1) << m;
    EXPECT_EQ(metric(m, "retryguard_policy_actions_total{action=\"defer_if_permit\"}"), 1) << m;

    std::ofstream(dir / "retryguard.yaml", std::ios::trunc)
        << live_config(dir, "errors: {internal: accept}\n");
    ::kill(d.pid(), SIGHUP);
    EXPECT_TRUE(eventually([&] { return d.log().find("reload done") != std::string::npos; })) << d.log();
    EXPECT_EQ(ask_rcpt(d.port(), "other@example.test"), kDunno);
    const std::string after = d.metrics();  // still a fail-open, now answered DUNNO
    EXPECT_EQ(metric(after, "retryguard_policy_fail_open_total{reason=\"decider_error\"}"), 2) << after;
    EXPECT_EQ(metric(after, "retryguard_policy_actions_total{action=\"defer_if_permit\"}"), 1) << after;
    d.stop();
    fs::remove_all(dir);
}

// ledger.retention.prune_interval: the daemon prunes the ledger (at start, then
// every interval) on its own thread and connection while it follows the log.
TEST(PolicydLive, PrunesTheLedgerWhileFollowing) {
    const fs::path dir = fs::temp_directory_path() / ("rg-policyd-prune-" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
    std::ofstream(dir / "retryguard.yaml") << live_config(dir);
    std::ofstream(dir / "mail.log").flush();
    Daemon d({"-c", (dir / "retryguard.yaml").string(), "-o", "ledger.retention.prune_interval=1m"}, {},
             false);
    ASSERT_TRUE(d.ready()) << d.log();
    EXPECT_TRUE(eventually([&] { return d.log().find("prune done: messages=0") != std::string::npos; }))
        << d.log();
    EXPECT_EQ(ask_rcpt(d.port(), "user@example.test"), kDunno);
    d.stop();
    fs::remove_all(dir);
}

// A reload whose classifier rule the daemon would refuse fails as a whole: it
// says so and why, and the rest of the new file (errors.timeout) is not
// applied either.
TEST(PolicydLive, ReloadWithBadClassifierRuleFailsAndKeepsTheWholeConfig) {
    const fs::path dir = fs::temp_directory_path() / ("rg-policyd-badrule-" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
    std::ofstream(dir / "retryguard.yaml") << live_config(dir, "errors: {timeout: tempfail}\n");
    std::ofstream(dir / "mail.log").flush();
    Daemon d({"-c", (dir / "retryguard.yaml").string(), "--simulate-slow-decider", "300", "-o",
              "policy.deadline=50ms"},
             {}, false);
    ASSERT_TRUE(d.ready()) << d.log();
    const std::string deferred = ask_rcpt(d.port(), "user@example.test");
    ASSERT_EQ(deferred.rfind("action=DEFER_IF_PERMIT", 0), 0u) << deferred;

    std::ofstream(dir / "retryguard.yaml", std::ios::trunc)
        << live_config(dir,
                       "errors: {timeout: accept}\n"
                       "classifier:\n"
                       "  rules:\n"
                       "    - {name: broken, category: greylisting, text: \"(unclosed\"}\n");
    ::kill(d.pid(), SIGHUP);
    EXPECT_TRUE(eventually([&] { return d.log().find("reload failed") != std::string::npos; })) << d.log();
    EXPECT_NE(d.log().find("bad RE2 pattern in rule `broken`"), std::string::npos) << d.log();
    EXPECT_EQ(d.log().find("reload done"), std::string::npos) << d.log();
    EXPECT_EQ(ask_rcpt(d.port(), "user@example.test").rfind("action=DEFER_IF_PERMIT", 0), 0u) << d.log();
    const std::string m = d.metrics();
    EXPECT_EQ(metric(m, "retryguard_policy_reloads_total{result=\"failed\"}"), 1) << m;
    d.stop();
    fs::remove_all(dir);
}

// ------------------------------------------------------------- hardening

namespace {

// "Uid:" / "Gid:" / "Groups:" line of /proc/PID/status, without the label.
std::string proc_status(pid_t pid, const std::string& field) {
    std::istringstream in(read_file("/proc/" + std::to_string(pid) + "/status"));
    for (std::string line; std::getline(in, line);)
        if (line.rfind(field + ":", 0) == 0) return line.substr(field.size() + 1);
    return "";
}

std::vector<long> numbers(const std::string& text) {
    std::vector<long> out;
    std::istringstream in(text);
    for (long v; in >> v;) out.push_back(v);
    return out;
}

// Lines of `log` that contain `needle`.
std::size_t count_lines(const std::string& log, const std::string& needle) {
    std::size_t n = 0;
    std::istringstream in(log);
    for (std::string line; std::getline(in, line);)
        if (line.find(needle) != std::string::npos) ++n;
    return n;
}

}  // namespace

// Started as root with policy.user/policy.group, the daemon opens its socket
// (owned by them, with policy.socket_mode), its ledger and its log source as
// root, then runs as that user and group only, for good: SIGHUP reloads as
// that user.
TEST(PolicydLive, StartedAsRootRunsAsPolicyUserAndGroupWithItsSocketOwnedByThem) {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root (CI runs this test as root)";
    const passwd* nobody = ::getpwnam("nobody");
    const group* nogroup = ::getgrnam("nogroup");
    ASSERT_TRUE(nobody && nogroup);
    const uid_t uid = nobody->pw_uid;
    const gid_t gid = nogroup->gr_gid;
    const fs::path dir = fs::temp_directory_path() / ("rg-policyd-drop-" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
    std::ofstream(dir / "retryguard.yaml")
        << live_config(dir, {}, "user: nobody, group: nogroup, socket_mode: \"0660\"");
    std::ofstream(dir / "mail.log").flush();
    ::chmod((dir / "mail.log").c_str(), 0600);  // root's: opened before the drop
    Daemon d({"-c", (dir / "retryguard.yaml").string()}, {}, false);
    ASSERT_TRUE(d.ready()) << d.log();

    const auto uids = numbers(proc_status(d.pid(), "Uid"));  // real, effective, saved, filesystem
    const auto gids = numbers(proc_status(d.pid(), "Gid"));
    ASSERT_EQ(uids.size(), 4u) << proc_status(d.pid(), "Uid");
    ASSERT_EQ(gids.size(), 4u);
    for (long v : uids) EXPECT_EQ(v, static_cast<long>(uid));
    for (long v : gids) EXPECT_EQ(v, static_cast<long>(gid));
    for (long g : numbers(proc_status(d.pid(), "Groups"))) EXPECT_NE(g, 0) << "still in group root";

    struct stat st {};
    ASSERT_EQ(::stat(d.unix_path().c_str(), &st), 0);
    EXPECT_TRUE(S_ISSOCK(st.st_mode));
    EXPECT_EQ(st.st_uid, uid);
    EXPECT_EQ(st.st_gid, gid);
    EXPECT_EQ(st.st_mode & 0777, 0660u);
    ASSERT_EQ(::stat((dir / "ledger.db").c_str(), &st), 0);
    EXPECT_EQ(st.st_uid, uid) << "the ledger created as root belongs to policy.user";

    Client c = Client::unix_socket(d.unix_path());
    ASSERT_TRUE(c.connected());
    c.send(request("someone@example.test"));
    EXPECT_EQ(c.answer(), kDunno);
    EXPECT_NE(d.log().find("running as nobody:nogroup"), std::string::npos) << d.log();

    // The reload reads the configuration as nobody.
    d.signal(SIGHUP);
    EXPECT_TRUE(eventually([&] { return d.log().find("reload done") != std::string::npos; })) << d.log();
    d.signal(SIGTERM);
    EXPECT_EQ(d.wait_exit(10s), 0) << d.log();
    d.stop();
    fs::remove_all(dir);
}

// Started as root, an unknown policy.user (or root itself) is refused
// rather than running on as root.
TEST(PolicydLive, StartedAsRootRefusesAnUnknownOrRootPolicyUser) {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root (CI runs this test as root)";
    const fs::path dir = fs::temp_directory_path() / ("rg-policyd-nouser-" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
    std::ofstream(dir / "mail.log").flush();
    for (const char* who : {"user: no-such-user-rg, group: nogroup", "user: root, group: root"}) {
        std::ofstream(dir / "retryguard.yaml", std::ios::trunc) << live_config(dir, {}, who);
        Daemon d({"-c", (dir / "retryguard.yaml").string()}, {}, false);
        EXPECT_FALSE(d.ready()) << d.log();
        EXPECT_NE(d.log().find("refusing to run as root"), std::string::npos) << d.log();
    }
    fs::remove_all(dir);
}

// metrics.allow_non_loopback: true is an explicit opt-in that check-config
// accepts; the daemon honours it (with a warning) instead of refusing to start.
TEST(PolicydLive, MetricsAllowNonLoopbackIsHonouredWithAWarning) {
    const fs::path dir = fs::temp_directory_path() / ("rg-policyd-nonloop-" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
    std::ofstream(dir / "mail.log").flush();
    std::ofstream(dir / "retryguard.yaml")
        << live_config(dir, "metrics: {listen: \"0.0.0.0:0\", allow_non_loopback: true}\n");
    Daemon d({"-c", (dir / "retryguard.yaml").string()}, {}, false, false);
    ASSERT_TRUE(d.ready()) << d.log();
    EXPECT_NE(d.log().find("may be reachable from other hosts"), std::string::npos) << d.log();
    EXPECT_NE(http_body(d.metrics_port(), "/health").find("ok"), std::string::npos);
    d.stop();
    fs::remove_all(dir);
}

// A log the daemon's user may not read is not "not there yet": it is logged
// once, counted, and /health says so until the file becomes readable.
TEST(PolicydLive, UnreadableSourceIsLoggedCountedAndUnhealthyUntilReadable) {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root: the daemon must drop to nobody to be refused the file";
    const fs::path dir = fs::temp_directory_path() / ("rg-policyd-unreadable-" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
    std::ofstream(dir / "retryguard.yaml") << live_config(dir);
    std::ofstream(dir / "mail.log") << fixture_lines().front() << "\n";
    ASSERT_EQ(::chown((dir / "mail.log").c_str(), 0, 0), 0);
    ASSERT_EQ(::chmod((dir / "mail.log").c_str(), 0600), 0);
    Daemon d({"-c", (dir / "retryguard.yaml").string()}, {}, false);
    ASSERT_TRUE(d.ready()) << d.log();
    const std::string series =
        "retryguard_follower_unreadable{source=\"file:" + (dir / "mail.log").string() + "\"}";
    EXPECT_TRUE(eventually([&] { return metric(d.metrics(), series) == 1; })) << d.metrics();
    std::string health;
    EXPECT_TRUE(eventually([&] {
        health = http_body(d.metrics_port(), "/health");
        return health.find(" 503 ") != std::string::npos;
    })) << health;
    EXPECT_NE(health.find("Permission denied for user nobody"), std::string::npos) << health;
    EXPECT_NE(d.log().find("cannot read: Permission denied"), std::string::npos) << d.log();
    ::chmod((dir / "mail.log").c_str(), 0644);
    EXPECT_TRUE(eventually([&] { return metric(d.metrics(), series) == 0; })) << d.metrics();
    EXPECT_TRUE(eventually(
        [&] { return http_body(d.metrics_port(), "/health").find(" 200 ") != std::string::npos; }));
    EXPECT_NE(d.log().find("readable again"), std::string::npos) << d.log();
    // once, not once per retry
    const std::string log = d.log();
    std::size_t n = 0;
    for (auto p = log.find("cannot read: Permission denied"); p != std::string::npos;
         p = log.find("cannot read: Permission denied", p + 1))
        ++n;
    EXPECT_EQ(n, 1u) << log;
    d.stop();
    fs::remove_all(dir);
}

// Metrics connections are bounded: one beyond metrics.max_connections is
// closed at once and counted, and the bound frees up as connections end.
TEST(PolicydDaemon, MetricsConnectionsBeyondTheLimitAreClosedAndCounted) {
    Daemon d({"-o", "metrics.max_connections=2"});
    ASSERT_TRUE(d.ready()) << d.log();
    std::vector<Client> held;
    for (int i = 0; i < 2; ++i) {
        held.push_back(Client::tcp(d.metrics_port()));
        ASSERT_TRUE(held.back().connected());
        held.back().send("GET /health HTTP/1.1\r\n");  // an unfinished request keeps it open
    }
    // Accepted in order: the two above are open before this one is looked at.
    EXPECT_TRUE(eventually([&] {
        Client extra = Client::tcp(d.metrics_port());
        return extra.closed_within(2000ms) && extra.received().empty();
    })) << d.log();
    held.clear();
    std::string m;
    EXPECT_TRUE(eventually([&] {
        m = d.metrics();
        return metric(m, "retryguard_policyd_metrics_connections_refused_total") >= 1;
    })) << m
        << d.log();
    EXPECT_GE(count_lines(d.log(), "metrics connection limit 2 reached"), 1u) << d.log();
}

// Not built under the sanitizers (rather than skipped there): their runtime
// opens descriptors of its own (UBSan's vptr check probes memory through a
// pipe), so out of descriptors it reports a false "invalid vptr" and, built
// with -fno-sanitize-recover, aborts the daemon. The plain suite runs it.
#ifndef __SANITIZE_ADDRESS__
// Out of descriptors (EMFILE): both acceptors back off instead of spinning,
// count the errors, log the first one and then at most one line per 10 s,
// and say when accepting works again.
TEST(PolicydDaemon, OutOfDescriptorsBacksOffLogsOnceAndRecovers) {
    Daemon d({"-o", "policy.max_connections=1000"});
    ASSERT_TRUE(d.ready()) << d.log();
    // Leave room for exactly two more descriptors: the limit is one above the
    // second-lowest free descriptor number (inherited descriptors may sit high).
    std::set<int> used;
    for (const auto& e : fs::directory_iterator("/proc/" + std::to_string(d.pid()) + "/fd"))
        used.insert(std::stoi(e.path().filename().string()));
    std::vector<int> free_fds;
    for (int fd = 0; free_fds.size() < 2; ++fd)
        if (!used.count(fd)) free_fds.push_back(fd);
    rlimit before{};
    ASSERT_EQ(nofile_limit(d.pid(), nullptr, &before), 0);
    rlimit tight = before;
    tight.rlim_cur = static_cast<rlim_t>(free_fds[1] + 1);
    ASSERT_EQ(nofile_limit(d.pid(), &tight, nullptr), 0);

    std::vector<Client> clients;
    for (int i = 0; i < 2; ++i) {
        clients.push_back(Client::tcp(d.port()));
        clients.back().send(request("a@example.test"));
        ASSERT_EQ(clients.back().answer(), kDunno) << d.log();
    }
    // Queued in the backlog, never accepted while the limit holds.
    Client waiting = Client::tcp(d.port());
    Client metrics_waiting = Client::tcp(d.metrics_port());
    ASSERT_TRUE(waiting.connected() && metrics_waiting.connected());
    waiting.send(request("b@example.test"));
    EXPECT_TRUE(eventually([&] { return d.log().find("policy accept: ") != std::string::npos; })) << d.log();
    EXPECT_TRUE(eventually([&] { return d.log().find("metrics accept: ") != std::string::npos; })) << d.log();
    std::this_thread::sleep_for(2500ms);  // long enough for many retries
    EXPECT_EQ(waiting.answer(100ms), "");

    // Give descriptors back: the waiting connection is answered.
    ASSERT_EQ(nofile_limit(d.pid(), &before, nullptr), 0);
    clients.clear();
    EXPECT_EQ(waiting.answer(5000ms), kDunno) << d.log();
    EXPECT_TRUE(eventually([&] {
        return d.log().find("policy accept recovered after ") != std::string::npos;
    })) << d.log();
    const std::string log = d.log();
    // One line when it started; no line per retry (the retries happen every
    // 100 ms to 1 s, the repeat lines at most every 10 s).
    EXPECT_EQ(count_lines(log, "policy accept: "), 1u) << log;
    EXPECT_LE(count_lines(log, "policy accept still failing"), 1u) << log;
    const std::string m = d.metrics();
    const double policy_errors = metric(m, "retryguard_policyd_accept_errors_total{listener=\"policy\"}");
    const double metrics_errors = metric(m, "retryguard_policyd_accept_errors_total{listener=\"metrics\"}");
    EXPECT_GE(policy_errors, 2) << m;
    EXPECT_GE(metrics_errors, 2) << m;
    // Each failed accept waited before the next one (a spinning acceptor makes
    // hundreds of thousands of attempts in 2.5 s).
    EXPECT_EQ(metric(m, "retryguard_policyd_accept_backoffs_total{listener=\"policy\"}"), policy_errors) << m;
    EXPECT_EQ(metric(m, "retryguard_policyd_accept_backoffs_total{listener=\"metrics\"}"), metrics_errors)
        << m;
    EXPECT_LT(policy_errors + metrics_errors, 200) << m;
}
#endif  // __SANITIZE_ADDRESS__

// Rate-limited warnings are not lost: the count of those suppressed is logged
// once the limiter opens again, with no new warning needed, and every
// malformed request is accounted for in the log (logged or counted).
TEST(PolicydDaemon, SuppressedWarningCountIsLoggedWhenTheLimiterOpens) {
    Daemon d;
    ASSERT_TRUE(d.ready()) << d.log();
    constexpr int kBad = 6;
    for (int i = 0; i < kBad; ++i) {
        Client c = Client::tcp(d.port());
        c.send("no equals sign\n\n");
        EXPECT_TRUE(c.closed_within(5000ms));
    }
    auto accounted = [&] {
        const std::string log = d.log();
        std::size_t total = 0;
        std::istringstream in(log);
        for (std::string line; std::getline(in, line);) {
            if (line.find("malformed policy request from") != std::string::npos) {
                ++total;
                const auto semi = line.rfind("; ");
                total += std::stoul(line.substr(semi + 2));  // "N similar lines suppressed"
            }
            const auto pos = line.find(" similar malformed-request warning(s) suppressed");
            if (pos != std::string::npos) {
                const auto start = line.rfind(' ', pos - 1) + 1;
                total += std::stoul(line.substr(start, pos - start));
            }
        }
        return total;
    };
    EXPECT_TRUE(eventually([&] { return accounted() == kBad; }, 10s)) << accounted() << "\n" << d.log();
    EXPECT_GE(count_lines(d.log(), "similar malformed-request warning(s) suppressed"), 1u) << d.log();
}

// ------------------------------------------------- settings and their effect

namespace {

// A loopback port free at the time of the call (SOCK_STREAM or SOCK_DGRAM).
int free_port(int type) {
    const int fd = ::socket(AF_INET, type, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    int port = 0;
    if (fd >= 0 && ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0)
        port = ntohs(a.sin_port);
    if (fd >= 0) ::close(fd);
    return port;
}

bool send_datagram(int port, const std::string& datagram) {
    const int fd = ::socket(AF_INET, SOCK_DGRAM, 0);
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(static_cast<uint16_t>(port));
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    const bool sent =
        fd >= 0 && ::sendto(fd, datagram.data(), datagram.size(), 0, reinterpret_cast<const sockaddr*>(&to),
                            sizeof to) == static_cast<ssize_t>(datagram.size());
    if (fd >= 0) ::close(fd);
    return sent;
}

}  // namespace

// policy.socket_mode: the UNIX policy socket gets that mode (not the default 0660).
TEST(PolicydDaemon, UnixPolicySocketGetsTheConfiguredMode) {
    Daemon d({"-o", "policy.socket_mode=0600"});
    ASSERT_TRUE(d.ready()) << d.log();
    struct stat st {};
    ASSERT_EQ(::stat(d.unix_path().c_str(), &st), 0);
    EXPECT_TRUE(S_ISSOCK(st.st_mode));
    EXPECT_EQ(st.st_mode & 0777, 0600u);
    Client c = Client::unix_socket(d.unix_path());
    ASSERT_TRUE(c.connected());
    ASSERT_TRUE(c.send(request("user@flagged.test")));
    EXPECT_EQ(c.answer(), kReject);
}

// policy.max_attributes: a request with more attribute lines than that closes
// its connection and is counted; one within the limit is answered.
TEST(PolicydDaemon, RequestWithMoreAttributesThanTheLimitIsRefused) {
    Daemon d({"-o", "policy.max_attributes=12"});  // request() sends exactly 12
    ASSERT_TRUE(d.ready()) << d.log();
    Client ok = Client::tcp(d.port());
    ASSERT_TRUE(ok.send(request("a@flagged.test")));
    EXPECT_EQ(ok.answer(), kReject);
    Client many = Client::tcp(d.port());
    ASSERT_TRUE(many.send(request("a@flagged.test", "RCPT", "ccert_subject=x\nccert_issuer=y\n")));
    EXPECT_EQ(many.answer(1000ms), "");
    EXPECT_TRUE(many.closed_within(3000ms));
    EXPECT_EQ(metric(d.metrics(), "retryguard_policy_malformed_total{reason=\"too_many_attributes\"}"), 1)
        << d.metrics();
    // The connection within the limit goes on.
    ASSERT_TRUE(ok.send(request("b@flagged.test")));
    EXPECT_EQ(ok.answer(), kReject);
}

// policy.worker_threads: decisions that may block run on that many threads.
// Eight decisions of 200 ms each take 1.6 s on one worker (one after the
// other), and about 200 ms on eight; the default two would take 800 ms.
TEST(PolicydDaemon, BlockingDecisionsRunOnAsManyThreadsAsConfigured) {
    auto elapsed_for_eight = [](const std::string& threads) {
        Daemon d({"--simulate-slow-decider", "200", "-o", "policy.deadline=10s", "-o",
                  "policy.worker_threads=" + threads});
        EXPECT_TRUE(d.ready()) << d.log();
        if (!d.ready()) return Clock::duration::zero();
        std::vector<Client> clients;
        for (int i = 0; i < 8; ++i) clients.push_back(Client::tcp(d.port()));
        const auto t0 = Clock::now();
        for (auto& c : clients) EXPECT_TRUE(c.send(request("a@flagged.test")));
        for (auto& c : clients) EXPECT_EQ(c.answer(10s), kReject);
        const auto took = Clock::now() - t0;
        EXPECT_EQ(metric(d.metrics(), "retryguard_policy_fail_open_total{reason=\"timeout\"}"), 0);
        return took;
    };
    const auto one = elapsed_for_eight("1");
    EXPECT_GE(one, 1600ms) << "one worker runs the decisions one after the other";
    const auto eight = elapsed_for_eight("8");
    EXPECT_LT(eight, 700ms) << "eight workers run them at once";
}

// metrics.enabled false: nothing listens on metrics.listen, and the daemon
// serves policy requests without it.
TEST(PolicydDaemon, MetricsDisabledServesNoEndpoint) {
    const int port = free_port(SOCK_STREAM);
    ASSERT_GT(port, 0);
    const std::string listen = "metrics.listen=127.0.0.1:" + std::to_string(port);
    Daemon off({"-o", "metrics.enabled=false", "-o", listen}, {}, true, false);
    ASSERT_TRUE(off.listening()) << off.log();
    EXPECT_EQ(off.metrics_port(), 0) << off.ready_file();
    EXPECT_EQ(off.ready_file().find("metrics"), std::string::npos) << off.ready_file();
    EXPECT_FALSE(Client::tcp(port).connected()) << "something listens on the metrics address";
    Client c = Client::tcp(off.port());
    ASSERT_TRUE(c.send(request("user@flagged.test")));
    EXPECT_EQ(c.answer(), kReject);
    off.stop();
    // The same address with metrics on (the default) is served.
    Daemon on({"-o", listen}, {}, true, false);
    ASSERT_TRUE(on.ready()) << on.log();
    EXPECT_EQ(on.metrics_port(), port);
    EXPECT_NE(http_body(port, "/health").find("ok"), std::string::npos);
}

// sources[].address and sources[].max_line_length: a syslog_udp source listens
// on its address (the deferrals sent there escalate the destination) and cuts
// a line at its own max_line_length, counted per source; a datagram line
// longer than 8 KiB fits the default 64 KiB.
TEST(PolicydLive, SyslogUdpSourcesListenOnTheirAddressAndCutAtTheirLineLength) {
    const fs::path dir = fs::temp_directory_path() / ("rg-policyd-udp-" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
    give_to_nobody(dir);
    const int wide = free_port(SOCK_DGRAM), narrow = free_port(SOCK_DGRAM);
    ASSERT_GT(wide, 0);
    ASSERT_GT(narrow, 0);
    ASSERT_NE(wide, narrow);
    std::ofstream(dir / "retryguard.yaml")
        << "policy: {user: nobody, group: nogroup}\n"
           "ledger: {backend: sqlite, sqlite: {path: " +
               (dir / "ledger.db").string() +
               "}}\n"
               "sources:\n"
               "  - {type: syslog_udp, name: udp-wide, address: \"127.0.0.1:" +
               std::to_string(wide) +
               "\"}\n"
               "  - {type: syslog_udp, name: udp-narrow, address: \"127.0.0.1:" +
               std::to_string(narrow) +
               "\", max_line_length: 1KiB}\n"
               "ingest: {batch_max_delay: 50ms}\n"
               "categories: {receiver_config: {watch_after_deferrals: 1, escalate_after: 1m}}\n"
               "actions:\n"
               "  escalated: \"REJECT 4.7.1 retryguard: {domain} escalated ({category})\"\n";
    Daemon d({"-c", (dir / "retryguard.yaml").string()}, {}, false);
    ASSERT_TRUE(d.ready()) << d.log();
    EXPECT_EQ(ask_rcpt(d.port(), "user@cfgerr.lab.test"), kDunno);

    const auto lines = fixture_lines();
    ASSERT_GT(lines.size(), 10u);
    for (const auto& l : lines) ASSERT_TRUE(send_datagram(wide, "<22>" + l));
    std::string answer;
    EXPECT_TRUE(eventually([&] {
        answer = ask_rcpt(d.port(), "someone@cfgerr.lab.test");
        return answer != kDunno;
    })) << d.log();
    EXPECT_EQ(answer.rfind("action=REJECT 4.7.1 retryguard: cfgerr.lab.test escalated (receiver-config)", 0),
              0u)
        << answer;

    const std::string head = "<22>Nov 29 20:38:50 relay postfix/smtp[1]: ";
    ASSERT_TRUE(send_datagram(narrow, head + std::string(2000, 'n')));
    ASSERT_TRUE(send_datagram(wide, head + std::string(12000, 'w')));
    const std::string cut_narrow = "retryguard_follower_lines_truncated_total{source=\"udp-narrow\"}";
    const std::string cut_wide = "retryguard_follower_lines_truncated_total{source=\"udp-wide\"}";
    std::string m;
    EXPECT_TRUE(eventually([&] {
        m = d.metrics();
        return metric(m, "retryguard_follower_lines_total{source=\"udp-narrow\"}") >= 1 &&
               metric(m, "retryguard_follower_lines_total{source=\"udp-wide\"}") >=
                   static_cast<double>(lines.size() + 1);
    })) << m;
    EXPECT_EQ(metric(m, cut_narrow), 1) << m;
    EXPECT_EQ(metric(m, cut_wide), 0) << m;
    d.stop();
    fs::remove_all(dir);
}

// log.facility and log.ident: with log.target syslog, the daemon's own lines
// and its verdict lines reach syslog under that facility (local3.info: <158>)
// and ident (IDENT/policyd), not mail (<22> for info) and retryguard/policyd. The daemon runs in a mount
// namespace of its own whose /dev/log is a socket of this test.
TEST(PolicydDaemon, SyslogLinesCarryTheConfiguredFacilityAndIdent) {
    // The namespace's /dev is made private before anything is mounted on it,
    // so nothing reaches the host's; the root's propagation is left alone
    // (inside a chroot whose root is no mount point it cannot be changed).
    if (::geteuid() != 0 ||
        std::system("/usr/bin/unshare --mount --propagation unchanged /bin/sh -c 'mount --make-rprivate /dev "
                    "&& [ -d /dev/shm ]' 2>/dev/null") != 0) {
        if (std::getenv("CI")) FAIL() << "needs root, mount namespaces (unshare --mount) and /dev/shm";
        GTEST_SKIP() << "NO MOUNT NAMESPACES HERE (needs root and unshare --mount)";
    }
    const fs::path dev = fs::temp_directory_path() / ("rg-policyd-dev-" + std::to_string(::getpid()));
    fs::remove_all(dev);
    fs::create_directories(dev);
    ::chmod(dev.c_str(), 0755);
    const int fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    ASSERT_GE(fd, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    const std::string log_path = (dev / "log").string();
    ASSERT_LT(log_path.size(), sizeof a.sun_path);
    std::strncpy(a.sun_path, log_path.c_str(), sizeof a.sun_path - 1);
    ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    ::chmod(log_path.c_str(), 0666);  // the daemon writes to it as nobody
    // /dev in the namespace: a tmpfs with the real device nodes the daemon may
    // open bound into it and `log` pointing at this test's socket. Every mount
    // is made below the namespace's /dev once it is private (first on its
    // /dev/shm, then that over /dev), so none can propagate to the host's.
    const std::string setup =
        "set -e; mount --make-rprivate /dev; mount -t tmpfs -o mode=0755 rg-dev /dev/shm; "
        "for n in null zero full random urandom; do [ -e /dev/$n ] || continue; "
        ": >/dev/shm/$n; mount --bind /dev/$n /dev/shm/$n; done; "
        "ln -s \"$RG_DEV/log\" /dev/shm/log; mount --rbind /dev/shm /dev; exec \"$@\"";
    Daemon d({"-o", "log.target=syslog", "-o", "log.facility=local3", "-o", "log.ident=edge-guard"},
             {{"RG_DEV", dev.string()}}, true, true,
             {"/usr/bin/unshare", "--mount", "--propagation", "unchanged", "/bin/sh", "-c", setup, "sh"});
    ASSERT_TRUE(d.ready()) << d.log();
    Client c = Client::tcp(d.port());
    ASSERT_TRUE(c.send(request("user@flagged.test")));
    EXPECT_EQ(c.answer(), kReject);

    std::vector<std::string> got;
    auto has = [&](const std::string& text) {
        for (const auto& g : got)
            if (g.find(text) != std::string::npos) return true;
        return false;
    };
    const auto until = Clock::now() + 10s;
    while (Clock::now() < until && !(has("listening: policy") && has("verdict=policy_reject"))) {
        pollfd p{fd, POLLIN, 0};
        if (::poll(&p, 1, 200) <= 0) continue;
        char buf[8192];
        const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
        if (n > 0) got.emplace_back(buf, static_cast<std::size_t>(n));
    }
    d.stop();
    ::close(fd);
    fs::remove_all(dev);
    std::string all;
    for (const auto& g : got) all += g + "\n";
    ASSERT_TRUE(has("listening: policy")) << all << d.log();
    ASSERT_TRUE(has("verdict=policy_reject")) << all;
    for (const auto& g : got) {
        ASSERT_EQ(g.rfind("<", 0), 0u) << g;
        EXPECT_EQ(std::stoi(g.substr(1)) / 8, 19) << "not facility local3: " << g;
        EXPECT_NE(g.find(" edge-guard/policyd["), std::string::npos) << g;
    }
    EXPECT_TRUE(has("<158>")) << "no local3.info line: " << all;
}
