// resend.cpp -- the resend decision, its reply text and its verdict line (see
// resend.hpp). Pure: no I/O, no clock, no exceptions escaping to the caller's
// C callbacks beyond std::bad_alloc, which the milter catches.
#include "retryguard/identity/resend.hpp"
#include "retryguard/rules/verdict.hpp"
#include "retryguard/text/text.hpp"

#include <fmt/format.h>
#include <algorithm>

namespace retryguard {

namespace {

constexpr std::size_t kMaxReplyText = 400;  // SMTP reply line limit is 512 with code

int strength(ResendAction a) noexcept {
    switch (a) {
        case ResendAction::reject: return 5;
        case ResendAction::hold: return 4;
        case ResendAction::drop_duplicates: return 3;
        case ResendAction::tag: return 2;
        case ResendAction::log_only: return 1;
    }
    return 0;
}

std::string recipient_domain(std::string_view addr) {
    auto at = addr.rfind('@');
    return at == std::string_view::npos ? std::string() : text::ascii_lower(addr.substr(at + 1));
}

// Printable ASCII only, and no '%' (libmilter's reply text is a format string
// on some MTAs); bounded.
std::string printable(std::string_view s, std::size_t limit) {
    std::string out;
    for (char c : s) {
        if (out.size() >= limit) break;
        auto u = static_cast<unsigned char>(c);
        if (u < 0x20 || u >= 0x7f)
            out += ' ';
        else if (c == '%')
            out += "pct";
        else
            out += c;
    }
    return out;
}

std::string join(const std::vector<std::string>& v, char sep = ',') {
    std::string out;
    for (const auto& s : v) {
        if (!out.empty()) out += sep;
        out += s;
    }
    return out;
}

// What the remote server said, without Postfix's framing:
// "host H[A] said: 451 4.3.5 text (in reply to RCPT TO command)" -> "451 4.3.5 text".
// Other reasons (connection refused, ...) stay as Postfix logged them.
std::string_view literal_reply(std::string_view reason) {
    auto said = reason.find(" said: ");
    if (reason.starts_with("host ") && said != std::string_view::npos) {
        reason.remove_prefix(said + 7);
        auto tail = reason.rfind(" (in reply to ");
        if (tail != std::string_view::npos && reason.ends_with(")")) reason = reason.substr(0, tail);
    }
    return reason;
}

std::string time_or_empty(const std::optional<TimePoint>& t) {
    return t ? format_rfc3339(*t) : std::string();
}

}  // namespace

std::string_view to_string(ResendAction a) noexcept {
    switch (a) {
        case ResendAction::reject: return "reject";
        case ResendAction::hold: return "hold";
        case ResendAction::drop_duplicates: return "drop_duplicates";
        case ResendAction::tag: return "tag";
        case ResendAction::log_only: return "log_only";
    }
    return "reject";
}

std::optional<ResendAction> resend_action_from_string(std::string_view s) noexcept {
    for (auto a : {ResendAction::reject, ResendAction::hold, ResendAction::drop_duplicates, ResendAction::tag,
                   ResendAction::log_only})
        if (s == to_string(a)) return a;
    return std::nullopt;
}

std::string_view to_string(SubmissionPath p) noexcept {
    return p == SubmissionPath::smtp ? "smtp" : "sendmail";
}

SubmissionPath classify_path(bool inet_client, int client_port) noexcept {
    return (inet_client && client_port == 0) ? SubmissionPath::sendmail : SubmissionPath::smtp;
}

MessageFacts lookup_identity(const MessageFacts& msg, bool match_message_id) {
    MessageFacts q = msg;
    if (!match_message_id) q.message_id.clear();
    if (msg.automated || msg.sender.empty()) q.fingerprint.clear();
    return q;
}

bool counts_as_retrying(const PendingCopy& copy) noexcept {
    return copy.first_deferral.has_value();
}

std::optional<TimePoint> next_retry_estimate(const PendingCopy& copy, Duration minimal_backoff,
                                             Duration maximal_backoff) {
    if (!copy.last_attempt) return std::nullopt;
    Duration age = copy.arrival ? *copy.last_attempt - *copy.arrival : Duration::zero();
    Duration backoff = std::clamp(age, minimal_backoff, std::max(minimal_backoff, maximal_backoff));
    return *copy.last_attempt + backoff;
}

const ResendRule& ResendPolicy::rule_for(std::string_view recipient) const {
    if (per_destination.empty()) return *this;
    std::string d = recipient_domain(recipient);
    if (auto it = per_destination.find(d); it != per_destination.end()) return it->second;
    // ".example.org" covers every subdomain; the longest suffix wins
    for (auto dot = d.find('.'); dot != std::string::npos; dot = d.find('.', dot + 1)) {
        if (auto it = per_destination.find(std::string_view(d).substr(dot)); it != per_destination.end())
            return it->second;
    }
    return *this;
}

namespace {

// reinjection.reject_text with its placeholders filled in (the loader has
// checked that only known ones are used); an unknown one is kept as written.
std::string fill_reply_template(const std::vector<PendingCopy>& dups, const ResendPolicy& policy,
                                const std::string& t) {
    const PendingCopy& p = dups.front();
    auto value = [&](std::string_view name) -> std::optional<std::string> {
        if (name == "recipient") return p.recipient;
        if (name == "original") return p.queue_id;
        if (name == "on_host") return p.host.empty() ? std::string() : " on " + p.host;
        if (name == "destination")
            return p.destination.empty() ? recipient_domain(p.recipient) : p.destination;
        if (name == "since")
            return p.first_deferral ? format_rfc3339(*p.first_deferral) : std::string("unknown");
        if (name == "reply") return printable(literal_reply(p.last_reply), 160);
        if (name == "next_retry") {
            auto next = next_retry_estimate(p, policy.minimal_backoff, policy.maximal_backoff);
            return next ? format_rfc3339(*next) : std::string("unknown");
        }
        if (name == "more")
            return dups.size() > 1 ? fmt::format(" (and {} more recipient(s))", dups.size() - 1)
                                   : std::string();
        return std::nullopt;
    };
    std::string out;
    for (std::size_t i = 0; i < t.size();) {
        if (t[i] == '{') {
            auto close = t.find('}', i);
            if (close != std::string::npos) {
                if (auto v = value(std::string_view(t).substr(i + 1, close - i - 1))) {
                    out += *v;
                    i = close + 1;
                    continue;
                }
            }
        }
        out += t[i++];
    }
    return out;
}

}  // namespace

std::string resend_reply_text(const std::vector<PendingCopy>& dups, const ResendPolicy& policy,
                              const ResendRule* rule) {
    if (dups.empty()) return "Not a resend";
    const std::string& tmpl = (rule ? *rule : static_cast<const ResendRule&>(policy)).reply_template;
    if (!tmpl.empty()) return printable(fill_reply_template(dups, policy, tmpl), kMaxReplyText);
    const PendingCopy& p = dups.front();
    std::string text = fmt::format("Not accepted again: a copy for <{}> is already queued as {}{} for {}",
                                   p.recipient, p.queue_id, p.host.empty() ? std::string() : " on " + p.host,
                                   p.destination.empty() ? recipient_domain(p.recipient) : p.destination);
    if (p.first_deferral) text += fmt::format(", retrying since {}", format_rfc3339(*p.first_deferral));
    if (!p.last_reply.empty())
        text += fmt::format(" after \"{}\"", printable(literal_reply(p.last_reply), 160));
    if (auto next = next_retry_estimate(p, policy.minimal_backoff, policy.maximal_backoff))
        text += fmt::format(", next retry about {}", format_rfc3339(*next));
    if (dups.size() > 1) text += fmt::format(" (and {} more recipient(s))", dups.size() - 1);
    text += "; the queue keeps retrying it, do not resend";
    return printable(text, kMaxReplyText);
}

ResendDecision decide_resend(const MessageFacts& msg, const std::vector<PendingCopy>& pending,
                             const ResendPolicy& policy) {
    ResendDecision d;
    // one pending copy per duplicate recipient (the first the ledger gave), in message order
    for (const auto& rcpt : msg.recipients) {
        auto it = std::find_if(pending.begin(), pending.end(), [&](const PendingCopy& p) {
            return counts_as_retrying(p) && text::ascii_lower(p.recipient) == text::ascii_lower(rcpt);
        });
        if (it == pending.end())
            d.new_recipients.push_back(rcpt);
        else
            d.duplicates.push_back(*it);
    }
    if (d.duplicates.empty()) {
        d.verdict = "accept";
        return d;
    }
    // The strongest action over the duplicates outside dry run; the others stay in.
    ResendAction act = ResendAction::log_only, would = ResendAction::log_only;
    const ResendRule* rule = nullptr;  // the rule whose action won, outside dry run
    std::vector<const PendingCopy*> acted;
    for (const auto& p : d.duplicates) {
        const ResendRule& r = policy.rule_for(p.recipient);
        if (strength(r.action) > strength(would)) would = r.action;
        if (r.dry_run) {
            d.dry_run_recipients.push_back(p.recipient);
            continue;
        }
        acted.push_back(&p);
        if (!rule || strength(r.action) > strength(act)) {
            act = r.action;
            rule = &r;
        }
    }
    if (!rule) {
        d.dry_run = true;
        d.verdict = std::string(to_string(would));
        d.result = MilterResult::accept;
        return d;
    }
    const bool others_pass = !d.new_recipients.empty() || !d.dry_run_recipients.empty();
    if (act == ResendAction::reject && others_pass) act = ResendAction::drop_duplicates;
    d.verdict = std::string(to_string(act));
    switch (act) {
        case ResendAction::reject: {
            d.result = MilterResult::reject;
            bool soft = !policy.reject_code.empty() && policy.reject_code[0] == '4';
            if (soft && msg.path == SubmissionPath::sendmail) {
                d.reply_code = "550";
                d.reply_xcode = "5.7.1";
            } else {
                d.reply_code = policy.reject_code;
                d.reply_xcode = policy.reject_xcode;
            }
            d.reply_text = resend_reply_text(d.duplicates, policy, rule);
            break;
        }
        case ResendAction::hold:
            d.result = MilterResult::quarantine;
            d.quarantine_reason =
                printable(fmt::format("retryguard: resend of {} still queued", acted.front()->queue_id), 200);
            break;
        case ResendAction::drop_duplicates:
            if (!others_pass) {
                d.result = MilterResult::discard;
            } else {
                d.result = MilterResult::accept;
                for (const auto* p : acted) d.delete_recipients.push_back(p->recipient);
            }
            break;
        case ResendAction::tag: {
            d.result = MilterResult::accept;
            d.header_name = rule->header_name;
            std::vector<std::string> parts;
            for (const auto* p : acted) parts.push_back(p->recipient + " queued as " + p->queue_id);
            d.header_value = printable(join(parts, ';'), 900);
            break;
        }
        case ResendAction::log_only: d.result = MilterResult::accept; break;
    }
    return d;
}

// The verdict quoting is verdict.hpp's, shared with the engine and the log
// parser that reads these lines back.
std::string quote_value(std::string_view v) {
    return quote_verdict_value(v);
}

std::string verdict_line(const MessageFacts& msg, const ResendDecision& d, const ResendPolicy& policy) {
    std::string line = fmt::format("{}: verdict={} path={}", msg.queue_id.empty() ? "NOQUEUE" : msg.queue_id,
                                   d.verdict, to_string(msg.path));
    auto add = [&line](std::string_view key, std::string_view value) {
        if (value.empty()) return;
        line += ' ';
        line += key;
        line += '=';
        line += quote_value(value);
    };
    std::vector<std::string> originals, hosts, dups, matched;
    for (const auto& p : d.duplicates) {
        if (std::find(originals.begin(), originals.end(), p.queue_id) == originals.end())
            originals.push_back(p.queue_id);
        if (!p.host.empty() && std::find(hosts.begin(), hosts.end(), p.host) == hosts.end())
            hosts.push_back(p.host);
        dups.push_back(p.recipient);
        std::string by = p.matched_by_message_id ? "message-id" : "fingerprint";
        if (std::find(matched.begin(), matched.end(), by) == matched.end()) matched.push_back(by);
    }
    add("original", join(originals));
    add("original_host", join(hosts));
    add("duplicates", join(dups));
    add("new", join(d.new_recipients));
    add("matched", join(matched));
    if (!d.duplicates.empty()) {
        const auto& p = d.duplicates.front();
        add("destination", p.destination.empty() ? recipient_domain(p.recipient) : p.destination);
        add("since", time_or_empty(p.first_deferral));
        add("next_retry",
            time_or_empty(next_retry_estimate(p, policy.minimal_backoff, policy.maximal_backoff)));
        add("attempts", std::to_string(p.attempts));
        add("relay", p.relay);
        add("reply", printable(literal_reply(p.last_reply), 300));
    }
    if (!d.reply_code.empty()) add("response", d.reply_code + " " + d.reply_xcode);
    if (d.dry_run)
        add("dry_run", "yes");
    else
        add("dry_run_duplicates", join(d.dry_run_recipients));
    add("message_id", msg.message_id);
    add("fingerprint", msg.fingerprint);
    add("from", msg.sender.empty() ? std::string_view("<>") : std::string_view(msg.sender));
    add("nrcpt", std::to_string(msg.recipients.size()));
    return line;
}

std::string failopen_line(std::string_view queue_id, SubmissionPath path, std::string_view reason,
                          std::string_view detail, bool tempfail) {
    return fmt::format("{}: verdict={} path={} failopen={} detail={}",
                       queue_id.empty() ? "NOQUEUE" : queue_id, tempfail ? "tempfail" : "accept",
                       to_string(path), quote_value(reason), quote_value(printable(detail, 300)));
}

}  // namespace retryguard
