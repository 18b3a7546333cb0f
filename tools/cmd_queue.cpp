// cmd_queue.cpp -- `retryguard queue`: the deferred mail in the Postfix queue by
// destination and age (like qshape), each reply classified, with the guidance
// per category. Runs `postqueue -j` or reads its saved output. Glue only.
#include <cstdio>
#include <fstream>
#include <sstream>

#include "report_common.hpp"

namespace retryguard::cli {
namespace {

// Reads at most `limit` bytes of a command's output; false when it failed.
bool read_command(const char* command, std::string& out, std::size_t limit) {
    FILE* p = ::popen(command, "r");
    if (!p) return false;
    char buf[65536];
    std::size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) {
        if (out.size() + n > limit) {
            ::pclose(p);
            return false;
        }
        out.append(buf, n);
    }
    return ::pclose(p) == 0;
}

}  // namespace

void add_queue_command(CLI::App& app) {
    struct Opt : ReportCommon, PageOptions {
        std::string saved;
    };
    auto c = std::make_shared<Opt>();
    auto* cmd =
        app.add_subcommand("queue", "Deferred mail by destination and age, classified, with guidance");
    add_report_options(cmd, *c);
    cmd->add_option("--postqueue-json", c->saved, "Read saved `postqueue -j` output instead of running it");
    add_page_options(cmd, *c);
    cmd->callback([c] {
        auto now = report_now("queue", *c);
        if (!now) return void(exit_code() = kExitUsage);
        constexpr std::size_t kLimit = 1ull << 30;
        std::string text;
        if (!c->saved.empty()) {
            std::ifstream in(c->saved, std::ios::binary);
            if (!in) {
                fmt::print(stderr, "retryguard queue: cannot read {}\n", c->saved);
                return void(exit_code() = kExitUsage);
            }
            std::stringstream ss;
            ss << in.rdbuf();
            text = ss.str();
        } else if (!read_command("postqueue -j", text, kLimit)) {
            fmt::print(stderr,
                       "retryguard queue: `postqueue -j` failed (is Postfix installed and running?)\n");
            return void(exit_code() = kExitUsage);
        }
        auto rt = open_for_report("queue", *c, true);
        if (!rt) return void(exit_code() = kExitUsage);
        auto doc = report::queue(text, *rt->classifier, rt->ledger.get(), *now, c->page());
        if (!print_report("queue", doc, *c, *now, report::render_queue))
            return void(exit_code() = kExitUsage);
        exit_code() = kExitOk;
    });
}

}  // namespace retryguard::cli
