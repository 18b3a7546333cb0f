// redis_bulk.cpp -- the bulk load of an empty Redis ledger (docs/ledger.md,
// "Bulk load into an empty Redis ledger"). `retryguard import` records the
// files in a temporary SQLite ledger (the fast path, with the Redis ledger's
// event-key secret) and this copies its tables into Redis once, pipelined:
// one write per message, recipient and destination instead of the ingest
// script's work per event, which bounds an import into Redis by the server's
// single thread (docs/performance.md, "Redis import").
//
// The keys and values are those ingest.lua, verdict_effects.lua and the other
// scripts write (the table in docs/ledger.md, "Redis backend"), each with its
// TTL. <prefix>bulk-load (bulk_load.lua) names the owner from the claim until
// the copy is complete: a process killed meanwhile leaves it, and the next
// import on the same host, seeing its owner gone, removes every key of the
// prefix and starts again, so a kill and a rerun give what one clean run
// gives. Another writer of the same prefix during the copy is not detected;
// one found before it (the ledger no longer empty) ends the bulk load and the
// import records the files batch by batch.
#include <signal.h>
#include <sqlite3.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <charconv>
#include <condition_variable>
#include <deque>
#include <map>
#include <set>
#include <span>
#include <system_error>
#include <thread>

#include "ledger/redis_ledger.hpp"

namespace retryguard::ledger_detail::redis_backend {

namespace {

// A read-only SQLite connection and its statements, closed on scope exit.
class SqliteReader {
  public:
    explicit SqliteReader(const std::string& path) {
        // One thread at a time uses a reader: no mutex around each call.
        if (sqlite3_open_v2(path.c_str(), &db_, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, nullptr) !=
            SQLITE_OK) {
            std::string why = db_ ? sqlite3_errmsg(db_) : "out of memory";
            throw Failure{make_error(ErrorKind::io, "bulk load: " + path + ": " + why)};
        }
        // The early copy reads while the import writes (WAL): a reader may
        // meet a checkpoint restarting the WAL.
        sqlite3_busy_timeout(db_, 10000);
    }
    ~SqliteReader() {
        if (db_) sqlite3_close(db_);
    }
    SqliteReader(const SqliteReader&) = delete;
    SqliteReader& operator=(const SqliteReader&) = delete;

    class Rows {
      public:
        Rows(sqlite3* db, const char* sql) : db_(db) {
            if (sqlite3_prepare_v2(db, sql, -1, &st_, nullptr) != SQLITE_OK)
                throw Failure{make_error(ErrorKind::io, std::string("bulk load: ") + sqlite3_errmsg(db))};
        }
        ~Rows() { sqlite3_finalize(st_); }
        Rows(const Rows&) = delete;
        Rows& operator=(const Rows&) = delete;
        bool next() {
            const int rc = sqlite3_step(st_);
            if (rc == SQLITE_ROW) return true;
            if (rc == SQLITE_DONE) return false;
            throw Failure{make_error(ErrorKind::io, std::string("bulk load: ") + sqlite3_errmsg(db_))};
        }
        // A statement of one parameter, run again for `v`.
        void bind(std::int64_t v) {
            sqlite3_reset(st_);
            sqlite3_bind_int64(st_, 1, v);
        }
        bool null(int i) const { return sqlite3_column_type(st_, i) == SQLITE_NULL; }
        std::int64_t i64(int i) const { return sqlite3_column_int64(st_, i); }
        std::string_view text(int i) const {
            const auto* p = static_cast<const char*>(sqlite3_column_blob(st_, i));
            return p ? std::string_view(p, static_cast<std::size_t>(sqlite3_column_bytes(st_, i)))
                     : std::string_view();
        }

      private:
        sqlite3* db_;
        sqlite3_stmt* st_ = nullptr;
    };
    Rows rows(const char* sql) { return Rows(db_, sql); }

  private:
    sqlite3* db_ = nullptr;
};

std::string decimal(std::int64_t v) {
    char buf[24];
    auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
    (void)ec;
    return std::string(buf, end);
}

// A JSON string as cjson writes the values it stores: quotes, backslash and
// control characters escaped, other bytes as they are (a reply text that is not
// UTF-8 stays as the script would have stored it; text::append_json_string,
// for documents retryguard prints, replaces such bytes).
void json_string(std::string& out, std::string_view s) {
    out.push_back('"');
    for (const char c : s) {
        const auto u = static_cast<unsigned char>(c);
        if (c == '"' || c == '\\') {
            out.push_back('\\');
            out.push_back(c);
        } else if (u < 0x20) {
            static const char* hex = "0123456789abcdef";
            out += "\\u00";
            out.push_back(hex[u >> 4]);
            out.push_back(hex[u & 15]);
        } else {
            out.push_back(c);
        }
    }
    out.push_back('"');
}

class JsonObject {
  public:
    JsonObject() : out_(own_) {}
    // Built in `buf` (cleared first), whose capacity the next object reuses.
    explicit JsonObject(std::string& buf) : out_(buf) { out_.clear(); }
    JsonObject(const JsonObject&) = delete;  // out_ may name own_
    JsonObject& operator=(const JsonObject&) = delete;
    JsonObject& add(std::string_view name, std::string_view value) {
        out_.push_back(out_.empty() ? '{' : ',');
        json_string(out_, name);
        out_.push_back(':');
        json_string(out_, value);
        return *this;
    }
    // The document; a view into the buffer when one was given.
    std::string_view done() {
        if (out_.empty()) out_.push_back('{');
        out_.push_back('}');
        return out_;
    }

