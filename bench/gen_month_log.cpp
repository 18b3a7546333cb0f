// gen_month_log.cpp -- writes a synthetic Postfix 3.7 syslog of a mid-size
// relay over N days (the line formats of the postfix-3.7 sender fixtures) and,
// optionally, a truth file listing the cases planted in it (a local outage,
// receiver-config episodes that must escalate, a receiver-system episode that
// must not, a repeat offender, greylisting). Used by the replay tests and the
// import benchmarks. Deterministic: the same seed and options give the same
// bytes on any platform, so every distribution below is written out on top of
// std::mt19937_64 (std::*_distribution output differs between libraries).
//
//   gen_month_log [--days N] [--seed S] [--scale X] [--start YYYY-MM-DD]
//                 [--out FILE] [--truth FILE]
//
// --scale 1 is about 800k lines, 150k messages and 20k recipient domains over
// 30 days. Timestamps are UTC without a year (syslog); import with --utc and
// --year of the start date. Only names under .example/.test and addresses in
// the documentation ranges appear.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace {

using i64 = std::int64_t;
using u64 = std::uint64_t;

constexpr i64 kSec = 1000;  // internal times are milliseconds since the epoch
constexpr i64 kMin = 60 * kSec;
constexpr i64 kHour = 60 * kMin;
constexpr i64 kDay = 24 * kHour;

// ------------------------------------------------------------ randomness
struct Rng {
    std::mt19937_64 g;
    explicit Rng(u64 seed) : g(seed) {}
    u64 next() { return g(); }
    u64 below(u64 n) { return n == 0 ? 0 : next() % n; }  // bias < n / 2^64: irrelevant here
    i64 range(i64 lo, i64 hi) { return lo + static_cast<i64>(below(static_cast<u64>(hi - lo + 1))); }
    double unit() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
    bool chance(double p) { return unit() < p; }
    double expo(double mean) { return -mean * std::log1p(-unit()); }
};

u64 mix(u64 x) {  // splitmix64 finaliser: stable per-key pseudo-random values
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

// ------------------------------------------------------------ calendar (UTC)
i64 days_from_civil(i64 y, unsigned m, unsigned d) {
    y -= m <= 2;
    const i64 era = (y >= 0 ? y : y - 399) / 400;
    const unsigned yoe = static_cast<unsigned>(y - era * 400);
    const unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + static_cast<i64>(doe) - 719468;
}

struct Civil {
    i64 y;
    unsigned m, d, hh, mm, ss;
};

Civil civil(i64 ms) {
    i64 secs = ms / kSec;
    i64 z = secs / 86400;
    i64 rem = secs % 86400;
    z += 719468;
    const i64 era = (z >= 0 ? z : z - 146096) / 146097;
    const unsigned doe = static_cast<unsigned>(z - era * 146097);
    const unsigned yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    const unsigned doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    const unsigned mp = (5 * doy + 2) / 153;
    Civil c{};
    c.d = doy - (153 * mp + 2) / 5 + 1;
    c.m = mp < 10 ? mp + 3 : mp - 9;
    c.y = static_cast<i64>(yoe) + era * 400 + (c.m <= 2);
    c.hh = static_cast<unsigned>(rem / 3600);
    c.mm = static_cast<unsigned>(rem / 60 % 60);
    c.ss = static_cast<unsigned>(rem % 60);
    return c;
}

const char* const kMonths[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                               "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};

std::string syslog_time(i64 ms) {  // "Nov  1 00:00:03"
    const Civil c = civil(ms);
    char buf[32];
    std::snprintf(buf, sizeof buf, "%s %2u %02u:%02u:%02u", kMonths[c.m - 1], c.d, c.hh, c.mm, c.ss);
    return buf;
}

std::string rfc3339(i64 ms) {
    const Civil c = civil(ms);
    char buf[32];
    std::snprintf(buf, sizeof buf, "%04lld-%02u-%02uT%02u:%02u:%02uZ", static_cast<long long>(c.y), c.m, c.d,
                  c.hh, c.mm, c.ss);
    return buf;
}

// Postfix's delay format: whole seconds from 10 s, two significant digits below.
std::string pf_delay(i64 ms) {
    if (ms < 0) ms = 0;
    char buf[32];
    if (ms >= 10 * kSec) {
        std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(ms / kSec));
    } else if (ms >= kSec) {
        const i64 tenths = ms / 100;
        if (tenths % 10 == 0)
            std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(tenths / 10));
        else
            std::snprintf(buf, sizeof buf, "%lld.%lld", static_cast<long long>(tenths / 10),
                          static_cast<long long>(tenths % 10));
    } else {
        const i64 h = ms / 10;
        if (h == 0)
            std::snprintf(buf, sizeof buf, "0");
        else if (h % 10 == 0)
            std::snprintf(buf, sizeof buf, "0.%lld", static_cast<long long>(h / 10));
        else
            std::snprintf(buf, sizeof buf, "0.%02lld", static_cast<long long>(h));
    }
    return buf;
}

