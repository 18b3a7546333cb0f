// filter.hpp -- the libmilter callbacks of retryguard-milter and the state they
// share. Translates milter events into core calls (identity, decide_resend)
// and the decision back into libmilter actions; nothing here decides policy.
#pragma once

#include <libmilter/mfapi.h>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "log_sink.hpp"
#include "pending_store.hpp"
#include "retryguard/config/config.hpp"
#include "retryguard/identity/identity.hpp"
#include "retryguard/identity/resend.hpp"
#include "retryguard/identity/resend_config.hpp"

namespace retryguard::milter {

struct FilterConfig {
    ResendPolicy policy;
    FingerprintParts fingerprint;
    std::size_t fingerprint_body_limit = kDefaultFingerprintBodyLimit;
    std::shared_ptr<const re2::RE2> subject_ignore;  // reinjection.fingerprint.subject_ignore
    bool match_message_id = true;                    // reinjection.match_by: message_id
    std::size_t max_recipients = 1000;               // more: accept without a lookup (fail open)
    std::size_t max_headers = 1000;
    std::chrono::milliseconds deadline{500};  // milter.deadline: budget of the ledger lookup
    config::Config::Errors errors;            // errors.*: accept, or tempfail (SMTP path only)
};

// Counted fallbacks and outcomes, logged at exit (and readable by tests).
struct Counters {
    std::atomic<std::uint64_t> messages{0}, accepted{0}, refused{0}, held{0}, discarded{0}, tagged{0},
        recorded{0}, failopen_ledger{0}, failopen_timeout{0}, failopen_internal{0}, failopen_input{0},
        tempfailed{0}, record_errors{0}, reloads{0}, reload_errors{0}, lookups_filtered{0}, filter_errors{0},
        exceptions{0},  // caught at the top of the milter's own threads (reload, writer, filter rebuild)
        dry_run{0};     // decisions not carried out (dry_run, globally or for a duplicate's destination)
};

// Everything the callbacks need; set before smfi_main(). The settings are a
// snapshot replaced as a whole on reload; a message keeps the one it started with.
struct FilterGlobals {
    std::atomic<std::shared_ptr<const FilterConfig>> config{std::make_shared<const FilterConfig>()};
    std::unique_ptr<PendingStore> store;  // null: no ledger
    std::unique_ptr<LogSink> log;
    Counters counters;
};

FilterGlobals& globals();
smfiDesc filter_description();
std::string counters_line();

}  // namespace retryguard::milter