  private:
    std::string own_;
    std::string& out_;
};

}  // namespace

// A command's arguments as RESP bulk strings ("$3\r\nfoo\r\n"), formatted
// once, straight into one buffer: the copy sends millions of commands, and
// hiredis's argv formatting (a buffer per command, then another copy) was a
// large part of the copying thread's time (docs/performance.md, "Eighth
// round" of the Redis import).
class RespArgs {
  public:
    // `a` as one bulk string at the end of `out`.
    static void append(std::string& out, std::string_view a) {
        char len[24];
        auto [end, ec] = std::to_chars(len, len + sizeof len, a.size());
        (void)ec;
        out.push_back('$');
        out.append(len, end);
        out.append("\r\n", 2);
        out.append(a);
        out.append("\r\n", 2);
    }
    RespArgs& add(std::string_view a) {
        append(buf_, a);
        ++count_;
        return *this;
    }
    RespArgs& add(std::int64_t v) {
        char digits[24];
        auto [end, ec] = std::to_chars(digits, digits + sizeof digits, v);
        (void)ec;
        return add(std::string_view(digits, static_cast<std::size_t>(end - digits)));
    }
    std::size_t count() const noexcept { return count_; }
    const std::string& bytes() const noexcept { return buf_; }
    void clear() noexcept {
        buf_.clear();
        count_ = 0;
    }

  private:
    std::string buf_;
    std::size_t count_ = 0;
};

// Commands gathered in one buffer, handed to the connection's output buffer
// a window at a time and their replies read a window behind, so the server
// works on one window while the next is built. Any error reply fails the
// copy (the marker stays; the next import removes what was written).
class BulkWriter {
  public:
    BulkWriter(redisContext* ctx, std::function<void()> dropped) : ctx_(ctx), dropped_(std::move(dropped)) {}

    void command(std::initializer_list<std::string_view> args) {
        head(args.size());
        for (auto a : args) RespArgs::append(out_, a);
        added();
    }
    // A command of `head`'s arguments, then `tail`'s.
    void command(const RespArgs& head, const RespArgs& tail = RespArgs()) {
        this->head(head.count() + tail.count());
        out_ += head.bytes();
        out_ += tail.bytes();
        added();
    }
    void drain() {
        hand_over();
        while (pending_ > 0) read_one();
    }
    std::uint64_t sent() const noexcept { return sent_; }

  private:
    static constexpr std::size_t kWindow = 2000;
    void head(std::size_t n) {
        char len[24];
        auto [end, ec] = std::to_chars(len, len + sizeof len, n);
        (void)ec;
        out_.push_back('*');
        out_.append(len, end);
        out_.append("\r\n", 2);
    }
    void added() {
        ++queued_;
        ++sent_;
        if (queued_ < kWindow) return;
        hand_over();
        if (pending_ >= 2 * kWindow)
            for (std::size_t i = 0; i < kWindow; ++i) read_one();
    }
    // The gathered commands into hiredis's output buffer, sent by the next read.
    void hand_over() {
        if (queued_ == 0) return;
        if (redisAppendFormattedCommand(ctx_, out_.data(), out_.size()) != REDIS_OK)
            throw Failure{make_error(ErrorKind::internal, "ledger (redis): out of memory")};
        pending_ += queued_;
        queued_ = 0;
        out_.clear();
    }
    void read_one() {
        void* raw = nullptr;
        if (redisGetReply(ctx_, &raw) != REDIS_OK || !raw) dropped_();
        ReplyPtr reply(static_cast<redisReply*>(raw));
        --pending_;
        if (reply->type == REDIS_REPLY_ERROR)
            throw Failure{make_error(ErrorKind::io,
                                     "ledger (redis): bulk load: " + std::string(reply->str, reply->len))};
    }
    redisContext* ctx_;
    std::function<void()> dropped_;
    std::string out_;
    std::size_t queued_ = 0, pending_ = 0;
    std::uint64_t sent_ = 0;
};

namespace {

// A variadic command of one key, sent every kMembers members.
class Variadic {
  public:
    Variadic(BulkWriter& w, std::initializer_list<std::string_view> head) : w_(w) {
        for (auto h : head) head_.add(h);
    }
    template <typename... A>
    void add(const A&... a) {
        (members_.add(a), ...);
        if (members_.count() >= kMembers) flush();
    }
    void flush() {
        if (members_.count() > 0) {
            w_.command(head_, members_);
            any_ = true;
        }
        members_.clear();
    }
    bool any() const noexcept { return any_; }

  private:
    static constexpr std::size_t kMembers = 2000;
    BulkWriter& w_;
    RespArgs head_, members_;
    bool any_ = false;
};

// The columns of a message and of a recipient both copies read.
constexpr const char* kMessageColumns =
    "queue_id, first_queue_id, previous_queue_id, next_queue_id, message_id, fingerprint, sender, size, "
    "nrcpt, arrival, state, updated, finished, host";
constexpr const char* kRecipientColumns =
    "queue_id, address, domain, state, attempts, first_attempt, last_attempt, first_deferral, reply_code, "
    "enhanced, reply_text, stage, relay, category";

// A message row's identities (ingest.lua: set_identity): its Message-ID and
// its fingerprint, each a change of the identities stream if not empty.
std::string_view row_message_id(const SqliteReader::Rows& rows) {
    return rows.null(4) ? std::string_view() : rows.text(4);
}
std::string_view row_fingerprint(const SqliteReader::Rows& rows) {
    return rows.null(5) ? std::string_view() : rows.text(5);
}
std::uint64_t identity_changes(const SqliteReader::Rows& rows) {
    return (row_message_id(rows).empty() ? 0 : 1) + (row_fingerprint(rows).empty() ? 0 : 1);
}

// A message row's keys (ingest.lua: msg(), set_identity, fp_queued, finish);
// the identities stream is written at the end, from the newest rows.
class MessageWriter {
  public:
    MessageWriter(BulkWriter& w, const std::string& P, const std::string& MT)
        : w_(w),
          P_(P),
          MT_(MT),
          msgs(w, {"ZADD", P + "msgs"}),
          finished(w, {"ZADD", P + "finished"}),
          open_msgs(w, {"SADD", P + "open-msgs"}) {}

