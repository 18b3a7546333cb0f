// cmd_events.cpp -- `retryguard events`: prints the events the log parser finds
// in Postfix logs (files, .gz files or standard input). Glue only: reading is
// read_log_file, parsing is LogParser, formatting is event_json; this file must
// never interpret a line itself.
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "commands.hpp"
#include "retryguard/log/event_json.hpp"
#include "retryguard/log/log_parser.hpp"
#include "retryguard/log/log_reader.hpp"

namespace retryguard::cli {
namespace {

struct EventsOptions {
    bool json = false;
    bool quiet = false;  // parse only, print nothing but the summary
    bool utc = false;
    std::optional<int> year;
    std::vector<std::string> files;
};

int run_events(const EventsOptions& opt) {
    std::vector<std::string> files = opt.files.empty() ? std::vector<std::string>{"-"} : opt.files;
    int rc = kExitOk;
    LogParserStats total;
    std::string out;
    out.reserve(1 << 16);
    auto flush = [&out] {
        std::fwrite(out.data(), 1, out.size(), stdout);
        out.clear();
    };
    for (const auto& path : files) {
        LogParserOptions po;
        po.year = opt.year;
        po.local_time = !opt.utc;
        po.parse_replies = !opt.quiet;
        Event ev;
        const LogFileRead read = read_log_file(path, po, [&](std::string_view line, LogParser& parser) {
            parser.parse(line, ev);
            if (opt.quiet) return;
            if (opt.json)
                append_event_json(ev, out);
            else
                out += event_to_text(ev);
            out += '\n';
            if (out.size() >= (1 << 16)) flush();
        });
        if (!read.status) {
            fmt::print(stderr, "retryguard events: {}\n", read.status.error().message);
            rc = kExitAttention;
        }
        flush();
        const auto& st = read.stats;
        total.lines += st.lines;
        total.recognised += st.recognised;
        total.unknown += st.unknown;
        total.truncated += st.truncated;
        for (const auto& [k, n] : st.unknown_by_kind) total.unknown_by_kind[k] += n;
    }
    std::fflush(stdout);
    fmt::print(stderr, "retryguard events: {} lines, {} events, {} unknown, {} truncated\n", total.lines,
               total.recognised, total.unknown, total.truncated);
    for (const auto& [k, n] : total.unknown_by_kind) fmt::print(stderr, "  unknown {}: {}\n", k, n);
    return rc;
}

}  // namespace

void add_events_command(CLI::App& app) {
    auto opt = std::make_shared<EventsOptions>();
    auto* cmd =
        app.add_subcommand("events", "Print the events parsed from Postfix logs (stdin when no file)");
    cmd->add_flag("--json", opt->json, "One JSON object per line");
    cmd->add_flag("--quiet", opt->quiet, "Parse only (no reply parsing, no output) and print the summary");
    cmd->add_flag("--utc", opt->utc, "Read time stamps without a zone as UTC (default: local time)");
    cmd->add_option("--year", opt->year, "Year of the first time stamp without a year (default: inferred)")
        ->check(CLI::Range(1970, 9999));
    cmd->add_option("files", opt->files, "Log files, plain or gzip ('-' = standard input)");
    cmd->callback([opt] { exit_code() = run_events(*opt); });
}

}  // namespace retryguard::cli
