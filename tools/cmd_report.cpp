// cmd_report.cpp -- `retryguard report --html FILE`: one self-contained HTML
// page with timelines, categories over time, escalations and flags. Glue only.
#include <fstream>

#include "report_common.hpp"

namespace retryguard::cli {

void add_report_command(CLI::App& app) {
    struct Opt : ReportCommon {
        std::string html;
        int days = 30;
    };
    auto c = std::make_shared<Opt>();
    auto* cmd = app.add_subcommand("report", "Write a self-contained HTML report");
    add_report_options(cmd, *c);
    cmd->add_option("--html", c->html, "Output file")->required();
    cmd->add_option("--days", c->days, "Ended episodes from the last N days")->check(CLI::Range(1, 3650));
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