    void row(const SqliteReader::Rows& rows) {
        static const char* kNames[] = {"queue_id",
                                       "first_queue_id",
                                       "previous_queue_id",
                                       "next_queue_id",
                                       "message_id",
                                       "fingerprint",
                                       "sender",
                                       "size",
                                       "nrcpt",
                                       "arrival",
                                       "state",
                                       "updated",
                                       "finished",
                                       "host"};
        const std::string_view q = rows.text(0);
        key_.assign(P_).append("msg:").append(q);
        hset_.clear();
        hset_.add("HSET").add(key_);
        for (int i = 0; i < 14; ++i) {
            if (rows.null(i)) continue;
            if (i == 13 && rows.text(i).empty()) continue;  // no host named
            hset_.add(kNames[i]);
            if (i == 7 || i == 8 || i == 9 || i == 11 || i == 12)
                hset_.add(rows.i64(i));
            else
                hset_.add(rows.text(i));
        }
        w_.command(hset_);
        w_.command({"EXPIRE", key_, MT_});
        msgs.add(rows.i64(11), q);
        const bool is_finished = !rows.null(12);
        if (is_finished) finished.add(rows.i64(12), q);
        const std::string_view mid = row_message_id(rows), fp = row_fingerprint(rows);
        if (!mid.empty()) {
            key_.assign(P_).append("mid:").append(mid);
            w_.command({"SADD", key_, q});
            w_.command({"EXPIRE", key_, MT_});
        }
        if (!fp.empty() && !is_finished && rows.text(10) != "incoming") {
            key_.assign(P_).append("fp:").append(fp);
            w_.command({"SADD", key_, q});
            w_.command({"EXPIRE", key_, MT_});
        }
        if (!mid.empty() || !fp.empty()) open_msgs.add(q);
    }
    void flush() {
        msgs.flush();
        finished.flush();
        open_msgs.flush();
    }

  private:
    BulkWriter& w_;
    const std::string P_, MT_;  // copies: a temporary may be passed
    std::string key_;
    RespArgs hset_;

  public:
    Variadic msgs, finished, open_msgs;
};

// Recipient rows: one HSET per run of a message's rows, the address index.
class RecipientWriter {
  public:
    RecipientWriter(BulkWriter& w, const std::string& P, const std::string& MT) : w_(w), P_(P), MT_(MT) {}

    void row(const SqliteReader::Rows& rows) {
        const std::string_view q = rows.text(0);
        if (fields_.count() == 0 || q != run_q_) {
            flush();
            run_q_.assign(q);
        }
        auto time_or_empty = [&](int i) { return rows.null(i) ? std::string() : decimal(rows.i64(i)); };
        const std::string_view a = rows.text(1);
        const std::string last = time_or_empty(6);
        JsonObject j(json_);
        j.add("queue_id", q)
            .add("address", a)
            .add("domain", rows.text(2))
            .add("state", rows.text(3))
            .add("attempts", decimal(rows.i64(4)))
            .add("first_attempt", time_or_empty(5))
            .add("last_attempt", last)
            .add("first_deferral", time_or_empty(7))
            .add("reply_code", decimal(rows.i64(8)))
            .add("enhanced", rows.text(9))
            .add("reply_text", rows.text(10))
            .add("stage", rows.text(11))
            .add("relay", rows.text(12))
            .add("category", rows.text(13));
        fields_.add(a).add(j.done());
        key_.assign(P_).append("addr:").append(a);
        w_.command({"ZADD", key_, last.empty() ? std::string_view("0") : std::string_view(last), q});
        w_.command({"EXPIRE", key_, MT_});
    }
    void flush() {
        if (fields_.count() > 0) {
            key_.assign(P_).append("rcpt:").append(run_q_);
            head_.clear();
            head_.add("HSET").add(key_);
            w_.command(head_, fields_);
            w_.command({"EXPIRE", key_, MT_});
        }
        fields_.clear();
    }

  private:
    BulkWriter& w_;
    const std::string P_, MT_;  // copies: a temporary may be passed
    RespArgs head_, fields_;
    std::string run_q_, key_, json_;
};

// Closed episodes (ingest.lua: success), rows an import only adds.
constexpr const char* kEpisodesAfter =
    "SELECT id, kind, name, first_deferral, last_deferral, ended, attempts, messages, categories, "
    "last_reply, "
    "last_relay FROM episodes WHERE id > ?1 ORDER BY id";

class EpisodeWriter {
  public:
    EpisodeWriter(BulkWriter& w, const std::string& P, const std::string& KT)
        : w_(w), P_(P), KT_(KT), epsidx(w, {"ZADD", P + "epsidx", "NX"}) {}

    void row(const SqliteReader::Rows& rows) {
        const std::string key = P_ + "eps:" + std::string(rows.text(1)) + ":" + std::string(rows.text(2));
        const std::string ended = decimal(rows.i64(5));
        JsonObject j;
        j.add("id", decimal(rows.i64(0)))
            .add("first", decimal(rows.i64(3)))
            .add("last", decimal(rows.i64(4)))
            .add("ended", ended)
            .add("attempts", decimal(rows.i64(6)))
            .add("messages", decimal(rows.i64(7)))
            .add("categories", decimal(rows.i64(8)))
            .add("last_reply", rows.text(9))
            .add("last_relay", rows.text(10));
        w_.command({"ZADD", key, ended, j.done()});
        w_.command({"EXPIRE", key, KT_});
        epsidx.add(ended, std::string(rows.text(1)) + "\t" + std::string(rows.text(2)));
        last_id = std::max(last_id, rows.i64(0));
        ++count;
    }

  private:
    BulkWriter& w_;
    const std::string P_, KT_;

  public:
    Variadic epsidx;
    std::int64_t last_id = 0;
    std::uint64_t count = 0;
};

// Replay keys: one set per hour of event time (ingest.lua), from the packed
// (time, key) pairs of seen_batches (rows an import only adds) and the rows
// of seen_events.
constexpr const char* kSeenBatchesAfter = "SELECT id, keys FROM seen_batches WHERE id > ?1 ORDER BY id";

class SeenWriter {
  public:
    SeenWriter(BulkWriter& w, const std::string& P, const std::string& ST) : w_(w), P_(P), ST_(ST) {}