// ------------------------------------------------------------ options
struct Options {
    int days = 30;
    u64 seed = 1;
    double scale = 1.0;
    i64 start = 0;  // ms
    std::string out;
    std::string truth;
};

[[noreturn]] void usage(const char* why) {
    std::fprintf(stderr,
                 "gen_month_log: %s\nusage: gen_month_log [--days N] [--seed S] [--scale X] "
                 "[--start YYYY-MM-DD] [--out FILE] [--truth FILE]\n",
                 why);
    std::exit(2);
}

Options parse_options(int argc, char** argv) {
    Options o;
    o.start = days_from_civil(2026, 11, 1) * kDay;
    for (int i = 1; i < argc; ++i) {
        const std::string_view a = argv[i];
        auto value = [&]() -> const char* {
            if (i + 1 >= argc) usage("missing value");
            return argv[++i];
        };
        if (a == "--days") {
            o.days = std::atoi(value());
            if (o.days < 1 || o.days > 366) usage("--days: 1..366");
        } else if (a == "--seed") {
            o.seed = std::strtoull(value(), nullptr, 10);
        } else if (a == "--scale") {
            o.scale = std::strtod(value(), nullptr);
            if (!(o.scale > 0.0) || o.scale > 1000.0) usage("--scale: > 0 and <= 1000");
        } else if (a == "--start") {
            unsigned y = 0, m = 0, d = 0;
            if (std::sscanf(value(), "%u-%u-%u", &y, &m, &d) != 3 || m < 1 || m > 12 || d < 1 || d > 31)
                usage("--start: YYYY-MM-DD");
            o.start = days_from_civil(y, m, d) * kDay;
        } else if (a == "--out") {
            o.out = value();
        } else if (a == "--truth") {
            o.truth = value();
        } else if (a == "--help" || a == "-h") {
            usage("help");
        } else {
            usage("unknown option");
        }
    }
    return o;
}

// ------------------------------------------------------------ the world
const char* const kSyl[] = {"al", "be", "co", "da", "el",  "fa",  "ga",  "hi",  "io",  "ja", "ka",
                            "lu", "ma", "no", "or", "pe",  "qu",  "ra",  "si",  "to",  "ul", "va",
                            "we", "xo", "ya", "zu", "bri", "cor", "dun", "fen", "gor", "hal"};
const char* const kTld[] = {"example", "example.com", "example.net", "example.org", "test"};
const char* const kFirst[] = {"anna", "ben",  "carla", "dan",  "eva",  "felix", "gina",  "hugo",  "ines",
                              "jon",  "kim",  "lea",   "marc", "nina", "omar",  "paula", "quinn", "rosa",
                              "sam",  "tara", "uwe",   "vera", "will", "xena",  "yann",  "zoe"};
const char* const kLast[] = {"meyer",  "smith", "rossi",  "dubois", "novak", "garcia", "berg",  "costa",
                             "keller", "lang",  "moreau", "nagy",   "olsen", "petit",  "quint", "roth"};
const char* const kSenderDomains[] = {"corp.example", "shop.corp.example", "news.corp.example"};
constexpr int kTopDomains = 40;  // the big mailbox providers take a large share of the mail

struct Domain {
    std::string name;
    std::string mx;
    std::string ip;
};

Domain make_domain(int i) {
    Domain d;
    d.name = std::string(kSyl[i % 32]) + kSyl[(i / 32) % 32];
    if (i >= 1024) d.name += std::to_string(i / 1024);
    d.name += '.';
    d.name += kTld[mix(static_cast<u64>(i)) % 5];
    d.mx = ((mix(static_cast<u64>(i) + 7) & 1) ? "mx1." : "mx.") + d.name;
    const u64 h = mix(static_cast<u64>(i) * 31 + 3);
    char buf[64];
    if (h % 10 == 0) {
        std::snprintf(buf, sizeof buf, "2001:db8:%x::%x", static_cast<unsigned>((h >> 8) & 0xffff),
                      static_cast<unsigned>((h >> 24) & 0xff) + 1);
    } else {
        static const char* const nets[] = {"192.0.2", "198.51.100", "203.0.113"};
        std::snprintf(buf, sizeof buf, "%s.%u", nets[(h >> 8) % 3],
                      static_cast<unsigned>((h >> 16) % 254) + 1);
    }
    d.ip = buf;
    return d;
}

// ------------------------------------------------------------ planted faults
struct Window {
    i64 from, to;
    std::string reply;  // the whole "451 4.3.5 ..." after the recipient
    std::string dsn;
};

