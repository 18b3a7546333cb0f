// config.hpp -- the retryguard configuration: one declared table of keys
// (core/config/table.cpp) drives parsing, validation, the generated reference
// (docs/configuration.md) and the shipped default file (conf/retryguard.yaml).
//
// A load builds an immutable snapshot (std::shared_ptr<const Config>); a
// ConfigHolder swaps snapshots atomically on reload and keeps the running one
// when a reload fails. Nothing here throws: YAML and RE2 errors come back as
// diagnostics with file:line:column. Nothing here decides policy: the rules
// engine, the milter and the policy daemon read the values.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "retryguard/category.hpp"

// yaml-cpp and RE2 stay out of this header: the snapshot holds their objects
// behind pointers (built and read in core/config), so that a program reading
// the configuration does not compile either library's headers.
namespace YAML {
class Node;
}
namespace re2 {
class RE2;
}

namespace retryguard::config {

// Durations carry milliseconds so per-request deadlines ("100ms") and day-long
// thresholds ("3d") share one type.
using Duration = std::chrono::milliseconds;

// A place in a YAML file, 0-based as yaml-cpp's YAML::Mark (errors print it
// 1-based as file:line:column).
struct TextMark {
    int pos = 0;
    int line = 0;
    int column = 0;
};

// Every MX glob of `destinations:` compiled into one RE2::Set (defined in
// core/config/internal.hpp).
struct MxPatternSet;

// ---------------------------------------------------------------------------
// Value types that are more than a number or a string.

// OpenDKIM-style socket spec: unix:/path, local:/path, inet:port@host, inet6:port@host.
struct SocketSpec {
    enum class Kind { unix_path, inet, inet6 };
    Kind kind = Kind::unix_path;
    std::string path;  // unix_path
    std::string host;  // inet, inet6 (without brackets)
    std::uint16_t port = 0;
    std::string text;  // as written, for logs and explain
};

// host:port or [v6]:port, for the metrics listener and UDP syslog sources.
struct HostPort {
    std::string host;
    std::uint16_t port = 0;
    std::string text;
};

// A Postfix access(5) action as the policy daemon answers it.
struct PolicyAction {
    enum class Verb { dunno, warn, info, prepend, hold, defer_if_permit, reject };
    Verb verb = Verb::dunno;
    std::string text;  // may hold {placeholders}; see docs/configuration.md
    std::string to_string() const;
};

enum class LedgerBackend { sqlite, redis };
enum class SourceType { file, journald, syslog_unix, syslog_udp };
enum class SourceStart { end, beginning };
enum class ReinjectionAction { reject, hold, drop_duplicates, tag, log_only };
enum class ReinjectionMatch { message_id, fingerprint };
enum class FingerprintPart { sender, subject, body };
enum class ErrorAction { accept, tempfail };
enum class SyslogFacility {
    mail,
    daemon,
    user,
    local0,
    local1,
    local2,
    local3,
    local4,
    local5,
    local6,
    local7
};
enum class LogTarget { syslog, stderr_, both };
enum class LogLevel { debug, info, notice, warning, error };
// The syslog(3) facility code (LOG_MAIL, ...) and priority (LOG_INFO, ...).
int syslog_facility_code(SyslogFacility f) noexcept;
int syslog_priority(LogLevel l) noexcept;
std::string_view to_string(SyslogFacility f) noexcept;
enum class PolicyStage { connect, helo, mail, rcpt, data, end_of_message, vrfy, etrn };

// ---------------------------------------------------------------------------
// Settings a destination rule may override ("overridable" in the key table).

struct CategoryThresholds {
    std::int64_t watch_after_deferrals = 0;  // deferrals in one episode before `watch`
    Duration escalate_after{0};              // episode age before `escalate`
};

// Categories that run the per-destination ladder have their own thresholds;
// the others (permanent failures, per-recipient mailbox trouble, content,
// expired) borrow `unknown`'s, see thresholds().
inline constexpr std::array<Category, 9> kLadderCategories = {
    Category::receiver_config, Category::receiver_system, Category::greylisting,
    Category::rate_limited,    Category::policy,          Category::network,
    Category::routing,         Category::local,           Category::unknown};

struct Settings {
    std::array<CategoryThresholds, kLadderCategories.size()> categories{};
    const CategoryThresholds& thresholds(Category c) const;

    struct Retry {
        Duration min_interval{0};
        Duration min_interval_after_greylisting{0};
        Duration stalled_after{0};
        bool honor_retry_after_hint = true;
    } retry;