    void batch(const SqliteReader::Rows& rows) {
        const std::string_view keys = rows.text(1);
        const auto* p = reinterpret_cast<const unsigned char*>(keys.data());
        auto u64 = [](const unsigned char* b) {
            std::uint64_t v = 0;
            for (int i = 7; i >= 0; --i) v = (v << 8) | b[i];
            return v;
        };
        for (std::size_t i = 0; i + 16 <= keys.size(); i += 16)
            add(static_cast<std::int64_t>(u64(p + i)), u64(p + i + 8));
        last_id = std::max(last_id, rows.i64(0));
    }
    void add(std::int64_t t, std::uint64_t key) {
        constexpr std::int64_t kHour = 3'600'000'000LL;
        const std::int64_t h = t >= 0 ? t / kHour : (t - kHour + 1) / kHour;
        auto& members = pending_[h];
        members.add(key_hex(key));
        if (members.count() >= 2000) send(h, members);
        ++keys;
    }
    // What is pending, each hour's set with its TTL.
    void flush() {
        for (auto& [h, members] : pending_) {
            if (members.count() > 0) send(h, members);
            w_.command({"EXPIRE", P_ + "seen:" + decimal(h), ST_});
            hours.insert(h);
        }
        pending_.clear();
    }

  private:
    void send(std::int64_t h, RespArgs& members) {
        RespArgs head;
        head.add("SADD").add(P_ + "seen:" + decimal(h));
        w_.command(head, members);
        members.clear();
    }
    BulkWriter& w_;
    const std::string P_, ST_;
    std::map<std::int64_t, RespArgs> pending_;

  public:
    std::set<std::int64_t> hours;  // written
    std::int64_t last_id = 0;
    std::uint64_t keys = 0;
};

// Row ids copied early, by row id.
class RowSet {
  public:
    void insert(std::int64_t id) {
        if (id < 0) return;
        const auto i = static_cast<std::size_t>(id);
        if (i >= bits_.size()) bits_.resize(std::max(i + 1, bits_.size() * 2), false);
        bits_[i] = true;
    }
    bool contains(std::int64_t id) const {
        return id >= 0 && static_cast<std::size_t>(id) < bits_.size() && bits_[static_cast<std::size_t>(id)];
    }

  private:
    std::vector<bool> bits_;
};

// Each row of `table` (its `columns`) whose id is not in `copied`, in row-id
// order: every row by one scan when nothing was copied, else the missing ids
// read one by one (the rows the early copy did not write are a few thousand
// of a million).
template <typename Fn>
void each_row_not_in(SqliteReader& db, const std::string& table, const char* columns, const RowSet* copied,
                     Fn&& fn) {
    const std::string select = std::string("SELECT ") + columns + " FROM " + table;
    if (!copied) {
        auto rows = db.rows((select + " ORDER BY id").c_str());
        while (rows.next()) fn(rows);
        return;
    }
    std::int64_t last = 0;
    {
        auto max = db.rows(("SELECT MAX(id) FROM " + table).c_str());
        if (max.next() && !max.null(0)) last = max.i64(0);
    }
    auto one = db.rows((select + " WHERE id = ?1").c_str());
    for (std::int64_t id = 1; id <= last; ++id) {
        if (copied->contains(id)) continue;
        one.bind(id);
        if (one.next()) fn(one);
    }
}

// The marker's fields: "host pid start dir" (dir may hold spaces).
std::vector<std::string> owner_fields(std::string_view owner) {
    std::vector<std::string> f;
    for (int i = 0; i < 3; ++i) {
        const auto sp = owner.find(' ');
        if (sp == std::string_view::npos) break;
        f.emplace_back(owner.substr(0, sp));
        owner.remove_prefix(sp + 1);
    }
    f.emplace_back(owner);
    return f;
}

std::string this_host() {
    char buf[256] = {};
    if (gethostname(buf, sizeof buf - 1) != 0) return "?";
    return buf;
}

// The marker's process is gone: same host, and no process of that pid.
bool owner_gone(std::string_view owner) {
    const auto f = owner_fields(owner);
    if (f.size() != 4 || f[0] != this_host()) return false;
    long pid = 0;
    auto [p, ec] = std::from_chars(f[1].data(), f[1].data() + f[1].size(), pid);
    if (ec != std::errc{} || p != f[1].data() + f[1].size() || pid <= 0) return false;
    return kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH;
}

// SCAN's MATCH pattern of every key starting with `prefix`.
std::string glob_prefix(std::string_view prefix) {
    std::string out;
    for (char c : prefix) {
        if (c == '*' || c == '?' || c == '[' || c == ']' || c == '\\') out.push_back('\\');
        out.push_back(c);
    }
    out.push_back('*');
    return out;
}

}  // namespace

std::pair<std::string, std::string> RedisLedger::bulk_load_script(const char* op, std::string_view owner) {
    auto r = eval("bulk_load", {}, {P_, op, std::string(owner), ttl(options_.key_ttl)});
    if (r->type == REDIS_REPLY_INTEGER) return {r->integer == 1 ? "finished" : "not_ours", ""};
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2)
        throw Failure{make_error(ErrorKind::io, "ledger (redis): bulk_load: unexpected reply")};
    return {str(r->element[0]), str(r->element[1])};
}

// Every key of the prefix but the event-key secret, then the marker.
std::uint64_t RedisLedger::wipe_prefix_locked(bool keep_marker) {
    std::uint64_t removed = 0;
    std::string cursor = "0";
    const std::string pattern = glob_prefix(P_);
    do {
        auto r = call({"SCAN", cursor, "MATCH", pattern, "COUNT", "1000"});
        if (r->type != REDIS_REPLY_ARRAY || r->elements != 2)
            throw Failure{make_error(ErrorKind::io, "ledger (redis): SCAN: unexpected reply")};
        cursor = str(r->element[0]);
        std::vector<std::string> del{"UNLINK"};
        for (std::size_t i = 0; i < r->element[1]->elements; ++i) {
            std::string k = str(r->element[1]->element[i]);
            if (k == P_ + "event_keyer" || k == P_ + "bulk-load") continue;
            del.push_back(std::move(k));
        }
        if (del.size() > 1) removed += static_cast<std::uint64_t>(call(del)->integer);
    } while (cursor != "0");
    if (!keep_marker) call({"DEL", P_ + "bulk-load"});
    return removed;
}