struct Planted {
    int domain = 0;
    std::string kind;  // escalate, no-escalate, repeat-offender, greylist, during-outage
    std::vector<Window> windows;
    // observed while generating: deferral and delivery times (ms)
    std::vector<i64> deferred;
    std::vector<i64> sent;
};

// ------------------------------------------------------------ output ordering
struct Pending {
    i64 at;
    u64 seq;
    std::string line;
};
struct Later {
    bool operator()(const Pending& a, const Pending& b) const {
        return a.at != b.at ? a.at > b.at : a.seq > b.seq;
    }
};

// ------------------------------------------------------------ the generator
enum class Fate { sent, bounce, transient, forever };

struct Rcpt {
    int domain;
    std::string addr;
    Fate fate = Fate::sent;
    int transient_left = 0;
    int transient_kind = 0;
    bool done = false;
    bool bounced = false;
    bool greylisted_once = false;
    std::string last_reply;
};

class Generator {
  public:
    explicit Generator(const Options& o) : opt_(o), rng_(o.seed) {
        end_ = opt_.start + opt_.days * kDay;
        n_domains_ = std::max(1000, static_cast<int>(std::lround(20000.0 * opt_.scale)));
        domains_.reserve(static_cast<std::size_t>(n_domains_));
        for (int i = 0; i < n_domains_; ++i) domains_.push_back(make_domain(i));
        per_day_ = 4200.0 * opt_.scale;  // ~130k messages and ~800k lines a month at scale 1
        plant();
    }

    int run(std::FILE* out, std::FILE* truth);

  private:
    // --- planting
    void plant();
    int planted_index(int domain) const {
        for (std::size_t i = 0; i < planted_.size(); ++i)
            if (planted_[i].domain == domain) return static_cast<int>(i);
        return -1;
    }

    // --- arrivals
    double rate_per_ms(i64 t) const;
    i64 next_background_arrival(i64 t);

    // --- one message's whole life
    void message(i64 t0, int forced_domain, bool bulk);
    std::string queue_id(i64 t);
    int pick_domain();
    std::string local_part();
    int pid(const char* proc, i64 t, int pool);
    void emit(i64 at, const char* proc, int pid, const std::string& text);
    void flush_before(i64 t, std::FILE* out);
    void dsn(i64 t, const std::string& qid, const std::string& sender, bool delay_notice);

    const Options& opt_;
    Rng rng_;
    i64 end_ = 0;
    int n_domains_ = 0;
    double per_day_ = 0;
    std::vector<Domain> domains_;
    std::vector<Planted> planted_;
    std::vector<int> planted_of_;  // domain -> planted index or -1
    i64 outage_from_ = 0, outage_to_ = 0;
    std::set<int> outage_domains_;
    i64 outage_first_ = -1, outage_recovered_ = -1;
    std::vector<std::pair<i64, int>> planted_arrivals_;  // (time, domain); domain -1 = bulk mailing
    std::vector<Pending> heap_;
    u64 seq_ = 0;
    u64 qcount_ = 0;
    u64 lines_ = 0;
    u64 messages_ = 0;
    std::set<int> seen_domains_;
};

