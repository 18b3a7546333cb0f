// source.cpp -- what every line source shares: the pending batch that is offered
// again until the consumer commits it, the stop/wake mechanism, settings checks
// and the printable status. It must never advance the committed position
// without the consumer's acceptance, and never drop a refused batch.
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "retryguard/follow/follower.hpp"

namespace retryguard {

Status validate(const FollowerSettings& s) {
    if (s.batch_max_lines == 0)
        return make_error(ErrorKind::config, "follower batch_max_lines must be at least 1");
    if (s.batch_max_bytes < 1024)
        return make_error(ErrorKind::config, "follower batch_max_bytes must be at least 1024");
    if (s.max_line_bytes < 80 || s.max_line_bytes > (64u << 20))
        return make_error(ErrorKind::config, "follower max_line_bytes must be between 80 and 64 MiB");
    if (s.poll_interval.count() < 1 || s.poll_interval > std::chrono::minutes(10))
        return make_error(ErrorKind::config, "follower poll_interval must be between 1ms and 10min");
    if (s.read_chunk_bytes < 4096 || s.read_chunk_bytes > (64u << 20))
        return make_error(ErrorKind::config, "follower read_chunk_bytes must be between 4 KiB and 64 MiB");
    if (s.rotation_grace.count() < 0)
        return make_error(ErrorKind::config, "follower rotation_grace is negative");
    if (s.max_datagram_bytes != 0 && (s.max_datagram_bytes < 480 || s.max_datagram_bytes > 65535))
        return make_error(ErrorKind::config,
                          "follower max_datagram_bytes must be 0 or between 480 and 65535");
    for (const auto& p : s.journal_identifier_prefixes)
        if (p.empty()) return make_error(ErrorKind::config, "follower journal identifier prefix is empty");
    return {};
}

std::size_t datagram_limit(const FollowerSettings& s) noexcept {
    constexpr std::size_t kHeaderRoom = 1024, kFloor = 8 * 1024, kMost = 65535;
    if (s.max_datagram_bytes != 0) return s.max_datagram_bytes;
    return std::clamp(s.max_line_bytes + kHeaderRoom, kFloor, kMost);
}

std::string format_status(const FollowerStatus& st) {
    std::string out = fmt::format(
        "source={} kind={} path={} reading={} device={} inode={} offset={} read_offset={} file_size={} "
        "lag_bytes={} lines_read={} lines_truncated={} lines_skipped={} rotations={} truncations={} "
        "batches_refused={} pending={} inotify={}",
        st.source, st.kind, st.path, st.reading.empty() ? "-" : st.reading, st.device, st.inode, st.offset,
        st.read_offset, st.file_size, st.lag_bytes, st.lines_read, st.lines_truncated, st.lines_skipped,
        st.rotations, st.truncations, st.batches_refused, st.pending ? "yes" : "no",
        st.inotify ? "yes" : "no");
    if (!st.cursor.empty()) out += fmt::format(" cursor={}", st.cursor);
    if (st.open_errors) out += fmt::format(" open_errors={}", st.open_errors);
    if (!st.unreadable.empty()) out += fmt::format(" unreadable=\"{}\"", st.unreadable);
    if (!st.last_error.empty()) out += fmt::format(" last_error=\"{}\"", st.last_error);
    return out;
}

LineSource::LineSource(FollowerSettings settings, FollowerPosition start)
    : settings_(std::move(settings)), committed_(std::move(start)) {
    wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    counters_.source = committed_.source;
}

LineSource::~LineSource() {
    if (wake_fd_ >= 0) ::close(wake_fd_);
}

void LineSource::stop() {
    stop_requested_.store(true);
    if (wake_fd_ >= 0) {
        std::uint64_t one = 1;
        // A full eventfd counter still wakes the poller: nothing to do on EAGAIN.
        [[maybe_unused]] auto n = ::write(wake_fd_, &one, sizeof one);
    }
}

bool LineSource::wait_readable(int fd, std::chrono::steady_clock::time_point deadline) {
    using namespace std::chrono;
    while (!stopped()) {
        auto now = steady_clock::now();
        if (now >= deadline) return false;
        auto ms = duration_cast<milliseconds>(deadline - now).count() + 1;
        pollfd fds[2] = {{wake_fd_, POLLIN, 0}, {fd, POLLIN, 0}};
        int n = ::poll(fds, fd >= 0 ? 2 : 1, static_cast<int>(std::min<long long>(ms, 60'000)));
        if (n < 0) {
            if (errno == EINTR) continue;
            return false;
        }
        if (n == 0) continue;
        if (fd >= 0 && (fds[1].revents & (POLLIN | POLLERR | POLLHUP))) return true;
        if (fds[0].revents) return false;  // stop()
    }
    return false;
}

void LineSource::note_error(std::string message) {
    counters_.last_error = std::move(message);
    counters_.last_error_time = std::chrono::time_point_cast<Duration>(std::chrono::system_clock::now());
}

Result<const LineBatch*> LineSource::next_batch(std::chrono::milliseconds timeout) {
    if (has_pending_) return static_cast<const LineBatch*>(&pending_);
    if (stopped()) return static_cast<const LineBatch*>(nullptr);
    pending_.lines.clear();
    pending_.bytes = 0;
    pending_.end = committed_;
    Status filled = fill(pending_, std::chrono::steady_clock::now() + timeout);
    if (!filled) {
        note_error(filled.error().message);
        if (pending_.lines.empty()) return filled.error();
    }
    if (pending_.lines.empty()) return static_cast<const LineBatch*>(nullptr);
    pending_.end.source = committed_.source;
    pending_.end.lines = committed_.lines + pending_.lines.size();
    has_pending_ = true;
    return static_cast<const LineBatch*>(&pending_);
}

void LineSource::commit() {
    if (!has_pending_) return;
    committed_ = pending_.end;
    counters_.lines_read += pending_.lines.size();
    counters_.last_line_time = std::chrono::time_point_cast<Duration>(std::chrono::system_clock::now());
    on_commit(pending_);
    has_pending_ = false;
    pending_.lines.clear();
    pending_.bytes = 0;
}

void LineSource::refuse(const Error& why) {
    ++counters_.batches_refused;
    note_error(fmt::format("consumer refused batch: {}", why.message));
}

Result<std::size_t> LineSource::poll_once(const BatchConsumer& consumer, std::chrono::milliseconds timeout) {
    auto batch = next_batch(timeout);
    if (!batch) return batch.error();
    if (*batch == nullptr) return std::size_t{0};
    Status accepted = [&]() -> Status {
        try {
            return consumer(**batch);
        } catch (const std::exception& e) {
            return make_error(ErrorKind::internal, fmt::format("consumer threw: {}", e.what()));
        } catch (...) {
            return make_error(ErrorKind::internal, "consumer threw");
        }
    }();
    if (!accepted) {
        refuse(accepted.error());
        return std::size_t{0};
    }
    std::size_t n = (*batch)->lines.size();
    commit();
    return n;
}

Status LineSource::run(const BatchConsumer& consumer) {
    while (!stopped()) {
        std::uint64_t refused_before = counters_.batches_refused;
        auto n = poll_once(consumer, settings_.poll_interval * 4);
        if (!n) {
            if (stopped()) break;
            return n.error();
        }
        if (counters_.batches_refused != refused_before)
            wait_readable(-1, std::chrono::steady_clock::now() + settings_.refusal_backoff);
    }
    return {};
}

FollowerStatus LineSource::status() {
    FollowerStatus st = counters_;
    st.source = committed_.source;
    st.offset = committed_.offset;
    st.cursor = committed_.cursor;
    st.pending = has_pending_;
    add_status(st);
    return st;
}

}  // namespace retryguard