Result<BulkLoadClaim> RedisLedger::bulk_load_claim(std::string_view owner) {
    return run<BulkLoadClaim>([&] {
        BulkLoadClaim c;
        c.owner = owner;
        auto [outcome, detail] = bulk_load_script("claim", owner);
        if (outcome == "unfinished" && owner_gone(detail)) {
            // Taken over: the new marker names the unfinished load's directory.
            const auto old = owner_fields(detail);
            const auto mine = owner_fields(owner);
            c.owner = mine[0] + " " + mine[1] + " " + mine[2] + " " + old[3];
            options_.warn("ledger (redis): the bulk load of " + detail +
                          " did not finish and its process is gone: resuming it");
            try {
                c.wiped_keys = wipe_prefix_locked();
                std::tie(outcome, detail) = bulk_load_script("claim", c.owner);
            } catch (const Failure& f) {
                // The marker stays: the ledger holds part of a copy and must
                // not be written batch by batch on top of it.
                c.outcome = BulkLoadClaim::Outcome::busy;
                c.detail = detail + "; removing the keys it copied failed: " + f.error.message;
                return c;
            }
        }
        c.detail = detail;
        if (outcome == "claimed") {
            c.outcome = BulkLoadClaim::Outcome::claimed;
            c.keyer = keyer_locked();
            c.dir = owner_fields(c.owner).back();
        } else if (outcome == "unfinished") {
            c.outcome = BulkLoadClaim::Outcome::busy;
        } else {
            c.outcome = BulkLoadClaim::Outcome::not_empty;
        }
        return c;
    });
}

Status RedisLedger::bulk_load_release(std::string_view owner) {
    return status(run<int>([&] {
        eval("bulk_load", {}, {P_, "finish", std::string(owner), ttl(options_.key_ttl)});
        return 0;
    }));
}

// The early copy: the temporary ledger's writing thread queues the rows its
// queue-id map let go of (settled), this class's thread copies them a chunk
// at a time while the import goes on, and bulk_load_copy copies the rest.
// Settled rows change no more while the map lasts; when it ends early
// (unsettled) the rows copied may change after all, and the copy removes the
// prefix's keys and copies everything.
class RedisLedger::EarlyCopy {
  public:
    std::size_t chunk = 16384;  // queued numbers that wake the thread (LedgerOptions::redis_bulk_early_chunk)
    std::string sqlite_path, owner;
    std::mutex m;
    std::condition_variable cv;
    std::vector<std::int64_t> queue;  // per message: its row, its recipients' count, their rows
    bool closing = false;
    std::atomic<bool> unsettled{false}, dead{false};  // dead: queue no more
    std::thread thread;

    // The thread's, read after it ended:
    std::unique_ptr<SqliteReader> db;
    bool checked = false, refused = false, wrote = false;
    bool msgs_any = false, finished_any = false, open_any = false;
    std::optional<Error> failed;
    RowSet messages, recipients;
    std::uint64_t copied_messages = 0, copied_recipients = 0, commands = 0;
    std::uint64_t identity_changes = 0;  // of the messages copied: a Message-ID, a fingerprint
    // Episodes and replay-key batches up to these row ids are copied.
    std::int64_t episode_id = 0, seen_id = 0;
    std::uint64_t episodes = 0, seen_keys = 0;
    bool epsidx_any = false;
    std::set<std::int64_t> hours;

    void settled(std::int64_t message, std::span<const std::int64_t> rcpts) {
        if (dead.load(std::memory_order_relaxed)) return;
        bool wake = false;
        {
            std::lock_guard lock(m);
            const std::size_t before = queue.size();
            queue.push_back(message);
            queue.push_back(static_cast<std::int64_t>(rcpts.size()));
            queue.insert(queue.end(), rcpts.begin(), rcpts.end());
            wake = before < chunk && queue.size() >= chunk;
        }
        if (wake) cv.notify_one();
    }
    void mark_unsettled() {
        {
            std::lock_guard lock(m);
            unsettled = true;
            dead = true;
            queue.clear();
        }
        cv.notify_one();
    }
};

Result<LedgerIngest::BulkLoadFeed> RedisLedger::bulk_load_early(const std::string& sqlite_path,
                                                                std::string_view owner) {
    discard_early();  // an earlier load that never copied
    auto e = std::make_shared<EarlyCopy>();
    e->sqlite_path = sqlite_path;
    e->owner = owner;
    if (options_.redis_bulk_early_chunk > 0) e->chunk = options_.redis_bulk_early_chunk;
    try {
        e->thread = std::thread([this, e] { early_copy_loop(*e); });
    } catch (const std::system_error& x) {
        return make_error(ErrorKind::internal, std::string("ledger (redis): bulk load: ") + x.what());
    }
    early_ = e;
    BulkLoadFeed feed;
    feed.settled = [e](std::int64_t message, std::span<const std::int64_t> rcpts) {
        e->settled(message, rcpts);
    };
    feed.unsettled = [e] { e->mark_unsettled(); };
    return feed;
}

void RedisLedger::stop_early() noexcept {
    if (!early_) return;
    {
        std::lock_guard lock(early_->m);
        early_->closing = true;
    }
    early_->cv.notify_one();
    if (early_->thread.joinable()) early_->thread.join();
}

void RedisLedger::discard_early() noexcept {
    if (early_) early_->dead = true;
    stop_early();
}

