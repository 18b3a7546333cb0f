// resend_config.cpp -- maps reinjection.* of the configuration onto the
// milter's ResendPolicy. Translation only; decides nothing.
#include "retryguard/identity/resend_config.hpp"

#include <algorithm>

namespace retryguard {

ResendAction to_resend_action(config::ReinjectionAction a) noexcept {
    switch (a) {
        case config::ReinjectionAction::reject: return ResendAction::reject;
        case config::ReinjectionAction::hold: return ResendAction::hold;
        case config::ReinjectionAction::drop_duplicates: return ResendAction::drop_duplicates;
        case config::ReinjectionAction::tag: return ResendAction::tag;
        case config::ReinjectionAction::log_only: return ResendAction::log_only;
    }
    return ResendAction::reject;
}

bool tempfails(config::ErrorAction action, SubmissionPath path) noexcept {
    return action == config::ErrorAction::tempfail && path == SubmissionPath::smtp;
}

namespace {

// The settings a destination rule may change for the milter.
ResendRule resend_rule(const config::Settings& s) {
    ResendRule r;
    r.action = to_resend_action(s.reinjection.action);
    r.header_name = s.reinjection.tag_header;
    r.reply_template = s.reinjection.reject_text;
    r.dry_run = s.dry_run;
    return r;
}

}  // namespace

ResendSettings resend_settings_from(const config::Config& c) {
    ResendSettings s;
    const auto& r = c.global.reinjection;
    static_cast<ResendRule&>(s.policy) = resend_rule(c.global);
    auto has = [&](config::FingerprintPart p) {
        return std::find(r.fingerprint_parts.begin(), r.fingerprint_parts.end(), p) !=
               r.fingerprint_parts.end();
    };
    s.fingerprint =
        FingerprintParts{has(config::FingerprintPart::sender), has(config::FingerprintPart::subject),
                         has(config::FingerprintPart::body)};
    s.subject_ignore = r.subject_ignore_re;
    if (r.fingerprint_body_limit > 0)
        s.fingerprint_body_limit = static_cast<std::size_t>(r.fingerprint_body_limit);
    auto by = [&](config::ReinjectionMatch m) {
        return std::find(r.match_by.begin(), r.match_by.end(), m) != r.match_by.end();
    };
    s.match_message_id = by(config::ReinjectionMatch::message_id);
    s.match_fingerprint = by(config::ReinjectionMatch::fingerprint);
    if (!s.match_fingerprint) s.fingerprint = FingerprintParts{false, false, false};
    if (c.milter.deadline.count() > 0) s.deadline = c.milter.deadline;
    s.errors = c.errors;
    for (const auto& rule : c.destinations) {
        if (rule.kind == config::DestinationRule::Kind::mx) continue;
        ResendRule own = resend_rule(rule.settings);
        if (own == static_cast<const ResendRule&>(s.policy)) continue;
        std::string key = rule.kind == config::DestinationRule::Kind::exact ? rule.pattern : rule.suffix;
        s.policy.per_destination[key] = std::move(own);
    }
    return s;
}

}  // namespace retryguard