    struct Flags {
        bool enabled = true;
        std::int64_t episodes = 0;
        Duration period{0};
        std::int64_t deferrals = 0;
        Duration deferrals_window{0};
        Duration ttl{0};
        std::vector<Category> categories;
    } flags;

    struct Reinjection {
        ReinjectionAction action = ReinjectionAction::reject;
        std::vector<ReinjectionMatch> match_by;
        std::vector<FingerprintPart> fingerprint_parts;
        std::uint64_t fingerprint_body_limit = 0;  // bytes
        std::string subject_ignore;                // RE2 pattern, validated at load
        std::shared_ptr<const re2::RE2> subject_ignore_re;
        std::string tag_header;
        std::string reject_text;
    } reinjection;

    struct Actions {
        PolicyAction watch, escalated, flagged, local_incident;
    } actions;

    // "Do not resend" notices to local submitters (core/actions/).
    struct Notify {
        bool enabled = false;
        std::vector<Category> categories;
    } notify;

    // Flushing a destination's deferred mail when it delivers again.
    struct Flush {
        bool enabled = true;
        Duration min_interval{0};
        bool probe = false;
        Duration probe_interval{0};
    } flush;

    bool dry_run = false;
    std::string contact;  // only destination rules set it; escalation reports carry it
};

// ---------------------------------------------------------------------------
// Global-only parts.

struct SourceConfig {
    SourceType type = SourceType::file;
    std::string name;  // stable id (FollowerPosition::source); derived when not given
    std::string path;
    std::optional<HostPort> address;
    bool allow_non_loopback = false;
    std::string journal_match;
    SourceStart start = SourceStart::end;
    std::uint64_t max_line_length = 0;
    TextMark mark;  // where the entry starts (0-based, as yaml-cpp gives it)
};

// "localhost", 127.0.0.0/8 or ::1: the addresses the listeners take without
// an allow_non_loopback.
bool is_loopback(std::string_view host);

// The name a source gets when none is given: "file:PATH", "journal:MATCH",
// "syslog:unix:PATH", "syslog:udp:HOST:PORT".
std::string default_source_name(const SourceConfig& s);

// The id a source's follower position is stored under (FollowerPosition::source)
// and `status` shows: its `name`, so hosts of a fleet that follow the same path
// keep their own positions in a shared ledger by naming their sources. A file
// source's default name is "file:PATH"; a journald source given no name keeps
// the journal follower's own id, "journal", so positions saved before still resume.
std::string position_id(const SourceConfig& s);

// Whether a source resumes from a stored position (files, the journal); syslog
// datagrams cannot be read twice.
bool resumes_from_position(const SourceConfig& s) noexcept;

struct DaemonSocket {
    SocketSpec socket;
    std::uint32_t socket_mode = 0660;
    std::string user;
    std::string group;
};

// A `destinations:` entry.
struct DestinationRule {
    enum class Kind { exact, wildcard, mx };
    Kind kind = Kind::exact;
    std::string pattern;  // lower-case; wildcard stored as written ("*.example.com")
    std::string suffix;   // wildcard: ".example.com"
    std::shared_ptr<const re2::RE2> mx_re;
    std::size_t literal_chars = 0;             // mx: characters that are not glob metacharacters
    std::size_t index = 0;                     // position in `destinations:`
    int line = 0, column = 0;                  // 1-based
    Settings settings;                         // global settings with this rule's overrides applied
    std::vector<std::string> overridden_keys;  // table keys this rule sets
};

// Which rule applied to a destination and why. Valid while the snapshot lives.
struct Resolution {
    const Settings* settings = nullptr;                // never null
    const DestinationRule* rule = nullptr;             // null: the global settings
    std::vector<const DestinationRule*> also_matched;  // lower-precedence matches
    std::string domain, mx;                            // as compared: lower case, no trailing dot
    const struct Config* config = nullptr;
    // One line for logs and explain; built on demand so the request path does not pay for it.
    std::string reason() const;
};

struct Config {
    std::string source;                                 // file it came from ("<string>" for tests)
    std::chrono::system_clock::time_point loaded_at{};  // wall clock, for `retryguard status` only