void RedisLedger::early_copy_loop(EarlyCopy& e) {
    SigpipeGuard no_sigpipe;
    std::vector<std::int64_t> work;
    for (;;) {
        bool last = false;
        {
            std::unique_lock lock(e.m);
            e.cv.wait(lock, [&] { return e.closing || e.unsettled || e.queue.size() >= e.chunk; });
            if (e.unsettled) return;  // bulk_load_copy starts over
            work.swap(e.queue);
            last = e.closing;
        }
        if (!work.empty() && !e.dead) {
            auto done = run<int>([&] {
                early_chunk_locked(e, work);
                return 0;
            });
            if (!done) {
                e.failed = done.error();
                e.dead = true;
            }
        }
        work.clear();
        if (last) return;
    }
}

void RedisLedger::early_chunk_locked(EarlyCopy& e, const std::vector<std::int64_t>& work) {
    if (!e.checked) {
        // The ledger must still be empty before the first write (the claim
        // may be minutes old); the copy's own check at the end is this one.
        e.checked = true;
        if (bulk_load_script("check", e.owner).first != "claimed") {
            e.refused = true;
            e.dead = true;
            return;
        }
    }
    if (!e.db) e.db = std::make_unique<SqliteReader>(e.sqlite_path);
    auto msg =
        e.db->rows((std::string("SELECT ") + kMessageColumns + " FROM messages WHERE id = ?1").c_str());
    auto rcpt =
        e.db->rows((std::string("SELECT ") + kRecipientColumns + " FROM recipients WHERE id = ?1").c_str());
    const std::string MT = ttl(options_.message_ttl), KT = ttl(options_.key_ttl);
    const std::string ST = ttl(options_.seen_ttl + std::chrono::hours(1));
    BulkWriter w(ctx_, [this] { drop_connection(); });
    MessageWriter mw(w, P_, MT);
    RecipientWriter rw(w, P_, MT);
    e.wrote = true;  // from the first command: a failure leaves keys the copy removes
    for (std::size_t i = 0; i + 1 < work.size();) {
        const std::int64_t id = work[i++];
        const auto n = static_cast<std::size_t>(work[i++]);
        msg.bind(id);
        if (msg.next()) {
            mw.row(msg);
            e.messages.insert(id);
            ++e.copied_messages;
            e.identity_changes += identity_changes(msg);
        }
        for (std::size_t k = 0; k < n && i < work.size(); ++k) {
            const std::int64_t r = work[i++];
            rcpt.bind(r);
            if (rcpt.next()) {
                rw.row(rcpt);
                e.recipients.insert(r);
                ++e.copied_recipients;
            }
        }
        rw.flush();
    }
    mw.flush();
    {
        EpisodeWriter ew(w, P_, KT);
        auto rows = e.db->rows(kEpisodesAfter);
        rows.bind(e.episode_id);
        while (rows.next()) ew.row(rows);
        ew.epsidx.flush();
        e.epsidx_any = e.epsidx_any || ew.epsidx.any();
        e.episode_id = std::max(e.episode_id, ew.last_id);
        e.episodes += ew.count;
    }
    {
        SeenWriter sw(w, P_, ST);
        auto rows = e.db->rows(kSeenBatchesAfter);
        rows.bind(e.seen_id);
        while (rows.next()) sw.batch(rows);
        sw.flush();
        e.seen_id = std::max(e.seen_id, sw.last_id);
        e.seen_keys += sw.keys;
        e.hours.insert(sw.hours.begin(), sw.hours.end());
    }
    e.msgs_any = e.msgs_any || mw.msgs.any();
    e.finished_any = e.finished_any || mw.finished.any();
    e.open_any = e.open_any || mw.open_msgs.any();
    w.drain();
    e.commands += w.sent();
}

