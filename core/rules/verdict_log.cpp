// verdict_log.cpp -- writes verdict lines to syslog, postlogd, a file or stderr.
// The postlogd datagram has the shape Postfix's own msg_logger sends
// ("Mon DD HH:MM:SS host ident[pid]: text"), so the line lands in maillog_file
// exactly like Postfix's lines and the project's log parser reads it back.
// verdict_log.cpp -- verdict lines through the logging module (syslog,
// postlogd, a file or stderr), counted, and replayed after a crash without
// writing a line twice to a file that already holds it.
#include "retryguard/rules/verdict_log.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <utility>
#include <vector>

namespace retryguard {

using logging::kMaxRecord;
using logging::printable;

Result<VerdictLogTarget> parse_verdict_log_target(std::string_view spec) {
    auto parsed = logging::parse_target(spec);
    if (!parsed || parsed->kind == logging::Target::Kind::both)
        return make_error(ErrorKind::config, "bad verdict log target '" + std::string(spec) +
                                                 "' (expected syslog[:facility], postlog:/path, file:/path, "
                                                 "stderr or none)");
    VerdictLogTarget t;
    switch (parsed->kind) {
        case logging::Target::Kind::syslog: t.kind = VerdictLogTarget::Kind::syslog; break;
        case logging::Target::Kind::postlog: t.kind = VerdictLogTarget::Kind::postlog; break;
        case logging::Target::Kind::file: t.kind = VerdictLogTarget::Kind::file; break;
        case logging::Target::Kind::stderr_stream: t.kind = VerdictLogTarget::Kind::stderr_stream; break;
        case logging::Target::Kind::both:
        case logging::Target::Kind::none: t.kind = VerdictLogTarget::Kind::none; break;
    }
    t.path = parsed->path;
    if (const auto colon = spec.find(':');
        t.kind == VerdictLogTarget::Kind::syslog && colon != std::string_view::npos)
        t.facility = std::string(spec.substr(colon + 1));
    return t;
}

VerdictLog::~VerdictLog() = default;

Status VerdictLog::open(const VerdictLogTarget& target) {
    std::lock_guard lock(mu_);
    sink_.reset();
    target_ = target;
    logging::Target t;
    switch (target.kind) {
        case VerdictLogTarget::Kind::syslog: t.kind = logging::Target::Kind::syslog; break;
        case VerdictLogTarget::Kind::postlog: t.kind = logging::Target::Kind::postlog; break;
        case VerdictLogTarget::Kind::file: t.kind = logging::Target::Kind::file; break;
        case VerdictLogTarget::Kind::stderr_stream: t.kind = logging::Target::Kind::stderr_stream; break;
        case VerdictLogTarget::Kind::none: t.kind = logging::Target::Kind::none; break;
    }
    t.path = target.path;
    logging::Options o;
    o.program = target.ident;
    o.hostname = target.hostname;
    o.facility = logging::facility_code(target.facility);
    if (o.facility < 0)
        return make_error(ErrorKind::config, "unknown syslog facility '" + target.facility + "'");
    o.stderr_program = false;
    auto sink = logging::open_sink(t, o);
    if (!sink) return sink.error();
    sink_ = std::move(*sink);
    return {};
}

FileTailMatch match_file_tail(std::string_view tail, std::span<const std::string> pending) {
    FileTailMatch m;
    m.torn = !tail.empty() && tail.back() != '\n';
    // Complete lines only, newest first; a cut last line is not one of them.
    std::vector<std::string_view> lines;
    if (const auto last_nl = tail.rfind('\n'); last_nl != std::string_view::npos) {
        std::string_view complete = tail.substr(0, last_nl);
        while (lines.size() < pending.size()) {
            const auto nl = complete.rfind('\n');
            if (nl == std::string_view::npos) {
                lines.push_back(complete);
                break;
            }
            lines.push_back(complete.substr(nl + 1));
            complete = complete.substr(0, nl);
        }
    }
    auto is = [](std::string_view line, const std::string& text) {
        const std::string want = printable(text);
        return line.size() >= want.size() + 2 && line.ends_with(want) &&
               line.substr(line.size() - want.size() - 2, 2) == ": ";
    };
    for (std::size_t k = std::min(lines.size(), pending.size()); k > 0; --k) {
        // lines[k-1] .. lines[0] (oldest to newest) against pending[0 .. k).
        bool all = true;
        for (std::size_t i = 0; i < k && all; ++i) all = is(lines[k - 1 - i], pending[i]);
        if (all) {
            m.present = k;
            break;
        }
    }
    return m;
}

VerdictLog::Replay VerdictLog::replay(std::span<const std::string> lines) {
    Replay r;
    if (lines.empty()) return r;
    switch (target_.kind) {
        case VerdictLogTarget::Kind::none: return r;
        case VerdictLogTarget::Kind::file: break;
        default:
            for (const auto& l : lines) write_line(l);
            r.unchecked = lines.size();
            return r;
    }
    {
        std::lock_guard lock(mu_);
        // Enough of the end of the file for every pending line with its prefix.
        std::size_t window = 4096;
        for (const auto& l : lines) window += std::min(l.size(), kMaxRecord) + 256;
        std::string tail;
        const int fd = ::open(target_.path.c_str(), O_RDONLY | O_CLOEXEC);
        struct stat st {};
        if (fd >= 0 && ::fstat(fd, &st) == 0 && st.st_size > 0) {
            const auto size = static_cast<std::size_t>(st.st_size);
            const std::size_t from = size > window ? size - window : 0;
            tail.resize(size - from);
            const ssize_t got = ::pread(fd, tail.data(), tail.size(), static_cast<off_t>(from));
            tail.resize(got > 0 ? static_cast<std::size_t>(got) : 0);
        }
        if (fd >= 0) ::close(fd);
        const FileTailMatch m = match_file_tail(tail, lines);
        r.found = m.present;
        r.torn = m.torn;
        // The next line must start on a line of its own; a reader sees the cut
        // line, then the whole line written again below.
        if (m.torn && sink_ && !sink_->end_torn_line()) failures_.fetch_add(1);
    }
    for (std::size_t i = r.found; i < lines.size(); ++i) write_line(lines[i]);
    return r;
}

void VerdictLog::write(const Verdict& v) {
    write_line(format_verdict(v));
}

void VerdictLog::write_line(std::string_view message) {
    std::lock_guard lock(mu_);
    if (target_.kind == VerdictLogTarget::Kind::none) return;
    const bool ok = sink_ && sink_->write(logging::Severity::info, message);
    (ok ? written_ : failures_).fetch_add(1);
}

}  // namespace retryguard
