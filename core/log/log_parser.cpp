// log_parser.cpp -- Postfix log line -> Event. Owns the syslog header formats
// (RFC 3164, RFC 3339, RFC 5424), year inference, and the shapes of every
// Postfix message that the ledger and the rules care about.
//
// Must never: throw, allocate in proportion to anything but the (capped) line,
// scan a line more than a constant number of times (no backtracking, no regex),
// or treat an unrecognised line as an error. Peer-controlled text (addresses,
// replies, header values) may contain any byte; only delimiters Postfix itself
// writes are trusted for splitting.
#include "retryguard/log_parser.hpp"
#include "retryguard/verdict.hpp"

#include "retryguard/reply.hpp"

#include <algorithm>
#include <array>
#include <charconv>
#include <chrono>
#include <cstring>
#include <ctime>

namespace retryguard {
namespace {

using sv = std::string_view;
constexpr sv::size_type npos = sv::npos;

constexpr bool is_digit(char c) {
    return c >= '0' && c <= '9';
}
constexpr bool is_upper_hex(char c) {
    return is_digit(c) || (c >= 'A' && c <= 'F');
}
constexpr bool is_alnum(char c) {
    return is_digit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}
constexpr bool is_lower(char c) {
    return c >= 'a' && c <= 'z';
}

bool starts_with(sv s, sv p) {
    return s.size() >= p.size() && s.compare(0, p.size(), p) == 0;
}

// Fixed-width decimal field; false unless every char is a digit.
bool digits(sv s, int& out) {
    if (s.empty() || s.size() > 9) return false;
    int v = 0;
    for (char c : s) {
        if (!is_digit(c)) return false;
        v = v * 10 + (c - '0');
    }
    out = v;
    return true;
}

bool parse_int64(sv s, std::int64_t& out) {
    if (s.empty() || s.size() > 18) return false;
    std::int64_t v = 0;
    for (char c : s) {
        if (!is_digit(c)) return false;
        v = v * 10 + (c - '0');
    }
    out = v;
    return true;
}

bool parse_double(sv s, double& out) {
    if (s.empty() || s.size() > 32) return false;
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
    return ec == std::errc{} && p == s.data() + s.size();
}

// Postfix queue ids. Short: upper-case hex, microseconds (5 digits) + inode.
// Long (enable_long_queue_ids): 10 base-52 chars of time, 'z', inode chars.
bool is_queue_id(sv s) {
    if (s.size() >= 6 && s.size() <= 20) {
        bool hex = true;
        for (char c : s) hex = hex && is_upper_hex(c);
        if (hex) return true;
    }
    if (s.size() >= 12 && s.size() <= 24 && s[10] == 'z' && is_digit(s[0])) {
        for (std::size_t i = 0; i < s.size(); ++i) {
            if (!is_alnum(s[i])) return false;
            if (i < 10 && s[i] == 'z') return false;
        }
        return true;
    }
    return false;
}

int year_of(TimePoint t) {
    using namespace std::chrono;
    return int(year_month_day{floor<days>(t)}.year());
}

// host[addr] or host[addr]:port at the start of s. Returns consumed length, 0 if
// s does not start with one. The address may be IPv6 ("[2001:db8::1]") or a
// UNIX socket path (lmtp "[private/dovecot-lmtp]").
std::size_t parse_host_addr(sv s, sv& host, sv& addr, int& port) {
    std::size_t open = 0;
    while (open < s.size() && s[open] != '[' && s[open] != ' ' && s[open] != ',') ++open;
    if (open == 0 || open >= s.size() || s[open] != '[') return 0;
    std::size_t close = s.find(']', open + 1);
    if (close == npos) return 0;
    host = s.substr(0, open);
    addr = s.substr(open + 1, close - open - 1);
    port = 0;
    std::size_t end = close + 1;
    if (end + 1 < s.size() && s[end] == ':' && is_digit(s[end + 1])) {
        std::size_t p = end + 1;
        while (p < s.size() && is_digit(s[p]) && p - end <= 6) ++p;
        int v = 0;
        if (digits(s.substr(end + 1, p - end - 1), v) && v <= 65535) {
            port = v;
            end = p;
        }
    }
    return end;
}

void set_relay(Event& ev, sv relay) {
    ev.relay.assign(relay);
    sv host, addr;
    int port = 0;
    if (parse_host_addr(relay, host, addr, port) != 0) {
        ev.relay_host.assign(host);
        ev.relay_addr.assign(addr);
        ev.relay_port = port;
    } else {
        ev.relay_host.assign(relay);
    }
}

// Bounds what one hostile line can allocate; real lines carry a handful.
constexpr std::size_t kMaxFields = 64;

template <typename K, typename V>
void add_field(Event& ev, K&& key, V&& value) {
    if (ev.fields.size() < kMaxFields) ev.fields.emplace_back(std::string(key), std::string(value));
}

sv strip_brackets(sv v) {
    if (v.size() >= 2 && v.front() == '<' && v.back() == '>') return v.substr(1, v.size() - 2);
    return v;
}

// One "key=value" of a comma-separated Postfix list ("to=<a>, relay=x, ...").
// A value in angle brackets runs to the first ">" that ends the item, so a
// comma inside an address does not split it.
struct CommaScan {
    std::size_t pos = 0;
    // Next ">, " at or after the last search start (npos: none left). Remembered
    // so a hostile run of "<" items does not rescan the line for every item.
    std::size_t close = 0;
    bool close_valid = false;
};

bool next_comma_item(sv s, CommaScan& scan, sv& key, sv& value) {
    std::size_t& pos = scan.pos;
    while (pos < s.size() && s[pos] == ' ') ++pos;
    if (pos >= s.size()) return false;
    std::size_t eq = pos;
    while (eq < s.size() && (is_lower(s[eq]) || s[eq] == '_' || is_digit(s[eq]) || s[eq] == '-')) ++eq;
    if (eq == pos || eq >= s.size() || s[eq] != '=') return false;
    key = s.substr(pos, eq - pos);
    std::size_t v = eq + 1;
    std::size_t end;
    if (v < s.size() && s[v] == '<') {
        if (!scan.close_valid || (scan.close != npos && scan.close < v)) {
            scan.close = s.find(">, ", v);
            scan.close_valid = true;
        }
        std::size_t close = scan.close;
        if (close == npos) {
            close = (!s.empty() && s.back() == '>') ? s.size() - 1 : npos;
            end = close == npos ? s.find(", ", v) : close + 1;
        } else {
            end = close + 1;
        }
    } else {
        end = s.find(", ", v);
    }
    if (end == npos) end = s.size();
    value = s.substr(v, end - v);
    pos = end;
    if (pos < s.size() && s[pos] == ',') ++pos;
    return true;
}

// Space-separated "key=value" tail of smtpd/cleanup action lines
// ("from=<a> to=<b> proto=ESMTP helo=<h>"). Stops at ": " after a token, which
// is where cleanup header/body checks put their reason.
void parse_space_tail(sv s, Event& ev, sv* trailing_reason) {
    std::size_t pos = 0;
    while (pos < s.size()) {
        while (pos < s.size() && s[pos] == ' ') ++pos;
        if (pos >= s.size()) break;
        if (s[pos] == ':' && trailing_reason) {
            std::size_t r = pos + 1;
            while (r < s.size() && s[r] == ' ') ++r;
            *trailing_reason = s.substr(r);
            return;
        }
        std::size_t eq = pos;
        while (eq < s.size() && (is_lower(s[eq]) || s[eq] == '_')) ++eq;
        if (eq == pos || eq >= s.size() || s[eq] != '=') {
            std::size_t sp = s.find(' ', pos);
            pos = sp == npos ? s.size() : sp;
            continue;
        }
        sv key = s.substr(pos, eq - pos);
        std::size_t v = eq + 1, end;
        if (v < s.size() && s[v] == '<') {
            end = s.find('>', v);
            end = end == npos ? s.size() : end + 1;
        } else {
            end = v;
            while (end < s.size() && s[end] != ' ' && !(s[end] == ':' && end + 1 == s.size()) &&
                   !(s[end] == ':' && s[end + 1] == ' '))
                ++end;
        }
        sv value = s.substr(v, end - v);
        // postscreen separates its tail with ", ".
        if (!value.empty() && value.back() == ',' && value.front() != '<') value.remove_suffix(1);
        if (key == "from")
            ev.sender.assign(strip_brackets(value));
        else if (key == "to")
            ev.recipient.assign(strip_brackets(value));
        else
            add_field(ev, std::string(key), std::string(strip_brackets(value)));
        pos = end;
    }
}

// "4.7.1" at the start of s (cleanup milter replies log the enhanced code
// alone) or after a 3-digit code ("451 4.7.1 ...").
sv leading_dsn(sv s) {
    std::size_t p = 0;
    if (s.size() >= 4 && is_digit(s[0]) && is_digit(s[1]) && is_digit(s[2]) && s[3] == ' ') p = 4;
    std::size_t q = p;
    if (q >= s.size() || !(s[q] == '2' || s[q] == '4' || s[q] == '5')) return {};
    ++q;
    for (int part = 0; part < 2; ++part) {
        if (q >= s.size() || s[q] != '.') return {};
        ++q;
        std::size_t start = q;
        while (q < s.size() && is_digit(s[q]) && q - start < 3) ++q;
        if (q == start) return {};
    }
    if (q < s.size() && s[q] != ' ' && s[q] != ';') return {};
    return s.substr(p, q - p);
}

bool is_delivery_agent_like(sv process) {
    return process == "smtp" || process == "lmtp";
}

bool is_postfix_process(sv p) {
    static constexpr std::array<sv, 40> names = {
        "smtp",       "lmtp",      "local",           "virtual",   "pipe",
        "error",      "retry",     "discard",         "qmgr",      "oqmgr",
        "nqmgr",      "cleanup",   "pickup",          "smtpd",     "bounce",
        "defer",      "trace",     "postsuper",       "postqueue", "sendmail",
        "postdrop",   "master",    "anvil",           "scache",    "tlsmgr",
        "postscreen", "dnsblog",   "tlsproxy",        "verify",    "showq",
        "flush",      "proxymap",  "trivial-rewrite", "postlogd",  "postfix-script",
        "postmap",    "postalias", "postlog",         "spawn",     "qmqpd"};
    for (sv n : names)
        if (p == n) return true;
    return false;
}

}  // namespace

LogParser::LogParser(LogParserOptions options) : options_(std::move(options)) {
    reference_ = options_.reference_time.value_or(
        std::chrono::time_point_cast<Duration>(std::chrono::system_clock::now()));
}

void LogParser::set_reference_time(TimePoint reference) {
    reference_ = reference;
    have_last_ = false;
}

Event LogParser::parse(std::string_view line) {
    Event ev;
    parse(line, ev);
    return ev;
}

namespace {

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

// ---- message shapes -------------------------------------------------------

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

}  // namespace

bool LogParser::parse(std::string_view line, Event& out) {
    reset(out);
    ++stats_.lines;
    while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.remove_suffix(1);
    if (line.size() > kMaxLogLineLength) {
        line = line.substr(0, kMaxLogLineLength);
        out.truncated = true;
        ++stats_.truncated;
    }
    parse_line(line, out);
    return finish(out);
}

bool LogParser::parse_record(const LogRecord& record, Event& out) {
    reset(out);
    ++stats_.lines;
    sv message = record.message;
    while (!message.empty() && (message.back() == '\n' || message.back() == '\r')) message.remove_suffix(1);
    if (message.size() > kMaxLogLineLength) {
        message = message.substr(0, kMaxLogLineLength);
        out.truncated = true;
        ++stats_.truncated;
    }
    out.time = record.time;
    out.host.assign(record.host.substr(0, 255));
    out.program.assign(record.identifier.substr(0, 255));
    out.pid = record.pid;
    note_time(record.time, year_of(record.time));
    dispatch(out.program, message, out);
    return finish(out);
}

void LogParser::dispatch(std::string_view program, std::string_view text, Event& out) {
    if (out.program.data() != program.data()) out.program.assign(program);
    std::size_t slash = out.program.rfind('/');
    sv process = slash == npos ? sv(out.program) : sv(out.program).substr(slash + 1);
    out.process.assign(process);
    out.text.assign(text);
    if (starts_with(process, "retryguard") || starts_with(out.program, "retryguard")) {
        if (!parse_verdict(text, out)) mark_unknown(out, "retryguard-other");
        return;
    }
    // A daemon name alone is not enough: Postfix always logs "syslog_name/daemon".
    if (!is_postfix_process(process) || (slash == npos && out.program != "postfix")) {
        mark_unknown(out, "not-postfix");
        return;
    }
    sv kind = parse_postfix_message(process, text, out);
    if (!kind.empty()) mark_unknown(out, kind);
}

void LogParser::mark_unknown(Event& out, std::string_view kind) {
    out.kind = EventKind::unknown;
    out.unknown_kind.assign(kind);
}

bool LogParser::finish(Event& out) {
    if (out.kind == EventKind::unknown) {
        if (out.unknown_kind.empty()) out.unknown_kind = "unrecognised";
        ++stats_.unknown;
        auto it = stats_.unknown_by_kind.find(sv(out.unknown_kind));
        if (it == stats_.unknown_by_kind.end())
            stats_.unknown_by_kind.emplace(out.unknown_kind, 1);
        else
            ++it->second;
        return false;
    }
    ++stats_.recognised;
    if (options_.parse_replies && !out.reason.empty() &&
        (out.kind == EventKind::delivery || out.kind == EventKind::connection_problem ||
         out.kind == EventKind::smtpd_action || out.kind == EventKind::milter_action)) {
        // cleanup logs a milter's reply as "5.7.1 text" without the basic code.
        std::string_view reason = out.reason;
        if (!out.dsn.empty() && starts_with(reason, out.dsn) && reason.size() > out.dsn.size() &&
            reason[out.dsn.size()] == ' ')
            reason.remove_prefix(out.dsn.size() + 1);
        out.reply = parse_postfix_reason(reason, out.dsn);
    }
    return true;
}

bool LogParser::local_to_utc(std::int64_t local_seconds, std::int64_t& utc_seconds) {
    if (!options_.local_time) {
        utc_seconds = local_seconds;
        return true;
    }
    std::int64_t hour = local_seconds >= 0 ? local_seconds / 3600 : (local_seconds - 3599) / 3600;
    if (hour != cached_local_hour_) {
        std::time_t t = static_cast<std::time_t>(hour * 3600);
        std::tm tm{};
        if (!gmtime_r(&t, &tm)) return false;
        tm.tm_isdst = -1;
        std::time_t utc = std::mktime(&tm);
        if (utc == static_cast<std::time_t>(-1) && tm.tm_year != 69) return false;
        cached_offset_ = static_cast<std::int64_t>(t) - static_cast<std::int64_t>(utc);
        cached_local_hour_ = hour;
    }
    utc_seconds = local_seconds - cached_offset_;
    return true;
}

void LogParser::note_time(TimePoint t, int year) {
    if (!have_last_ || t > last_time_) {
        have_last_ = true;
        last_time_ = t;
        last_year_ = year;
    }
}

bool LogParser::convert_3164(int month, int day, std::int64_t seconds_of_day, std::int64_t micros,
                             TimePoint& out) {
    using namespace std::chrono;
    auto make = [&](int y, TimePoint& t) {
        const auto days = days_from_civil(y, month, day);
        std::int64_t utc = 0;
        if (!days || !local_to_utc(*days * 86400 + seconds_of_day, utc)) return false;
        t = TimePoint{Duration{utc * 1000000 + micros}};
        return true;
    };
    constexpr auto half_year = hours(24 * 183);
    int y;
    TimePoint t{};
    if (!have_last_) {
        if (options_.year) {
            y = *options_.year;
            if (!make(y, t)) return false;
        } else {
            // A line "from the future" relative to the reference is last year's.
            y = year_of(reference_);
            if (!make(y, t)) {
                // Feb 29 against a non-leap reference year: the latest leap year before.
                for (int back = 1; back <= 4 && !make(y - back, t); ++back) {
                }
                y = year_of(t);
            } else if (t > reference_ + hours(24)) {
                --y;
                if (!make(y, t)) return false;
            }
        }
    } else {
        y = last_year_;
        if (!make(y, t)) {
            if (!make(y + 1, t)) return false;
            y = y + 1;
        }
        if (t + half_year < last_time_) {
            // December -> January: the stream went past New Year.
            if (!make(y + 1, t)) return false;
            ++y;
        } else if (t > last_time_ + half_year) {
            // A late line from before New Year; the stream's year stays.
            if (!make(y - 1, t)) return false;
            --y;
        }
    }
    note_time(t, y);
    out = t;
    return true;
}

bool LogParser::parse_line(std::string_view line, Event& out) {
    sv s = line;
    if (s.empty()) {
        mark_unknown(out, "empty");
        return false;
    }
    // Syslog priority "<PRI>" as received on a socket.
    bool rfc5424 = false;
    if (s[0] == '<') {
        std::size_t close = s.find('>');
        int pri = 0;
        if (close == npos || close > 4 || !digits(s.substr(1, close - 1), pri)) {
            mark_unknown(out, "not-syslog");
            return false;
        }
        s.remove_prefix(close + 1);
        if (s.size() > 2 && s[0] == '1' && s[1] == ' ') {
            rfc5424 = true;
            s.remove_prefix(2);
        }
    }

    // Time stamp.
    std::size_t pos = 0;
    TimePoint time{};
    // A leap second is kept within its minute.
    auto second_of_day = [](int h, int m, int sec) { return h * 3600 + m * 60 + std::min(sec, 59); };
    if (s.size() >= 19 && is_digit(s[0]) && s[4] == '-' && s[7] == '-' &&
        (s[10] == 'T' || s[10] == 't' || s[10] == ' ')) {
        const auto p = scan_rfc3339(s);
        if (!p || !rfc3339_in_range(*p) || p->offset_hours > 23 || p->offset_minutes > 59) {
            mark_unknown(out, "bad-time");
            return false;
        }
        const std::int64_t local = *days_from_civil(p->year, p->month, p->day) * 86400 +
                                   second_of_day(p->hour, p->minute, p->second);
        std::int64_t utc = local - p->offset_seconds;
        if (!p->has_zone && !local_to_utc(local, utc)) {
            mark_unknown(out, "bad-time");
            return false;
        }
        pos = p->length;
        time = TimePoint{Duration{utc * 1000000 + p->micros}};
        note_time(time, p->year);
    } else if (!rfc5424 && s.size() >= 15 && s[3] == ' ' && (s[4] == ' ' || is_digit(s[4])) &&
               is_digit(s[5]) && s[6] == ' ') {
        const auto p = scan_rfc3164(s);
        if (!p || p->day < 1 || p->day > 31 || p->hour > 23 || p->minute > 59 || p->second > 60 ||
            !convert_3164(p->month, p->day, second_of_day(p->hour, p->minute, p->second), p->micros, time)) {
            mark_unknown(out, "bad-time");
            return false;
        }
        pos = p->length;
    } else if (rfc5424 && starts_with(s, "- ")) {
        time = std::chrono::time_point_cast<Duration>(std::chrono::system_clock::now());
        pos = 1;
    } else {
        mark_unknown(out, !s.empty() && s[0] == '#' ? "comment" : "not-syslog");
        return false;
    }
    out.time = time;
    if (pos >= s.size() || s[pos] != ' ') {
        mark_unknown(out, "bad-time");
        return false;
    }
    while (pos < s.size() && s[pos] == ' ') ++pos;
    s.remove_prefix(pos);

    // Host (optional: local syslog(3) datagrams have none), then TAG[PID]: .
    sv program;
    sv text;
    if (rfc5424) {
        // HOST APP PROCID MSGID SD MSG
        std::array<sv, 4> tok{};
        for (auto& t : tok) {
            std::size_t sp = s.find(' ');
            if (sp == npos) {
                mark_unknown(out, "not-syslog");
                return false;
            }
            t = s.substr(0, sp);
            s.remove_prefix(sp + 1);
        }
        if (tok[0] != "-") out.host.assign(tok[0].substr(0, 255));
        program = tok[1];
        std::int64_t pid = 0;
        if (parse_int64(tok[2], pid)) out.pid = pid;
        // Structured data: "-" or one or more [id k="v" ...] with \] escapes.
        if (starts_with(s, "-")) {
            s.remove_prefix(1);
        } else {
            while (!s.empty() && s[0] == '[') {
                std::size_t i = 1;
                bool quoted = false;
                for (; i < s.size(); ++i) {
                    if (s[i] == '\\') {
                        ++i;
                        continue;
                    }
                    if (s[i] == '"') quoted = !quoted;
                    if (s[i] == ']' && !quoted) break;
                }
                s.remove_prefix(i < s.size() ? i + 1 : s.size());
            }
        }
        if (!s.empty() && s[0] == ' ') s.remove_prefix(1);
        if (starts_with(s, "\xEF\xBB\xBF")) s.remove_prefix(3);
        text = s;
    } else {
        std::size_t sp = s.find(' ');
        sv first = s.substr(0, sp);
        if (first.empty() || first.back() != ':') {
            if (sp == npos) {
                mark_unknown(out, "not-syslog");
                return false;
            }
            out.host.assign(first.substr(0, 255));
            s.remove_prefix(sp + 1);
            while (!s.empty() && s[0] == ' ') s.remove_prefix(1);
            sp = s.find(' ');
            first = s.substr(0, sp);
        }
        if (first.size() < 2 || first.back() != ':') {
            mark_unknown(out, "not-syslog");
            return false;
        }
        sv tag = first.substr(0, first.size() - 1);
        if (!tag.empty() && tag.back() == ']') {
            std::size_t open = tag.rfind('[');
            std::int64_t pid = 0;
            if (open == npos || !parse_int64(tag.substr(open + 1, tag.size() - open - 2), pid)) {
                mark_unknown(out, "not-syslog");
                return false;
            }
            out.pid = pid;
            tag = tag.substr(0, open);
        }
        program = tag;
        text = sp == npos ? sv{} : s.substr(sp + 1);
    }
    if (program.empty() || program.size() > 255) {
        mark_unknown(out, "not-syslog");
        return false;
    }
    dispatch(program, text, out);
    return out.kind != EventKind::unknown;
}

}  // namespace retryguard