void Generator::plant() {
    planted_of_.assign(static_cast<std::size_t>(n_domains_), -1);
    const int D = opt_.days;
    const double s = opt_.scale;
    int next_domain = n_domains_ - 1;  // planted domains come from the long tail
    auto add = [&](const std::string& kind) -> Planted& {
        Planted p;
        p.domain = next_domain--;
        p.kind = kind;
        planted_of_[static_cast<std::size_t>(p.domain)] = static_cast<int>(planted_.size());
        planted_.push_back(std::move(p));
        return planted_.back();
    };
    auto cfg = [](const std::string& text) { return "451 4.3.5 <%R>: Recipient address rejected: " + text; };

    // The local outage: ~40 min on the sending side's own path, past the month's middle.
    outage_from_ = opt_.start + (D * 55 / 100) * kDay + 10 * kHour + 17 * kMin;
    outage_to_ = outage_from_ + 40 * kMin;
    {
        Planted& p = add("during-outage");
        p.windows.push_back(
            {outage_from_ - 25 * kMin, outage_to_ + 50 * kMin, cfg("System config error"), "4.3.5"});
    }
    // A newsletter goes out at the start of the outage: hundreds of domains fail at once.
    planted_arrivals_.push_back({outage_from_ + 2 * kMin, -1});

    if (D >= 4) {
        const int E = std::max(2, static_cast<int>(std::lround(3 * s)));
        for (int i = 0; i < E; ++i) {
            Planted& p = add("escalate");
            const i64 from = opt_.start + kDay + (static_cast<i64>(i) * (D - 5) * kDay) / E +
                             ((8 + 3 * i) % 24) * kHour + rng_.range(0, kHour);
            const i64 len = 26 * kHour + ((i * 5) % 15) * kHour;
            p.windows.push_back({from, from + len, cfg("System config error"), "4.3.5"});
        }
        const int NE = std::max(1, static_cast<int>(std::lround(s)));
        for (int i = 0; i < NE; ++i) {
            Planted& p = add("no-escalate");
            const i64 from = opt_.start + kDay + 6 * kHour + (static_cast<i64>(i) * (D - 4) * kDay) / NE +
                             kDay / 2 + rng_.range(0, kHour);
            p.windows.push_back({from, from + 30 * kHour,
                                 "451 4.3.0 <%R>: Recipient address rejected: Temporary system problem",
                                 "4.3.0"});
        }
    }
    if (D >= 6) {
        const int R = std::max(1, static_cast<int>(std::lround(2 * s)));
        const i64 spacing = (static_cast<i64>(D) - 2) * kDay / 4;
        for (int i = 0; i < R; ++i) {
            Planted& p = add("repeat-offender");
            for (int j = 0; j < 4; ++j) {
                const i64 from = opt_.start + kDay + j * spacing + ((9 + 5 * i + 7 * j) % 14) * kHour;
                const i64 len = 2 * kHour + ((i + j) % 5) * kHour;
                p.windows.push_back(
                    {from, from + len,
                     cfg(j % 2 ? "Server configuration error" : "Server configuration problem"), "4.3.5"});
            }
        }
    }
    const int G = std::max(3, static_cast<int>(std::lround(10 * s)));
    for (int i = 0; i < G; ++i) add("greylist");

    // Planted domains get their own steady trickle of mail (every 1-3 h) so
    // that their episodes are seen from start to recovery.
    // Each fault window also gets a message shortly after it opens.
    for (const Planted& p : planted_) {
        i64 t = opt_.start + rng_.range(0, 120 * kMin);
        while (t < end_) {
            planted_arrivals_.push_back({t, p.domain});
            t += rng_.range(60 * kMin, 180 * kMin);
        }
        for (const Window& w : p.windows)
            planted_arrivals_.push_back({w.from + rng_.range(2 * kMin, 10 * kMin), p.domain});
    }
    std::sort(planted_arrivals_.begin(), planted_arrivals_.end());
}

// Diurnal and weekly shape of a business relay; normalised so per_day_ holds on average.
double Generator::rate_per_ms(i64 t) const {
    static const double hour_w[24] = {0.2, 0.15, 0.1, 0.1, 0.15, 0.3, 0.6, 1.2, 1.8, 2.0, 2.0, 1.8,
                                      1.5, 1.8,  1.9, 1.8, 1.6,  1.3, 1.0, 0.8, 0.7, 0.5, 0.4, 0.3};
    // hour_w averages 1; weekends run at 0.4.
    constexpr double mean = (5.0 + 2 * 0.4) / 7.0;
    const i64 day = t / kDay;
    const int wd = static_cast<int>((day + 3) % 7);  // 1970-01-01 was a Thursday: 0 = Monday
    const double week = wd >= 5 ? 0.4 : 1.0;
    const int h = static_cast<int>(t % kDay / kHour);
    return per_day_ / static_cast<double>(kDay) * hour_w[h] * week / mean;
}

// Non-homogeneous Poisson arrivals by thinning against the peak rate.
i64 Generator::next_background_arrival(i64 t) {
    const double peak = per_day_ / static_cast<double>(kDay) * 2.0 / ((5.0 + 2 * 0.4) / 7.0);
    for (;;) {
        t += static_cast<i64>(rng_.expo(1.0 / peak)) + 1;
        if (t >= end_) return end_;
        if (rng_.unit() * peak < rate_per_ms(t)) return t;
    }
}

std::string Generator::queue_id(i64 t) {
    // Postfix short ids: 5 hex digits of microseconds, then the queue file's
    // inode; a bijective scramble of a counter keeps the "inode" unique.
    const u64 usec = (static_cast<u64>(t % kSec) * 1000 + rng_.below(1000)) & 0xFFFFF;
    const u64 inode = ((++qcount_) * 0x9E3779B1ULL) & 0xFFFFFF;
    char buf[16];
    std::snprintf(buf, sizeof buf, "%05llX%06llX", static_cast<unsigned long long>(usec),
                  static_cast<unsigned long long>(inode));
    return buf;
}

int Generator::pick_domain() {
    if (rng_.chance(0.45)) {
        const double u = rng_.unit();
        return static_cast<int>(u * u * kTopDomains);
    }
    return kTopDomains + static_cast<int>(rng_.below(static_cast<u64>(n_domains_ - kTopDomains)));
}

