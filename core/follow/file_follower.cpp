// file_follower.cpp -- follows a log file by path through appends, rename-and-
// create rotation and copytruncate, and resumes from a committed position
// (device, inode, offset, head fingerprint). It yields only complete lines, reads
// a rotated file to its end before moving to the new one (also when the rotation
// happened while we were stopped), and must never skip or repeat a committed
// line, stall on a huge line, or interpret line content.
#include <dirent.h>
#include <fcntl.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <optional>
#include <thread>
#include <tuple>

#include <fmt/format.h>

#include "retryguard/file_access.hpp"
#include "retryguard/follow/follower.hpp"

namespace retryguard {
namespace {

using Clock = std::chrono::steady_clock;

// The fingerprint covers the first min(kHeadBytes, offset) bytes: bytes before a
// committed offset never change in an append-only file, so the same prefix must
// hash the same on resume unless the file was truncated or the inode reused.
constexpr std::size_t kHeadBytes = 1024;

std::string fingerprint(std::string_view head) {
    if (head.empty()) return {};
    auto data = reinterpret_cast<const Bytef*>(head.data());
    auto len = static_cast<uInt>(head.size());
    return fmt::format("{:08x}{:08x}", ::crc32(0L, data, len), ::adler32(1L, data, len));
}

std::string pread_upto(int fd, std::uint64_t offset, std::size_t n) {
    std::string out(n, '\0');
    std::size_t got = 0;
    while (got < n) {
        ssize_t r = ::pread(fd, out.data() + got, n - got, static_cast<off_t>(offset + got));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        got += static_cast<std::size_t>(r);
    }
    out.resize(got);
    return out;
}

bool is_compressed_name(std::string_view name) {
    for (std::string_view ext : {".gz", ".xz", ".bz2", ".zst", ".lz4", ".Z", ".zip"})
        if (name.size() >= ext.size() && name.substr(name.size() - ext.size()) == ext) return true;
    return false;
}

bool all_digits(std::string_view s) {
    return !s.empty() && s.size() <= 9 &&
           std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

class FileFollower final : public LineSource {
  public:
    FileFollower(std::string path, FollowerPosition start, FollowerSettings settings)
        : LineSource(std::move(settings), std::move(start)), path_(std::move(path)) {
        auto slash = path_.rfind('/');
        dir_ = slash == std::string::npos ? "." : (slash == 0 ? "/" : path_.substr(0, slash));
        base_ = slash == std::string::npos ? path_ : path_.substr(slash + 1);
        counters_.kind = "file";
        counters_.path = path_;
    }

    ~FileFollower() override {
        close_current();
        if (inotify_fd_ >= 0) ::close(inotify_fd_);
    }

    void init() {
        if (settings_.use_inotify) {
            inotify_fd_ = ::inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
            if (inotify_fd_ >= 0) {
                // A directory watch reports writes to, and renames of, every file in
                // it: one watch covers the log, its rotated names and its successor.
                constexpr std::uint32_t mask = IN_MODIFY | IN_CREATE | IN_MOVED_FROM | IN_MOVED_TO |
                                               IN_DELETE | IN_CLOSE_WRITE | IN_ATTRIB | IN_DELETE_SELF |
                                               IN_MOVE_SELF;
                if (::inotify_add_watch(inotify_fd_, dir_.c_str(), mask) < 0) {
                    note_error(fmt::format("inotify on {}: {}; polling", dir_, std::strerror(errno)));
                    ::close(inotify_fd_);
                    inotify_fd_ = -1;
                }
            }
        }
        resume(committed_);
    }

  protected:
    Status fill(LineBatch& out, Clock::time_point deadline) override {
        for (;;) {
            if (stopped()) return {};
            if (out.lines.empty()) check_files(out);
            if (cur_fd_ >= 0) {
                Status s = read_lines(out);
                if (!s) return s;
            }
            if (!out.lines.empty()) {
                out.end.device = cur_dev_;
                out.end.inode = cur_ino_;
                out.end.offset = line_start();
                out.end.head_fingerprint = fingerprint_at(out.end.offset);
                out.end.cursor.clear();
                return {};
            }
            auto now = Clock::now();
            if (now >= deadline) return {};
            auto until = std::min(deadline, now + settings_.poll_interval);
            if (draining_) {
                auto switch_at = std::max(drain_since_, last_growth_) + settings_.rotation_grace;
                if (switch_at > now) until = std::min(until, switch_at + std::chrono::milliseconds(1));
            }
            if (inotify_fd_ >= 0) {
                if (wait_readable(inotify_fd_, until)) drain_inotify();
            } else {
                wait_readable(-1, until);
            }
        }
    }

    void add_status(FollowerStatus& st) override {
        st.reading = cur_fd_ >= 0 ? cur_name_ : "";
        st.device = cur_dev_;
        st.inode = cur_ino_;
        st.read_offset = line_start();
        st.inotify = inotify_fd_ >= 0;
        st.file_size = 0;
        if (cur_fd_ >= 0) {
            struct stat sb {};
            if (::fstat(cur_fd_, &sb) == 0) st.file_size = static_cast<std::uint64_t>(sb.st_size);
        }
        std::uint64_t from = (committed_.inode == cur_ino_ && committed_.device == cur_dev_)
                                 ? committed_.offset
                                 : line_start();
        st.lag_bytes = st.file_size > from ? st.file_size - from : 0;
        // Rotated files still to read, and the new file at the path, are lag as well.
        if (draining_ && cur_fd_ >= 0) {
            std::vector<std::string> later;
            if (auto rotated = find_rotated(cur_dev_, cur_ino_))
                for (const auto& e : rotated->newer) later.push_back(e.name);
            later.push_back(path_);
            for (const auto& name : later) {
                struct stat sb {};
                if (::stat(name.c_str(), &sb) == 0) st.lag_bytes += static_cast<std::uint64_t>(sb.st_size);
            }
        }
    }

  private:
    std::uint64_t line_start() const { return long_ ? long_start_ : buf_off_ + pos_; }

    void close_current() {
        if (cur_fd_ >= 0) ::close(cur_fd_);
        cur_fd_ = -1;
    }

    // expect: the (device, inode) the caller saw under that name; when the name
    // now holds another file (renamed since), nothing changes and false is returned.
    bool open_at(const std::string& name, std::uint64_t offset, bool at_path,
                 std::optional<std::pair<std::uint64_t, std::uint64_t>> expect = std::nullopt) {
        int fd = ::open(name.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY);
        if (fd < 0) {
            // "Not there yet" is normal (the log appears later); anything else
            // (EACCES: the daemon's user may not read the mail log) is an
            // error the admin must see: counted, in status, once per change.
            if (errno != ENOENT && at_path) {
                ++counters_.open_errors;
                std::string why = name + ": cannot read: " + file_error_reason(errno);
                if (why != counters_.unreadable) {
                    counters_.unreadable = why;
                    note_error(why);
                }
            }
            return false;
        }
        if (at_path) counters_.unreadable.clear();
        struct stat sb {};
        if (::fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode) ||
            (expect && (static_cast<std::uint64_t>(sb.st_dev) != expect->first ||
                        static_cast<std::uint64_t>(sb.st_ino) != expect->second))) {
            ::close(fd);
            return false;
        }
        close_current();
        cur_fd_ = fd;
        cur_name_ = name;
        cur_dev_ = static_cast<std::uint64_t>(sb.st_dev);
        cur_ino_ = static_cast<std::uint64_t>(sb.st_ino);
        at_path_ = at_path;
        head_.clear();
        reset_reader(offset);
        last_size_ = static_cast<std::uint64_t>(sb.st_size);
        last_growth_ = Clock::now();
        return true;
    }

    void reset_reader(std::uint64_t offset) {
        buf_.clear();
        buf_off_ = offset;
        pos_ = 0;
        long_ = false;
        long_prefix_.clear();
        eof_ = false;
    }

    void ensure_head(std::size_t n) {
        n = std::min(n, kHeadBytes);
        if (head_.size() >= n || cur_fd_ < 0) return;
        head_ = pread_upto(cur_fd_, 0, n);
    }

    std::string fingerprint_at(std::uint64_t offset) {
        std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(kHeadBytes, offset));
        ensure_head(n);
        return fingerprint(std::string_view(head_).substr(0, std::min(n, head_.size())));
    }

