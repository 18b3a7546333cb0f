// main.cpp -- entry point of the retryguard command.
#include <cstdio>

#include "commands.hpp"

namespace retryguard::cli {
int& exit_code() {
    static int code = kExitOk;
    return code;
}
}  // namespace retryguard::cli

int main(int argc, char** argv) {
    using namespace retryguard::cli;
    CLI::App app{"retryguard: record, classify and act on Postfix deferrals", "retryguard"};
    app.set_version_flag("--version", RETRYGUARD_VERSION);
    app.require_subcommand(1);
    add_classify_command(app);
    add_events_command(app);
    add_import_command(app);
    add_follow_command(app);
    add_check_config_command(app);
    add_status_command(app);
    add_destinations_command(app);
    add_escalations_command(app);
    add_explain_command(app);
    add_flags_command(app);
    add_prune_command(app);
    add_queue_command(app);
    add_report_command(app);

    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        int rc = app.exit(e);
        return rc == 0 ? kExitOk : kExitUsage;
    }
    return exit_code();
}