    struct Ledger {
        LedgerBackend backend = LedgerBackend::sqlite;
        std::string sqlite_path;
        Duration sqlite_busy_timeout{0};
        bool sqlite_gather_wal_writes = true;
        std::string redis_address;  // host:port or unix:/path
        std::string redis_key_prefix;
        Duration redis_timeout{0};
        Duration redis_reconnect_max_backoff{0};
        std::int64_t redis_database = 0;
        std::string redis_password_file;
        bool redis_bulk_load = true;
        Duration retention_events{0};
        Duration retention_finished_messages{0};
        Duration retention_episodes{0};
        Duration retention_prune_interval{0};
    } ledger;

    std::vector<SourceConfig> sources;
    struct Ingest {
        std::int64_t batch_max_events = 0;
        Duration batch_max_delay{0};
    } ingest;

    struct Milter : DaemonSocket {
        Duration deadline{0};
        Duration timeout{0};
        std::string reject_code, reject_xcode;
        Duration minimal_backoff{0}, maximal_backoff{0};
        std::int64_t record_queue = 0;
        Duration filter_rescan{0};
    } milter;

    struct Policy : DaemonSocket {
        Duration deadline{0};
        std::vector<std::string> extra_sockets;  // validated socket specs
        Duration request_timeout{0};
        std::int64_t worker_threads = 0;
        Duration idle_timeout{0};
        std::uint64_t max_line_length = 0;
        std::int64_t max_attributes = 0;
        std::uint64_t max_request_size = 0;
        std::int64_t max_connections = 0;
        std::vector<PolicyStage> stages;
    } policy;

    struct Spread {
        bool enabled = true;
        Duration window{0};
        std::int64_t min_destinations = 0;
        Duration quiet_period{0};
        std::vector<Category> categories;
    } spread;

    struct Errors {
        ErrorAction ledger_unavailable = ErrorAction::accept;
        ErrorAction timeout = ErrorAction::accept;
        ErrorAction internal = ErrorAction::accept;
        ErrorAction bad_input = ErrorAction::accept;
    } errors;

    struct Log {
        SyslogFacility facility = SyslogFacility::mail;
        std::string ident;
        LogTarget target = LogTarget::syslog;
        LogLevel level = LogLevel::info;
        std::string verdicts;  // verdict log target ("" = as log.target); see parse_verdict_log_target
        std::string hostname;  // host field of postlog lines ("" = this host's short name)
    } log;

    // The text of a notice (the per-destination switches are in Settings).
    struct NoticeText {
        std::string from;
        std::string subject;
        std::string body;  // may hold line breaks
    } notice;
    std::int64_t flush_max_messages = 0;

    // How retryguard reaches the local Postfix (notices, flushes).
    struct Postfix {
        std::string sendmail_path;
        std::string postqueue_path;
        std::string config_directory;  // -C / -c DIR; "" = the default instance
        Duration maximal_queue_lifetime{0};
        Duration command_timeout{0};
    } postfix;

    struct Metrics {
        bool enabled = true;
        HostPort listen;
        bool allow_non_loopback = false;
        std::int64_t max_connections = 0;
    } metrics;

    // User classifier rules: kept as YAML for the classifier module to
    // validate, with where they came from so its errors carry file:line:col.
    struct Classifier {
        std::shared_ptr<const YAML::Node> rules;  // a sequence (possibly empty), never null after a load
        TextMark mark;                            // 0-based, as yaml-cpp gives it
        std::string file;
    } classifier;

    Settings global;
    std::vector<DestinationRule> destinations;

    // Most specific rule for a destination: exact domain > longest `*.` wildcard
    // > MX-host group (most literal characters, then first in the file) > global.
    // `mx_host` may be empty when the relay is not known yet.
    Resolution resolve(std::string_view domain, std::string_view mx_host = {}) const;

