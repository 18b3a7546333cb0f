// runtime.hpp -- what every retryguard program opens at start: the
// configuration snapshot, the ledger it names and the classifier with the
// user's rules layered on the shipped ones. One function, so the CLI, the
// policy daemon and the milter cannot disagree about how that is done.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "retryguard/classify/classifier.hpp"
#include "retryguard/config/config.hpp"
#include "retryguard/ledger/ledger.hpp"
#include "retryguard/result.hpp"

namespace retryguard {

inline constexpr const char* kDefaultConfigPath = "/etc/retryguard/retryguard.yaml";

struct RuntimeOptions {
    // Config file; empty: kDefaultConfigPath when it exists, else built-in defaults.
    std::string config_path;
    // Postfix-style "key=value" overrides (-o), applied to the file's table and
    // validated with it (see config::load_string).
    std::vector<std::string> overrides;
    bool open_ledger = true;
    bool load_classifier = true;
    // Run as root, a SQLite ledger not there yet is made for the owner of its
    // directory (create_ledger_for_directory_owner): the CLI sets this, so that
    // root's first `retryguard import` leaves a ledger the daemons can still
    // write. The policy daemon hands its files to policy.user itself.
    bool ledger_to_directory_owner = false;
};

struct Runtime {
    std::shared_ptr<const config::Config> config;
    std::string config_path;  // "" for built-in defaults
    std::unique_ptr<Ledger> ledger;
    std::shared_ptr<const Classifier> classifier;
    // What opening did or found that the user should hear of, one line each
    // (a ledger made for its directory's owner, a root-owned one the daemons
    // cannot write); the program prints them.
    std::vector<std::string> notices;
};

// Errors: ErrorKind::config with every diagnostic, one per line
// ("file:line:col: error: ..."), or the ledger's / classifier's error.
Result<Runtime> open_runtime(const RuntimeOptions& options);

// The ledger options a configuration asks for (ledger.redis.password_file is
// read by open_configured_ledger, so that this cannot fail).
LedgerOptions ledger_options_from(const config::Config& config);

// ledger.redis.password_file: one line, "password" or "user:password" (Redis 6
// ACL). Refused when others may access it, the group may write it, or it is not
// a regular file; group read is allowed (root:<service group> 0640).
struct RedisCredentials {
    std::string username, password;
};
Result<RedisCredentials> read_redis_password_file(const std::string& path);

// Opens the ledger `options` name (creating an embedded ledger's directory on
// first use). open_runtime and programs that open the ledger later (the milter,
// after dropping privileges) both come here.
Result<std::unique_ptr<Ledger>> open_configured_ledger(const LedgerOptions& options);
// The same, with ledger.redis.password_file read into the options first.
Result<std::unique_ptr<Ledger>> open_configured_ledger(const config::Config& config);

// The classifier: shipped rules plus config->classifier.rules.
Result<std::shared_ptr<const Classifier>> classifier_from(const config::Config& config);

// What a daemon would refuse in a loaded configuration beyond the file's own
// checks: the classifier rules compiled exactly as classifier_from() does.
// Each problem is a diagnostic with file:line:col where the rule compiler
// gives one. Used by `retryguard check-config` and by reloads, so a file that
// passes the check is one the daemons start and reload with.
std::vector<config::Diagnostic> runtime_checks(const config::Config& config);

}  // namespace retryguard
