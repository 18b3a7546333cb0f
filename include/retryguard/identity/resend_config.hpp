// resend_config.hpp -- the milter's resend handling from the YAML
// configuration (reinjection.*, globally and per destination rule), so the
// milter and the rest of retryguard read one file. Command-line options of
// retryguard-milter override what this returns.
#pragma once

#include <cstddef>

#include "retryguard/config/config.hpp"
#include "retryguard/identity/identity.hpp"
#include "retryguard/identity/resend.hpp"

namespace retryguard {

struct ResendSettings {
    ResendPolicy policy;
    FingerprintParts fingerprint;
    std::size_t fingerprint_body_limit = kDefaultFingerprintBodyLimit;
    std::shared_ptr<const re2::RE2> subject_ignore;  // reinjection.fingerprint.subject_ignore (null: none)
    bool match_message_id = true;
    bool match_fingerprint = true;
    Duration deadline = std::chrono::milliseconds(500);  // milter.deadline: budget of the ledger lookup
    config::Config::Errors errors;                       // errors.*: accept or tempfail per kind of failure
};

// Exact-domain rules map to "example.org", wildcard rules to ".example.org"
// (ResendPolicy's subdomain form). MX-group rules cannot apply at end of
// message (the MX is not known before delivery) and are skipped.
ResendSettings resend_settings_from(const config::Config& config);

// Whether a failure of ours answers the client with a temporary failure: only
// when errors.* says tempfail and the message came over SMTP. On the sendmail
// path pickup would retry a tempfailed message forever, so it is accepted.
bool tempfails(config::ErrorAction action, SubmissionPath path) noexcept;

ResendAction to_resend_action(config::ReinjectionAction a) noexcept;

}  // namespace retryguard