    // Lookup indexes into `destinations`, built by the loader.
    std::unordered_map<std::string, std::size_t> exact_rules;     // "example.com"
    std::unordered_map<std::string, std::size_t> wildcard_rules;  // ".example.com"
    std::vector<std::size_t> mx_rules;  // by literal_chars descending, then file order
    // Every MX glob in one automaton; pattern i of the set is mx_rules[i].
    std::shared_ptr<const MxPatternSet> mx_set;  // core/config/internal.hpp
};

// ---------------------------------------------------------------------------
// The key table.

enum class ValueType {
    duration,
    size,
    integer,
    boolean,
    enumeration,
    enum_list,
    string,
    path,
    regex,
    socket,
    host_port,
    redis_address,
    file_mode,
    policy_action,
    yaml_sequence,  // kept as a node (classifier.rules)
    socket_list,    // a list of socket specs
    item_list,      // a sequence of maps whose keys are `key[].x` (sources, destinations)
};
std::string_view to_string(ValueType t) noexcept;

enum class Scope {
    global,            // top-level only
    overridable,       // top-level and in destination rules
    source_item,       // sources[].x
    destination_item,  // destinations[].domain / mx / contact
};

struct KeySpec {
    std::string_view key;  // dotted, lower-case with underscores
    ValueType type;
    Scope scope;
    std::string_view default_yaml;              // the default as YAML text ("" = none/unset)
    std::string_view unit;                      // "" when none
    std::span<const std::string_view> allowed;  // enums
    std::int64_t min = 0, max = 0;              // integers; durations in ms and sizes in bytes (0,0 = none)
    bool bare_seconds = false;                  // durations: a bare number means seconds
    std::string_view doc;                       // one line
};

std::span<const KeySpec> key_table() noexcept;
const KeySpec* find_key(std::string_view dotted) noexcept;

// Who reads a key, comma-separated: ledger (every program, through
// open_runtime), engine (the rules engine: policyd and the CLI), classifier,
// policyd, milter, cli. Declared per section in table.cpp, with exceptions per
// key; tests/unit/config_consumers_test.cpp proves each key has an effect there.
std::string_view key_consumers(std::string_view key) noexcept;

// ---------------------------------------------------------------------------
// Loading.

struct Diagnostic {
    std::string file;
    int line = 0;    // 1-based; 0 = no position (e.g. unreadable file)
    int column = 0;  // 1-based
    std::string message;
    std::string to_string() const;  // "file:line:col: error: message"
};

struct LoadOutcome {
    std::shared_ptr<const Config> config;  // null when there are errors
    std::vector<Diagnostic> errors;        // every error found, in file order
    std::set<std::string> keys_present;    // table keys the file sets
    bool ok() const noexcept { return config != nullptr; }
};

inline constexpr std::size_t kMaxConfigBytes = 4 * 1024 * 1024;

// `overrides` are Postfix-style "key=value" settings (`-o` on every program's
// command line): the dotted key of the table, the value as it would be written
// in the file (lists and `sources` in YAML flow syntax: [a, b]). They replace
// what the file says and are validated the same way; their errors name the
// override ("-o key=value: error: ...").
LoadOutcome load_string(std::string_view yaml_text, std::string file_name = "<string>",
                        const std::vector<std::string>& overrides = {});
LoadOutcome load_file(const std::string& path, const std::vector<std::string>& overrides = {});
// The built-in defaults (every key at its table default, no destinations).
std::shared_ptr<const Config> defaults();

// Text forms shared by docs, explain and tests.
std::string format_duration(Duration d);
std::string format_size(std::uint64_t bytes);
// Parse one value as the table's parser would (for tests and tools).
std::optional<Duration> parse_duration(std::string_view text, bool bare_seconds, std::string* why = nullptr);
std::optional<std::uint64_t> parse_size(std::string_view text, std::string* why = nullptr);
std::optional<SocketSpec> parse_socket(std::string_view text, std::string* why = nullptr);

// The value of an overridable key in a Settings, in canonical text.
std::string show_setting(const Settings& s, std::string_view key);

// Generated documents.
std::string render_docs_markdown();
std::string render_default_yaml();

// ---------------------------------------------------------------------------
// Atomic snapshot holder for the daemons.

class ConfigHolder {
  public:
    // `overrides` (see load_string) are applied again on every reload.
    explicit ConfigHolder(std::shared_ptr<const Config> initial, std::vector<std::string> overrides = {});
    // The snapshot to use for one unit of work; keep it until the work is done.
    std::shared_ptr<const Config> current() const noexcept { return current_.load(); }
    // Checks a loaded snapshot beyond the file itself (e.g. compiles the
    // classifier rules as the daemons do); returns its problems.
    using Validator = std::function<std::vector<Diagnostic>(const Config&)>;
    // Load `path` (default: the current snapshot's source) and swap it in when
    // it is valid and `validate` (when given) finds nothing. On errors the
    // running snapshot stays, whole, and the errors return.
    std::vector<Diagnostic> reload(const std::string& path = {}, const Validator& validate = {});
    std::uint64_t generation() const noexcept { return generation_.load(); }

  private:
    std::atomic<std::shared_ptr<const Config>> current_;
    std::atomic<std::uint64_t> generation_{1};
    std::vector<std::string> overrides_;
};

}  // namespace retryguard::config