std::string Generator::local_part() {
    std::string s = kFirst[rng_.below(26)];
    s += '.';
    s += kLast[rng_.below(16)];
    if (rng_.chance(0.5)) s += std::to_string(rng_.below(100));
    return s;
}

// Postfix processes live for a while and are replaced: a small pool per hour.
int Generator::pid(const char* proc, i64 t, int pool) {
    u64 key = static_cast<u64>(t / kHour) * 131;
    for (const char* p = proc; *p; ++p) key = key * 31 + static_cast<unsigned char>(*p);
    return 1000 + static_cast<int>(mix(key * 64 + rng_.below(static_cast<u64>(pool))) % 60000);
}

void Generator::emit(i64 at, const char* proc, int p, const std::string& text) {
    if (at >= end_) return;
    std::string line = syslog_time(at);
    line += " relay postfix/";
    line += proc;
    line += '[';
    line += std::to_string(p);
    line += "]: ";
    line += text;
    line += '\n';
    heap_.push_back({at, seq_++, std::move(line)});
    std::push_heap(heap_.begin(), heap_.end(), Later{});
}

void Generator::flush_before(i64 t, std::FILE* out) {
    while (!heap_.empty() && heap_.front().at < t) {
        std::pop_heap(heap_.begin(), heap_.end(), Later{});
        std::fwrite(heap_.back().line.data(), 1, heap_.back().line.size(), out);
        ++lines_;
        heap_.pop_back();
    }
}

// A non-delivery or delay notification back to the (local) sender.
void Generator::dsn(i64 t, const std::string& qid, const std::string& sender, bool delay_notice) {
    const std::string nq = queue_id(t);
    const Civil c = civil(t);
    char mid[64];
    std::snprintf(mid, sizeof mid, "%04lld%02u%02u%02u%02u%02u", static_cast<long long>(c.y), c.m, c.d, c.hh,
                  c.mm, c.ss);
    emit(t, "cleanup", pid("cleanup", t, 2), nq + ": message-id=<" + mid + "." + nq + "@relay.corp.example>");
    emit(t, "qmgr", pid("qmgr", 0, 1),
         nq + ": from=<>, size=" + std::to_string(2400 + rng_.below(600)) + ", nrcpt=1 (queue active)");
    emit(
        t, "bounce", pid("bounce", t, 3),
        qid + (delay_notice ? ": sender delay notification: " : ": sender non-delivery notification: ") + nq);
    if (!delay_notice) emit(t, "qmgr", pid("qmgr", 0, 1), qid + ": removed");
    const i64 d = 10 + static_cast<i64>(rng_.below(30));
    emit(t + d, "virtual", pid("virtual", t, 2),
         nq + ": to=<" + sender + ">, relay=virtual, delay=" + pf_delay(d) + ", delays=0/0/0/" + pf_delay(d) +
             ", dsn=2.0.0, status=sent (delivered to maildir)");
    emit(t + d, "qmgr", pid("qmgr", 0, 1), nq + ": removed");
}

