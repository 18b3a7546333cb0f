// position.hpp -- where a log follower stands in its source, persisted so that
// a restart (also after kill -9) resumes without losing or repeating a line.
// The follower produces positions; whoever consumes a batch of lines commits
// the batch's end position in the same transaction as the batch's effects
// (the ledger does, see ledger.hpp), which is what makes ingest exactly-once.
#pragma once

#include <cstdint>
#include <string>

namespace retryguard {

struct FollowerPosition {
    std::string source;  // stable id of the source: "file:/var/log/mail.log", "journal", "syslog:unix:/path"
    // file sources
    std::uint64_t device = 0;
    std::uint64_t inode = 0;
    std::uint64_t offset = 0;      // byte offset just past the last consumed line
    std::string head_fingerprint;  // hex hash of the file's first bytes: detects a reused inode
    // journal sources
    std::string cursor;
    // bookkeeping
    std::uint64_t lines = 0;  // lines consumed from this source since it was first seen
};

}  // namespace retryguard
