// cmd_escalations.cpp -- `retryguard escalations`: every escalated destination
// with a note ready to send to its postmaster. Exit 1 when there is one. Glue only.
#include "report_common.hpp"

namespace retryguard::cli {

void add_escalations_command(CLI::App& app) {
    auto c = std::make_shared<ReportCommon>();
    auto* cmd = app.add_subcommand("escalations",
                                   "Escalated destinations with a note for their postmaster (exit 1 if any)");
    add_report_options(cmd, *c);
    cmd->callback([c] {
        auto now = report_now("escalations", *c);
        if (!now) return void(exit_code() = kExitUsage);
        auto rt = open_for_report("escalations", *c);
        if (!rt) return void(exit_code() = kExitUsage);
        auto doc = report::escalations(*rt->ledger, *rt->config, *now);
        if (!doc) {
            fmt::print(stderr, "retryguard escalations: {}\n", doc.error().message);
            return void(exit_code() = kExitUsage);
        }
        if (c->json)
            print_json(*doc);
        else
            fmt::print("{}", report::render_escalations(*doc, render_options(*c, *now)));
        exit_code() = doc->at("escalations").empty() ? kExitOk : kExitAttention;
    });
}

}  // namespace retryguard::cli
