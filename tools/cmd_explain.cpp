// cmd_explain.cpp -- `retryguard explain QID|MESSAGE-ID|ADDRESS`: one message's
// timeline with the category and guidance of each reply and what happens next.
// Glue only; the notices and flushes it shows come from core/actions/.
#include "report_common.hpp"
#include "retryguard/actions/actions.hpp"

namespace retryguard::cli {

void add_explain_command(CLI::App& app) {
    struct Opt : ReportCommon {
        std::string query;
        std::string lifetime = "5d";
    };
    auto c = std::make_shared<Opt>();
    auto* cmd =
        app.add_subcommand("explain", "Timeline of one message by queue id, Message-ID or recipient address");
    add_report_options(cmd, *c);
    cmd->add_option("query", c->query, "Queue id, Message-ID or recipient address")->required();
    cmd->add_option("--queue-lifetime", c->lifetime,
                    "Postfix maximal_queue_lifetime for the expiry estimate (e.g. 5d, 72h; default 5d)");
    cmd->callback([c] {
        auto now = report_now("explain", *c);
        if (!now) return void(exit_code() = kExitUsage);
        report::ExplainOptions eo;
        {
            const std::string& s = c->lifetime;
            std::size_t n = 0;
            long long v = 0;
            try {
                v = std::stoll(s, &n);
            } catch (...) {
                n = 0;
            }
            std::string unit = n ? s.substr(n) : "";
            long long mult = unit == "d"   ? 86400
                             : unit == "h" ? 3600
                             : unit == "m" ? 60
                             : unit == "s" ? 1
                                           : 0;
            if (!n || !mult || v <= 0 || v > 3650LL * 86400) {
                fmt::print(stderr, "retryguard explain: --queue-lifetime: expected e.g. 5d, 72h, got '{}'\n",
                           s);
                return void(exit_code() = kExitUsage);
            }
            eo.queue_lifetime = std::chrono::seconds(v * mult);
        }
        auto rt = open_for_report("explain", *c, true);
        if (!rt) return void(exit_code() = kExitUsage);
        auto doc = report::explain(*rt->ledger, *rt->classifier, *rt->config, c->query, *now, eo);
        if (!doc) {
            fmt::print(stderr, "retryguard explain: {}\n", doc.error().message);
            return void(exit_code() =
                            doc.error().kind == ErrorKind::invalid_input ? kExitAttention : kExitUsage);
        }
        // Notices and flushes retryguard-policyd recorded for these messages.
        if (auto st = rt->ledger->get_state(actions::Planner::kStateKey); st && st->has_value())
            (*doc)["actions"] = actions::actions_for_explain(**st, *doc);
        else
            (*doc)["actions"] = nlohmann::json::array();
        print_document(*doc, *c, *now, report::render_explain);
        exit_code() = kExitOk;
    });
}

}  // namespace retryguard::cli
