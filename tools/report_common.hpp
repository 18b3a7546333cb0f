// report_common.hpp -- the options every reporting command shares (-c, -o,
// --json, the hidden --now) and the one way they open the runtime and print.
// Glue only: documents are built and rendered in core/report.
#pragma once

#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "commands.hpp"
#include "retryguard/report/report.hpp"
#include "retryguard/runtime/runtime.hpp"
#include "retryguard/text/text.hpp"

namespace retryguard::cli {

struct ReportCommon {
    std::string config;
    std::vector<std::string> overrides;  // -o key=value
    std::string now;                     // hidden: RFC 3339, fixes "now" for stable relative times (tests)
    bool json = false;
    bool no_colour = false;
};

inline void add_report_options(CLI::App* cmd, ReportCommon& c) {
    cmd->add_option("-c,--config", c.config, "Configuration file (default /etc/retryguard/retryguard.yaml)");
    cmd->add_option("-o", c.overrides,
                    "KEY=VALUE: set a configuration key (repeatable), e.g. -o ledger.sqlite.path=/tmp/l.db")
        ->allow_extra_args(false);  // one KEY=VALUE per -o: the words after it are arguments
    cmd->add_flag("--json", c.json, "Print JSON (stable keys, see docs/cli.md)");
    cmd->add_flag("--no-color", c.no_colour, "No colours even on a terminal");
    cmd->add_option("--now", c.now, "")->group("");  // hidden
}

// --limit/--offset of the listings: every row unless a page is asked for; the
// output says what it left out (docs/cli.md "Listings").
struct PageOptions {
    std::optional<std::size_t> limit;
    std::size_t offset = 0;
    report::Page page() const { return report::Page{offset, limit}; }
};

inline void add_page_options(CLI::App* cmd, PageOptions& p) {
    cmd->add_option("--limit", p.limit, "Show at most N rows (default: all), saying how many were left out")
        ->check(CLI::PositiveNumber);
    cmd->add_option("--offset", p.offset, "Skip the first N rows (with --limit: the next page)");
}

// Opens config + ledger + classifier; prints the error and returns nullopt on failure.
inline std::optional<Runtime> open_for_report(const char* name, const ReportCommon& c,
                                              bool classifier = false) {
    RuntimeOptions ro;
    ro.config_path = c.config;
    ro.overrides = c.overrides;
    ro.load_classifier = classifier;
    ro.ledger_to_directory_owner = true;
    auto rt = open_runtime(ro);
    if (!rt) {
        fmt::print(stderr, "retryguard {}: {}\n", name, rt.error().message);
        return std::nullopt;
    }
    for (const auto& n : rt->notices) fmt::print(stderr, "retryguard {}: {}\n", name, n);
    return std::move(*rt);
}

inline std::optional<TimePoint> report_now(const char* name, const ReportCommon& c) {
    if (c.now.empty()) return std::chrono::time_point_cast<Duration>(std::chrono::system_clock::now());
    auto t = report::parse_rfc3339(c.now);
    if (!t) {
        fmt::print(stderr, "retryguard {}: --now: {}\n", name, t.error().message);
        return std::nullopt;
    }
    return *t;
}

inline report::RenderOptions render_options(const ReportCommon& c, TimePoint now) {
    report::RenderOptions r;
    r.now = now;
    r.colour = !c.no_colour && ::isatty(STDOUT_FILENO) == 1 && std::getenv("NO_COLOR") == nullptr;
    return r;
}

// Through the one JSON renderer: valid UTF-8 whatever the ledger holds.
inline void print_json(const nlohmann::json& doc) {
    fmt::print("{}\n", text::json_dump(doc, 2));
}

// A report's renderer for people (report::render_status, render_flags, ...).
using ReportRenderer = std::string (*)(const nlohmann::json&, const report::RenderOptions&);

// A report's document as asked: JSON (--json), or rendered for the terminal.
inline void print_document(const nlohmann::json& doc, const ReportCommon& c, TimePoint now,
                           ReportRenderer render) {
    if (c.json)
        print_json(doc);
    else
        fmt::print("{}", render(doc, render_options(c, now)));
}

// The same for a document that may have failed to build: false, with the
// reason on standard error, when it did.
inline bool print_report(const char* name, const Result<nlohmann::json>& doc, const ReportCommon& c,
                         TimePoint now, ReportRenderer render) {
    if (!doc) {
        fmt::print(stderr, "retryguard {}: {}\n", name, doc.error().message);
        return false;
    }
    print_document(*doc, c, now, render);
    return true;
}

}  // namespace retryguard::cli
