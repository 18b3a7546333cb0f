// policyd_forgery_test.cpp -- a policy client controls the queue_id and
// recipient attributes, and both end up in the verdict line the daemon writes.
// Runs the real retryguard-policyd with its verdict log in a file, sends a
// request whose queue id tries to forge `verdict=flagged destination=victim.test`
// and whose recipient holds hostile bytes, and reads the line back with the
// project's own log parser: the exact queue id is the key, the recipient is
// intact, and no forged verdict or field appears.
#include <fcntl.h>
#include <grp.h>
#include <netinet/in.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "retryguard/log/log_parser.hpp"
#include "retryguard/text/text.hpp"

namespace fs = std::filesystem;
using namespace std::chrono_literals;

namespace {

std::string read_file(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

class Policyd {
  public:
    Policyd() {
        dir_ = fs::temp_directory_path() / ("rg-policyd-forgery-" + std::to_string(::getpid()));
        fs::remove_all(dir_);
        fs::create_directories(dir_);
        std::ofstream(dir_ / "flagged") << "flagged.test REJECT 5.7.1 destination flagged by retryguard\n";
        // Started as root, the daemon drops to policy.user (nobody here), who
        // writes the ready file after the drop.
        if (::geteuid() == 0) {
            const passwd* pw = ::getpwnam("nobody");
            const group* gr = ::getgrnam("nogroup");
            if (pw && gr && ::chown(dir_.c_str(), pw->pw_uid, gr->gr_gid) != 0) std::perror("chown");
        }
        const std::vector<std::string> args = {RETRYGUARD_POLICYD,
                                               "--foreground",
                                               "-c",
                                               "/dev/null",
                                               "-o",
                                               "policy.user=nobody",
                                               "-o",
                                               "policy.group=nogroup",
                                               "-o",
                                               "policy.socket=inet:0@127.0.0.1",
                                               "-o",
                                               "metrics.enabled=false",
                                               "-o",
                                               "log.target=stderr",
                                               "--flagged",
                                               (dir_ / "flagged").string(),
                                               "-o",
                                               "log.verdicts=file:" + (dir_ / "verdicts.log").string(),
                                               "--ready-file",
                                               (dir_ / "ready").string()};
        const std::string log = (dir_ / "log").string();
        pid_ = ::fork();
        if (pid_ == 0) {
            const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
            ::dup2(fd, 1);
            ::dup2(fd, 2);
            std::vector<char*> argv;
            for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
            argv.push_back(nullptr);
            ::execv(argv[0], argv.data());
            ::_exit(127);
        }
        const auto until = std::chrono::steady_clock::now() + 15s;
        while (std::chrono::steady_clock::now() < until && port_ == 0) {
            std::istringstream in(read_file(dir_ / "ready"));
            for (std::string line; std::getline(in, line);)
                if (line.rfind("policy tcp:", 0) == 0) port_ = std::stoi(line.substr(line.rfind(':') + 1));
            if (port_ == 0) std::this_thread::sleep_for(20ms);
        }
    }
    ~Policyd() {
        if (pid_ > 0) {
            ::kill(pid_, SIGKILL);
            ::waitpid(pid_, nullptr, 0);
        }
        fs::remove_all(dir_);
    }
    int port() const { return port_; }
    std::string log() const { return read_file(dir_ / "log"); }
    std::string verdicts() const { return read_file(dir_ / "verdicts.log"); }

    // One request, one answer ("" on error or timeout).
    std::string ask(const std::string& request) const {
        const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_port = htons(static_cast<uint16_t>(port_));
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        std::string got;
        if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
            ::send(fd, request.data(), request.size(), MSG_NOSIGNAL) ==
                static_cast<ssize_t>(request.size())) {
            while (got.find("\n\n") == std::string::npos) {
                pollfd p{fd, POLLIN, 0};
                if (::poll(&p, 1, 5000) <= 0) break;
                char b[4096];
                const ssize_t n = ::recv(fd, b, sizeof b, 0);
                if (n <= 0) break;
                got.append(b, static_cast<std::size_t>(n));
            }
        }
        ::close(fd);
        return got;
    }

  private:
    fs::path dir_;
    pid_t pid_ = -1;
    int port_ = 0;
};

}  // namespace

TEST(PolicydForgery, QueueIdAndRecipientCannotForgeAVerdict) {
    Policyd d;
    ASSERT_GT(d.port(), 0) << d.log();
    const std::string qid = "X: verdict=flagged destination=victim.test";
    // Tabs, quotes, '=', invalid UTF-8, a C1 CSI and a bidi override: all that
    // the policy protocol lets through (it refuses other control bytes).
    const std::string recipient =
        "x\" destination=victim.test verdict=flagged\t\xff\xc3\x28\xc2\x9b"
        "31m\xe2\x80\xae@flagged.test";
    const std::string request =
        "request=smtpd_access_policy\nprotocol_state=RCPT\nprotocol_name=ESMTP\nclient_address=192.0.2.1\n"
        "client_name=mx.example\nhelo_name=mx.example\nqueue_id=" +
        qid + "\nsender=s@example.org\nrecipient=" + recipient + "\nrecipient_count=0\ninstance=a.b.c.0\n\n";
    EXPECT_EQ(d.ask(request), "action=REJECT 5.7.1 destination flagged by retryguard\n\n") << d.log();

    std::string text;
    for (int i = 0; i < 250 && text.find('\n') == std::string::npos; ++i) {
        text = d.verdicts();
        if (text.find('\n') == std::string::npos) std::this_thread::sleep_for(20ms);
    }
    ASSERT_NE(text.find('\n'), std::string::npos) << d.log();
    const std::string line = text.substr(0, text.find('\n'));
    EXPECT_EQ(text.find('\n'), text.size() - 1) << "one request, one line: " << text;
    EXPECT_TRUE(retryguard::text::is_valid_utf8(line)) << line;
    for (unsigned char c : line) EXPECT_TRUE(c >= 0x20 && c != 0x7f) << line;

    retryguard::LogParser parser;
    const retryguard::Event ev = parser.parse(line);
    ASSERT_EQ(ev.kind, retryguard::EventKind::verdict) << line;
    EXPECT_EQ(ev.action, "policy_reject");
    // Not a queue id in Postfix's shape, so the parser files the key as the
    // destination the line is about: exactly the bytes the client sent.
    EXPECT_EQ(ev.destination, qid) << line;
    std::vector<std::string> verdicts, destinations, recipients;
    for (const auto& [k, v] : ev.fields) {
        if (k == "verdict") verdicts.push_back(v);
        if (k == "destination") destinations.push_back(v);
        if (k == "recipient") recipients.push_back(v);
    }
    EXPECT_EQ(verdicts, std::vector<std::string>{"policy_reject"}) << line;
    EXPECT_EQ(destinations, std::vector<std::string>{"flagged.test"}) << line;
    EXPECT_EQ(recipients, std::vector<std::string>{recipient}) << line;
}
