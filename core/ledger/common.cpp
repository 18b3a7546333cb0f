// common.cpp -- the part of the ledger both backends share: identity
// normalisation, event keys (SipHash under the ledger's secret, FNV-1a before
// its horizon) and the secret's stored form, the event -> operation
// translation, names of the ledger's enums, and open_ledger()'s parsing of the
// backend spec. Must never touch a store itself.
#include <algorithm>
#include <array>
#include <atomic>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <mutex>

#include <fmt/format.h>
#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/params.h>
#include <openssl/rand.h>

#include "ledger/internal.hpp"
#include "retryguard/reply/reply.hpp"
#include "retryguard/text/text.hpp"

namespace retryguard {

namespace {

// The helpers write into `out`, reusing its buffer: the ingest path plans
// every event into one Op (plan_ledger_op).
void assign_lower_after_at(std::string& out, std::string_view s) {
    if (s.size() > kMaxIdentityLength) s = s.substr(0, kMaxIdentityLength);
    out.assign(s);
    auto at = out.rfind('@');
    if (at == std::string::npos) return;
    for (std::size_t i = at; i < out.size(); ++i) out[i] = text::ascii_lower(out[i]);
}

void assign_strip_brackets(std::string& out, std::string_view s) {
    s = text::trim(s);
    if (s.size() >= 2 && s.front() == '<' && s.back() == '>') s = text::trim(s.substr(1, s.size() - 2));
    assign_lower_after_at(out, s);
}

// Lower-cased and cut at kMaxIdentityLength: domains and host names as keys.
void assign_lower(std::string& out, std::string_view s) {
    out.assign(s.substr(0, std::min(s.size(), kMaxIdentityLength)));
    for (char& c : out) c = text::ascii_lower(c);
}

void assign_domain_of(std::string& out, std::string_view address) {
    auto at = address.rfind('@');
    if (at == std::string_view::npos) {
        out.clear();
        return;
    }
    auto d = address.substr(at + 1);
    if (!d.empty() && d.back() == '>') d.remove_suffix(1);
    if (!d.empty() && d.back() == '.') d.remove_suffix(1);
    assign_lower(out, d);
}

}  // namespace

std::string normalize_message_id(std::string_view message_id) {
    std::string out;
    assign_strip_brackets(out, message_id);
    return out;
}
std::string normalize_address(std::string_view address) {
    std::string out;
    assign_strip_brackets(out, address);
    return out;
}

std::string domain_of(std::string_view address) {
    std::string out;
    assign_domain_of(out, address);
    return out;
}

std::uint64_t fnv_event_key(const Event& event) noexcept {
    std::uint64_t h = 1469598103934665603ULL;
    auto mix = [&h](std::string_view bytes) {
        for (unsigned char c : bytes) {
            h ^= c;
            h *= 1099511628211ULL;
        }
        h ^= 0xff;  // field separator: ("ab","c") and ("a","bc") differ
        h *= 1099511628211ULL;
    };
    std::array<char, 24> buf{};
    auto r = std::to_chars(buf.data(), buf.data() + buf.size(), to_micros(event.time));
    mix(std::string_view(buf.data(), static_cast<std::size_t>(r.ptr - buf.data())));
    mix(event.host);
    mix(event.program);
    r = std::to_chars(buf.data(), buf.data() + buf.size(), event.pid);
    mix(std::string_view(buf.data(), static_cast<std::size_t>(r.ptr - buf.data())));
    mix(event.text);
    return h;
}

namespace {

std::atomic<std::uint64_t> g_key_fallbacks{0};

// OpenSSL's SipHash (libcrypto is already linked for the milter's content
// fingerprint). The algorithm is fetched once per process; each thread keeps
// one context and re-keys it per event, so hashing allocates nothing.
EVP_MAC* siphash() noexcept {
    static EVP_MAC* const mac = EVP_MAC_fetch(nullptr, "SIPHASH", nullptr);
    return mac;
}

struct MacContext {
    EVP_MAC_CTX* ctx = nullptr;
    MacContext() noexcept {
        if (EVP_MAC* mac = siphash()) ctx = EVP_MAC_CTX_new(mac);
    }
    ~MacContext() { EVP_MAC_CTX_free(ctx); }
    MacContext(const MacContext&) = delete;
    MacContext& operator=(const MacContext&) = delete;
};

void put_le64(unsigned char* out, std::uint64_t v) noexcept {
    for (int i = 0; i < 8; ++i) out[i] = static_cast<unsigned char>(v >> (8 * i));
}

// SipHash-2-4 with a 64-bit result over the fields, each string preceded by
// its length so that no two different events give the same input.
std::optional<std::uint64_t> keyed_event_key(const Event& event, const EventKeyer& keyer) noexcept {
    thread_local MacContext mac;
    if (!mac.ctx) return std::nullopt;
    std::size_t out_size = 8;
    OSSL_PARAM params[] = {OSSL_PARAM_construct_size_t(OSSL_MAC_PARAM_SIZE, &out_size),
                           OSSL_PARAM_construct_end()};
    std::array<unsigned char, 40> head{};
    put_le64(head.data(), static_cast<std::uint64_t>(to_micros(event.time)));
    put_le64(head.data() + 8, static_cast<std::uint64_t>(static_cast<std::int64_t>(event.pid)));
    put_le64(head.data() + 16, event.host.size());
    put_le64(head.data() + 24, event.program.size());
    put_le64(head.data() + 32, event.text.size());
    auto update = [&](std::string_view bytes) {
        return EVP_MAC_update(mac.ctx, reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size()) ==
               1;
    };
    std::array<unsigned char, 8> out{};
    std::size_t written = 0;
    if (EVP_MAC_init(mac.ctx, keyer.secret.data(), keyer.secret.size(), params) != 1 ||
        EVP_MAC_update(mac.ctx, head.data(), head.size()) != 1 || !update(event.host) ||
        !update(event.program) || !update(event.text) ||
        EVP_MAC_final(mac.ctx, out.data(), &written, out.size()) != 1 || written != out.size())
        return std::nullopt;
    std::uint64_t key = 0;
    for (int i = 7; i >= 0; --i) key = (key << 8) | out[static_cast<std::size_t>(i)];
    return key;
}

}  // namespace

std::uint64_t event_key(const Event& event, const EventKeyer& keyer) noexcept {
    if (keyer.horizon && event.time <= *keyer.horizon) return fnv_event_key(event);
    if (auto key = keyed_event_key(event, keyer)) return *key;
    // Fail open: the event is still recorded, with the weaker key, and counted.
    g_key_fallbacks.fetch_add(1, std::memory_order_relaxed);
    return fnv_event_key(event);
}

std::uint64_t event_key_fallbacks() noexcept {
    return g_key_fallbacks.load(std::memory_order_relaxed);
}

std::vector<Category> categories_in(CategorySet set) {
    std::vector<Category> out;
    for (const auto& entry : all_categories())
        if (set & category_bit(entry.category)) out.push_back(entry.category);
    return out;
}

namespace {
constexpr std::array<std::string_view, 8> kMessageStates = {"incoming", "active", "deferred", "hold",
                                                            "requeued", "gone",   "expired",  "rejected"};
constexpr std::array<std::string_view, 4> kRecipientStates = {"pending", "sent", "bounced", "expired"};
constexpr std::array<std::string_view, 2> kDestinationKinds = {"domain", "relay"};

template <typename E, std::size_t N>
std::optional<E> from_table(const std::array<std::string_view, N>& table, std::string_view name) {
    for (std::size_t i = 0; i < N; ++i)
        if (table[i] == name) return static_cast<E>(i);
    return std::nullopt;
}
}  // namespace

std::string_view to_string(MessageState s) noexcept {
    return kMessageStates[static_cast<std::size_t>(s)];
}
std::optional<MessageState> message_state_from_string(std::string_view n) noexcept {
    return from_table<MessageState>(kMessageStates, n);
}
std::string_view to_string(RecipientState s) noexcept {
    return kRecipientStates[static_cast<std::size_t>(s)];
}
std::optional<RecipientState> recipient_state_from_string(std::string_view n) noexcept {
    return from_table<RecipientState>(kRecipientStates, n);
}
std::string_view to_string(DestinationKind k) noexcept {
    return kDestinationKinds[static_cast<std::size_t>(k)];
}
std::optional<DestinationKind> destination_kind_from_string(std::string_view n) noexcept {
    return from_table<DestinationKind>(kDestinationKinds, n);
}

namespace ledger_detail {

bool is_finished(MessageState s) noexcept {
    return s == MessageState::requeued || s == MessageState::gone || s == MessageState::expired ||
           s == MessageState::rejected;
}

Status check_identities(std::span<const MessageIdentity> identities) {
    for (const auto& id : identities) {
        if (id.queue_id.empty())
            return make_error(ErrorKind::invalid_input, "ledger: identity without queue id");
        if (id.queue_id.size() > 64) return make_error(ErrorKind::limit, "ledger: queue id longer than 64");
        if (id.recipients.size() > kMaxRecipientsPerMessage)
            return make_error(ErrorKind::limit, "ledger: more than " +
                                                    std::to_string(kMaxRecipientsPerMessage) +
                                                    " recipients in one identity");
    }
    return {};
}

Status check_query(const PendingCopyQuery& query) {
    if (query.recipients.size() > kMaxRecipientsPerMessage)
        return make_error(ErrorKind::limit, "ledger: more than " + std::to_string(kMaxRecipientsPerMessage) +
                                                " recipients in one lookup");
    return {};
}

std::string key_hex(std::uint64_t key) {
    std::array<char, 17> buf{};
    std::snprintf(buf.data(), buf.size(), "%016llx", static_cast<unsigned long long>(key));
    return std::string(buf.data(), 16);
}

namespace {
bool contains(std::string_view hay, std::string_view needle) {
    return hay.find(needle) != std::string_view::npos;
}

// The host that answered: the reply's "host H[A] said" / "connect to H[A]", else
// relay=H[A] when it names a network peer. Local transports have no relay.
void assign_answering_relay(std::string& out, const Event& e) {
    if (e.reply && !e.reply->remote_host.empty())
        assign_lower(out, e.reply->remote_host);
    else if (!e.relay_addr.empty() && !e.relay_host.empty() && e.relay_host != "none")
        assign_lower(out, e.relay_host);
    else
        out.clear();
}

void assign_bounded_host(std::string& out, std::string_view host) {
    out.assign(host.substr(0, std::min<std::size_t>(host.size(), 255)));
    for (char& c : out)
        if (c <= ' ' || c > '~') c = '?';
}

// `out` cut to at most `max` bytes of `s`.
void assign_cut(std::string& out, std::string_view s, std::size_t max) {
    out.assign(s.substr(0, std::min(s.size(), max)));
}
}  // namespace

std::string bounded_host(std::string_view host) {
    std::string out;
    assign_bounded_host(out, host);
    return out;
}

Op plan(const IngestItem& item, const EventKeyer& keyer) {
    Op op;
    plan_ledger_op(item, keyer, op);
    return op;
}

namespace {
void plan_op(const IngestItem& item, const EventKeyer& keyer, Op& op) {
    const Event& e = item.event;
    op.reset();
    op.key = item.key != 0 ? item.key : event_key(e, keyer);
    op.time = to_micros(e.time);
    assign_cut(op.queue_id, e.queue_id, 64);
    assign_bounded_host(op.host, e.host);
    op.category = item.category;
    if (op.queue_id.empty()) return;  // NOQUEUE and unrelated lines: seen only
    switch (e.kind) {
        case EventKind::pickup:
            op.kind = OpKind::pickup;
            assign_cut(op.other_id, e.orig_queue_id, 64);
            assign_strip_brackets(op.text, e.sender);
            break;
        case EventKind::message_id:
            op.kind = OpKind::message_id;
            assign_strip_brackets(op.text, e.message_id);
            op.resent = e.resent;
            if (op.text.empty()) op.kind = OpKind::none;
            break;
        case EventKind::queue_active:
            op.kind = OpKind::queue_active;
            assign_strip_brackets(op.text, e.sender);
            op.size = e.size;
            op.nrcpt = e.nrcpt;
            break;
        case EventKind::delivery: {
            switch (e.status) {
                case DeliveryStatus::sent: op.outcome = Outcome::sent; break;
                case DeliveryStatus::deferred: op.outcome = Outcome::deferred; break;
                case DeliveryStatus::bounced:
                case DeliveryStatus::undeliverable: op.outcome = Outcome::bounced; break;
                case DeliveryStatus::expired: op.outcome = Outcome::expired; break;
                case DeliveryStatus::none: break;
            }
            assign_strip_brackets(op.recipient, e.recipient);
            if (op.outcome == Outcome::none || op.recipient.empty()) break;
            op.kind = OpKind::delivery;
            assign_domain_of(op.domain, op.recipient);
            assign_answering_relay(op.relay, e);
            op.domain_hash = destination_hash("domain", op.domain);
            op.relay_hash = destination_hash("relay", op.relay);
            assign_cut(op.reason, e.reason, kMaxReplyLength);
            if (e.reply) {
                op.code = e.reply->code;
                if (e.reply->enhanced)
                    fmt::format_to(std::back_inserter(op.enhanced), "{}.{}.{}",
                                   static_cast<unsigned>(e.reply->enhanced->klass),
                                   static_cast<unsigned>(e.reply->enhanced->subject),
                                   static_cast<unsigned>(e.reply->enhanced->detail));
                // Stored as "" when the reply names no stage (to_string says "none").
                if (e.reply->stage != SmtpStage::none) op.stage.assign(to_string(e.reply->stage));
            }
            if (op.enhanced.empty()) assign_cut(op.enhanced, e.dsn, 16);
            break;
        }
        case EventKind::queue_removed: op.kind = OpKind::removed; break;
        case EventKind::expired: op.kind = OpKind::expired; break;
        case EventKind::queue_operation:
            if (contains(e.text, "placed on hold") || e.action == "hold" || e.action == "placed on hold")
                op.kind = OpKind::hold;
            else if (contains(e.text, "released from hold") || e.action == "release" ||
                     e.action == "released from hold")
                op.kind = OpKind::release;
            else if (contains(e.text, ": removed") || e.action == "removed")
                op.kind = OpKind::removed;
            break;
        case EventKind::milter_action:
            if (contains(e.action, "hold"))
                op.kind = OpKind::hold;
            else if (contains(e.action, "reject") || contains(e.action, "discard"))
                op.kind = OpKind::rejected;
            break;
        case EventKind::smtpd_client: op.kind = OpKind::client; break;
        default: break;
    }
}
}  // namespace

void fresh_journal_entry(std::span<const IngestItem> batch, BatchJournal whole,
                         const std::vector<bool>& fresh, std::string& out) {
    out.assign(kJournalBatchTag);
    std::vector<std::string_view> parts;
    const bool split = whole.items == batch.size() && split_journal_batch(whole.entry, batch.size(), parts);
    for (std::size_t i = 0; i < batch.size() && i < fresh.size(); ++i) {
        if (!fresh[i]) continue;
        if (split)
            out += parts[i];
        else
            append_journal_batch_item(out, batch[i]);
    }
}

std::string encode_event_keyer(const EventKeyer& keyer) {
    std::string out = "1 ";
    static constexpr char kHex[] = "0123456789abcdef";
    for (unsigned char b : keyer.secret) {
        out += kHex[b >> 4];
        out += kHex[b & 0xf];
    }
    out += ' ';
    out += keyer.horizon ? std::to_string(to_micros(*keyer.horizon)) : std::string("-");
    return out;
}

std::optional<EventKeyer> decode_event_keyer(std::string_view stored) {
    EventKeyer keyer;
    constexpr std::size_t kHexDigits = 2 * std::tuple_size_v<decltype(keyer.secret)>;
    if (stored.size() < 3 + kHexDigits + 1 || !stored.starts_with("1 ") || stored[2 + kHexDigits] != ' ')
        return std::nullopt;
    auto digit = [](char c) -> int {
        if (c >= '0' && c <= '9') return c - '0';
        if (c >= 'a' && c <= 'f') return c - 'a' + 10;
        return -1;
    };
    for (std::size_t i = 0; i < keyer.secret.size(); ++i) {
        int hi = digit(stored[2 + 2 * i]), lo = digit(stored[3 + 2 * i]);
        if (hi < 0 || lo < 0) return std::nullopt;
        keyer.secret[i] = static_cast<unsigned char>(hi << 4 | lo);
    }
    auto horizon = stored.substr(3 + kHexDigits);
    if (horizon == "-") return keyer;
    std::int64_t us = 0;
    auto [p, ec] = std::from_chars(horizon.data(), horizon.data() + horizon.size(), us);
    if (ec != std::errc{} || p != horizon.data() + horizon.size()) return std::nullopt;
    keyer.horizon = from_micros(us);
    return keyer;
}

std::optional<EventKeyer> new_event_keyer(std::optional<TimePoint> horizon) {
    EventKeyer keyer;
    if (RAND_bytes(keyer.secret.data(), static_cast<int>(keyer.secret.size())) != 1) return std::nullopt;
    keyer.horizon = horizon;
    return keyer;
}

LedgerCounters Counters::snapshot() const noexcept {
    LedgerCounters c;
    c.operations = operations.load(std::memory_order_relaxed);
    c.failures = failures.load(std::memory_order_relaxed);
    c.unavailable = unavailable.load(std::memory_order_relaxed);
    c.reconnects = reconnects.load(std::memory_order_relaxed);
    c.duplicates = duplicates.load(std::memory_order_relaxed);
    c.events = events.load(std::memory_order_relaxed);
    c.shared_reads = shared_reads.load(std::memory_order_relaxed);
    return c;
}

std::function<void(std::string_view)> default_warn() {
    // At most one line per second reaches stderr so an outage cannot flood the log;
    // the counters keep the exact numbers.
    struct State {
        std::mutex mutex;
        std::chrono::steady_clock::time_point last{};
        std::uint64_t suppressed = 0;
    };
    auto state = std::make_shared<State>();
    return [state](std::string_view message) {
        std::lock_guard lock(state->mutex);
        auto now = std::chrono::steady_clock::now();
        if (now - state->last < std::chrono::seconds(1)) {
            ++state->suppressed;
            return;
        }
        state->last = now;
        if (state->suppressed)
            std::fprintf(stderr, "retryguard ledger: %.*s (%llu similar suppressed)\n",
                         static_cast<int>(message.size()), message.data(),
                         static_cast<unsigned long long>(state->suppressed));
        else
            std::fprintf(stderr, "retryguard ledger: %.*s\n", static_cast<int>(message.size()),
                         message.data());
        state->suppressed = 0;
    };
}

}  // namespace ledger_detail

void plan_ledger_op(const IngestItem& item, const EventKeyer& keyer, LedgerOp& op) {
    ledger_detail::plan_op(item, keyer, op);
}

Status LedgerLookup::for_each_open_identity(
    const std::function<void(std::string_view message_id, std::string_view fingerprint)>&) {
    return make_error(ErrorKind::unavailable,
                      "ledger (" + std::string(backend()) + "): cannot list its identities");
}

Result<std::unique_ptr<IdentityStream>> LedgerLookup::open_identity_stream() {
    return make_error(ErrorKind::unavailable,
                      "ledger (" + std::string(backend()) + "): has no stream of identity changes");
}

Result<BulkLoadClaim> LedgerIngest::bulk_load_claim(std::string_view) {
    return make_error(ErrorKind::unavailable, "ledger: a bulk load needs the Redis backend");
}

Result<BulkLoadStats> LedgerIngest::bulk_load_copy(const std::string&, std::string_view) {
    return make_error(ErrorKind::unavailable, "ledger: a bulk load needs the Redis backend");
}

Result<LedgerIngest::BulkLoadFeed> LedgerIngest::bulk_load_early(const std::string&, std::string_view) {
    return make_error(ErrorKind::unavailable, "ledger: a bulk load needs the Redis backend");
}

Status LedgerIngest::bulk_load_release(std::string_view) {
    return make_error(ErrorKind::unavailable, "ledger: a bulk load needs the Redis backend");
}

Result<std::unique_ptr<Ledger>> open_ledger(const LedgerOptions& options) {
    std::string_view spec = text::trim(options.spec);
    if (spec.empty()) return make_error(ErrorKind::config, "ledger: empty backend spec");
    if (spec.starts_with("redis+unix:")) {
        auto path = spec.substr(11);
        if (path.empty()) return make_error(ErrorKind::config, "ledger: redis+unix: needs a socket path");
        return ledger_detail::open_redis_ledger({}, 0, 0, std::string(path), options);
    }
    if (spec.starts_with("redis://")) {
        auto rest = spec.substr(8);
        int db = 0;
        if (auto slash = rest.find('/'); slash != std::string_view::npos) {
            auto dbs = rest.substr(slash + 1);
            auto [p, ec] = std::from_chars(dbs.data(), dbs.data() + dbs.size(), db);
            if (ec != std::errc{} || p != dbs.data() + dbs.size() || db < 0 || db > 1000)
                return make_error(ErrorKind::config,
                                  "ledger: bad Redis database number in '" + options.spec + "'");
            rest = rest.substr(0, slash);
        }
        int port = 6379;
        std::string host(rest);
        if (auto colon = rest.rfind(':');
            colon != std::string_view::npos && rest.find(']') == std::string_view::npos) {
            auto ps = rest.substr(colon + 1);
            auto [p, ec] = std::from_chars(ps.data(), ps.data() + ps.size(), port);
            if (ec != std::errc{} || p != ps.data() + ps.size() || port <= 0 || port > 65535)
                return make_error(ErrorKind::config, "ledger: bad Redis port in '" + options.spec + "'");
            host = std::string(rest.substr(0, colon));
        }
        if (host.empty()) host = "127.0.0.1";
        return ledger_detail::open_redis_ledger(host, port, db, {}, options);
    }
    if (spec.starts_with("sqlite://"))
        spec.remove_prefix(9);
    else if (spec.starts_with("sqlite:"))
        spec.remove_prefix(7);
    else if (spec.find("://") != std::string_view::npos)
        return make_error(ErrorKind::config,
                          "ledger: unknown backend in '" + options.spec + "' (sqlite: or redis://)");
    if (spec.empty()) return make_error(ErrorKind::config, "ledger: sqlite: needs a file path");
    return ledger_detail::open_sqlite_ledger(std::string(spec), options);
}

}  // namespace retryguard
