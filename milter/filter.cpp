// filter.cpp -- libmilter callbacks: per-connection and per-message context,
// the identity built incrementally, the decision at end of message.
// No exception may cross a callback: each one runs inside guarded(), which
// catches everything, counts it, logs it and accepts the message (fail open).
#include "filter.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <fmt/format.h>
#include <chrono>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

namespace retryguard::milter {

namespace {

// The actions a verdict can take: add a header (tag), delete recipients
// (drop_duplicates), quarantine (hold).
constexpr unsigned long kFilterActions = SMFIF_ADDHDRS | SMFIF_DELRCPT | SMFIF_QUARANTINE;

struct MessageContext {
    explicit MessageContext(std::shared_ptr<const FilterConfig> c)
        : config(std::move(c)),
          fingerprint(config->fingerprint, config->fingerprint_body_limit, config->subject_ignore) {}
    std::shared_ptr<const FilterConfig> config;  // as when the message began
    MessageFacts facts;
    FingerprintBuilder fingerprint;
    std::optional<std::string> raw_message_id;
    std::size_t headers = 0;
    bool over_limit = false;
    std::string over_limit_why;
};

struct ConnectionState {
    bool can_skip = false;  // the MTA offered SMFIP_SKIP (on_negotiate)
    int client_port = -1;
    SubmissionPath path = SubmissionPath::smtp;
    std::unique_ptr<MessageContext> msg;
};

ConnectionState* conn(SMFICTX* ctx) {
    return static_cast<ConnectionState*>(smfi_getpriv(ctx));
}

std::string macro(SMFICTX* ctx, const char* name) {
    const char* v = smfi_getsymval(ctx, const_cast<char*>(name));
    return v ? std::string(v) : std::string();
}

std::string queue_id(SMFICTX* ctx) {
    auto q = macro(ctx, "i");
    if (q.empty()) q = macro(ctx, "{i}");
    return q;
}

std::string strip_brackets(const char* a) {
    std::string_view s = a ? a : "";
    if (s.size() >= 2 && s.front() == '<' && s.back() == '>') s = s.substr(1, s.size() - 2);
    return std::string(s.substr(0, 1024));
}

void log_line(Severity s, const std::string& text) {
    if (globals().log) globals().log->write(s, text);
}

// A failure of ours for this message: log why, count it, and accept it, or
// answer 451 4.3.0 so the client retries when errors.* says so (tempfails():
// never on the sendmail path). The line is a verdict line ("QID:
// verdict=accept ... failopen=..."), so it carries no "warning:" prefix that
// would hide the queue id from log parsers.
sfsistat fail_open(SMFICTX* ctx, std::atomic<std::uint64_t>& counter, std::string_view reason,
                   std::string_view detail,
                   config::ErrorAction action = config::ErrorAction::accept) noexcept {
    try {
        ++counter;
        auto* c = conn(ctx);
        SubmissionPath path = c ? c->path : SubmissionPath::smtp;
        bool tempfail = tempfails(action, path);
        log_line(Severity::info, failopen_line(queue_id(ctx), path, reason, detail, tempfail));
        if (c) c->msg.reset();
        if (tempfail) {
            ++globals().counters.tempfailed;
            std::string text =
                fmt::format("retryguard: cannot check this message now ({}), try again later", reason);
            smfi_setreply(ctx, const_cast<char*>("451"), const_cast<char*>("4.3.0"), text.data());
            return SMFIS_TEMPFAIL;
        }
        ++globals().counters.accepted;
    } catch (...) {
    }
    return SMFIS_ACCEPT;
}

config::ErrorAction action_for(const MessageContext* m, config::ErrorAction config::Config::Errors::*which) {
    return m ? m->config->errors.*which : globals().config.load()->errors.*which;
}

MessageContext* message(SMFICTX* ctx) {
    auto* c = conn(ctx);
    return c ? c->msg.get() : nullptr;
}

template <typename F>
sfsistat guarded(SMFICTX* ctx, const char* where, F&& f) noexcept {
    try {
        return f();
    } catch (const std::exception& e) {
        return fail_open(ctx, globals().counters.failopen_internal, "internal-error",
                         fmt::format("{}: {}", where, e.what()),
                         action_for(message(ctx), &config::Config::Errors::internal));
    } catch (...) {
        return fail_open(ctx, globals().counters.failopen_internal, "internal-error",
                         fmt::format("{}: unknown exception", where),
                         action_for(message(ctx), &config::Config::Errors::internal));
    }
}

int port_of(const sockaddr* sa) {
    if (!sa) return 0;
    if (sa->sa_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in*>(sa)->sin_port);
    if (sa->sa_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6*>(sa)->sin6_port);
    return 0;
}

// What the MTA is asked for: the actions the filter declares, the protocol
// steps it has callbacks for, and SMFIP_SKIP where offered, so that the rest
// of a body the fingerprint no longer reads is not sent (on_body). Postfix
// offers it since 2.6 (milter protocol 6).
sfsistat on_negotiate(SMFICTX* ctx, unsigned long f0, unsigned long f1, unsigned long, unsigned long,
                      unsigned long* pf0, unsigned long* pf1, unsigned long* pf2, unsigned long* pf3) {
    try {
        auto* c = conn(ctx);
        if (!c) {
            c = new ConnectionState;
            smfi_setpriv(ctx, c);
        }
        c->can_skip = (f1 & SMFIP_SKIP) != 0;
        *pf0 = f0 & kFilterActions;
        *pf1 = f1 & (SMFIP_SKIP | SMFIP_NOHELO | SMFIP_NOEOH | SMFIP_NOUNKNOWN | SMFIP_NODATA);
        *pf2 = 0;
        *pf3 = 0;
        return SMFIS_CONTINUE;
    } catch (...) {
        return SMFIS_ALL_OPTS;  // libmilter's defaults; on_body then never skips
    }
}

sfsistat on_connect(SMFICTX* ctx, char*, _SOCK_ADDR* addr) {
    return guarded(ctx, "connect", [&] {
        auto* c = conn(ctx);
        if (!c) {
            c = new ConnectionState;
            smfi_setpriv(ctx, c);
        }
        c->client_port = port_of(addr);
        bool inet = addr && (addr->sa_family == AF_INET || addr->sa_family == AF_INET6);
        c->path = classify_path(inet, c->client_port);
        return SMFIS_CONTINUE;
    });
}

sfsistat on_envfrom(SMFICTX* ctx, char** argv) {
    return guarded(ctx, "mail", [&] {
        auto* c = conn(ctx);
        if (!c) return SMFIS_ACCEPT;  // connect never seen: nothing to decide on
        c->msg = std::make_unique<MessageContext>(globals().config.load());
        c->msg->facts.path = c->path;
        c->msg->facts.sender = strip_brackets(argv ? argv[0] : nullptr);
        c->msg->fingerprint.sender(c->msg->facts.sender);
        return SMFIS_CONTINUE;
    });
}

sfsistat on_envrcpt(SMFICTX* ctx, char** argv) {
    return guarded(ctx, "rcpt", [&] {
        auto* m = message(ctx);
        if (!m) return SMFIS_CONTINUE;
        if (m->facts.recipients.size() >= m->config->max_recipients) {
            m->over_limit = true;
            m->over_limit_why = fmt::format("more than {} recipients", m->config->max_recipients);
            return SMFIS_CONTINUE;
        }
        m->facts.recipients.push_back(strip_brackets(argv ? argv[0] : nullptr));
        return SMFIS_CONTINUE;
    });
}

sfsistat on_header(SMFICTX* ctx, char* name, char* value) {
    return guarded(ctx, "header", [&] {
        auto* m = message(ctx);
        if (!m || !name || !value) return SMFIS_CONTINUE;
        if (++m->headers > m->config->max_headers) {
            m->over_limit = true;
            m->over_limit_why = fmt::format("more than {} headers", m->config->max_headers);
            return SMFIS_CONTINUE;
        }
        if (!m->raw_message_id && strcasecmp(name, "Message-ID") == 0) m->raw_message_id = std::string(value);
        if (marks_automated(name, value)) m->facts.automated = true;
        m->fingerprint.header(name, value);
        return SMFIS_CONTINUE;
    });
}

sfsistat on_body(SMFICTX* ctx, unsigned char* chunk, size_t len) {
    return guarded(ctx, "body", [&] {
        auto* m = message(ctx);
        if (m && chunk) m->fingerprint.body(std::string_view(reinterpret_cast<const char*>(chunk), len));
        // nothing more to read: the MTA may keep the rest of the body to itself
        if (m && m->fingerprint.body_done() && conn(ctx)->can_skip) return SMFIS_SKIP;
        return SMFIS_CONTINUE;
    });
}

sfsistat apply(SMFICTX* ctx, MessageContext& m, const ResendDecision& d) {
    auto& counters = globals().counters;
    switch (d.result) {
        case MilterResult::reject:
            if (smfi_setreply(ctx, const_cast<char*>(d.reply_code.c_str()),
                              const_cast<char*>(d.reply_xcode.c_str()),
                              const_cast<char*>(d.reply_text.c_str())) != MI_SUCCESS)
                log_line(Severity::warning,
                         fmt::format("{}: smfi_setreply failed; default reply used", m.facts.queue_id));
            ++counters.refused;
            // libmilter sends the reply set above only with the status of its
            // class (5xx with REJECT, 4xx with TEMPFAIL); with the other one it
            // drops it and the MTA answers its default 550 5.7.1. A 4xx
            // milter.reject_code is therefore a temporary refusal.
            return d.reply_code.starts_with('4') ? SMFIS_TEMPFAIL : SMFIS_REJECT;
        case MilterResult::discard: ++counters.discarded; return SMFIS_DISCARD;
        case MilterResult::quarantine:
            if (smfi_quarantine(ctx, const_cast<char*>(d.quarantine_reason.c_str())) != MI_SUCCESS)
                log_line(Severity::warning, fmt::format("{}: smfi_quarantine failed", m.facts.queue_id));
            ++counters.held;
            return SMFIS_ACCEPT;
        case MilterResult::accept: break;
    }
    for (const auto& r : d.delete_recipients) {
        std::string rcpt = "<" + r + ">";
        if (smfi_delrcpt(ctx, rcpt.data()) != MI_SUCCESS)
            log_line(Severity::warning, fmt::format("{}: smfi_delrcpt {} failed", m.facts.queue_id, rcpt));
    }
    if (!d.header_name.empty()) {
        if (smfi_addheader(ctx, const_cast<char*>(d.header_name.c_str()),
                           const_cast<char*>(d.header_value.c_str())) == MI_SUCCESS)
            ++counters.tagged;
    }
    ++counters.accepted;
    return SMFIS_ACCEPT;
}

sfsistat on_eom(SMFICTX* ctx) {
    return guarded(ctx, "end-of-message", [&]() -> sfsistat {
        auto* m = message(ctx);
        if (!m) return SMFIS_ACCEPT;
        auto& g = globals();
        ++g.counters.messages;
        m->facts.queue_id = queue_id(ctx);
        if (m->raw_message_id) m->facts.message_id = parse_message_id_header(*m->raw_message_id).value_or("");
        m->facts.fingerprint = m->fingerprint.finish();
        if (m->over_limit)
            return fail_open(ctx, g.counters.failopen_input, "input-limit", m->over_limit_why,
                             m->config->errors.bad_input);

        std::vector<PendingCopy> pending;
        if (g.store) {
            auto deadline = std::chrono::steady_clock::now() + m->config->deadline;
            auto found =
                g.store->find_pending(lookup_identity(m->facts, m->config->match_message_id), deadline);
            if (!found && found.error().kind == ErrorKind::timeout)
                return fail_open(ctx, g.counters.failopen_timeout, "ledger-timeout",
                                 fmt::format("no answer within {} ms: {}", m->config->deadline.count(),
                                             found.error().message),
                                 m->config->errors.timeout);
            if (!found)
                return fail_open(ctx, g.counters.failopen_ledger, "ledger-error",
                                 fmt::format("{}: {}", to_string(found.error().kind), found.error().message),
                                 m->config->errors.ledger_unavailable);
            pending = std::move(*found);
        }
        ResendDecision d = decide_resend(m->facts, pending, m->config->policy);
        if (d.dry_run || !d.dry_run_recipients.empty()) ++g.counters.dry_run;
        log_line(Severity::info, verdict_line(m->facts, d, m->config->policy));
        sfsistat rc = apply(ctx, *m, d);
        // Remember what was accepted for delivery so later resends are recognised.
        if (g.store && d.result == MilterResult::accept && !m->facts.queue_id.empty()) {
            auto now = std::chrono::time_point_cast<Duration>(std::chrono::system_clock::now());
            if (auto st = g.store->record(m->facts, now); !st) {
                ++g.counters.record_errors;
                log_line(Severity::warning, fmt::format("{}: could not record the message identity: {}",
                                                        m->facts.queue_id, st.error().message));
            } else {
                ++g.counters.recorded;
            }
        }
        conn(ctx)->msg.reset();
        return rc;
    });
}

sfsistat on_abort(SMFICTX* ctx) {
    return guarded(ctx, "abort", [&] {
        if (auto* c = conn(ctx)) c->msg.reset();
        return SMFIS_CONTINUE;
    });
}

sfsistat on_close(SMFICTX* ctx) {
    try {
        delete conn(ctx);
        smfi_setpriv(ctx, nullptr);
    } catch (...) {
    }
    return SMFIS_CONTINUE;
}

}  // namespace

FilterGlobals& globals() {
    static FilterGlobals g;
    return g;
}

smfiDesc filter_description() {
    smfiDesc d{};
    d.xxfi_name = const_cast<char*>("retryguard-milter");
    d.xxfi_version = SMFI_VERSION;
    d.xxfi_flags = kFilterActions;
    d.xxfi_connect = on_connect;
    d.xxfi_envfrom = on_envfrom;
    d.xxfi_envrcpt = on_envrcpt;
    d.xxfi_header = on_header;
    d.xxfi_body = on_body;
    d.xxfi_eom = on_eom;
    d.xxfi_abort = on_abort;
    d.xxfi_close = on_close;
    d.xxfi_negotiate = on_negotiate;
    return d;
}

std::string counters_line() {
    const auto& c = globals().counters;
    return fmt::format(
        "counters: messages={} accepted={} refused={} held={} discarded={} tagged={} recorded={} "
        "failopen_ledger={} failopen_timeout={} failopen_internal={} failopen_input={} tempfailed={} "
        "record_errors={} reloads={} reload_errors={} lookups_filtered={} filter_errors={} exceptions={} "
        "dry_run={}",
        c.messages.load(), c.accepted.load(), c.refused.load(), c.held.load(), c.discarded.load(),
        c.tagged.load(), c.recorded.load(), c.failopen_ledger.load(), c.failopen_timeout.load(),
        c.failopen_internal.load(), c.failopen_input.load(), c.tempfailed.load(), c.record_errors.load(),
        c.reloads.load(), c.reload_errors.load(), c.lookups_filtered.load(), c.filter_errors.load(),
        c.exceptions.load(), c.dry_run.load());
}

}  // namespace retryguard::milter
