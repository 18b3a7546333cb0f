// postfix_wiring.hpp -- does the local Postfix actually use retryguard?
// `retryguard check-config` reads `postconf -nx` and says what is missing:
// the milter in smtpd_milters and non_smtpd_milters (the sendmail path),
// milter_default_action = accept (fail open), the policy service in
// smtpd_recipient_restrictions before any permit_* that would end the
// evaluation for local and authenticated senders, and log sources the policy
// daemon's user can read. Pure functions over text and stat(2); never changes
// anything.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "retryguard/config/config.hpp"
#include "retryguard/result.hpp"

namespace retryguard {

struct WiringFinding {
    enum class Level { ok, warning, error };
    Level level = Level::ok;
    std::string what;  // one line: what was found
    std::string fix;   // what to do about it ("" for ok)
};
std::string_view to_string(WiringFinding::Level level) noexcept;

// `postconf -nx` output ("name = value" lines) -> findings for the milter and
// the policy service of `config`. Parameters not set take Postfix's defaults
// (queue_directory /var/spool/postfix, milter_default_action tempfail).
std::vector<WiringFinding> check_postfix_wiring(std::string_view postconf_n, const config::Config& config);

// Whether each file source can be read by `user` (the policy daemon's user),
// counting the groups the shipped unit adds (SupplementaryGroups=adm
// systemd-journal) when `unit_groups` is true.
std::vector<WiringFinding> check_sources_readable(const config::Config& config, const std::string& user,
                                                  bool unit_groups = true);
// The same check for one file source (`retryguard status` shows it per follower).
WiringFinding check_source_readable(const config::SourceConfig& source, const std::string& user,
                                    bool unit_groups = true);

// Whether Postfix's daemons (user `postfix_user`, its primary group only:
// Postfix's set_ugid() drops supplementary groups) can enter the directory of
// each UNIX socket of the milter and the policy service and connect to it.
std::vector<WiringFinding> check_sockets_reachable(const config::Config& config,
                                                   const std::string& postfix_user = "postfix");

// With a Redis ledger shared by several hosts, a follower's position is
// stored under its source id: the derived id ("file:/var/log/mail.log") is the
// same on every host, so hosts would overwrite each other's position. A
// warning per file or journal source that keeps its derived id.
std::vector<WiringFinding> check_fleet_sources(const config::Config& config);

// Runs `postconf -nx` (with -c DIR when `config_dir` is not empty).
Result<std::string> run_postconf(const std::string& config_dir = {});

// Postfix's endpoint spelling for a retryguard socket: unix:/var/spool/postfix/x
// -> "unix:x" (relative to the queue directory, so chrooted daemons reach it),
// inet:PORT@HOST -> "inet:HOST:PORT". For messages.
std::string postfix_endpoint(const config::SocketSpec& socket, std::string_view queue_directory);

}  // namespace retryguard
