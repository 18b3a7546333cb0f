// follow_util.hpp -- helpers for the follower tests: a temporary directory that
// removes itself, file writes that bypass any buffering, and a loop that drains
// a source.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "retryguard/follow/follower.hpp"

namespace retryguard::test {

struct TempDir {
    std::string path;
    TempDir() {
        std::string tmpl = (std::filesystem::temp_directory_path() / "rg-follow-XXXXXX").string();
        path = ::mkdtemp(tmpl.data()) ? tmpl : std::string();
    }
    ~TempDir() {
        std::error_code ec;
        if (!path.empty()) std::filesystem::remove_all(path, ec);
    }
    std::string operator/(const std::string& name) const { return path + "/" + name; }
};

inline void append(const std::string& file, const std::string& text) {
    int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    ASSERT_GE(fd, 0) << file;
    std::size_t done = 0;
    while (done < text.size()) {
        ssize_t n = ::write(fd, text.data() + done, text.size() - done);
        ASSERT_GT(n, 0);
        done += static_cast<std::size_t>(n);
    }
    ::close(fd);
}

inline std::string slurp(const std::string& file) {
    std::ifstream in(file, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

inline FollowerSettings fast_settings() {
    FollowerSettings s;
    s.poll_interval = std::chrono::milliseconds(20);
    s.rotation_grace = std::chrono::milliseconds(60);
    return s;
}

// Reads and commits until `want` lines arrived or `limit` passed.
inline std::vector<RawLine> drain(LineSource& src, std::size_t want,
                                  std::chrono::milliseconds limit = std::chrono::milliseconds(5000)) {
    std::vector<RawLine> got;
    auto deadline = std::chrono::steady_clock::now() + limit;
    while (got.size() < want && std::chrono::steady_clock::now() < deadline) {
        auto b = src.next_batch(std::chrono::milliseconds(50));
        if (!b) {
            ADD_FAILURE() << b.error().message;
            break;
        }
        if (*b == nullptr) continue;
        for (const auto& l : (*b)->lines) got.push_back(l);
        src.commit();
    }
    return got;
}

inline std::vector<std::string> texts(const std::vector<RawLine>& lines) {
    std::vector<std::string> out;
    for (const auto& l : lines) out.push_back(l.text);
    return out;
}

}  // namespace retryguard::test
