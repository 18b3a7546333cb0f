// ledger_feed.cpp -- e2e helper: feeds a Postfix log file into a ledger with
// the real log parser and the real ledger ingest, resuming from the position
// stored in the ledger. The e2e tests run it with --follow beside the sending
// Postfix, where production runs retryguard-policyd's log follower. It must
// never be installed or used outside the tests.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "retryguard/ledger.hpp"
#include "retryguard/log_parser.hpp"

using namespace retryguard;

namespace {
std::atomic<bool> stop{false};
void on_signal(int) {
    stop = true;
}
}  // namespace

int main(int argc, char** argv) {
    if (argc < 3) {
        std::fprintf(stderr, "usage: %s LEDGER-SPEC LOGFILE [--follow]\n", argv[0]);
        return 2;
    }
    std::string spec = argv[1], path = argv[2];
    bool follow = argc > 3 && std::string(argv[3]) == "--follow";
    signal(SIGTERM, on_signal);
    signal(SIGINT, on_signal);

    auto ledger = open_ledger(spec);
    if (!ledger) {
        std::fprintf(stderr, "ledger_feed: %s\n", ledger.error().message.c_str());
        return 1;
    }
    std::string source = "file:" + path;
    auto pos = (*ledger)->load_position(source);
    if (!pos) {
        std::fprintf(stderr, "ledger_feed: %s\n", pos.error().message.c_str());
        return 1;
    }
    FollowerPosition at;
    at.source = source;
    if (pos->has_value()) at = **pos;
    LogParser parser;
    do {
        std::ifstream in(path, std::ios::binary);
        if (in) {
            in.seekg(static_cast<std::streamoff>(at.offset));
            std::string line;
            std::vector<IngestItem> batch;
            std::uint64_t offset = at.offset;
            while (std::getline(in, line)) {
                if (in.eof()) break;  // a partial last line: wait for the rest
                offset += line.size() + 1;
                IngestItem item;
                parser.parse(line, item.event);
                if (item.event.kind != EventKind::unknown) batch.push_back(std::move(item));
                at.lines++;
            }
            if (offset != at.offset) {
                at.offset = offset;
                struct stat st {};
                if (stat(path.c_str(), &st) == 0) {
                    at.device = st.st_dev;
                    at.inode = st.st_ino;
                }
                auto r = (*ledger)->ingest(batch, at);
                if (!r) {
                    std::fprintf(stderr, "ledger_feed: ingest: %s\n", r.error().message.c_str());
                    return 1;
                }
            }
        }
        if (follow) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    } while (follow && !stop);
    return 0;
}
