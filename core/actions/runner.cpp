// runner.cpp -- runs Postfix's sendmail and postqueue for the actions planner:
// posix_spawn with a minimal environment, input on a pipe, a deadline after
// which the child is killed, and the first line of its complaint kept.
// Must never block past the deadline, leak a child, or raise SIGPIPE in the
// caller; failures come back as values and are reported once per change.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>
#include <cerrno>
#include <cstring>
#include <thread>

#include "retryguard/actions/actions.hpp"
#include "retryguard/file_access.hpp"

namespace retryguard::actions {
namespace {

constexpr std::size_t kMaxStderr = 1024;

std::string first_line(std::string s) {
    auto nl = s.find('\n');
    if (nl != std::string::npos) s.resize(nl);
    return mail_text(s);
}

}  // namespace

Status run_command(const std::vector<std::string>& argv, std::string_view input,
                   std::chrono::milliseconds timeout) {
    if (argv.empty() || argv[0].empty() || argv[0].front() != '/')
        return make_error(ErrorKind::config, "command must be an absolute path");
    OwnedFd in_r, in_w, err_r, err_w;
    int p[2];
    if (::pipe2(p, O_CLOEXEC) != 0)
        return make_error(ErrorKind::internal, std::string("pipe: ") + std::strerror(errno));
    in_r.fd = p[0], in_w.fd = p[1];
    if (::pipe2(p, O_CLOEXEC) != 0)
        return make_error(ErrorKind::internal, std::string("pipe: ") + std::strerror(errno));
    err_r.fd = p[0], err_w.fd = p[1];

    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, in_r.fd, 0);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_adddup2(&fa, err_w.fd, 2);
    posix_spawn_file_actions_addclosefrom_np(&fa, 3);
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    sigset_t none, defaults;
    sigemptyset(&none);
    sigemptyset(&defaults);
    sigaddset(&defaults, SIGPIPE);  // the daemon ignores SIGPIPE; the child must not inherit that
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setsigdefault(&attr, &defaults);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);

    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    char path_env[] = "PATH=/usr/sbin:/usr/bin:/sbin:/bin";
    char* envp[] = {path_env, nullptr};
    pid_t pid = -1;
    const int rc = ::posix_spawn(&pid, argv[0].c_str(), &fa, &attr, args.data(), envp);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&attr);
    if (rc != 0)
        return make_error(ErrorKind::unavailable,
                          fmt::format("cannot run {}: {}", argv[0], std::strerror(rc)));
    in_r.reset();
    err_w.reset();

    // Writing to a child that has exited raises SIGPIPE: block it on this
    // thread while writing and take a pending one away afterwards.
    sigset_t pipe_set, old_mask;
    sigemptyset(&pipe_set);
    sigaddset(&pipe_set, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_set, &old_mask);
    ::fcntl(in_w.fd, F_SETFL, ::fcntl(in_w.fd, F_GETFL) | O_NONBLOCK);

    const auto deadline = std::chrono::steady_clock::now() + timeout;
    std::string err;
    std::size_t written = 0;
    bool timed_out = false;
    if (input.empty()) in_w.reset();
    while (err_r.fd >= 0 || in_w.fd >= 0) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
            deadline - std::chrono::steady_clock::now());
        if (left.count() <= 0) {
            timed_out = true;
            break;
        }
        pollfd fds[2];
        nfds_t n = 0;
        if (in_w.fd >= 0) fds[n++] = pollfd{in_w.fd, POLLOUT, 0};
        if (err_r.fd >= 0) fds[n++] = pollfd{err_r.fd, POLLIN, 0};
        const int r = ::poll(fds, n, static_cast<int>(left.count()));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) continue;
        for (nfds_t i = 0; i < n; ++i) {
            if (!fds[i].revents) continue;
            if (fds[i].fd == in_w.fd) {
                const ssize_t w = ::write(in_w.fd, input.data() + written, input.size() - written);
                if (w > 0) written += static_cast<std::size_t>(w);
                if ((w < 0 && errno != EAGAIN && errno != EINTR) || written == input.size()) in_w.reset();
            } else {
                char buf[512];
                const ssize_t got = ::read(err_r.fd, buf, sizeof buf);
                if (got > 0) {
                    if (err.size() < kMaxStderr) err.append(buf, static_cast<std::size_t>(got));
                } else if (got == 0 || (errno != EAGAIN && errno != EINTR)) {
                    err_r.reset();
                }
            }
        }
    }
    in_w.reset();
    err_r.reset();
    timespec zero{0, 0};
    while (sigtimedwait(&pipe_set, nullptr, &zero) > 0) {
    }
    pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);

    int status = 0;
    for (;;) {
        const pid_t w = ::waitpid(pid, &status, WNOHANG);
        if (w == pid) break;
        if (w < 0) {
            if (errno == EINTR) continue;
            return make_error(ErrorKind::internal, std::string("waitpid: ") + std::strerror(errno));
        }
        if (timed_out || std::chrono::steady_clock::now() >= deadline) {
            timed_out = true;
            ::kill(pid, SIGKILL);
            while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
            }
            break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    if (timed_out)
        return make_error(ErrorKind::timeout,
                          fmt::format("{} did not finish within {} ms", argv[0], timeout.count()));
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return {};
    const std::string said = first_line(err);
    if (WIFEXITED(status))
        return make_error(ErrorKind::unavailable,
                          fmt::format("{} exited with status {}{}{}", argv[0], WEXITSTATUS(status),
                                      said.empty() ? "" : ": ", said));
    return make_error(ErrorKind::unavailable, fmt::format("{} ended by signal {}{}{}", argv[0],
                                                          WTERMSIG(status), said.empty() ? "" : ": ", said));
}

