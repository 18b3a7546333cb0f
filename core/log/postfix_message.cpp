// postfix_message.cpp -- the shapes of every Postfix message that the ledger
// and the rules care about (deliveries, qmgr, smtpd and milter actions,
// connection problems, cleanup, pickup, postsuper) and retryguard's own verdict
// lines: the text after "program[pid]: " into the fields of an Event.
//
// Must never: throw, allocate in proportion to anything but the (capped) line,
// scan a line more than a constant number of times (no backtracking, no regex),
// or treat an unrecognised line as an error. Peer-controlled text (addresses,
// replies, header values) may contain any byte; only delimiters Postfix itself
// writes are trusted for splitting.
#include <array>

#include "log/log_parser_internal.hpp"
#include "retryguard/rules/verdict.hpp"

namespace retryguard::log_detail {

void reset(Event& ev) {
    ev.kind = EventKind::unknown;
    ev.time = {};
    ev.host.clear();
    ev.program.clear();
    ev.process.clear();
    ev.pid = 0;
    ev.queue_id.clear();
    ev.recipient.clear();
    ev.orig_recipient.clear();
    ev.relay.clear();
    ev.relay_host.clear();
    ev.relay_addr.clear();
    ev.relay_port = 0;
    ev.dsn.clear();
    ev.status = DeliveryStatus::none;
    ev.delay = 0;
    ev.delays.clear();
    ev.conn_use.clear();
    ev.tls.clear();
    ev.reason.clear();
    ev.reply.reset();
    ev.sender.clear();
    ev.size = -1;
    ev.nrcpt = -1;
    ev.message_id.clear();
    ev.resent = false;
    ev.orig_queue_id.clear();
    ev.uid = -1;
    ev.client.clear();
    ev.action.clear();
    ev.stage.clear();
    ev.new_queue_id.clear();
    ev.fields.clear();
    ev.destination.clear();
    ev.unknown_kind.clear();
    ev.text.clear();
    ev.truncated = false;
}

namespace {

// "to=<r>, orig_to=<o>, relay=..., conn_use=N, delay=N, delays=a/b/c/d,
//  dsn=X.Y.Z, status=WORD (reason)"
bool parse_delivery(sv s, Event& ev) {
    CommaScan scan;
    sv key, value;
    bool have_status = false;
    while (next_comma_item(s, scan, key, value)) {
        if (key == "status") {
            // status=WORD, then " (reason)" running to the last ')' of the line.
            std::size_t word_end = 0;
            while (word_end < value.size() && value[word_end] != ' ') ++word_end;
            sv word = value.substr(0, word_end);
            if (word == "sent")
                ev.status = DeliveryStatus::sent;
            else if (word == "deferred")
                ev.status = DeliveryStatus::deferred;
            else if (word == "bounced")
                ev.status = DeliveryStatus::bounced;
            else if (word == "expired" || word == "force-expired")
                ev.status = DeliveryStatus::expired;
            else if (word == "undeliverable")
                ev.status = DeliveryStatus::undeliverable;
            else
                add_field(ev, "status", std::string(word));
            std::size_t abs = static_cast<std::size_t>(value.data() - s.data()) + word_end;
            sv rest = s.substr(abs);
            if (starts_with(rest, " (")) {
                sv inner = rest.substr(2);
                if (!inner.empty() && inner.back() == ')') inner.remove_suffix(1);
                ev.reason.assign(inner);
            } else if (starts_with(rest, ", ")) {
                ev.reason.assign(rest.substr(2));
            }
            have_status = true;
            break;
        }
        if (key == "to")
            ev.recipient.assign(strip_brackets(value));
        else if (key == "orig_to")
            ev.orig_recipient.assign(strip_brackets(value));
        else if (key == "relay")
            set_relay(ev, value);
        else if (key == "delay")
            parse_double(value, ev.delay);
        else if (key == "delays")
            ev.delays.assign(value);
        else if (key == "dsn")
            ev.dsn.assign(value);
        else if (key == "conn_use")
            ev.conn_use.assign(value);
        else if (key == "tls")
            ev.tls.assign(value);
        else
            add_field(ev, std::string(key), std::string(value));
    }
    if (!have_status) return false;
    ev.kind = EventKind::delivery;
    return true;
}

// qmgr "from=<s>, size=N, nrcpt=N (queue active)" and
// "from=<s>, status=expired|force-expired, returned to sender"
bool parse_qmgr_from(sv s, Event& ev) {
    CommaScan scan;
    sv key, value;
    bool have_from = false;
    while (next_comma_item(s, scan, key, value)) {
        if (key == "from") {
            ev.sender.assign(strip_brackets(value));
            have_from = true;
        } else if (key == "size") {
            parse_int64(value, ev.size);
        } else if (key == "nrcpt") {
            // "1 (queue active)"
            std::size_t sp = value.find(' ');
            int n = 0;
            if (digits(value.substr(0, sp), n)) ev.nrcpt = n;
            if (sp != npos && value.substr(sp) == " (queue active)" && have_from) {
                ev.kind = EventKind::queue_active;
                return true;
            }
        } else if (key == "status") {
            if ((value == "expired" || value == "force-expired") && have_from) {
                ev.kind = EventKind::expired;
                ev.status = DeliveryStatus::expired;
                ev.action.assign(value);
                sv rest = s.substr(scan.pos);
                while (!rest.empty() && rest.front() == ' ') rest.remove_prefix(1);
                ev.reason.assign(rest);
                return true;
            }
            return false;
        } else {
            add_field(ev, std::string(key), std::string(value));
        }
    }
    return false;
}

// "ACTION: STAGE from CLIENT: REASON; from=<s> to=<r> proto=P helo=<h>"
// (smtpd access/policy actions and milter actions), and cleanup's header/body
// checks "ACTION: header NAME: VALUE from CLIENT; from=<s> to=<r> ...: REASON".
bool parse_action_line(sv s, Event& ev) {
    std::size_t colon = 0;
    while (colon < s.size() && (is_lower(s[colon]) || s[colon] == '-' || s[colon] == '_')) ++colon;
    if (colon == 0 || !starts_with(s.substr(colon), ": ")) return false;
    sv action = s.substr(0, colon);
    sv rest = s.substr(colon + 2);

    if (starts_with(rest, "header ") || starts_with(rest, "body ")) {
        // The header text is peer-controlled; Postfix writes " from CLIENT; from=<"
        // after it, so split at the first "; from=<" and take the client before it.
        ev.stage.assign(rest.substr(0, rest.find(' ')));
        std::size_t tail = rest.find("; from=<");
        if (tail == npos) return false;
        sv before = rest.substr(0, tail);
        std::size_t from = before.rfind(" from ");
        if (from != npos) ev.client.assign(before.substr(from + 6));
        add_field(ev, std::string(ev.stage),
                  std::string(
                      before.substr(ev.stage.size() + 1, from == npos ? npos : from - ev.stage.size() - 1)));
        sv reason;
        parse_space_tail(rest.substr(tail + 2), ev, &reason);
        ev.reason.assign(reason);
    } else {
        std::size_t stage_end = 0;
        while (stage_end < rest.size() && ((rest[stage_end] >= 'A' && rest[stage_end] <= 'Z') ||
                                           rest[stage_end] == '-' || rest[stage_end] == '_'))
            ++stage_end;
        if (stage_end == 0 || !starts_with(rest.substr(stage_end), " from ")) return false;
        ev.stage.assign(rest.substr(0, stage_end));
        sv after = rest.substr(stage_end + 6);
        // smtpd: "host[addr]: ", postscreen: "[addr]:port: ". Every client has a
        // bracket ("unknown[unknown]"); one without is not Postfix's.
        std::size_t client_end = npos, body_start = 0;
        for (std::size_t b = after.find(']'); b != npos; b = after.find(']', b + 1)) {
            std::size_t q = b + 1;
            if (q < after.size() && after[q] == ':') {
                std::size_t d = q + 1;
                while (d < after.size() && is_digit(after[d]) && d - q <= 6) ++d;
                if (d + 1 < after.size() && after[d] == ':' && after[d + 1] == ' ' && d > q + 1) {
                    client_end = d;
                    body_start = d + 2;
                    break;
                }
            }
            if (starts_with(after.substr(q), ": ")) {
                client_end = q;
                body_start = q + 2;
                break;
            }
        }
        if (client_end == npos) return false;
        ev.client.assign(after.substr(0, client_end));
        sv body = after.substr(body_start);
        // The reason ends at the first "; " that starts Postfix's own tail.
        std::size_t cut = npos;
        for (std::size_t p = body.find("; "); p != npos; p = body.find("; ", p + 2)) {
            sv t = body.substr(p + 2);
            if (starts_with(t, "from=<") || starts_with(t, "to=<") || starts_with(t, "proto=")) {
                cut = p;
                break;
            }
        }
        ev.reason.assign(body.substr(0, cut));
        if (cut != npos) parse_space_tail(body.substr(cut + 2), ev, nullptr);
    }
    ev.action.assign(action);
    ev.dsn.assign(leading_dsn(ev.reason));
    ev.kind = starts_with(action, "milter-") ? EventKind::milter_action : EventKind::smtpd_action;
    return true;
}

// smtp/lmtp lines without to=: trouble with one server of the destination.
bool parse_connection_problem(sv s, Event& ev) {
    struct Shape {
        sv prefix;
        sv action;
    };
    static constexpr std::array<Shape, 9> shapes = {{
        {"connect to ", "connect"},
        {"host ", "said"},
        {"lost connection with ", "lost-connection"},
        {"conversation with ", "timeout"},
        {"SSL_connect error to ", "tls"},
        {"server certificate verification failed for ", "tls"},
        {"TLS is required, but was not offered by host ", "tls"},
        {"TLS is required, but host ", "tls"},
        {"Cannot start TLS", "tls"},
    }};
    for (const auto& shape : shapes) {
        if (!starts_with(s, shape.prefix)) continue;
        sv host, addr;
        int port = 0;
        sv at = s.substr(shape.prefix.size());
        std::size_t used = parse_host_addr(at, host, addr, port);
        if (used == 0 && shape.prefix != "Cannot start TLS") return false;
        ev.action.assign(shape.action);
        if (shape.action == "said" && starts_with(at.substr(used), " refused to talk to me"))
            ev.action = "refused";
        if (used) set_relay(ev, at.substr(0, used));
        ev.reason.assign(s);
        ev.kind = EventKind::connection_problem;
        return true;
    }
    return false;
}

}  // namespace

// retryguard's own "QID: verdict=NAME key=value key=\"quoted value\" ...".
// The reading, key included, is verdict.hpp's: one implementation for writer
// and reader, so a key or value cannot add fields of its own.
bool parse_verdict(sv text, Event& ev) {
    VerdictLine line;
    if (!parse_verdict_line(text, line)) return false;
    if (line.has_key && !line.key.empty()) {
        if (is_queue_id(line.key))
            ev.queue_id = std::move(line.key);
        else if (line.key != "NOQUEUE")
            ev.destination = std::move(line.key);
    }
    for (auto& [key, value] : line.fields) {
        if (key == "verdict" && ev.action.empty()) ev.action = value;
        add_field(ev, std::move(key), std::move(value));
    }
    if (ev.action.empty()) return false;
    ev.kind = EventKind::verdict;
    return true;
}

// Everything Postfix logs after "program[pid]: ". Returns the unknown kind when
// the message is not recognised, an empty view when it is.
sv parse_postfix_message(sv process, sv text, Event& ev) {
    // Severity-prefixed diagnostics are Postfix talking about itself.
    for (sv sev : {sv("warning: "), sv("error: "), sv("fatal: "), sv("panic: ")}) {
        if (!starts_with(text, sev)) continue;
        // "warning: QID: header_checks map lookup problem ...": keep the message.
        sv after = text.substr(sev.size());
        std::size_t c = after.substr(0, 26).find(": ");
        if (c != npos && is_queue_id(after.substr(0, c))) ev.queue_id.assign(after.substr(0, c));
        return sev.substr(0, sev.size() - 2);
    }

    sv rest = text;
    bool keyed = false;  // "QID: " or "NOQUEUE: "
    // A queue id is at most 24 characters: look no further for its colon.
    std::size_t colon = text.substr(0, 26).find(": ");
    if (colon != npos) {
        sv prefix = text.substr(0, colon);
        if (prefix == "NOQUEUE") {
            keyed = true;
        } else if (is_queue_id(prefix)) {
            keyed = true;
            ev.queue_id.assign(prefix);
        }
        if (keyed) rest = text.substr(colon + 2);
    }

    if (keyed) {
        if (starts_with(rest, "to=")) return parse_delivery(rest, ev) ? sv{} : sv("delivery-malformed");
        if (ev.queue_id.empty() && !(process == "smtpd" || process == "cleanup" || process == "postscreen"))
            return "noqueue-other";
        if (process == "qmgr" || process == "oqmgr" || process == "nqmgr") {
            if (rest == "removed") {
                ev.kind = EventKind::queue_removed;
                return {};
            }
            if (starts_with(rest, "from=")) return parse_qmgr_from(rest, ev) ? sv{} : sv("qmgr-other");
            return "qmgr-other";
        }
        if (process == "cleanup") {
            if (starts_with(rest, "message-id=") || starts_with(rest, "resent-message-id=")) {
                ev.resent = rest[0] == 'r';
                sv id = rest.substr(ev.resent ? 18 : 11);
                ev.message_id.assign(id);
                ev.kind = EventKind::message_id;
                return {};
            }
            return parse_action_line(rest, ev) ? sv{} : sv("cleanup-other");
        }
        if (process == "pickup") {
            if (!starts_with(rest, "uid=")) return "pickup-other";
            std::size_t pos = 0;
            while (pos < rest.size()) {
                std::size_t sp = rest.find(' ', pos);
                if (sp == npos) sp = rest.size();
                sv item = rest.substr(pos, sp - pos);
                if (starts_with(item, "uid="))
                    parse_int64(item.substr(4), ev.uid);
                else if (starts_with(item, "from="))
                    ev.sender.assign(strip_brackets(item.substr(5)));
                else if (starts_with(item, "orig_id="))
                    ev.orig_queue_id.assign(item.substr(8));
                pos = sp + 1;
            }
            ev.kind = EventKind::pickup;
            return {};
        }
        if (process == "smtpd" || process == "postscreen") {
            if (starts_with(rest, "client=")) {
                CommaScan scan;
                sv key, value;
                while (next_comma_item(rest, scan, key, value)) {
                    if (key == "client")
                        ev.client.assign(value);
                    else
                        add_field(ev, std::string(key), std::string(value));
                }
                ev.kind = EventKind::smtpd_client;
                return {};
            }
            if (parse_action_line(rest, ev)) return {};
            return process == "postscreen" ? "postscreen-other" : "smtpd-other";
        }
        if (process == "bounce" || process == "defer" || process == "trace") {
            // "sender non-delivery notification: NEWQID" (also postmaster, delay,
            // delivery status = success notices)
            std::size_t sp = rest.find(' ');
            sv who = rest.substr(0, sp);
            if (sp == npos || !(who == "sender" || who == "postmaster")) return "bounce-other";
            sv what = rest.substr(sp + 1);
            std::size_t n = what.find(" notification: ");
            if (n == npos) return "bounce-other";
            sv type = what.substr(0, n);
            sv qid = what.substr(n + 15);
            if (!is_queue_id(qid)) return "bounce-other";
            if (type == "delivery status")
                ev.action = "success";
            else if (type == "non-delivery" || type == "delay")
                ev.action.assign(type);
            else
                return "bounce-other";
            add_field(ev, "notify", std::string(who));
            ev.new_queue_id.assign(qid);
            ev.kind = EventKind::notification;
            return {};
        }
        if (process == "postsuper") {
            if (rest == "removed") {
                ev.kind = EventKind::queue_removed;
                ev.action = "removed";
                return {};
            }
            if (rest == "requeued" || rest == "placed on hold" || rest == "released from hold" ||
                rest == "expired") {
                ev.action.assign(rest);
                ev.kind = EventKind::queue_operation;
                return {};
            }
            return "postsuper-other";
        }
        if (is_delivery_agent_like(process)) {
            if (parse_connection_problem(rest, ev)) return {};
            return "smtp-other";
        }
        return "postfix-other";
    }

    // Lines without a queue id.
    if (is_delivery_agent_like(process)) {
        if (parse_connection_problem(rest, ev)) return {};
        if (rest.find(" TLS connection established ") != npos) return "tls-established";
        return "smtp-other";
    }
    if (process == "smtpd" || process == "postscreen") {
        if (starts_with(rest, "connect from ")) return "smtpd-connect";
        if (starts_with(rest, "disconnect from ")) return "smtpd-disconnect";
        if (starts_with(rest, "lost connection after ") || starts_with(rest, "timeout after "))
            return "smtpd-lost-connection";
        return process == "postscreen" ? "postscreen-other" : "smtpd-other";
    }
    if (process == "postsuper") return "postsuper-summary";
    return "postfix-other";
}

}  // namespace retryguard::log_detail
