// commands.hpp -- the retryguard command tree. Each subcommand lives in its own
// tools/cmd_<name>.cpp and registers itself from main.cpp. Subcommands only
// translate between the command line and the core; nothing here decides policy.
#pragma once

#include <CLI/CLI.hpp>

namespace retryguard::cli {

// Exit codes scripts can rely on.
inline constexpr int kExitOk = 0;
inline constexpr int kExitAttention = 1;  // something needs attention (an escalation, bad input lines)
inline constexpr int kExitUsage = 2;      // usage or configuration error

// Every subcommand sets this from its callback; main returns it.
int& exit_code();

// Subcommand registration: one function per tools/cmd_<name>.cpp.
void add_import_command(CLI::App& app);
void add_classify_command(CLI::App& app);
void add_events_command(CLI::App& app);
void add_follow_command(CLI::App& app);
void add_check_config_command(CLI::App& app);
void add_status_command(CLI::App& app);
void add_destinations_command(CLI::App& app);
void add_escalations_command(CLI::App& app);
void add_explain_command(CLI::App& app);
void add_flags_command(CLI::App& app);
void add_prune_command(CLI::App& app);
void add_queue_command(CLI::App& app);
void add_report_command(CLI::App& app);

}  // namespace retryguard::cli
