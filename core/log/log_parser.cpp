// log_parser.cpp -- Postfix log line -> Event. Owns LogParser: the syslog
// header formats (RFC 3164, RFC 3339, RFC 5424), year inference and local time,
// the counters; the message after "program[pid]: " is postfix_message.cpp's.
//
// Must never: throw, allocate in proportion to anything but the (capped) line,
// scan a line more than a constant number of times (no backtracking, no regex),
// or treat an unrecognised line as an error. Peer-controlled text (addresses,
// replies, header values) may contain any byte; only delimiters Postfix itself
// writes are trusted for splitting.
#include "retryguard/log/log_parser.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <ctime>

#include "log/log_parser_internal.hpp"
#include "log/syslog_header.hpp"
#include "retryguard/reply/reply.hpp"

namespace retryguard {

using namespace log_detail;

namespace {

int year_of(TimePoint t) {
    using namespace std::chrono;
    return int(year_month_day{floor<days>(t)}.year());
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
        const auto pri = syslog_header::scan_priority(s);
        if (!pri) {
            mark_unknown(out, "not-syslog");
            return false;
        }
        s.remove_prefix(pri->length);
        rfc5424 = syslog_header::take_rfc5424_version(s);
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
        // Structured data: lenient here (a line, not a datagram): whatever
        // does not close runs to the end of the line.
        syslog_header::skip_structured_data(s);
        if (!s.empty() && s[0] == ' ') s.remove_prefix(1);
        syslog_header::skip_bom(s);
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