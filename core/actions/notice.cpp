// notice.cpp -- the text of a "do not resend" notice: the configured template
// filled in, with the headers that mark it as automatic. Owns how outside text
// (the receiving server's reply, addresses) is carried into a mail: cleaned of
// control characters, never inside a header unchecked, long lines wrapped.
// Must never let a placeholder's value add a header or a line break to one.
#include <fmt/format.h>

#include <ctime>

#include "retryguard/actions/actions.hpp"
#include "retryguard/text/text.hpp"

namespace retryguard::actions {
namespace {

constexpr std::size_t kReplyWidth = 72;
constexpr std::size_t kBodyWidth = 76;
constexpr std::size_t kReplyLines = 12;
constexpr std::size_t kMaxRecipientsListed = 50;
constexpr std::size_t kMaxSubjectBytes = 200;

std::string human_time(TimePoint t) {
    const std::time_t tt =
        std::chrono::system_clock::to_time_t(std::chrono::time_point_cast<std::chrono::seconds>(t));
    std::tm tm{};
    gmtime_r(&tt, &tm);
    char buf[40];
    std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M UTC", &tm);
    return buf;
}

// A header value: printable ASCII only (non-ASCII would need RFC 2047), one
// line, at most `max` bytes.
std::string header_text(std::string_view s, std::size_t max) {
    std::string out;
    for (unsigned char c : s) {
        if (out.size() >= max) break;
        if (c < 0x20 || c == 0x7f)
            out.push_back(' ');
        else if (c > 0x7e)
            out.push_back('?');
        else
            out.push_back(static_cast<char>(c));
    }
    return out;
}

std::string fill(std::string_view tmpl, const std::map<std::string, std::string, std::less<>>& values) {
    std::string out;
    for (std::size_t i = 0; i < tmpl.size(); ++i) {
        if (tmpl[i] == '{') {
            const auto close = tmpl.find('}', i);
            if (close != std::string_view::npos) {
                auto it = values.find(tmpl.substr(i + 1, close - i - 1));
                if (it != values.end()) {
                    out += it->second;
                    i = close;
                    continue;
                }
            }
        }
        out.push_back(tmpl[i]);
    }
    return out;
}

}  // namespace

bool safe_header_address(std::string_view a) noexcept {
    if (a.empty() || a.size() > 320) return false;
    const auto at = a.rfind('@');
    if (at == std::string_view::npos || at == 0 || at + 1 == a.size()) return false;
    for (unsigned char c : a)
        if (c <= 0x20 || c >= 0x7f || c == '<' || c == '>' || c == ',' || c == ';' || c == '"' || c == '(' ||
            c == ')' || c == '\\')
            return false;
    return true;
}

std::string mail_text(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    for (std::size_t i = 0; i < s.size();) {
        const auto c = static_cast<unsigned char>(s[i]);
        const std::size_t n = text::utf8_sequence_length(s, i);
        if (n == 0) {
            out.push_back('?');
            ++i;
            continue;
        }
        if (n == 1) {
            if (c == '\t')
                out.push_back(' ');
            else if (c >= 0x20 && c != 0x7f)
                out.push_back(static_cast<char>(c));
            ++i;
            continue;
        }
        // C1 controls (U+0080..U+009F) and the line/direction marks are controls too.
        const std::string_view seq = s.substr(i, n);
        const bool c1 = n == 2 && c == 0xc2 && static_cast<unsigned char>(s[i + 1]) < 0xa0;
        const bool marks = seq == "\u2028" || seq == "\u2029" || (seq >= "\u202a" && seq <= "\u202e") ||
                           (seq >= "\u2066" && seq <= "\u2069");
        if (!c1 && !marks) out.append(seq);
        i += n;
    }
    return out;
}

std::string wrap_text(std::string_view text, std::size_t width, std::string_view indent,
                      std::size_t max_lines) {
    std::string out;
    std::size_t lines = 0, pos = 0;
    while (pos < text.size() && text[pos] == ' ') ++pos;
    while (pos < text.size()) {
        if (lines == max_lines) {
            out += " ...";
            break;
        }
        std::size_t take = std::min(width, text.size() - pos);
        if (pos + take < text.size()) {
            const auto blank = text.rfind(' ', pos + take);
            if (blank != std::string_view::npos && blank > pos + width / 2) take = blank - pos;
            // Never inside a UTF-8 sequence.
            while (take > 1 && (static_cast<unsigned char>(text[pos + take]) & 0xc0) == 0x80) --take;
        }
        if (lines) out.push_back('\n');
        out.append(indent);
        out.append(text.substr(pos, take));
        ++lines;
        pos += take;
        while (pos < text.size() && text[pos] == ' ') ++pos;
    }
    return out;
}

std::string render_notice(const Notice& n, const NoticeTemplate& t) {
    std::map<std::string, std::string, std::less<>> v;
    v["queue_id"] = mail_text(n.queue_id);
    v["destination"] = mail_text(n.destination);
    v["sender"] = mail_text(n.sender);
    v["category"] = std::string(to_string(n.category));
    v["since"] = human_time(n.time);
    v["expiry"] = human_time(n.expiry);
    std::string rcpts;
    for (std::size_t i = 0; i < n.recipients.size() && i < kMaxRecipientsListed; ++i)
        rcpts += (i ? "\n" : "") + wrap_text(mail_text(n.recipients[i]), kReplyWidth, "    ", 1);
    if (n.recipients.size() > kMaxRecipientsListed)
        rcpts += fmt::format("\n    (and {} more)", n.recipients.size() - kMaxRecipientsListed);
    v["recipients"] = rcpts;
    v["reply"] = wrap_text(mail_text(n.reply), kReplyWidth, "    ", kReplyLines);
    // A failure of this mail server itself has no remote postmaster to tell:
    // its escalation goes to the server's own administrator.
    const bool local = n.category == Category::local;
    v["reply_from"] = local ? "Our own mail server reported" : "The receiving mail server answered";
    v["side"] = local ? "of our own mail server" : "on the receiving side";
    const char* to_whom = local ? "this mail server's administrator" : "the recipient's postmaster";
    if (n.escalated)
        v["escalation"] =
            fmt::format("The problem has lasted long enough that it is being reported to {}.", to_whom);
    else if (n.escalation)
        v["escalation"] =
            fmt::format("If it lasts until {}, the problem is reported to {}, with the reply above.",
                        human_time(*n.escalation), to_whom);
    else
        v["escalation"] = "";

    // The subject gets the same values, made header-safe.
    std::map<std::string, std::string, std::less<>> hv;
    for (const auto& [k, val] : v) hv[k] = header_text(val, kMaxSubjectBytes);
    std::string msg;
    msg += "From: " + header_text(t.from, kMaxSubjectBytes) + "\n";
    msg += "To: <" + n.sender + ">\n";
    msg += "Subject: " + header_text(fill(t.subject, hv), kMaxSubjectBytes) + "\n";
    msg += "Auto-Submitted: auto-generated\n";
    msg += "Precedence: bulk\n";
    msg += "MIME-Version: 1.0\n";
    msg += "Content-Type: text/plain; charset=utf-8\n";
    msg += "Content-Transfer-Encoding: 8bit\n";
    msg += "\n";
    // Template lines are wrapped as a mail client would; the indented reply
    // and recipient lines are short already.
    const std::string body = fill(t.body, v);
    std::string wrapped;
    for (std::size_t pos = 0; pos <= body.size();) {
        auto nl = body.find('\n', pos);
        if (nl == std::string::npos) nl = body.size();
        const std::string_view line = std::string_view(body).substr(pos, nl - pos);
        wrapped += line.size() > kBodyWidth ? wrap_text(line, kBodyWidth, "", 1000) : std::string(line);
        wrapped += '\n';
        pos = nl + 1;
    }
    while (wrapped.size() > 1 && wrapped.ends_with("\n\n")) wrapped.pop_back();
    msg += wrapped;
    return msg;
}

}  // namespace retryguard::actions
