// position_store.cpp -- FilePositionStore: follower positions in small files,
// replaced atomically (temp file, fsync, rename, fsync of the directory). It must
// never leave a torn or half-written position behind, whatever kills the process.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <charconv>
#include <cstring>

#include <fmt/format.h>

#include "retryguard/follow/follower.hpp"

namespace retryguard {
namespace {

constexpr std::string_view kMagic = "retryguard-position 1";
constexpr std::size_t kMaxPositionFile = 64 * 1024;

std::string escape(std::string_view v) {
    std::string out;
    out.reserve(v.size());
    for (char c : v) {
        if (c == '\\')
            out += "\\\\";
        else if (c == '\n')
            out += "\\n";
        else if (c == '\r')
            out += "\\r";
        else
            out += c;
    }
    return out;
}

Result<std::string> unescape(std::string_view v) {
    std::string out;
    out.reserve(v.size());
    for (std::size_t i = 0; i < v.size(); ++i) {
        if (v[i] != '\\') {
            out += v[i];
            continue;
        }
        if (++i == v.size()) return make_error(ErrorKind::invalid_input, "position: dangling escape");
        switch (v[i]) {
            case '\\': out += '\\'; break;
            case 'n': out += '\n'; break;
            case 'r': out += '\r'; break;
            default: return make_error(ErrorKind::invalid_input, "position: bad escape");
        }
    }
    return out;
}

Result<std::uint64_t> parse_u64(std::string_view key, std::string_view v) {
    std::uint64_t n = 0;
    auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
    if (ec != std::errc{} || p != v.data() + v.size() || v.empty())
        return make_error(ErrorKind::invalid_input, fmt::format("position: {} is not a number", key));
    return n;
}

Status write_all(int fd, std::string_view data) {
    while (!data.empty()) {
        ssize_t n = ::write(fd, data.data(), data.size());
        if (n < 0) {
            if (errno == EINTR) continue;
            return make_error(ErrorKind::io, fmt::format("write: {}", std::strerror(errno)));
        }
        data.remove_prefix(static_cast<std::size_t>(n));
    }
    return {};
}

}  // namespace

std::string serialize_position(const FollowerPosition& p) {
    return fmt::format(
        "{}\nsource={}\ndevice={}\ninode={}\noffset={}\nhead_fingerprint={}\ncursor={}\nlines={}\n", kMagic,
        escape(p.source), p.device, p.inode, p.offset, escape(p.head_fingerprint), escape(p.cursor), p.lines);
}

Result<FollowerPosition> parse_position(std::string_view text) {
    if (text.size() > kMaxPositionFile) return make_error(ErrorKind::limit, "position: file too large");
    FollowerPosition p;
    bool magic = false, have_source = false;
    while (!text.empty()) {
        auto nl = text.find('\n');
        if (nl == std::string_view::npos)
            return make_error(ErrorKind::invalid_input, "position: last line not terminated (torn write?)");
        std::string_view line = text.substr(0, nl);
        text.remove_prefix(nl + 1);
        if (!magic) {
            if (line != kMagic) return make_error(ErrorKind::invalid_input, "position: unknown format");
            magic = true;
            continue;
        }
        auto eq = line.find('=');
        if (eq == std::string_view::npos)
            return make_error(ErrorKind::invalid_input, "position: line without '='");
        std::string_view key = line.substr(0, eq), value = line.substr(eq + 1);
        if (key == "source") {
            auto v = unescape(value);
            if (!v) return v.error();
            p.source = std::move(*v);
            have_source = true;
        } else if (key == "head_fingerprint" || key == "cursor") {
            auto v = unescape(value);
            if (!v) return v.error();
            (key == "cursor" ? p.cursor : p.head_fingerprint) = std::move(*v);
        } else if (key == "device" || key == "inode" || key == "offset" || key == "lines") {
            auto n = parse_u64(key, value);
            if (!n) return n.error();
            if (key == "device")
                p.device = *n;
            else if (key == "inode")
                p.inode = *n;
            else if (key == "offset")
                p.offset = *n;
            else
                p.lines = *n;
        }
        // Unknown keys are ignored so that a newer version's file still loads.
    }
    if (!magic || !have_source) return make_error(ErrorKind::invalid_input, "position: incomplete");
    return p;
}

FilePositionStore::FilePositionStore(std::string directory, bool sync)
    : dir_(std::move(directory)), sync_(sync) {}

std::string FilePositionStore::file_for(const std::string& source) const {
    std::string name;
    for (char c : source) {
        bool keep = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                    c == '-' || c == '_';
        name += keep ? c : '_';
        if (name.size() >= 100) break;
    }
    // The readable part may collide ("a/b" vs "a_b"); the checksum of the full id does not in practice.
    auto crc = ::crc32(0L, reinterpret_cast<const Bytef*>(source.data()), static_cast<uInt>(source.size()));
    return fmt::format("{}/{}-{:08x}.pos", dir_, name, crc);
}

Result<FollowerPosition> FilePositionStore::load(const std::string& source) {
    std::string path = file_for(source);
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT) {
            FollowerPosition fresh;
            fresh.source = source;
            return fresh;
        }
        return make_error(ErrorKind::io, fmt::format("open {}: {}", path, std::strerror(errno)));
    }
    std::string text;
    char buf[4096];
    for (;;) {
        ssize_t n = ::read(fd, buf, sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        text.append(buf, static_cast<std::size_t>(n));
        if (text.size() > kMaxPositionFile) break;
    }
    ::close(fd);
    auto p = parse_position(text);
    if (!p) return make_error(p.error().kind, fmt::format("{}: {}", path, p.error().message));
    if (p->source != source)
        return make_error(ErrorKind::invalid_input,
                          fmt::format("{}: holds the position of '{}', not '{}'", path, p->source, source));
    return p;
}

Status FilePositionStore::save(const FollowerPosition& position) {
    if (::mkdir(dir_.c_str(), 0750) != 0 && errno != EEXIST)
        return make_error(ErrorKind::io, fmt::format("mkdir {}: {}", dir_, std::strerror(errno)));
    std::string path = file_for(position.source);
    std::string tmp = path + ".tmp";
    int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0640);
    if (fd < 0) return make_error(ErrorKind::io, fmt::format("open {}: {}", tmp, std::strerror(errno)));
    Status written = write_all(fd, serialize_position(position));
    if (written && sync_ && ::fsync(fd) != 0)
        written = make_error(ErrorKind::io, fmt::format("fsync {}: {}", tmp, std::strerror(errno)));
    ::close(fd);
    if (!written) return written;
    if (::rename(tmp.c_str(), path.c_str()) != 0)
        return make_error(ErrorKind::io, fmt::format("rename {}: {}", tmp, std::strerror(errno)));
    int dfd = sync_ ? ::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
    if (dfd >= 0) {
        ::fsync(dfd);  // makes the rename itself durable across a power loss
        ::close(dfd);
    }
    return {};
}

}  // namespace retryguard
