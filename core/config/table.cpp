// table.cpp -- THE declared table of configuration keys: spelling, type,
// default, unit, allowed values, range, one-line doc, and the field each key
// fills. Parsing, validation, docs/configuration.md and conf/retryguard.yaml
// all come from here, so a key cannot be spelled one way in one place and
// another way elsewhere. Must never hold parsing logic (see loader.cpp).
#include <algorithm>
#include <array>
#include <string>
#include <type_traits>

#include "config/internal.hpp"

namespace retryguard::config::detail {
namespace {

constexpr std::int64_t kMs = 1;
constexpr std::int64_t kSec = 1000 * kMs;
constexpr std::int64_t kMin = 60 * kSec;
constexpr std::int64_t kHour = 60 * kMin;
constexpr std::int64_t kDay = 24 * kHour;
constexpr std::int64_t kKiB = 1024;
constexpr std::int64_t kMiB = 1024 * kKiB;

// --- enum spellings (index = enumerator value) -------------------------------
constexpr std::array<std::string_view, 2> kBackends = {"sqlite", "redis"};
constexpr std::array<std::string_view, 4> kSourceTypes = {"file", "journald", "syslog_unix", "syslog_udp"};
constexpr std::array<std::string_view, 2> kStarts = {"end", "beginning"};
constexpr std::array<std::string_view, 5> kReinjectionActions = {"reject", "hold", "drop_duplicates", "tag",
                                                                 "log_only"};
constexpr std::array<std::string_view, 2> kMatches = {"message_id", "fingerprint"};
constexpr std::array<std::string_view, 3> kParts = {"sender", "subject", "body"};
constexpr std::array<std::string_view, 2> kErrorActions = {"accept", "tempfail"};
constexpr std::array<std::string_view, 11> kFacilities = {
    "mail", "daemon", "user", "local0", "local1", "local2", "local3", "local4", "local5", "local6", "local7"};
constexpr std::array<std::string_view, 3> kLogTargets = {"syslog", "stderr", "both"};
constexpr std::array<std::string_view, 5> kLogLevels = {"debug", "info", "notice", "warning", "error"};
constexpr std::array<std::string_view, 8> kStages = {"connect", "helo",           "mail", "rcpt",
                                                     "data",    "end_of_message", "vrfy", "etrn"};
constexpr std::array<std::string_view, 14> kCategories = {"receiver_config", "receiver_config_permanent",
                                                          "receiver_system", "greylisting",
                                                          "rate_limited",    "policy",
                                                          "mailbox",         "address",
                                                          "network",         "routing",
                                                          "content",         "expired",
                                                          "local",           "unknown"};
constexpr std::array<std::string_view, 7> kVerbs = {"DUNNO",           "WARN",  "INFO", "PREPEND", "HOLD",
                                                    "DEFER_IF_PERMIT", "REJECT"};

template <typename E>
std::span<const std::string_view> names_of();
template <>
std::span<const std::string_view> names_of<LedgerBackend>() {
    return kBackends;
}
template <>
std::span<const std::string_view> names_of<SourceType>() {
    return kSourceTypes;
}
template <>
std::span<const std::string_view> names_of<SourceStart>() {
    return kStarts;
}
template <>
std::span<const std::string_view> names_of<ReinjectionAction>() {
    return kReinjectionActions;
}
template <>
std::span<const std::string_view> names_of<ReinjectionMatch>() {
    return kMatches;
}
template <>
std::span<const std::string_view> names_of<FingerprintPart>() {
    return kParts;
}
template <>
std::span<const std::string_view> names_of<ErrorAction>() {
    return kErrorActions;
}
template <>
std::span<const std::string_view> names_of<SyslogFacility>() {
    return kFacilities;
}
template <>
std::span<const std::string_view> names_of<LogTarget>() {
    return kLogTargets;
}
template <>
std::span<const std::string_view> names_of<LogLevel>() {
    return kLogLevels;
}
template <>
std::span<const std::string_view> names_of<PolicyStage>() {
    return kStages;
}
template <>
std::span<const std::string_view> names_of<Category>() {
    return kCategories;
}

template <typename E>
E enum_from(std::string_view name) {
    auto names = names_of<E>();
    auto it = std::find(names.begin(), names.end(), name);
    return static_cast<E>(it == names.end() ? 0 : it - names.begin());
}

// --- storing a parsed Value into a typed field --------------------------------
void assign(Duration& f, const Value& v) {
    f = std::get<Duration>(v);
}
void assign(std::int64_t& f, const Value& v) {
    f = std::get<std::int64_t>(v);
}
void assign(std::uint64_t& f, const Value& v) {
    f = static_cast<std::uint64_t>(std::get<std::int64_t>(v));
}
void assign(std::uint32_t& f, const Value& v) {
    f = static_cast<std::uint32_t>(std::get<std::int64_t>(v));
}
void assign(bool& f, const Value& v) {
    f = std::get<bool>(v);
}
void assign(std::string& f, const Value& v) {
    f = std::get<std::string>(v);
}
void assign(std::vector<std::string>& f, const Value& v) {
    f = std::get<std::vector<std::string>>(v);
}
void assign(SocketSpec& f, const Value& v) {
    f = std::get<SocketSpec>(v);
}
void assign(HostPort& f, const Value& v) {
    f = std::get<HostPort>(v);
}
void assign(std::optional<HostPort>& f, const Value& v) {
    f = std::get<HostPort>(v);
}
void assign(PolicyAction& f, const Value& v) {
    f = std::get<PolicyAction>(v);
}
// A new handle, not operator= on the old one: yaml-cpp's operator= writes
// through to the node the handle already refers to, which would edit the
// shared default snapshot.
void assign(std::shared_ptr<const YAML::Node>& f, const Value& v) {
    f = std::make_shared<const YAML::Node>(std::get<YAML::Node>(v));
}
template <typename E>
requires std::is_enum_v<E>
void assign(E& f, const Value& v) {
    f = enum_from<E>(std::get<std::string>(v));
}
template <typename E>
requires std::is_enum_v<E>
void assign(std::vector<E>& f, const Value& v) {
    f.clear();
    for (const auto& name : std::get<std::vector<std::string>>(v)) f.push_back(enum_from<E>(name));
}

// --- canonical text of a field (explain, docs, tests) ------------------------
std::string show(const Duration& f) {
    return format_duration(f);
}
std::string show(const std::int64_t& f) {
    return std::to_string(f);
}
std::string show(const std::uint64_t& f) {
    return format_size(f);
}
std::string show(const bool& f) {
    return f ? "true" : "false";
}
std::string show(const std::string& f) {
    return "\"" + f + "\"";
}
std::string show(const PolicyAction& f) {
    return "\"" + f.to_string() + "\"";
}
template <typename E>
requires std::is_enum_v<E> std::string show(const E& f) {
    return std::string(names_of<E>()[static_cast<std::size_t>(f)]);
}
template <typename E>
requires std::is_enum_v<E> std::string show(const std::vector<E>& f) {
    std::string out = "[";
    for (std::size_t i = 0; i < f.size(); ++i) out += (i ? ", " : "") + show(f[i]);
    return out + "]";
}

// "sources" and "destinations" need a field only for the table's sake: their
// entries are read item by item by the loader.
void assign(std::vector<SourceConfig>&, const Value&) {}
void assign(std::vector<DestinationRule>&, const Value&) {}

constexpr std::span<const std::string_view> kNone{};

#define RG_GLOBAL(key, type, def, unit, allowed, min, max, doc, field)                                   \
    Entry {                                                                                              \
        KeySpec{key, ValueType::type, Scope::global, def, unit, allowed, min, max, false, doc}, Binder { \
            [](Config& c, const Value& v) { assign(c.field, v); }, nullptr, nullptr, nullptr             \
        }                                                                                                \
    }
#define RG_SETTING(key, type, def, unit, allowed, min, max, doc, field)                              \
    Entry {                                                                                          \
        KeySpec{key, ValueType::type, Scope::overridable, def, unit, allowed, min, max, false, doc}, \
            Binder {                                                                                 \
            nullptr, [](Settings& s, const Value& v) { assign(s.field, v); },                        \
                [](const Settings& s) { return show(s.field); }, nullptr                             \
        }                                                                                            \
    }
// A global key whose field lives in Settings (c.global): not overridable,
// yet show_setting() can print it.
#define RG_GLOBAL_SETTING(key, type, def, unit, allowed, min, max, doc, field)                           \
    Entry {                                                                                              \
        KeySpec{key, ValueType::type, Scope::global, def, unit, allowed, min, max, false, doc}, Binder { \
            [](Config& c, const Value& v) { assign(c.global.field, v); }, nullptr,                       \
                [](const Settings& s) { return show(s.field); }, nullptr                                 \
        }                                                                                                \
    }
#define RG_SOURCE(key, type, def, unit, allowed, min, max, doc, field)                             \
    Entry {                                                                                        \
        KeySpec{"sources[]." key,                                                                  \
                ValueType::type,                                                                   \
                Scope::source_item,                                                                \
                def,                                                                               \
                unit,                                                                              \
                allowed,                                                                           \
                min,                                                                               \
                max,                                                                               \
                false,                                                                             \
                doc},                                                                              \
            Binder {                                                                               \
            nullptr, nullptr, nullptr, [](SourceConfig& s, const Value& v) { assign(s.field, v); } \
        }                                                                                          \
    }
#define RG_DEST(key, type, doc)          \
    Entry {                              \
        KeySpec{"destinations[]." key,   \
                ValueType::type,         \
                Scope::destination_item, \
                "",                      \
                "",                      \
                kNone,                   \
                0,                       \
                0,                       \
                false,                   \
                doc},                    \
            Binder {}                    \
    }
// A category's two ladder keys, declared with SETTING (RG_SETTING: a
// destination rule may override them; RG_GLOBAL_SETTING: top level only).
#define RG_CATEGORY_KEYS(SETTING, name, idx, watch, escalate, why)                                       \
    SETTING("categories." #name ".watch_after_deferrals", integer, watch, "deferrals", kNone, 1, 100000, \
            "Deferrals in one " #name " episode before the destination moves to `watch`.",               \
            categories[idx].watch_after_deferrals),                                                      \
        SETTING("categories." #name ".escalate_after", duration, escalate, "duration", kNone, kMin,      \
                365 * kDay, "Age of a " #name " episode before it escalates: " why,                      \
                categories[idx].escalate_after)
#define RG_CATEGORY(...) RG_CATEGORY_KEYS(RG_SETTING, __VA_ARGS__)
// The local category's episode is the sending host's own (one for all
// destinations), so its keys are global: a destination rule cannot set them.
#define RG_CATEGORY_GLOBAL(...) RG_CATEGORY_KEYS(RG_GLOBAL_SETTING, __VA_ARGS__)

const std::vector<Entry>& table() {
    static const std::vector<Entry> t = {
        // --- ledger -----------------------------------------------------------
        RG_GLOBAL("ledger.backend", enumeration, "sqlite", "", kBackends, 0, 0,
                  "Where shared state lives: the embedded SQLite file, or Redis for a fleet of MTAs.",
                  ledger.backend),
        RG_GLOBAL("ledger.sqlite.path", path, "/var/lib/retryguard/ledger.db", "", kNone, 1, 4096,
                  "SQLite ledger file (absolute path; WAL files sit next to it).", ledger.sqlite_path),
        RG_GLOBAL("ledger.sqlite.busy_timeout", duration, "2s", "duration", kNone, 0, 60 * kSec,
                  "How long a writer waits for a lock held by another process before failing open.",
                  ledger.sqlite_busy_timeout),
        RG_GLOBAL(
            "ledger.sqlite.gather_wal_writes", boolean, "true", "", kNone, 0, 0,
            "Write each commit's WAL frames in a few large writes instead of two system calls per page, "
            "and read the tables and the sort's temporary files of bulk mode's index build in stretches "
            "(docs/ledger.md, \"SQLite backend\"). false: SQLite's default VFS does all of it, as it "
            "does anyway, with a warning, should the gathering VFS fail to register.",
            ledger.sqlite_gather_wal_writes),
        RG_GLOBAL("ledger.redis.address", redis_address, "127.0.0.1:6379", "", kNone, 0, 0,
                  "Redis server: host:port, [v6]:port or unix:/path.", ledger.redis_address),
        RG_GLOBAL("ledger.redis.key_prefix", string, "\"retryguard:\"", "", kNone, 1, 64,
                  "Prefix of every Redis key, so several installations can share one server.",
                  ledger.redis_key_prefix),
        RG_GLOBAL("ledger.redis.timeout", duration, "200ms", "duration", kNone, kMs, 60 * kSec,
                  "Per-command Redis timeout; past it the caller fails open (errors.timeout).",
                  ledger.redis_timeout),
        RG_GLOBAL(
            "ledger.redis.reconnect_max_backoff", duration, "30s", "duration", kNone, 100 * kMs, 10 * kMin,
            "Reconnects to a lost Redis back off exponentially up to this delay; meanwhile callers fail "
            "open (errors.ledger_unavailable).",
            ledger.redis_reconnect_max_backoff),
        RG_GLOBAL("ledger.redis.database", integer, "0", "", kNone, 0, 1023, "Redis logical database number.",
                  ledger.redis_database),
        RG_GLOBAL("ledger.redis.password_file", path, "\"\"", "", kNone, 0, 0,
                  "File holding the Redis password (AUTH); empty: no password. Never put it in this file.",
                  ledger.redis_password_file),
        RG_GLOBAL(
            "ledger.redis.bulk_load", boolean, "true", "", kNone, 0, 0,
            "`retryguard import` into an empty Redis ledger records the files in a temporary SQLite ledger "
            "(in $TMPDIR, else /var/tmp) and copies the result into Redis once, most of it while the import "
            "runs (docs/ledger.md, \"Bulk load into an empty Redis ledger\"). false: every batch goes "
            "through the ingest script.",
            ledger.redis_bulk_load),
        RG_GLOBAL("ledger.retention.events", duration, "30d", "duration", kNone, kHour, 3650 * kDay,
                  "Raw events older than this are pruned.", ledger.retention_events),
        RG_GLOBAL("ledger.retention.finished_messages", duration, "14d", "duration", kNone, kHour,
                  3650 * kDay, "Messages delivered, bounced or expired longer ago than this are pruned.",
                  ledger.retention_finished_messages),
        RG_GLOBAL("ledger.retention.episodes", duration, "180d", "duration", kNone, kDay, 3650 * kDay,
                  "Closed deferral episodes are kept this long; must cover flags.period.",
                  ledger.retention_episodes),
        RG_GLOBAL("ledger.retention.prune_interval", duration, "1h", "duration", kNone, kMin, 7 * kDay,
                  "How often pruning runs.", ledger.retention_prune_interval),

        // --- log sources ------------------------------------------------------
        RG_GLOBAL("sources", item_list, "[{type: file, path: /var/log/mail.log}]", "", kNone, 0, 0,
                  "Postfix log sources the policy daemon follows (a list; see sources[].*).", sources),
        RG_SOURCE("type", enumeration, "file", "", kSourceTypes, 0, 0,
                  "file (follows rotation), journald, syslog_unix (datagram socket) or syslog_udp.", type),
        RG_SOURCE("name", string, "\"\"", "", kNone, 0, 128,
                  "Stable id under which the follower position is stored; empty: derived from type and path.",
                  name),
        RG_SOURCE("path", path, "\"\"", "", kNone, 0, 0,
                  "file: the log file; syslog_unix: the socket to create. Not used by the other types.",
                  path),
        RG_SOURCE("address", host_port, "\"\"", "", kNone, 0, 0,
                  "syslog_udp: host:port to listen on (loopback unless allow_non_loopback).", address),
        RG_SOURCE("allow_non_loopback", boolean, "false", "", kNone, 0, 0,
                  "syslog_udp: allow a non-loopback listen address (anyone who can reach it can feed lines).",
                  allow_non_loopback),
        RG_SOURCE("journal_match", string, "\"SYSLOG_FACILITY=2\"", "", kNone, 0, 512,
                  "journald: match expression (FIELD=value) selecting Postfix's lines.", journal_match),
        RG_SOURCE("start", enumeration, "end", "", kStarts, 0, 0,
                  "Where to start when no position is stored yet: the end (live) or the beginning.", start),
        RG_SOURCE("max_line_length", size, "64KiB", "bytes", kNone, 1 * kKiB, 64 * kKiB,
                  "Longer lines are cut there and counted (retryguard_follower_lines_truncated_total), "
                  "never fatal; 64KiB at most, the log parser's own limit.",
                  max_line_length),
        RG_GLOBAL("ingest.batch_max_events", integer, "2000", "lines", kNone, 1, 100000,
                  "Log lines written to the ledger in one transaction at most (a follower catching up "
                  "fills them; on a live log batch_max_delay ends a batch first).",
                  ingest.batch_max_events),
        RG_GLOBAL("ingest.batch_max_delay", duration, "200ms", "duration", kNone, kMs, 60 * kSec,
                  "A partial batch is written after this delay.", ingest.batch_max_delay),

        // --- milter -----------------------------------------------------------
        RG_GLOBAL("milter.socket", socket, "unix:/var/spool/postfix/retryguard/milter.sock", "", kNone, 0, 0,
                  "Milter listen socket (unix:/path, local:/path, inet:port@host, inet6:port@host).",
                  milter.socket),
        RG_GLOBAL("milter.socket_mode", file_mode, "\"0660\"", "octal", kNone, 0, 0777,
                  "Permissions of a UNIX milter socket (quote it: \"0660\").", milter.socket_mode),
        RG_GLOBAL("milter.user", string, "retryguard", "", kNone, 1, 32,
                  "Unprivileged user the milter runs as after creating its socket.", milter.user),
        RG_GLOBAL("milter.group", string, "retryguard", "", kNone, 1, 32,
                  "Group of the milter process and its socket (add postfix to it).", milter.group),
        RG_GLOBAL("milter.deadline", duration, "500ms", "duration", kNone, 10 * kMs, 60 * kSec,
                  "Budget for the ledger lookup at end of message; past it the message is accepted "
                  "(errors.timeout).",
                  milter.deadline),
        RG_GLOBAL("milter.timeout", duration, "30s", "duration", kNone, kSec, kHour,
                  "libmilter I/O timeout towards Postfix (smfi_settimeout): a connection whose command stops "
                  "partway is closed after it; an idle connection between commands is left to libmilter's "
                  "own, much longer, check.",
                  milter.timeout),
        RG_GLOBAL("milter.reject_code", string, "\"550\"", "", kNone, 3, 3,
                  "SMTP code of a refused resend (quote it): 5xx refuses it for good, 4xx temporarily (the "
                  "client may try again). Mail from the sendmail command always gets a 5xx.",
                  milter.reject_code),
        RG_GLOBAL("milter.reject_xcode", string, "\"5.7.1\"", "", kNone, 5, 9,
                  "Enhanced status code of a refused resend; its class must match milter.reject_code.",
                  milter.reject_xcode),
        RG_GLOBAL("milter.minimal_backoff", duration, "300s", "duration", kNone, kSec, kDay,
                  "Postfix's minimal_backoff_time: the shortest gap between retries, for the next-retry "
                  "estimate in the reply.",
                  milter.minimal_backoff),
        RG_GLOBAL("milter.maximal_backoff", duration, "4000s", "duration", kNone, kSec, kDay,
                  "Postfix's maximal_backoff_time: the longest gap between retries (at least "
                  "milter.minimal_backoff).",
                  milter.maximal_backoff),
        RG_GLOBAL("milter.record_queue", integer, "10000", "identities", kNone, 0, 1000000,
                  "Accepted messages waiting for the writer thread to record them; 0: recorded at end of "
                  "message (slower replies).",
                  milter.record_queue),
        RG_GLOBAL("milter.filter_rescan", duration, "60s", "duration", kNone, 0, kDay,
                  "How often the in-memory identity filter is rebuilt from the ledger; 0: no filter, every "
                  "message is looked up in the ledger.",
                  milter.filter_rescan),

        // --- policy service ---------------------------------------------------
        RG_GLOBAL("policy.socket", socket, "unix:/var/spool/postfix/retryguard/policy.sock", "", kNone, 0, 0,
                  "Policy service listen socket (same syntax as milter.socket).", policy.socket),
        RG_GLOBAL("policy.socket_mode", file_mode, "\"0660\"", "octal", kNone, 0, 0777,
                  "Permissions of a UNIX policy socket.", policy.socket_mode),
        RG_GLOBAL("policy.user", string, "retryguard", "", kNone, 1, 32,
                  "Unprivileged user the policy daemon runs as.", policy.user),
        RG_GLOBAL("policy.group", string, "retryguard", "", kNone, 1, 32,
                  "Group of the policy daemon and its socket.", policy.group),
        RG_GLOBAL("policy.deadline", duration, "100ms", "duration", kNone, kMs, 10 * kSec,
                  "Per-request deadline; past it the answer is DUNNO (errors.timeout). Keep it well below "
                  "Postfix's smtpd_policy_service_timeout (100s).",
                  policy.deadline),
        RG_GLOBAL("policy.extra_sockets", socket_list, "[]", "", kNone, 0, 0,
                  "Further listen sockets of the policy service, same syntax as policy.socket (e.g. a "
                  "loopback TCP port beside the UNIX socket).",
                  policy.extra_sockets),
        RG_GLOBAL("policy.request_timeout", duration, "10s", "duration", kNone, kSec, kHour,
                  "Time from a request's first byte to its end; a slower client is disconnected.",
                  policy.request_timeout),
        RG_GLOBAL("policy.worker_threads", integer, "2", "threads", kNone, 1, 256,
                  "Threads that run reloads off the event loop (answers come from memory, on the loop).",
                  policy.worker_threads),
        RG_GLOBAL("policy.idle_timeout", duration, "300s", "duration", kNone, kSec, kHour,
                  "Idle connections are closed after this (Postfix's smtpd_policy_service_max_idle).",
                  policy.idle_timeout),
        RG_GLOBAL("policy.max_line_length", size, "8KiB", "bytes", kNone, 256, 1 * kMiB,
                  "Longest attribute line accepted; longer closes the connection with a warning.",
                  policy.max_line_length),
        RG_GLOBAL("policy.max_attributes", integer, "128", "attributes", kNone, 8, 10000,
                  "Most attributes in one request.", policy.max_attributes),
        RG_GLOBAL("policy.max_request_size", size, "64KiB", "bytes", kNone, 1 * kKiB, 16 * kMiB,
                  "Largest request accepted.", policy.max_request_size),
        RG_GLOBAL("policy.max_connections", integer, "1024", "connections", kNone, 1, 100000,
                  "Concurrent connections at most (Postfix opens one per smtpd process).",
                  policy.max_connections),
        RG_GLOBAL("policy.stages", enum_list, "[rcpt]", "", kStages, 0, 0,
                  "protocol_state values that get a decision; other stages answer DUNNO.", policy.stages),

        // --- per-category ladder thresholds (overridable) ---------------------
        RG_CATEGORY(receiver_config, 0, "3", "24h", "the guidance says contact the recipient past 24-48 h."),
        RG_CATEGORY(receiver_system, 1, "3", "72h",
                    "the guidance says 3-5 days; 72h reports before Postfix's 5d queue lifetime."),
        RG_CATEGORY(greylisting, 2, "3", "4h", "a second attempt normally passes, so hours mean trouble."),
        RG_CATEGORY(rate_limited, 3, "5", "24h", "slow down first; a day of it needs a person."),
        RG_CATEGORY(policy, 4, "3", "24h", "this one is about you; look before the queue gives up."),
        RG_CATEGORY(network, 5, "3", "48h", "retry and watch the spread first."),
        RG_CATEGORY(routing, 6, "3", "24h", "broken DNS rarely fixes itself."),
        RG_CATEGORY_GLOBAL(local, 7, "1", "1h",
                           "your own Postfix (one episode for every destination); nobody else will fix it."),
        RG_CATEGORY(unknown, 8, "3", "48h",
                    "also used by categories without a ladder of their own (mailbox, content, ...)."),

        // --- retry spacing (overridable) ----------------------------------------
        RG_SETTING("retry.min_interval", duration, "30m", "duration", kNone, kMin, 7 * kDay,
                   "Retries to one destination sooner than this are reported (RFC 5321 4.5.4.1: at least 30 "
                   "minutes).",
                   retry.min_interval),
        RG_SETTING("retry.min_interval_after_greylisting", duration, "15m", "duration", kNone, kMin, 7 * kDay,
                   "Retries sooner than this after a greylisting reply are reported.",
                   retry.min_interval_after_greylisting),
        RG_SETTING("retry.stalled_after", duration, "3h", "duration", kNone, 10 * kMin, 30 * kDay,
                   "A deferred recipient with no attempt for this long is reported as stalled (Postfix's "
                   "maximal_backoff_time is 4000s).",
                   retry.stalled_after),
        RG_SETTING("retry.honor_retry_after_hint", boolean, "true", "", kNone, 0, 0,
                   "Also report retries sooner than a delay the receiver asked for (\"try again in 300 "
                   "seconds\").",
                   retry.honor_retry_after_hint),

        // --- repeat offenders (overridable) ----------------------------------
        RG_SETTING("flags.enabled", boolean, "true", "", kNone, 0, 0,
                   "Flag destinations whose receiving system fails again and again.", flags.enabled),
        RG_SETTING("flags.episodes", integer, "3", "episodes", kNone, 1, 1000,
                   "Episodes of the flag categories within flags.period that flag a destination.",
                   flags.episodes),
        RG_SETTING("flags.period", duration, "30d", "duration", kNone, kHour, 3650 * kDay,
                   "Window over which flags.episodes are counted.", flags.period),
        RG_SETTING("flags.deferrals", integer, "0", "deferrals", kNone, 0, 1000000,
                   "Alternatively flag after this many flag-category deferrals within flags.deferrals_window "
                   "(0: off).",
                   flags.deferrals),
        RG_SETTING("flags.deferrals_window", duration, "24h", "duration", kNone, kMin, 365 * kDay,
                   "Window for flags.deferrals.", flags.deferrals_window),
        RG_SETTING("flags.ttl", duration, "30d", "duration", kNone, kHour, 3650 * kDay,
                   "A flag expires this long after the episode that set it (or by `retryguard flags clear`).",
                   flags.ttl),
        RG_SETTING("flags.categories", enum_list, "[receiver_config]", "", kCategories, 0, 0,
                   "Categories whose episodes count towards a flag.", flags.categories),

        // --- re-injection (the lookup keys are global: one lookup per message) -----
        RG_SETTING("reinjection.action", enumeration, "reject", "", kReinjectionActions, 0, 0,
                   "What the milter does with a resend of a message still retrying.", reinjection.action),
        RG_GLOBAL_SETTING("reinjection.match_by", enum_list, "[message_id, fingerprint]", "", kMatches, 1, 2,
                          "How a resend is recognised: same Message-ID, same content fingerprint, or both.",
                          reinjection.match_by),
        RG_GLOBAL_SETTING("reinjection.fingerprint.parts", enum_list, "[sender, subject, body]", "", kParts,
                          1, 3, "Message parts the content fingerprint is built from.",
                          reinjection.fingerprint_parts),
        RG_GLOBAL_SETTING("reinjection.fingerprint.body_limit", size, "1MiB", "bytes", kNone, 1 * kKiB,
                          64 * kMiB, "Body bytes hashed at most (normalised body).",
                          reinjection.fingerprint_body_limit),
        RG_GLOBAL_SETTING(
            "reinjection.fingerprint.subject_ignore", regex, "\"\"", "", kNone, 0, 0,
            "RE2 pattern whose matches are removed from the (lower-cased) subject before hashing, e.g. "
            "a tag a gateway adds ('^\\[ext\\] '); empty: none. Reply prefixes are best kept: without "
            "them a reply could hash like the message it answers.",
            reinjection.subject_ignore),
        RG_SETTING("reinjection.tag_header", string, "X-Retryguard-Resend", "", kNone, 1, 64,
                   "Header added when reinjection.action is tag.", reinjection.tag_header),
        RG_SETTING(
            "reinjection.reject_text", string,
            "\"Not accepted again: a copy for <{recipient}> is already queued as {original}{on_host} for "
            "{destination}, retrying since {since} after \\\"{reply}\\\", next retry about "
            "{next_retry}{more}; "
            "the queue keeps retrying it, do not resend\"",
            "", kNone, 1, 400,
            "Reply text of a refused resend (the milter's reply, with milter.reject_code). "
            "Placeholders: {recipient} {original} {on_host} (\" on HOST\", the host holding the copy, or "
            "nothing) {destination} {reply} {since} {next_retry} {more} (\" (and N more recipient(s))\" or "
            "nothing).",
            reinjection.reject_text),

        // --- policy actions (overridable) -------------------------------------
        RG_SETTING("actions.watch", policy_action, "DUNNO", "", kVerbs, 0, 0,
                   "Policy answer for new mail to a destination in `watch`.", actions.watch),
        RG_SETTING("actions.escalated", policy_action,
                   "\"WARN retryguard: {domain} escalated ({category}) since {since}: {reply}\"", "", kVerbs,
                   0, 0, "Policy answer for new mail to an escalated destination.", actions.escalated),
        RG_SETTING("actions.flagged", policy_action,
                   "\"INFO retryguard: {domain} flagged as consistently unreliable\"", "", kVerbs, 0, 0,
                   "Policy answer for new mail to a flagged destination.", actions.flagged),
        RG_SETTING("actions.local_incident", policy_action,
                   "\"WARN retryguard: local outbound problem suspected ({category})\"", "", kVerbs, 0, 0,
                   "Policy answer while a local outbound incident is open.", actions.local_incident),
        RG_SETTING("dry_run", boolean, "false", "", kNone, 0, 0,
                   "Log every verdict but answer DUNNO / accept: try a config without touching mail.",
                   dry_run),

        // --- notices and flushes (core/actions/) --------------------------------
        RG_SETTING("notify.enabled", boolean, "false", "", kNone, 0, 0,
                   "Send the local submitter one \"do not resend\" notice on the first deferral of a message "
                   "whose category is in notify.categories (docs/guidance.md, \"Notices and flushes\").",
                   notify.enabled),
        RG_SETTING(
            "notify.categories", enum_list, "[receiver_config, receiver_system]", "", kCategories, 0, 0,
            "Categories whose first deferral is worth a notice: problems the guidance says to wait out.",
            notify.categories),
        RG_GLOBAL("notify.from", string, "\"Mail Delivery System <MAILER-DAEMON>\"", "", kNone, 1, 200,
                  "From: header of a notice (the envelope sender is always the null sender).", notice.from),
        RG_GLOBAL(
            "notify.subject", string,
            "\"Delayed, do not resend: your message to {destination} is queued and retried\"", "", kNone, 1,
            200,
            "Subject of a notice. Placeholders as notify.template; outside text in it is cleaned and cut.",
            notice.subject),
        RG_GLOBAL(
            "notify.template", string,
            "\"Your message {queue_id} to {destination} has not been delivered yet.\\n\\nDelayed "
            "recipient(s):\\n{recipients}\\n\\n{reply_from}:\\n{reply}\\n\\nThis is a problem "
            "{side} ({category}). Your message stays in our queue and is retried "
            "automatically until {expiry}; you do not need to do anything.\\n\\nPlease do not send it "
            "again: a new copy would not get through any sooner, and a resend of a message that is still "
            "queued is refused.\\n\\n{escalation}\\n\"",
            "", kNone, 1, 8000,
            "Body of a notice (line breaks allowed). Placeholders: {queue_id} {destination} {recipients} "
            "(one per line) {reply} (quoted, wrapped) {reply_from} (who gave the reply: \"The receiving mail "
            "server answered\", or \"Our own mail server reported\" for a local failure) {side} (\"on the "
            "receiving side\", or \"of our own mail server\") {category} {since} {expiry} {escalation} (a "
            "sentence) {sender}.",
            notice.body),
        RG_SETTING(
            "flush.enabled", boolean, "true", "", kNone, 0, 0,
            "When a destination in watch or escalate delivers again, ask Postfix to retry its deferred "
            "mail at once (postqueue -i QUEUE_ID for each).",
            flush.enabled),
        RG_SETTING("flush.min_interval", duration, "10m", "duration", kNone, 0, 7 * kDay,
                   "At most one flush per destination within this time.", flush.min_interval),
        RG_GLOBAL("flush.max_messages", integer, "1000", "messages", kNone, 1, 100000,
                  "Queue ids flushed at most per recovery (the rest wait for their normal retry).",
                  flush_max_messages),
        RG_SETTING(
            "flush.probe", boolean, "false", "", kNone, 0, 0,
            "For an escalated destination, flush one of its queued messages every flush.probe_interval, "
            "so the episode ends as soon as the remote side is fixed.",
            flush.probe),
        RG_SETTING("flush.probe_interval", duration, "30m", "duration", kNone, 30 * kMin, 7 * kDay,
                   "Time between two probes of one destination (RFC 5321: at least 30 minutes).",
                   flush.probe_interval),
        RG_GLOBAL("postfix.sendmail_path", path, "/usr/sbin/sendmail", "", kNone, 1, 4096,
                  "Postfix's sendmail, which sends notices (sendmail -f '' -t).", postfix.sendmail_path),
        RG_GLOBAL("postfix.postqueue_path", path, "/usr/sbin/postqueue", "", kNone, 1, 4096,
                  "Postfix's postqueue, which flushes (postqueue -i QUEUE_ID; Postfix 2.4 or later).",
                  postfix.postqueue_path),
        RG_GLOBAL("postfix.config_directory", path, "\"\"", "", kNone, 0, 4096,
                  "Configuration directory of the Postfix instance (sendmail -C, postqueue -c); empty: the "
                  "default instance. Postfix lets a user other than root name a directory only when the "
                  "default main.cf lists it in alternate_config_directories or multi_instance_directories.",
                  postfix.config_directory),
        RG_GLOBAL("postfix.maximal_queue_lifetime", duration, "5d", "duration", kNone, kHour, 100 * kDay,
                  "Postfix's maximal_queue_lifetime: a notice says the message is retried until its arrival "
                  "plus this.",
                  postfix.maximal_queue_lifetime),
        RG_GLOBAL("postfix.command_timeout", duration, "10s", "duration", kNone, kSec, 10 * kMin,
                  "A sendmail or postqueue run taking longer is killed and counted as failed.",
                  postfix.command_timeout),

        // --- spread detection --------------------------------------------------
        RG_GLOBAL("spread.enabled", boolean, "true", "", kNone, 0, 0,
                  "Tell a local outbound problem from remote ones.", spread.enabled),
        RG_GLOBAL("spread.window", duration, "15m", "duration", kNone, kMin, 24 * kHour,
                  "Window in which deferrals of one category are counted across destinations.",
                  spread.window),
        RG_GLOBAL("spread.min_destinations", integer, "10", "destinations", kNone, 2, 100000,
                  "Distinct destinations (by MX host) within spread.window that open a local incident.",
                  spread.min_destinations),
        RG_GLOBAL("spread.quiet_period", duration, "2h", "duration", kNone, kMin, 7 * kDay,
                  "An incident closes after this long without a deferral of its category (longer than "
                  "Postfix's maximal_backoff_time, so retry gaps do not end it), or earlier when its "
                  "destinations deliver again.",
                  spread.quiet_period),
        RG_GLOBAL("spread.categories", enum_list,
                  "[network, routing, policy, receiver_system, local, unknown]", "", kCategories, 0, 0,
                  "Categories watched for spread.", spread.categories),

        // --- error handling ---------------------------------------------------
        RG_GLOBAL("errors.ledger_unavailable", enumeration, "accept", "", kErrorActions, 0, 0,
                  "Ledger unreachable when the milter looks a message up: accept, or tempfail (SMTP "
                  "only; the sendmail path is accepted). Counted and logged. The policy daemon answers from "
                  "memory and never meets it.",
                  errors.ledger_unavailable),
        RG_GLOBAL("errors.timeout", enumeration, "accept", "", kErrorActions, 0, 0,
                  "A deadline passed (milter.deadline, policy.deadline, ledger.redis.timeout).",
                  errors.timeout),
        RG_GLOBAL("errors.internal", enumeration, "accept", "", kErrorActions, 0, 0,
                  "A bug of ours (broken invariant, unexpected exception).", errors.internal),
        RG_GLOBAL("errors.bad_input", enumeration, "accept", "", kErrorActions, 0, 0,
                  "A message we cannot parse (the milter). A policy request the policy daemon cannot parse "
                  "closes its connection instead (docs/policyd.md): Postfix reconnects.",
                  errors.bad_input),

        // --- logging ------------------------------------------------------------
        RG_GLOBAL("log.facility", enumeration, "mail", "", kFacilities, 0, 0,
                  "Syslog facility of verdict lines (mail puts them next to Postfix's).", log.facility),
        RG_GLOBAL("log.ident", string, "retryguard", "", kNone, 1, 32,
                  "Syslog ident; the daemons append /milter or /policyd.", log.ident),
        RG_GLOBAL("log.target", enumeration, "syslog", "", kLogTargets, 0, 0,
                  "syslog, stderr (foreground, systemd) or both.", log.target),
        RG_GLOBAL("log.level", enumeration, "info", "", kLogLevels, 0, 0,
                  "Least severity logged; verdicts are info.", log.level),
        RG_GLOBAL("log.verdicts", string, "\"\"", "", kNone, 0, 512,
                  "Where the daemons write verdict lines: empty for where log.target sends the other lines, "
                  "syslog (log.facility, log.ident), postlog:/path (Postfix's postlogd socket, for "
                  "maillog_file sites), file:/path, stderr or none.",
                  log.verdicts),
        RG_GLOBAL("log.hostname", string, "\"\"", "", kNone, 0, 255,
                  "Host field of lines written to postlog:/path (Postfix writes myhostname there); empty: "
                  "this host's name up to the first dot.",
                  log.hostname),

        // --- metrics --------------------------------------------------------------
        RG_GLOBAL("metrics.enabled", boolean, "true", "", kNone, 0, 0, "Serve Prometheus metrics over HTTP.",
                  metrics.enabled),
        RG_GLOBAL("metrics.listen", host_port, "127.0.0.1:9487", "", kNone, 0, 0,
                  "host:port of the metrics and health endpoint (loopback unless allow_non_loopback).",
                  metrics.listen),
        RG_GLOBAL("metrics.allow_non_loopback", boolean, "false", "", kNone, 0, 0,
                  "Serve metrics.listen on a non-loopback address (the endpoint has no authentication; "
                  "the daemon logs a warning at start).",
                  metrics.allow_non_loopback),
        RG_GLOBAL("metrics.max_connections", integer, "16", "connections", kNone, 1, 1000,
                  "Open metrics/health connections at most; further ones are closed at once and counted.",
                  metrics.max_connections),

        // --- classifier -------------------------------------------------------------
        RG_GLOBAL("classifier.rules", yaml_sequence, "[]", "", kNone, 0, 0,
                  "User classifier rules, applied before the shipped ones (validated by the classifier; "
                  "see docs/classifier.md).",
                  classifier.rules),

        // --- destination rules ---------------------------------------------------
        RG_GLOBAL("destinations", item_list, "[]", "", kNone, 0, 0,
                  "Per-destination rules (a list; see destinations[].*). Each may override every key marked "
                  "overridable.",
                  destinations),
        RG_DEST("domain", string,
                "Exact domain (example.com) or wildcard (*.example.com: any subdomain, not the apex)."),
        RG_DEST("mx", string,
                "Glob on the MX/relay host (mx*.provider.net): one rule for every domain that host serves. "
                "* and ? (may cross dots), [a-z] classes."),
        RG_DEST("contact", string, "Who to reach at the destination; escalation reports carry it."),
    };
    return t;
}

#undef RG_GLOBAL
#undef RG_SETTING
#undef RG_SOURCE
#undef RG_DEST
#undef RG_CATEGORY
#undef RG_CATEGORY_GLOBAL
#undef RG_CATEGORY_KEYS

constexpr std::array<std::string_view, 5> kActionPlaceholders = {"domain", "mx", "category", "since",
                                                                 "reply"};
constexpr std::array<std::string_view, 6> kActionPlaceholdersWithContact = {"domain", "mx",    "category",
                                                                            "since",  "reply", "contact"};
constexpr std::array<std::string_view, 11> kNoticePlaceholders = {
    "queue_id", "destination", "recipients", "reply",      "reply_from", "side",
    "category", "since",       "expiry",     "escalation", "sender"};
constexpr std::array<std::string_view, 8> kRejectPlaceholders = {
    "recipient", "original", "on_host", "destination", "reply", "since", "next_retry", "more"};

}  // namespace

std::span<const Entry> entries() noexcept {
    return table();
}

const Entry* find_entry(std::string_view dotted) noexcept {
    for (const auto& e : table())
        if (e.spec.key == dotted) return &e;
    return nullptr;
}

std::string_view section_doc(std::string_view section) noexcept {
    static constexpr std::array<std::pair<std::string_view, std::string_view>, 18> docs = {{
        {"ledger", "Shared state of the daemons and the CLI."},
        {"sources", "Where the policy daemon reads Postfix's log."},
        {"ingest", "Batching of log events into the ledger."},
        {"milter", "retryguard-milter: refuses manual re-injection."},
        {"policy", "retryguard-policyd: policy delegation (check_policy_service)."},
        {"categories", "Escalation ladder per category: noted -> watch -> escalate -> recovered."},
        {"retry", "Retry spacing checks."},
        {"flags", "Repeat offenders: destinations whose mail system fails again and again."},
        {"reinjection", "Resends of messages Postfix is still retrying."},
        {"actions",
         "Policy answers for new mail to troubled destinations. Verbs: DUNNO, WARN, INFO, PREPEND, "
         "HOLD, DEFER_IF_PERMIT, REJECT; text may use {domain} {mx} {category} {since} {reply} "
         "{contact}."},
        {"notify", "\"Do not resend\" notices to the local submitter of a deferred message."},
        {"flush", "Retrying a destination's deferred mail as soon as it delivers again."},
        {"postfix", "How retryguard runs the local Postfix's sendmail and postqueue."},
        {"spread", "Many destinations failing at once: suspect the local outbound path."},
        {"errors", "What to do when something fails (fail open by default; always counted and logged)."},
        {"log", "Verdict lines in the mail log."},
        {"metrics", "Prometheus metrics and health endpoint."},
        {"classifier", "User rules for the reply classifier."},
    }};
    for (const auto& [name, doc] : docs)
        if (name == section) return doc;
    if (section == "destinations") return "Per-destination overrides; the most specific rule wins.";
    if (section == "dry_run") return "";
    return "";
}

std::span<const std::string_view> placeholders_for(std::string_view key) noexcept {
    if (key == "reinjection.reject_text") return kRejectPlaceholders;
    if (key == "notify.template" || key == "notify.subject") return kNoticePlaceholders;
    if (key.starts_with("actions.")) return kActionPlaceholdersWithContact;
    return kActionPlaceholders;
}

}  // namespace retryguard::config::detail

