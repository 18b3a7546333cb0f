// cmd_report.cpp -- `retryguard report --html FILE`: the period report (what
// went wrong in the last N days and what to do) as one self-contained HTML
// page, built by report::html_report. Glue only.
#include <fstream>

#include "report_common.hpp"

namespace retryguard::cli {

void add_report_command(CLI::App& app) {
    struct Opt : ReportCommon {
        std::string html;
        int days = 30;
    };
    auto c = std::make_shared<Opt>();
    auto* cmd = app.add_subcommand("report", "Write the period report as one self-contained HTML page");
    add_report_options(cmd, *c);
    cmd->add_option("--html", c->html, "Output file")->required();
    cmd->add_option("--days", c->days,
                    "The period: the last N days (escalations closed, flags, incidents, episodes)")
        ->check(CLI::Range(1, 3650));
    cmd->callback([c] {
        auto now = report_now("report", *c);
        if (!now) return void(exit_code() = kExitUsage);
        auto rt = open_for_report("report", *c);
        if (!rt) return void(exit_code() = kExitUsage);
        auto page = report::html_report(*rt->ledger, *rt->config, *now, c->days);
        if (!page) {
            fmt::print(stderr, "retryguard report: {}\n", page.error().message);
            return void(exit_code() = kExitUsage);
        }
        std::ofstream out(c->html, std::ios::binary | std::ios::trunc);
        out << *page;
        if (!out.flush()) {
            fmt::print(stderr, "retryguard report: cannot write {}\n", c->html);
            return void(exit_code() = kExitUsage);
        }
        if (c->json) print_json(nlohmann::json{{"file", c->html}, {"bytes", page->size()}});
        exit_code() = kExitOk;
    });
}

}  // namespace retryguard::cli