void Generator::message(i64 t0, int forced_domain, bool bulk) {
    ++messages_;
    const std::string qid = queue_id(t0);
    const std::string sender =
        bulk ? std::string("newsletter@news.corp.example")
             : local_part() + "@" + kSenderDomains[rng_.chance(0.7) ? 0 : 1 + rng_.below(2)];
    const i64 size = 600 + static_cast<i64>(rng_.expo(18000));

    // Recipients and what each will meet.
    std::vector<Rcpt> rcpts;
    int n = 1;
    if (forced_domain < 0) {
        const double u = rng_.unit();
        n = u < 0.85 ? 1 : u < 0.95 ? 2 : static_cast<int>(rng_.range(3, 5));
    }
    for (int i = 0; i < n; ++i) {
        Rcpt r;
        r.domain = forced_domain >= 0 ? forced_domain : pick_domain();
        r.addr = local_part() + "@" + domains_[static_cast<std::size_t>(r.domain)].name;
        if (planted_of_[static_cast<std::size_t>(r.domain)] < 0 && !bulk) {
            const double u = rng_.unit();
            if (u < 0.025) {
                r.fate = Fate::bounce;
            } else if (u < 0.045) {
                r.fate = Fate::transient;
                r.transient_left = static_cast<int>(rng_.range(1, 3));
                r.transient_kind = static_cast<int>(rng_.below(10));
            } else if (u < 0.047 && r.domain < kTopDomains) {
                r.fate = Fate::forever;  // a mailbox full for days: the message expires
            }
        }
        seen_domains_.insert(r.domain);
        rcpts.push_back(std::move(r));
    }

    // Submission.
    i64 t = t0;
    const bool via_smtpd = bulk || rng_.chance(0.3);
    if (via_smtpd) {
        const unsigned host = bulk ? 9 : static_cast<unsigned>(rng_.below(8)) + 1;
        const std::string client = (bulk ? std::string("lists") : "app" + std::to_string(host)) +
                                   ".corp.example[198.51.100." + std::to_string(10 + host) + "]";
        const int sp = pid("smtpd", t, 6);
        emit(t, "smtpd", sp, "connect from " + client);
        t += 20 + static_cast<i64>(rng_.below(60));
        emit(t, "smtpd", sp, qid + ": client=" + client);
        t += 10 + static_cast<i64>(rng_.below(40));
        char mid[96];
        std::snprintf(mid, sizeof mid, "%016llx.%llu@%s", static_cast<unsigned long long>(rng_.next()),
                      static_cast<unsigned long long>(t0 / kSec),
                      bulk ? "news.corp.example" : "app.corp.example");
        emit(t, "cleanup", pid("cleanup", t, 2), qid + ": message-id=<" + mid + ">");
        t += 5 + static_cast<i64>(rng_.below(30));
        emit(t, "smtpd", sp,
             "disconnect from " + client + " ehlo=1 mail=1 rcpt=" + std::to_string(n) +
                 " data=1 quit=1 commands=" + std::to_string(n + 4));
    } else {
        emit(t, "pickup", pid("pickup", 0, 1),
             qid + ": uid=" + std::to_string(1000 + rng_.below(40)) + " from=<" + sender + ">");
        t += 10 + static_cast<i64>(rng_.below(40));
        char mid[64];
        const Civil c = civil(t0);
        std::snprintf(mid, sizeof mid, "%04lld%02u%02u%02u%02u%02u", static_cast<long long>(c.y), c.m, c.d,
                      c.hh, c.mm, c.ss);
        emit(t, "cleanup", pid("cleanup", t, 2),
             qid + ": message-id=<" + mid + "." + qid + "@relay.corp.example>");
    }
    t += 5 + static_cast<i64>(rng_.below(30));

    // Delivery attempts on Postfix's schedule (minimal_backoff_time 300s,
    // maximal_backoff_time 4000s, queue_run_delay 300s) until every recipient
    // is done or maximal_queue_lifetime (5d) runs out.
    const std::string from_line = qid + ": from=<" + sender + ">, size=" + std::to_string(size) +
                                  ", nrcpt=" + std::to_string(n) + " (queue active)";
    i64 backoff = 300 * kSec;
    bool warned = false;
    bool any_bounced = false;
    for (int attempt = 0;; ++attempt) {
        if (t >= end_) return;
        emit(t, "qmgr", pid("qmgr", 0, 1), from_line);
        i64 ts = t + 10 + static_cast<i64>(rng_.below(80));
        bool pending = false;
        for (Rcpt& r : rcpts) {
            if (r.done) continue;
            const Domain& d = domains_[static_cast<std::size_t>(r.domain)];
            const int pi = planted_of_[static_cast<std::size_t>(r.domain)];
            Planted* pl = pi >= 0 ? &planted_[static_cast<std::size_t>(pi)] : nullptr;
            const int sp = pid("smtp", ts, 20);
            const i64 q = static_cast<i64>(rng_.below(40));  // time in qmgr
            const std::string relay = d.mx + "[" + d.ip + "]";
            auto delays = [&](i64 conn, i64 xfer) {
                const i64 total = ts - t0;
                const i64 before = std::max<i64>(0, total - q - conn - xfer);
                return ", delay=" + pf_delay(total) + ", delays=" + pf_delay(before) + "/" + pf_delay(q) +
                       "/" + pf_delay(conn) + "/" + pf_delay(xfer);
            };
            auto deferred_reply = [&](const std::string& reply_tpl, const std::string& dsn,
                                      const char* stage) {
                std::string reply = reply_tpl;
                if (auto at = reply.find("%R"); at != std::string::npos) reply.replace(at, 2, r.addr);
                const i64 conn = 20 + static_cast<i64>(rng_.below(200));
                emit(ts, "smtp", sp,
                     qid + ": to=<" + r.addr + ">, relay=" + relay + ":25" + delays(conn, 5) +
                         ", dsn=" + dsn + ", status=deferred (host " + relay + " said: " + reply +
                         " (in reply to " + stage + " command))");
                r.last_reply = reply;
                if (pl) pl->deferred.push_back(ts);
                pending = true;
            };

            // 1. A planted receiver fault.
            const Window* w = nullptr;
            if (pl)
                for (const Window& x : pl->windows)
                    if (ts >= x.from && ts < x.to) w = &x;
            if (w) {
                deferred_reply(w->reply, w->dsn, "RCPT TO");
            } else if (!pl && ts >= outage_from_ && ts < outage_to_) {
                // 2. Our own path is down: connects time out or the network is unreachable.
                const bool unreachable = rng_.chance(0.3);
                const char* why = unreachable ? "Network is unreachable" : "Connection timed out";
                const i64 conn = unreachable ? 1 : 30 * kSec;
                const std::string c = "connect to " + relay + ":25: " + why;
                emit(ts + conn, "smtp", sp, c);
                ts += conn;
                emit(ts, "smtp", sp,
                     qid + ": to=<" + r.addr + ">, relay=none" + delays(conn, 0) +
                         ", dsn=4.4.1, status=deferred (" + c + ")");
                if (outage_first_ < 0 || ts < outage_first_) outage_first_ = ts;
                outage_domains_.insert(r.domain);
                pending = true;
            } else if (pl && pl->kind == "greylist" && !r.greylisted_once) {
                // 3. Greylisting: the first attempt of a new triplet is turned away.
                r.greylisted_once = true;
                deferred_reply(rng_.chance(0.5)
                                   ? "450 4.7.1 <%R>: Recipient address rejected: Greylisted, see "
                                     "http://postgrey.example/help/" +
                                         d.name + ".html"
                                   : "451 4.7.1 <%R>: Recipient address rejected: greylisted, try "
                                     "again in 300 seconds",
                               "4.7.1", "RCPT TO");
            } else if (r.fate == Fate::bounce) {
                const i64 conn = 20 + static_cast<i64>(rng_.below(200));
                emit(ts, "smtp", sp,
                     qid + ": to=<" + r.addr + ">, relay=" + relay + ":25" + delays(conn, 5) +
                         ", dsn=5.1.1, status=bounced (host " + relay + " said: 550 5.1.1 <" + r.addr +
                         ">: Recipient address rejected: User unknown in virtual mailbox table (in reply to "
                         "RCPT TO "
                         "command))");
                r.done = r.bounced = any_bounced = true;
            } else if (r.fate == Fate::forever || (r.fate == Fate::transient && r.transient_left > 0)) {
                if (r.fate == Fate::transient) --r.transient_left;
                const int k = r.fate == Fate::forever ? 0 : r.transient_kind;
                if (k < 4) {
                    deferred_reply("452 4.2.2 <%R>: Mailbox full", "4.2.2", "RCPT TO");
                } else if (k < 8) {
                    deferred_reply("421 4.7.0 Too many concurrent SMTP connections; please try again later",
                                   "4.7.0", "MAIL FROM");
                } else if (k < 9) {
                    const std::string c = "connect to " + relay + ":25: Connection refused";
                    emit(ts, "smtp", sp, c);
                    emit(ts, "smtp", sp,
                         qid + ": to=<" + r.addr + ">, relay=none" + delays(2, 0) +
                             ", dsn=4.4.1, status=deferred (" + c + ")");
                    pending = true;
                } else {
                    emit(ts, "smtp", sp,
                         qid + ": to=<" + r.addr + ">, relay=" + relay + ":25" + delays(150, 0) +
                             ", dsn=4.4.2, status=deferred (lost connection with " + relay +
                             " while receiving the initial server greeting)");
                    pending = true;
                }
            } else {
                const i64 conn = 20 + static_cast<i64>(rng_.below(300));
                const i64 xfer = 10 + static_cast<i64>(rng_.below(200)) + size / 1000;
                ts += conn + xfer;
                char tail[64];
                std::snprintf(tail, sizeof tail, "%010llX",
                              static_cast<unsigned long long>(rng_.next() >> 24));
                const std::string reply = (r.domain % 3 == 0)
                                              ? std::string("250 2.0.0 Ok: queued as ") + tail
                                              : std::string("250 2.0.0 OK ") + tail + " - accepted";
                emit(ts, "smtp", sp,
                     qid + ": to=<" + r.addr + ">, relay=" + relay + ":25" + delays(conn, xfer) +
                         ", dsn=2.0.0, status=sent (" + reply + ")");
                r.done = true;
                if (pl) pl->sent.push_back(ts);
                if (!pl && ts >= outage_to_ && (outage_recovered_ < 0 || ts < outage_recovered_))
                    outage_recovered_ = ts;
            }
            ts += 5 + static_cast<i64>(rng_.below(40));
        }
        t = ts;
        if (!pending) break;
        if (t - t0 >= 5 * kDay) {
            emit(t, "qmgr", pid("qmgr", 0, 1),
                 qid + ": from=<" + sender + ">, status=expired, returned to sender");
            dsn(t, qid, sender, false);
            return;
        }
        if (!warned && t - t0 >= 4 * kHour) {  // delay_warning_time = 4h
            warned = true;
            dsn(t, qid, sender, true);
        }
        t += backoff + rng_.range(0, 300) * kSec;
        backoff = std::min<i64>(backoff * 2, 4000 * kSec);
    }
    if (any_bounced) {
        dsn(t, qid, sender, false);
    } else {
        emit(t, "qmgr", pid("qmgr", 0, 1), qid + ": removed");
    }
}

