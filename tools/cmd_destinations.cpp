// cmd_destinations.cpp -- `retryguard destinations`: recipient domains and MX
// hosts with their ladder state, worst first (or --sort), all or one page. Glue only.
#include "report_common.hpp"

namespace retryguard::cli {

void add_destinations_command(CLI::App& app) {
    struct Opt : ReportCommon, PageOptions {
        std::string state, category, kind, sort = "worst";
    };
    auto c = std::make_shared<Opt>();
    auto* cmd =
        app.add_subcommand("destinations", "Domains and MX hosts: state, category, deferrals, worst first");
    add_report_options(cmd, *c);
    cmd->add_option("--state", c->state, "Only this ladder state (escalate, watch, noted, recovered, none)");
    cmd->add_option("--category", c->category, "Only destinations whose open episode has this category");
    cmd->add_option("--kind", c->kind, "domain or mx")->check(CLI::IsMember({"domain", "mx"}));
    cmd->add_option("--sort", c->sort,
                    "worst (escalated, flagged, watch, then oldest open episode), name, age or deferrals")
        ->check(CLI::IsMember({"worst", "name", "age", "deferrals"}));
    add_page_options(cmd, *c);
    cmd->callback([c] {
        auto now = report_now("destinations", *c);
        if (!now) return void(exit_code() = kExitUsage);
        report::DestinationQuery q;
        q.sort = report::destination_sort_from_string(c->sort).value_or(report::DestinationSort::worst);
        q.page = c->page();
        if (!c->state.empty()) q.state = c->state;
        if (!c->kind.empty()) q.kind = c->kind == "mx" ? DestinationKind::relay : DestinationKind::domain;
        if (!c->category.empty()) {
            auto cat = category_from_string(c->category);
            if (!cat) {
                fmt::print(stderr, "retryguard destinations: unknown category '{}'\n", c->category);
                return void(exit_code() = kExitUsage);
            }
            q.category = *cat;
        }
        auto rt = open_for_report("destinations", *c);
        if (!rt) return void(exit_code() = kExitUsage);
        auto doc = report::destinations(*rt->ledger, q, *now);
        if (!print_report("destinations", doc, *c, *now, report::render_destinations))
            return void(exit_code() = kExitUsage);
        // Over every matching row, not only the page shown.
        exit_code() = doc->value("escalated", std::size_t{0}) > 0 ? kExitAttention : kExitOk;
    });
}

}  // namespace retryguard::cli