    static bool same_head(int fd, std::uint64_t offset, const std::string& fp) {
        std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(kHeadBytes, offset));
        return fingerprint(pread_upto(fd, 0, n)) == fp;
    }

    // The committed file is no longer at the path: look for it under a rotated
    // name (path.N or path-SUFFIX, uncompressed) and list the rotated files newer
    // than it, oldest first.
    struct Entry {
        std::string name;
        bool numbered;
        std::uint32_t number;
        std::uint64_t dev, ino, size;
        std::pair<std::uint64_t, std::uint64_t> id() const { return {dev, ino}; }
    };
    struct Rotated {
        Entry found;
        std::vector<Entry> newer;
    };
    // The rotated files as one consistent view: logrotate renames path.N to
    // path.N+1 one file at a time, and a directory read during those renames
    // may miss a name or see one twice; two reads that agree are taken as the
    // view. nullopt while rotation is still shuffling names (look again later).
    std::optional<std::vector<Entry>> list_rotated_stable() {
        auto key = [](const std::vector<Entry>& v) {
            std::vector<std::tuple<std::string, std::uint64_t, std::uint64_t>> k;
            for (const auto& e : v) k.emplace_back(e.name, e.dev, e.ino);
            std::sort(k.begin(), k.end());
            return k;
        };
        auto a = list_rotated();
        for (int attempt = 0; attempt < 3; ++attempt) {
            auto b = list_rotated();
            if (key(a) == key(b)) return a;
            a = std::move(b);
        }
        return std::nullopt;
    }
    std::vector<Entry> list_rotated() {
        std::vector<Entry> entries;
        DIR* d = ::opendir(dir_.c_str());
        if (!d) return entries;
        while (dirent* e = ::readdir(d)) {
            std::string_view name = e->d_name;
            if (name.size() <= base_.size() + 1 || name.substr(0, base_.size()) != base_) continue;
            char sep = name[base_.size()];
            if (sep != '.' && sep != '-') continue;
            if (is_compressed_name(name)) continue;
            std::string full = dir_ + "/" + std::string(name);
            struct stat sb {};
            if (::stat(full.c_str(), &sb) != 0 || !S_ISREG(sb.st_mode)) continue;
            std::string_view suffix = name.substr(base_.size() + 1);
            Entry entry{full,
                        sep == '.' && all_digits(suffix),
                        0,
                        static_cast<std::uint64_t>(sb.st_dev),
                        static_cast<std::uint64_t>(sb.st_ino),
                        static_cast<std::uint64_t>(sb.st_size)};
            if (entry.numbered) std::from_chars(suffix.data(), suffix.data() + suffix.size(), entry.number);
            entries.push_back(std::move(entry));
        }
        ::closedir(d);
        return entries;
    }

