// cmd_status.cpp -- `retryguard status`: one screen about followers, the
// ledger, destinations, flags, the local-outbound incident and counters.
// Glue only; the document comes from core/report.
#include "report_common.hpp"

namespace retryguard::cli {

void add_status_command(CLI::App& app) {
    auto c = std::make_shared<ReportCommon>();
    auto* cmd = app.add_subcommand("status",
                                   "One screen: followers, ledger, destinations, flags, incident, counters");
    add_report_options(cmd, *c);
    cmd->callback([c] {
        auto now = report_now("status", *c);
        if (!now) return void(exit_code() = kExitUsage);
        auto rt = open_for_report("status", *c);
        if (!rt) return void(exit_code() = kExitUsage);
        report::StatusInputs in{rt->config.get(), rt->config_path};
        auto doc = report::status(*rt->ledger, in, *now);
        if (!print_report("status", doc, *c, *now, report::render_status))
            return void(exit_code() = kExitUsage);
        bool attention = doc->at("destinations_by_state").value("escalate", 0) > 0 ||
                         doc->at("engine").at("local_incident_open").get<bool>();
        for (const auto& f : doc->at("followers"))
            if (f.contains("problem") && f["problem"].is_string()) attention = true;
        exit_code() = attention ? kExitAttention : kExitOk;
    });
}

}  // namespace retryguard::cli
