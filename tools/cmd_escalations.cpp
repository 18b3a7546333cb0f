// cmd_escalations.cpp -- `retryguard escalations`: every escalated destination
// with a note ready to send to its postmaster, and with --since the escalations
// closed in that period. Exit 1 when one is open. Glue only.
#include "report_common.hpp"

namespace retryguard::cli {

void add_escalations_command(CLI::App& app) {
    struct Opt : ReportCommon, PageOptions {
        std::string since;
    };
    auto c = std::make_shared<Opt>();
    auto* cmd = app.add_subcommand("escalations",
                                   "Escalated destinations with a note for their postmaster (exit 1 if any)");
    add_report_options(cmd, *c);
    cmd->add_option("--since", c->since,
                    "DURATION (e.g. 7d, 36h): also the escalations closed in that period");
    add_page_options(cmd, *c);
    cmd->callback([c] {
        auto now = report_now("escalations", *c);
        if (!now) return void(exit_code() = kExitUsage);
        report::EscalationQuery q;
        q.page = c->page();
        if (!c->since.empty()) {
            std::string why;
            auto d = config::parse_duration(c->since, false, &why);
            if (!d) {
                fmt::print(stderr, "retryguard escalations: --since: {}\n", why);
                return void(exit_code() = kExitUsage);
            }
            q.since = *d;
        }
        auto rt = open_for_report("escalations", *c);
        if (!rt) return void(exit_code() = kExitUsage);
        auto doc = report::escalations(*rt->ledger, *rt->config, *now, q);
        if (!print_report("escalations", doc, *c, *now, report::render_escalations))
            return void(exit_code() = kExitUsage);
        exit_code() = doc->value("open", std::size_t{0}) > 0 ? kExitAttention : kExitOk;
    });
}

}  // namespace retryguard::cli