Result<BulkLoadStats> RedisLedger::bulk_load_copy(const std::string& sqlite_path, std::string_view owner) {
    // The early copy ends first: what it queued is copied, then the rest.
    const std::shared_ptr<EarlyCopy> early = early_;
    if (early) {
        stop_early();
        early_.reset();
        early->db.reset();
        if (early->failed)
            options_.warn("ledger (redis): bulk load: the copy during the import failed (" +
                          early->failed->message + "): copying everything again");
    }
    const bool early_wrote = early && early->wrote;
    const bool redo = early_wrote && (early->unsettled || early->failed);
    return run<BulkLoadStats>([&] {
        BulkLoadStats stats;
        // The connection sat idle through the import (minutes at a large log):
        // a server that closes idle clients makes the first call fail; the
        // check only reads, so it is sent again on a new connection.
        std::pair<std::string, std::string> checked;
        for (int attempt = 1;; ++attempt) {
            try {
                checked = bulk_load_script("check", owner);
                break;
            } catch (const Failure& f) {
                if (f.error.kind != ErrorKind::unavailable || attempt == 3) throw;
                std::this_thread::sleep_for(
                    std::min(options_.reconnect_max, options_.reconnect_min * (2 << attempt)));
            }
        }
        auto [outcome, detail] = checked;
        if (early_wrote && outcome == "not_empty") {
            // What the early copy wrote (it checked before writing).
            if (redo) {
                stats.early_redone = true;
                wipe_prefix_locked(true);
            }
            outcome = "claimed";
        }
        if (outcome == "not_empty") {
            bulk_load_script("finish", owner);
            stats.refused = true;
            stats.refused_why = "another writer wrote " + P_ + detail + " meanwhile";
            return stats;
        }
        if (outcome != "claimed")
            throw Failure{make_error(ErrorKind::io, "ledger (redis): bulk load: the marker " + P_ +
                                                        "bulk-load is no longer ours (" + detail + ")")};
        SqliteReader db(sqlite_path);
        BulkWriter w(ctx_, [this] { drop_connection(); });
        SigpipeGuard no_sigpipe;
        const std::string MT = ttl(options_.message_ttl), KT = ttl(options_.key_ttl);
        const std::string ST = ttl(options_.seen_ttl + std::chrono::hours(1));
        auto long_lived = [&](const std::string& k) { w.command({"EXPIRE", k, KT}); };

        // Messages, their indexes and identities (ingest.lua: msg(), set_identity, fp_queued, finish),
        // but those the early copy wrote; the identities stream from the newest rows.
        const bool skip = early_wrote && !redo;
        if (skip) {
            stats.messages_early = early->copied_messages;
            stats.messages += early->copied_messages;
            stats.recipients += early->copied_recipients;
        }
        {
            MessageWriter mw(w, P_, MT);
            // The rows the early copy did not write, then the newest changes
            // from the last message back; the count covers every row.
            std::uint64_t change_count = skip ? early->identity_changes : 0;
            each_row_not_in(db, "messages", kMessageColumns, skip ? &early->messages : nullptr,
                            [&](const auto& row) {
                                mw.row(row);
                                ++stats.messages;
                                change_count += identity_changes(row);
                            });
            constexpr std::size_t kStream = 100000;            // ingest.lua's MAXLEN ~
            std::deque<std::pair<char, std::string>> changes;  // the newest, oldest first
            {
                auto rows = db.rows("SELECT message_id, fingerprint FROM messages ORDER BY id DESC");
                auto newest = [&](char kind, int column) {
                    if (changes.size() < kStream && !rows.null(column) && !rows.text(column).empty())
                        changes.emplace_front(kind, rows.text(column));
                };
                while (changes.size() < kStream && rows.next()) {
                    newest('f', 1);
                    newest('m', 0);
                }
            }
            mw.flush();
            if (mw.msgs.any() || (skip && early->msgs_any)) long_lived(P_ + "msgs");
            if (mw.finished.any() || (skip && early->finished_any)) long_lived(P_ + "finished");
            if (mw.open_msgs.any() || (skip && early->open_any)) long_lived(P_ + "open-msgs");
            if (change_count > 0) {
                std::uint64_t seq = change_count - changes.size();
                const std::string sk = P_ + "identities-stream";
                for (const auto& [kind, value] : changes) {
                    const std::string s = decimal(static_cast<std::int64_t>(++seq));
                    const char k[2] = {kind, 0};
                    w.command({"XADD", sk, "MAXLEN", "~", "100000", "*", "s", s, k, value});
                }
                w.command({"SET", P_ + "identities-seq", decimal(static_cast<std::int64_t>(change_count))});
                long_lived(P_ + "identities-seq");
                long_lived(sk);
            }
        }

        // Recipients, but those the early copy wrote.
        {
            RecipientWriter rw(w, P_, MT);
            each_row_not_in(db, "recipients", kRecipientColumns, skip ? &early->recipients : nullptr,
                            [&](const auto& row) {
                                rw.row(row);
                                ++stats.recipients;
                            });
            rw.flush();
        }

        // Destinations and their open episodes (ingest.lua: deferral, success;
        // verdict_effects.lua: state).
        {
            Variadic dests(w, {"ZADD", P_ + "dests"}), open(w, {"SADD", P_ + "open"});
            auto rows = db.rows(
                "SELECT kind, name, state, state_changed, last_success, last_deferral, ep_first, ep_last, "
                "ep_attempts, ep_messages, ep_categories, ep_last_reply, ep_last_relay, updated "
                "FROM destinations ORDER BY id");
            RespArgs hset;
            std::string key, m;
            while (rows.next()) {
                m.assign(rows.text(0)).append("\t").append(rows.text(1));
                key.assign(P_).append("dest:").append(rows.text(0)).append(":").append(rows.text(1));
                hset.clear();
                hset.add("HSET").add(key).add("kind").add(rows.text(0)).add("name").add(rows.text(1));
                auto time_field = [&](const char* name, int i) {
                    if (!rows.null(i)) hset.add(name).add(rows.i64(i));
                };
                if (!rows.text(2).empty() || !rows.null(3)) {  // verdict_effects.lua writes both
                    hset.add("state").add(rows.text(2));
                    time_field("state_changed", 3);
                }
                time_field("last_success", 4);
                time_field("last_deferral", 5);
                const bool open_ep = !rows.null(6);
                hset.add("ep_first");
                if (open_ep)
                    hset.add(rows.i64(6));
                else
                    hset.add("");
                hset.add("ep_last");
                if (rows.null(7))
                    hset.add("");
                else
                    hset.add(rows.i64(7));
                hset.add("ep_attempts").add(rows.i64(8));
                hset.add("ep_messages").add(rows.i64(9));
                hset.add("ep_categories").add(rows.i64(10));
                hset.add("ep_last_reply").add(rows.text(11));
                hset.add("ep_last_relay").add(rows.text(12));
                hset.add("updated").add(rows.i64(13));
                w.command(hset);
                w.command({"EXPIRE", key, KT});
                dests.add(rows.i64(13), m);
                if (open_ep) open.add(m);
                ++stats.destinations;
            }
            dests.flush();
            open.flush();
            if (dests.any()) long_lived(P_ + "dests");
            if (open.any()) long_lived(P_ + "open");
        }
        {
            auto rows =
                db.rows("SELECT kind, name, queue_id FROM episode_messages ORDER BY kind, name, queue_id");
            std::string run;
            std::optional<Variadic> set;
            while (rows.next()) {
                std::string key =
                    P_ + "destmsg:" + std::string(rows.text(0)) + ":" + std::string(rows.text(1));
                if (!set || key != run) {
                    if (set) {
                        set->flush();
                        long_lived(run);
                    }
                    run = key;
                    set.emplace(w, std::initializer_list<std::string_view>{"SADD", key});
                }
                set->add(rows.text(2));
            }
            if (set) {
                set->flush();
                long_lived(run);
            }
        }

        // Closed episodes (ingest.lua: success) but those the early copy wrote, and the counters.
        std::int64_t episode_ids = skip ? early->episode_id : 0;
        {
            EpisodeWriter ew(w, P_, KT);
            auto rows = db.rows(kEpisodesAfter);
            rows.bind(skip ? early->episode_id : 0);
            while (rows.next()) ew.row(rows);
            ew.epsidx.flush();
            if (ew.epsidx.any() || (skip && early->epsidx_any)) long_lived(P_ + "epsidx");
            episode_ids = std::max(episode_ids, ew.last_id);
            stats.episodes = ew.count + (skip ? early->episodes : 0);
        }
        {
            RespArgs counts;
            if (stats.recipients > 0)
                counts.add("recipients").add(static_cast<std::int64_t>(stats.recipients));
            if (stats.episodes > 0) {
                counts.add("episodes").add(static_cast<std::int64_t>(stats.episodes));
                counts.add("episode_ids").add(episode_ids);
            }
            if (counts.count() > 0) {
                RespArgs head;
                head.add("HSET").add(P_ + "counts");
                w.command(head, counts);
                long_lived(P_ + "counts");
            }
        }

        // Flags, verdict counts and mark, the outbox (verdict_effects.lua, set_flag.lua).
        {
            auto rows = db.rows(
                "SELECT id, destination, reason, set_at, expires_at, cleared_at FROM flags ORDER BY id");
            std::int64_t last = 0;
            while (rows.next()) {
                auto t = [&](int i) { return rows.null(i) ? std::string() : decimal(rows.i64(i)); };
                const std::string id = decimal(rows.i64(0));
                JsonObject j;
                j.add("id", id)
                    .add("destination", rows.text(1))
                    .add("reason", rows.text(2))
                    .add("set_at", t(3))
                    .add("expires_at", t(4))
                    .add("cleared_at", t(5));
                w.command({"HSET", P_ + "flags", id, j.done()});
                last = std::max(last, rows.i64(0));
            }
            if (last > 0) {
                w.command({"SET", P_ + "flagseq", decimal(last)});
                long_lived(P_ + "flags");
                long_lived(P_ + "flagseq");
            }
        }
        {
            auto rows = db.rows("SELECT verdict, count FROM verdict_counts");
            bool any = false;
            while (rows.next()) {
                w.command({"HSET", P_ + "verdicts", rows.text(0), decimal(rows.i64(1))});
                any = true;
            }
            if (any) long_lived(P_ + "verdicts");
        }
        {
            auto rows = db.rows("SELECT value FROM engine_marks WHERE name = 'verdicts'");
            if (rows.next() && rows.i64(0) > 0)
                w.command({"SET", P_ + "verdictmark", decimal(rows.i64(0)), "EX", KT});
        }
        {
            auto rows = db.rows("SELECT seq, at, line FROM verdict_outbox ORDER BY seq");
            bool any = false;
            while (rows.next()) {
                const std::string seq = decimal(rows.i64(0));
                w.command({"ZADD", P_ + "outbox", seq,
                           seq + "\t" + decimal(rows.i64(1)) + "\t" + std::string(rows.text(2))});
                any = true;
            }
            if (any) long_lived(P_ + "outbox");
        }

        // The engine: its journal, the journal's sequence, its state.
        {
            // Redis holds entries as it writes them: SQLite's compressed
            // batch entries are copied decompressed (docs/ledger.md "Engine journal").
            auto rows = db.rows("SELECT seq, entry FROM engine_journal ORDER BY seq");
            bool any = false;
            std::string plain;
            while (rows.next()) {
                const std::string seq = decimal(rows.i64(0));
                w.command({"ZADD", P_ + "journal", seq,
                           seq + ":" + std::string(plain_journal_entry(rows.text(1), plain))});
                any = true;
            }
            if (any) long_lived(P_ + "journal");
            auto seq = db.rows("SELECT seq FROM sqlite_sequence WHERE name = 'engine_journal'");
            if (seq.next() && seq.i64(0) > 0) {
                w.command({"SET", P_ + "journalseq", decimal(seq.i64(0))});
                long_lived(P_ + "journalseq");
            }
        }
        {
            auto rows = db.rows("SELECT key, value FROM engine_state");
            bool any = false;
            while (rows.next()) {
                w.command({"HSET", P_ + "state", rows.text(0), rows.text(1)});
                any = true;
            }
            if (any) long_lived(P_ + "state");
        }
        {
            auto rows = db.rows(
                "SELECT source, device, inode, offset, head_fingerprint, cursor, lines FROM positions");
            bool any = false;
            while (rows.next()) {
                FollowerPosition p;
                p.source = rows.text(0);
                p.device = static_cast<std::uint64_t>(rows.i64(1));
                p.inode = static_cast<std::uint64_t>(rows.i64(2));
                p.offset = static_cast<std::uint64_t>(rows.i64(3));
                p.head_fingerprint = rows.text(4);
                p.cursor = rows.text(5);
                p.lines = static_cast<std::uint64_t>(rows.i64(6));
                w.command({"HSET", P_ + "pos", p.source, position_json(p)});
                any = true;
            }
            if (any) long_lived(P_ + "pos");
        }

        // Replay keys but those the early copy wrote, and the index of their hours.
        {
            SeenWriter sw(w, P_, ST);
            if (skip) sw.hours = early->hours;
            {
                auto rows = db.rows(kSeenBatchesAfter);
                rows.bind(skip ? early->seen_id : 0);
                while (rows.next()) sw.batch(rows);
            }
            {
                auto rows = db.rows("SELECT time, key FROM seen_events");
                while (rows.next()) sw.add(rows.i64(0), static_cast<std::uint64_t>(rows.i64(1)));
            }
            sw.flush();
            stats.seen_keys = sw.keys + (skip ? early->seen_keys : 0);
            Variadic seen_hours(w, {"ZADD", P_ + "seen-hours"});
            for (const auto h : sw.hours) seen_hours.add(decimal(h), decimal(h));
            seen_hours.flush();
            if (seen_hours.any()) w.command({"EXPIRE", P_ + "seen-hours", ST});
        }
        w.drain();
        stats.commands = w.sent() + (skip ? early->commands : 0);
        auto done = eval("bulk_load", {}, {P_, "finish", std::string(owner), KT});
        if (done->type != REDIS_REPLY_INTEGER || done->integer != 1)
            throw Failure{
                make_error(ErrorKind::io, "ledger (redis): bulk load: the marker changed during the copy")};
        return stats;
    });
}

}  // namespace retryguard::ledger_detail::redis_backend