    // After copytruncate, the bytes between what we had read and the truncation
    // are only in the copy (path.1 or path-SUFFIX): the rotated file, other than
    // the current inode, that starts with the same bytes and reaches `offset`.
    std::optional<std::string> find_copy(std::uint64_t offset, const std::string& fp) {
        auto entries = list_rotated();
        // Newest first: path.1 before path.2, later dates before earlier ones.
        std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
            if (a.numbered != b.numbered) return a.numbered;
            return a.numbered ? a.number < b.number : a.name > b.name;
        });
        for (const auto& e : entries) {
            if ((e.dev == cur_dev_ && e.ino == cur_ino_) || e.size < offset) continue;
            int fd = ::open(e.name.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY);
            if (fd < 0) continue;
            bool same = same_head(fd, offset, fp);
            ::close(fd);
            if (same) return e.name;
        }
        return std::nullopt;
    }

    // Where (dev, ino) is in one consistent listing, and the files newer than it.
    static std::optional<Rotated> locate(const std::vector<Entry>& entries, std::uint64_t dev,
                                         std::uint64_t ino) {
        auto hit = std::find_if(entries.begin(), entries.end(),
                                [&](const Entry& e) { return e.dev == dev && e.ino == ino; });
        if (hit == entries.end()) return std::nullopt;
        Rotated r{*hit, {}};
        std::vector<Entry> newer;
        for (const auto& e : entries) {
            if (e.ino == ino && e.dev == dev) continue;
            if (hit->numbered ? (e.numbered && e.number < hit->number) : (!e.numbered && e.name > hit->name))
                newer.push_back(e);
        }
        // Numbered: path.3 is older than path.2; dated: lexical order is time order.
        std::sort(newer.begin(), newer.end(), [&](const Entry& a, const Entry& b) {
            return hit->numbered ? a.number > b.number : a.name < b.name;
        });
        r.newer = std::move(newer);
        return r;
    }

    std::optional<Rotated> find_rotated(std::uint64_t dev, std::uint64_t ino) {
        auto stable = list_rotated_stable();
        if (!stable) return std::nullopt;
        return locate(*stable, dev, ino);
    }

    void start_draining() {
        draining_ = true;
        drain_since_ = Clock::now();
    }

    void resume(const FollowerPosition& saved) {
        if (saved.inode == 0) {
            if (!open_at(path_, 0, true)) return;  // appears later: read it from its start
            if (settings_.start_at_end) reset_reader(last_line_boundary());
            return;
        }
        struct stat sb {};
        bool exists = ::stat(path_.c_str(), &sb) == 0;
        if (exists && static_cast<std::uint64_t>(sb.st_dev) == saved.device &&
            static_cast<std::uint64_t>(sb.st_ino) == saved.inode) {
            // Only the file stat() saw: if it was rotated away since, the path holds
            // another file (or none) and the saved file is among the rotated names.
            if (open_at(path_, 0, true, std::pair{saved.device, saved.inode})) {
                if (static_cast<std::uint64_t>(sb.st_size) >= saved.offset &&
                    same_head(cur_fd_, saved.offset, saved.head_fingerprint)) {
                    reset_reader(saved.offset);
                    return;
                }
                ++counters_.truncations;
                if (auto copy =
                        saved.offset > 0 ? find_copy(saved.offset, saved.head_fingerprint) : std::nullopt) {
                    open_at(*copy, 0, false);  // copytruncate while stopped: the rest is in the copy
                    reset_reader(saved.offset);
                    start_draining();
                    return;
                }
                note_error(
                    fmt::format("{} was truncated or replaced while stopped (offset {} no longer valid); "
                                "reading it from its start",
                                path_, saved.offset));
                return;
            }
        }
        // A rotation may be renaming files right now: a listing taken during it is
        // not used (look again once it settled), and a file renamed between the
        // listing and the open is looked up again. Only a settled listing without
        // the saved file means that it is gone.
        for (int attempt = 0; attempt < 200; ++attempt) {
            auto stable = list_rotated_stable();
            if (!stable) {
                std::this_thread::sleep_for(std::chrono::milliseconds(10));
                continue;
            }
            auto rotated = locate(*stable, saved.device, saved.inode);
            if (!rotated) break;
            if (!open_at(rotated->found.name, 0, false, rotated->found.id())) continue;  // renamed since
            struct stat rb {};
            ::fstat(cur_fd_, &rb);
            if (static_cast<std::uint64_t>(rb.st_size) >= saved.offset &&
                same_head(cur_fd_, saved.offset, saved.head_fingerprint)) {
                reset_reader(saved.offset);
                ++counters_.rotations;
                start_draining();
                return;
            }
            close_current();
            break;
        }
        note_error(
            fmt::format("saved file {}:{} of {} not found (rotated away and compressed or removed?); "
                        "reading {} from its start",
                        saved.device, saved.inode, path_, path_));
        open_at(path_, 0, true);
    }

    std::uint64_t last_line_boundary() {
        struct stat sb {};
        if (::fstat(cur_fd_, &sb) != 0) return 0;
        auto size = static_cast<std::uint64_t>(sb.st_size);
        std::uint64_t from = size > settings_.max_line_bytes ? size - settings_.max_line_bytes : 0;
        std::string tail = pread_upto(cur_fd_, from, static_cast<std::size_t>(size - from));
        auto nl = tail.rfind('\n');
        return nl == std::string::npos ? size : from + nl + 1;
    }

    void drain_inotify() {
        alignas(inotify_event) char buf[4096];
        while (::read(inotify_fd_, buf, sizeof buf) > 0) {
        }
    }

    bool has_partial() const { return long_ || pos_ < buf_.size(); }

    void emit(LineBatch& out, std::string_view text, std::uint64_t offset, bool truncated) {
        out.lines.push_back(RawLine{std::string(text), offset, truncated});
        out.bytes += text.size();
    }

    // A line longer than the limit: counted, and truncated or skipped.
    void emit_long(LineBatch& out, std::string_view prefix, std::uint64_t offset) {
        if (settings_.long_line == LongLinePolicy::skip) {
            ++counters_.lines_skipped;
            return;
        }
        ++counters_.lines_truncated;
        emit(out, prefix.substr(0, settings_.max_line_bytes), offset, true);
    }

    bool full(const LineBatch& out) const {
        return out.lines.size() >= settings_.batch_max_lines || out.bytes >= settings_.batch_max_bytes;
    }

    void check_files(LineBatch& out) {
        auto now = Clock::now();
        if (cur_fd_ < 0) {
            if (open_at(path_, 0, true)) draining_ = false;
            return;
        }
        struct stat sb {};
        if (::fstat(cur_fd_, &sb) != 0) return;
        auto size = static_cast<std::uint64_t>(sb.st_size);
        if (size != last_size_) {
            last_size_ = size;
            last_growth_ = now;
        }
        // copytruncate (or any shrink): the file restarts at 0 under the same inode.
        // A changed head catches a truncation already followed by regrowth.
        std::uint64_t read_end = buf_off_ + buf_.size();
        bool head_changed = !head_.empty() && pread_upto(cur_fd_, 0, head_.size()) != head_;
        if (size < read_end || head_changed) {
            ++counters_.truncations;
            std::uint64_t resume_at = line_start();
            std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(kHeadBytes, resume_at));
            if (at_path_ && resume_at > 0 && head_.size() >= n) {
                if (auto copy = find_copy(resume_at, fingerprint(std::string_view(head_).substr(0, n)))) {
                    open_at(*copy, 0, false);  // finish from the copy, then back to the path at 0
                    reset_reader(resume_at);
                    start_draining();
                    return;
                }
            }
            head_.clear();
            reset_reader(0);
            return;
        }
        if (at_path_) {
            struct stat pb {};
            bool exists = ::stat(path_.c_str(), &pb) == 0;
            if (!exists || static_cast<std::uint64_t>(pb.st_dev) != cur_dev_ ||
                static_cast<std::uint64_t>(pb.st_ino) != cur_ino_) {
                at_path_ = false;
                start_draining();
            }
        }
        if (!draining_ || !eof_) return;
        if (now < std::max(drain_since_, last_growth_) + settings_.rotation_grace) return;
        if (has_partial()) {
            // The rotated file ended without a newline and nobody writes to it any
            // more: its last line is complete as it is.
            if (long_) {
                emit_long(out, long_prefix_, long_start_);
                long_ = false;
                buf_off_ += buf_.size();
                buf_.clear();
                pos_ = 0;
            } else {
                std::string_view rest(buf_.data() + pos_, buf_.size() - pos_);
                if (rest.size() > settings_.max_line_bytes)
                    emit_long(out, rest, buf_off_ + pos_);
                else
                    emit(out, rest, buf_off_ + pos_, false);
                pos_ = buf_.size();
            }
            if (!out.lines.empty()) return;  // commit the old file's end before moving on
        }
        // The file right after this one is the next newer rotated name, looked up
        // now (not remembered): more rotations may have happened while we read.
        // Until a successor can be opened, stay on the drained file, so that the
        // next look is still relative to it (a new file that is rotated away
        // before we open the path must not be skipped).
        // The path's file is looked at before the rotated names: if it is rotated
        // away after this, the listing shows it as the newest rotated file; if
        // after the listing, opening the path finds another file and we look again.
        struct stat pb {};
        bool path_exists = ::stat(path_.c_str(), &pb) == 0;
        auto stable = list_rotated_stable();
        if (!stable) return;  // names still moving: look again
        auto rotated = locate(*stable, cur_dev_, cur_ino_);
        if (rotated) {
            if (!rotated->newer.empty()) {
                if (open_at(rotated->newer.front().name, 0, false, rotated->newer.front().id())) {
                    ++counters_.rotations;
                    start_draining();
                }
                return;  // renamed under our feet: look again on the next round
            }
        }
        if (!path_exists) return;
        if (static_cast<std::uint64_t>(pb.st_dev) == cur_dev_ &&
            static_cast<std::uint64_t>(pb.st_ino) == cur_ino_) {
            at_path_ = true;  // renamed back: it is the live file again, keep our place
            draining_ = false;
            return;
        }
        if (open_at(
                path_, 0, true,
                std::pair{static_cast<std::uint64_t>(pb.st_dev), static_cast<std::uint64_t>(pb.st_ino)})) {
            ++counters_.rotations;
            draining_ = false;
        }
    }

    Status read_lines(LineBatch& out) {
        const std::size_t max_line = settings_.max_line_bytes;
        for (;;) {
            while (pos_ < buf_.size()) {
                if (full(out)) return {};
                const char* start = buf_.data() + pos_;
                const void* hit = std::memchr(start, '\n', buf_.size() - pos_);
                if (!hit) break;
                auto len = static_cast<std::size_t>(static_cast<const char*>(hit) - start);
                if (long_) {
                    emit_long(out, long_prefix_, long_start_);
                    long_ = false;
                    long_prefix_.clear();
                } else if (len > max_line) {
                    emit_long(out, std::string_view(start, len), buf_off_ + pos_);
                } else {
                    emit(out, std::string_view(start, len), buf_off_ + pos_, false);
                }
                pos_ += len + 1;
            }
            if (full(out)) return {};
            std::size_t partial = buf_.size() - pos_;
            if (long_) {
                buf_off_ += buf_.size();  // the middle of a long line: keep nothing
                buf_.clear();
                pos_ = 0;
            } else if (partial > max_line) {
                long_ = true;
                long_start_ = buf_off_ + pos_;
                long_prefix_.assign(buf_.data() + pos_, max_line);
                buf_off_ += buf_.size();
                buf_.clear();
                pos_ = 0;
            } else if (pos_ > 0) {
                buf_.erase(0, pos_);
                buf_off_ += pos_;
                pos_ = 0;
            }
            std::size_t old = buf_.size();
            buf_.resize(old + settings_.read_chunk_bytes);
            ssize_t n = ::pread(cur_fd_, buf_.data() + old, settings_.read_chunk_bytes,
                                static_cast<off_t>(buf_off_ + old));
            if (n < 0) {
                buf_.resize(old);
                if (errno == EINTR) continue;
                return make_error(ErrorKind::io, fmt::format("read {}: {}", cur_name_, std::strerror(errno)));
            }
            buf_.resize(old + static_cast<std::size_t>(n));
            if (n == 0) {
                eof_ = true;
                return {};
            }
            eof_ = false;
        }
    }

    std::string path_, dir_, base_;
    int inotify_fd_ = -1;

    // The file being read.
    int cur_fd_ = -1;
    std::string cur_name_;
    std::uint64_t cur_dev_ = 0, cur_ino_ = 0;
    bool at_path_ = true;
    std::string head_;  // its first bytes (up to kHeadBytes)
    std::uint64_t last_size_ = 0;
    Clock::time_point last_growth_{};

    // Reader: buf_ holds file bytes from buf_off_; pos_ is the start of the first
    // line not yet delivered. A line longer than the limit is not kept: only its
    // prefix (long_prefix_) while the rest is skipped up to its newline.
    std::string buf_;
    std::uint64_t buf_off_ = 0;
    std::size_t pos_ = 0;
    bool long_ = false;
    std::string long_prefix_;
    std::uint64_t long_start_ = 0;
    bool eof_ = false;

    // Rotation: the current file is no longer at the path; after it come the
    // newer rotated files (oldest first), then the path.
    bool draining_ = false;
    Clock::time_point drain_since_{};
};

}  // namespace

std::string file_source_id(const std::string& path) {
    return "file:" + path;
}

Result<std::unique_ptr<LineSource>> open_file_follower(std::string path, FollowerPosition start,
                                                       FollowerSettings settings) {
    if (Status ok = validate(settings); !ok) return ok.error();
    if (path.empty()) return make_error(ErrorKind::config, "file follower: empty path");
    if (start.source.empty()) start.source = file_source_id(path);
    try {
        auto follower =
            std::make_unique<FileFollower>(std::move(path), std::move(start), std::move(settings));
        follower->init();
        return std::unique_ptr<LineSource>(std::move(follower));
    } catch (const std::exception& e) {
        return make_error(ErrorKind::internal, fmt::format("file follower: {}", e.what()));
    }
}

}  // namespace retryguard