namespace retryguard::config {

std::string_view key_consumers(std::string_view key) noexcept {
    // Most specific first: a whole key, then its section.
    static constexpr std::array<std::pair<std::string_view, std::string_view>, 29> kConsumers = {{
        {"ledger.retention.prune_interval", "policyd"},
        {"ledger.redis.bulk_load", "cli"},
        {"ledger.retention.", "ledger, policyd, cli"},
        {"ledger.", "ledger"},
        {"sources", "policyd"},
        {"ingest.", "policyd"},
        {"milter.", "milter"},
        {"policy.user", "policyd"},
        {"policy.group", "policyd"},
        {"policy.", "policyd"},
        {"categories.", "engine"},
        {"retry.", "engine"},
        {"flags.", "engine"},
        {"reinjection.", "milter"},
        {"actions.", "policyd"},
        {"dry_run", "engine, milter, policyd"},
        {"notify.", "policyd"},
        {"flush.", "policyd"},
        {"postfix.", "policyd"},
        {"spread.", "engine"},
        {"errors.ledger_unavailable", "milter"},
        {"errors.bad_input", "milter"},
        {"errors.", "milter, policyd"},
        {"log.hostname", "milter"},
        {"log.", "milter, policyd"},
        {"metrics.", "policyd"},
        {"classifier.", "classifier"},
        {"destinations[]", "engine, milter"},
        {"destinations", "engine, milter"},
    }};
    for (const auto& [prefix, who] : kConsumers)
        if (key.starts_with(prefix)) return who;
    return {};
}

}  // namespace retryguard::config

namespace retryguard::config::detail {

std::span<const std::string_view> category_names() noexcept {
    return kCategories;
}
std::span<const std::string_view> action_verbs() noexcept {
    return kVerbs;
}

}  // namespace retryguard::config::detail