int Generator::run(std::FILE* out, std::FILE* truth) {
    std::size_t pa = 0;
    i64 bg = next_background_arrival(opt_.start);
    for (;;) {
        const bool have_planted = pa < planted_arrivals_.size() && planted_arrivals_[pa].first < end_;
        if (!have_planted && bg >= end_) break;
        if (have_planted && planted_arrivals_[pa].first <= bg) {
            const auto [at, dom] = planted_arrivals_[pa++];
            flush_before(at, out);
            if (dom >= 0) {
                message(at, dom, false);
            } else {
                // The newsletter: one message per subscriber, hundreds of distinct domains.
                std::set<int> picked;
                i64 t = at;
                while (picked.size() < 300) {
                    const int d = kTopDomains +
                                  static_cast<int>(rng_.below(static_cast<u64>(n_domains_ - kTopDomains)));
                    if (planted_of_[static_cast<std::size_t>(d)] >= 0 || !picked.insert(d).second) continue;
                    t += 200 + static_cast<i64>(rng_.below(400));
                    flush_before(t, out);
                    message(t, d, true);
                }
            }
        } else {
            flush_before(bg, out);
            message(bg, -1, false);
            bg = next_background_arrival(bg);
        }
    }
    flush_before(end_, out);

    if (truth) {
        std::fprintf(
            truth, "outage\t%s\t%s\t%zu\n", rfc3339(outage_first_ < 0 ? outage_from_ : outage_first_).c_str(),
            rfc3339(outage_recovered_ < 0 ? outage_to_ : outage_recovered_).c_str(), outage_domains_.size());
        for (const Planted& p : planted_) {
            const std::string& name = domains_[static_cast<std::size_t>(p.domain)].name;
            // An episode runs from its first deferral to the first delivery after the fault.
            auto episode = [&](const Window& w) -> std::pair<i64, i64> {
                i64 first = -1, recovered = -1;
                for (i64 x : p.deferred)
                    if (x >= w.from && x < w.to && (first < 0 || x < first)) first = x;
                for (i64 x : p.sent)
                    if (x >= w.to && (recovered < 0 || x < recovered)) recovered = x;
                return {first, recovered};
            };
            if (p.kind == "during-outage") {
                std::fprintf(truth, "during-outage\t%s\treceiver-config\n", name.c_str());
            } else if (p.kind == "escalate" || p.kind == "no-escalate") {
                const auto [a, b] = episode(p.windows[0]);
                if (a < 0 || b < 0) continue;
                std::fprintf(truth, "%s\t%s\t%s\t%s\t%s\n", p.kind.c_str(), name.c_str(),
                             p.kind == "escalate" ? "receiver-config" : "receiver-system", rfc3339(a).c_str(),
                             rfc3339(b).c_str());
            } else if (p.kind == "repeat-offender") {
                int n = 0;
                for (const Window& w : p.windows)
                    if (episode(w).first >= 0) ++n;
                std::fprintf(truth, "repeat-offender\t%s\t%d\n", name.c_str(), n);
            } else if (p.kind == "greylist") {
                if (!p.deferred.empty()) std::fprintf(truth, "greylist\t%s\n", name.c_str());
            }
        }
    }
    std::fprintf(stderr,
                 "gen_month_log: %llu lines, %llu messages, %zu recipient domains, %d days, seed %llu\n",
                 static_cast<unsigned long long>(lines_), static_cast<unsigned long long>(messages_),
                 seen_domains_.size(), opt_.days, static_cast<unsigned long long>(opt_.seed));
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    const Options opt = parse_options(argc, argv);
    std::FILE* out = stdout;
    if (!opt.out.empty() && !(out = std::fopen(opt.out.c_str(), "w"))) {
        std::perror(opt.out.c_str());
        return 1;
    }
    std::FILE* truth = nullptr;
    if (!opt.truth.empty() && !(truth = std::fopen(opt.truth.c_str(), "w"))) {
        std::perror(opt.truth.c_str());
        return 1;
    }
    static char buf[1 << 16];
    std::setvbuf(out, buf, _IOFBF, sizeof buf);
    Generator g(opt);
    const int rc = g.run(out, truth);
    if (std::fclose(out) != 0 || (truth && std::fclose(truth) != 0)) {
        std::perror("gen_month_log: write");
        return 1;
    }
    return rc;
}
