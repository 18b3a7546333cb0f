// cmd_flags.cpp -- `retryguard flags list|clear DESTINATION` and `retryguard
// prune`: the two maintenance acts an operator asks for explicitly. Glue only.
#include "report_common.hpp"

namespace retryguard::cli {

void add_flags_command(CLI::App& app) {
    struct Opt : ReportCommon, PageOptions {
        bool all = false;
        std::string destination;
    };
    auto c = std::make_shared<Opt>();
    auto* cmd = app.add_subcommand("flags", "List or clear destination flags");
    cmd->require_subcommand(1);
    auto* list = cmd->add_subcommand("list", "Active flags (all with --all)");
    add_report_options(list, *c);
    list->add_flag("--all", c->all, "Include cleared and expired flags");
    add_page_options(list, *c);
    list->callback([c] {
        auto now = report_now("flags", *c);
        if (!now) return void(exit_code() = kExitUsage);
        auto rt = open_for_report("flags", *c);
        if (!rt) return void(exit_code() = kExitUsage);
        auto doc = report::flags(*rt->ledger, *now, c->all, c->page());
        if (!print_report("flags", doc, *c, *now, report::render_flags))
            return void(exit_code() = kExitUsage);
        exit_code() = kExitOk;
    });
    auto* clear = cmd->add_subcommand("clear", "Clear every active flag of a destination");
    add_report_options(clear, *c);
    clear->add_option("destination", c->destination, "Destination as listed (e.g. domain:example.com)")
        ->required();
    clear->callback([c] {
        auto now = report_now("flags", *c);
        if (!now) return void(exit_code() = kExitUsage);
        auto rt = open_for_report("flags", *c);
        if (!rt) return void(exit_code() = kExitUsage);
        auto n = rt->ledger->clear_flags(c->destination, *now);
        if (!n) {
            fmt::print(stderr, "retryguard flags clear: {}\n", n.error().message);
            return void(exit_code() = kExitUsage);
        }
        if (c->json)
            print_json(nlohmann::json{{"destination", c->destination}, {"cleared", *n}});
        else
            fmt::print("{}: {} flag(s) cleared\n", text::terminal(c->destination), *n);
        exit_code() = *n > 0 ? kExitOk : kExitAttention;
    });
}

void add_prune_command(CLI::App& app) {
    auto c = std::make_shared<ReportCommon>();
    auto* cmd = app.add_subcommand("prune", "Remove ledger records older than the configured retention");
    add_report_options(cmd, *c);
    cmd->callback([c] {
        auto now = report_now("prune", *c);
        if (!now) return void(exit_code() = kExitUsage);
        auto rt = open_for_report("prune", *c);
        if (!rt) return void(exit_code() = kExitUsage);
        auto r = rt->ledger->prune(report::retention_from(*rt->config), *now);
        if (!r) {
            fmt::print(stderr, "retryguard prune: {}\n", r.error().message);
            return void(exit_code() = kExitUsage);
        }
        auto doc = report::prune_to_json(*r);
        if (c->json)
            print_json(doc);
        else
            fmt::print("pruned: {} messages, {} recipients, {} episodes, {} flags, {} seen events\n",
                       r->messages, r->recipients, r->episodes, r->flags, r->seen_events);
        exit_code() = kExitOk;
    });
}

}  // namespace retryguard::cli