ActionRunner::ActionRunner(RunnerSettings settings, Log log, Exec exec)
    : settings_(std::move(settings)), log_(std::move(log)), exec_(std::move(exec)) {}

std::vector<std::string> ActionRunner::sendmail_argv() const {
    std::vector<std::string> a{settings_.sendmail_path};
    if (!settings_.config_directory.empty()) a.insert(a.end(), {"-C", settings_.config_directory});
    // The null envelope sender: a notice that cannot be delivered never bounces back.
    a.insert(a.end(), {"-f", "", "-t", "-i"});
    return a;
}

std::vector<std::string> ActionRunner::postqueue_argv(std::string_view queue_id) const {
    std::vector<std::string> a{settings_.postqueue_path};
    if (!settings_.config_directory.empty()) a.insert(a.end(), {"-c", settings_.config_directory});
    a.insert(a.end(), {"-i", std::string(queue_id)});
    return a;
}

std::optional<Error> ActionRunner::paused(std::string_view what) const {
    auto it = paused_until_.find(what);
    if (it == paused_until_.end() || std::chrono::steady_clock::now() >= it->second) return std::nullopt;
    auto err = last_error_.find(what);
    return make_error(ErrorKind::unavailable,
                      fmt::format("not run: {} failed recently ({})", what,
                                  err == last_error_.end() ? std::string() : err->second));
}

void ActionRunner::report(std::string_view what, const Status& st) {
    if (!st)
        paused_until_[std::string(what)] = std::chrono::steady_clock::now() + settings_.pause_after_failure;
    auto it = last_error_.find(what);
    if (it == last_error_.end()) it = last_error_.emplace(std::string(what), std::string()).first;
    const std::string now = st ? std::string() : st.error().message;
    if (now == it->second) return;
    if (log_) {
        if (!st)
            log_(true, fmt::format("{} failed: {} (retryguard goes on; mail is not affected)", what, now));
        else
            log_(false, fmt::format("{} works again", what));
    }
    it->second = now;
}

Status ActionRunner::send(const Notice& n, const NoticeTemplate& t) {
    if (!safe_header_address(n.sender))
        return make_error(ErrorKind::invalid_input, "sender address not fit for a header");
    if (auto p = paused("sendmail")) return *p;
    Status st = exec_(sendmail_argv(), render_notice(n, t), settings_.timeout);
    report("sendmail", st);
    return st;
}

std::size_t ActionRunner::flush(const Flush& f) {
    std::size_t ok = 0;
    for (const auto& qid : f.queue_ids) {
        // A queue id is letters and digits; anything else never reaches argv.
        bool valid = !qid.empty() && qid.size() <= 32;
        for (char c : qid) valid = valid && std::isalnum(static_cast<unsigned char>(c));
        if (!valid) continue;
        if (paused("postqueue")) break;
        Status st = exec_(postqueue_argv(qid), {}, settings_.timeout);
        report("postqueue", st);
        if (!st) break;
        ++ok;
    }
    return ok;
}

CarriedOut carry_out(Planner& planner, ActionRunner& runner, const NoticeTemplate& tmpl) {
    CarriedOut out;
    auto notices = planner.take_notices();
    auto flushes = planner.take_flushes();
    out.planned = !notices.empty() || !flushes.empty();
    for (const auto& n : notices) {
        Verdict v = notified_verdict(n);
        if (n.dry_run) {
            v.add("dry_run", "yes");
        } else if (!runner.send(n, tmpl)) {
            planner.notice_done(n, false);
            continue;
        }
        planner.notice_done(n, true);
        out.verdicts.push_back(std::move(v));
    }
    for (const auto& f : flushes) {
        const std::size_t done = f.dry_run ? f.queue_ids.size() : runner.flush(f);
        planner.flush_done(f, done > 0);
        if (done == 0) continue;
        Verdict v = flushed_verdict(f, done);
        if (f.dry_run) v.add("dry_run", "yes");
        out.verdicts.push_back(std::move(v));
    }
    return out;
}

}  // namespace retryguard::actions
