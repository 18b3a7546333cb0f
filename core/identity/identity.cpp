// identity.cpp -- Message-ID normalisation and the content fingerprint (see
// identity.hpp for the rules). Owns only text normalisation and hashing; it
// must never decide anything about a message and never throw.
#include "retryguard/identity/identity.hpp"
#include "retryguard/text/text.hpp"

#include <re2/re2.h>

#include <openssl/evp.h>

#include <algorithm>
#include <cctype>
#include <cstdio>

namespace retryguard {

namespace {

bool is_wsp(char c) noexcept {
    return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

// Removes RFC 5322 comments "(...)" (nested, quoted-pairs) outside quoted strings.
// nullopt when parentheses are unbalanced.
std::optional<std::string> strip_comments(std::string_view in) {
    std::string out;
    out.reserve(in.size());
    int depth = 0;
    bool quoted = false;
    for (std::size_t i = 0; i < in.size(); ++i) {
        char c = in[i];
        if (c == '\\' && i + 1 < in.size() && (depth > 0 || quoted)) {
            if (depth == 0) {
                out += c;
                out += in[i + 1];
            }
            ++i;
            continue;
        }
        if (depth == 0 && c == '"') quoted = !quoted;
        if (!quoted && c == '(') {
            ++depth;
            continue;
        }
        if (!quoted && c == ')') {
            if (depth == 0) return std::nullopt;
            --depth;
            continue;
        }
        if (depth == 0) out += c;
    }
    if (depth != 0) return std::nullopt;
    return out;
}

std::string hex(const unsigned char* p, std::size_t n) {
    static const char digits[] = "0123456789abcdef";
    std::string out;
    out.reserve(n * 2);
    for (std::size_t i = 0; i < n; ++i) {
        out += digits[p[i] >> 4];
        out += digits[p[i] & 15];
    }
    return out;
}

// The boundary parameter of a Content-Type value (quoted or token), or "".
std::string boundary_param(std::string_view text) {
    for (std::size_t i = 0; i + 9 <= text.size(); ++i) {
        if (!text::istarts_with(text.substr(i), "boundary=")) continue;
        if (i > 0 && !(is_wsp(text[i - 1]) || text[i - 1] == ';')) continue;
        std::size_t p = i + 9;
        std::string value;
        if (p < text.size() && text[p] == '"') {
            ++p;
            while (p < text.size() && text[p] != '"') value += text[p++];
        } else {
            while (p < text.size() && text[p] != ';' && !is_wsp(text[p])) value += text[p++];
        }
        if (value.size() > 200) value.clear();  // RFC 2046: at most 70 characters
        return value;
    }
    return {};
}

constexpr std::size_t kMaxLine = 4096;
constexpr std::size_t kMaxBoundaries = 64;

}  // namespace

bool marks_automated(std::string_view name, std::string_view value) noexcept {
    // The first token of the value: up to ';', '(' or white space, after leading white space.
    std::size_t b = 0;
    while (b < value.size() && (is_wsp(value[b]) || value[b] == '\r' || value[b] == '\n')) ++b;
    std::size_t e = b;
    while (e < value.size() && value[e] != ';' && value[e] != '(' && !is_wsp(value[e]) && value[e] != '\r' &&
           value[e] != '\n')
        ++e;
    const std::string_view token = value.substr(b, e - b);
    if (text::iequals(name, "Auto-Submitted")) return !token.empty() && !text::iequals(token, "no");
    if (text::iequals(name, "Precedence"))
        return text::iequals(token, "bulk") || text::iequals(token, "list") || text::iequals(token, "junk");
    return text::iequals(name, "List-Id") || text::iequals(name, "List-Unsubscribe") ||
           text::iequals(name, "List-Post");
}

std::optional<std::string> parse_message_id_header(std::string_view value) {
    if (value.size() > kMaxMessageIdLength * 4) return std::nullopt;
    auto stripped = strip_comments(value);
    if (!stripped) return std::nullopt;
    std::string_view s = *stripped;
    // the first <...>, or the whole value when there are no brackets
    std::string_view id = s;
    auto open = s.find('<');
    if (open != std::string_view::npos) {
        auto close = s.find('>', open);
        if (close == std::string_view::npos) return std::nullopt;
        id = s.substr(open + 1, close - open - 1);
    } else if (s.find('>') != std::string_view::npos) {
        return std::nullopt;
    }
    std::string compact;
    for (char c : id) {
        if (is_wsp(c)) continue;
        auto u = static_cast<unsigned char>(c);
        if (u < 0x21 || u == 0x7f || c == '<' || c == '>') return std::nullopt;
        compact += c;
    }
    if (compact.empty() || compact.size() > kMaxMessageIdLength) return std::nullopt;
    auto at = compact.rfind('@');
    if (at != std::string::npos)
        for (std::size_t i = at + 1; i < compact.size(); ++i) compact[i] = text::ascii_lower(compact[i]);
    return compact;
}

std::string normalize_subject(std::string_view subject) {
    std::string out;
    bool space = false;
    for (char c : subject) {
        if (is_wsp(c)) {
            space = !out.empty();
            continue;
        }
        if (space) out += ' ';
        space = false;
        out += text::ascii_lower(c);
    }
    return out;
}

// SHA-1 from OpenSSL's libcrypto: the fingerprint is a duplicate key, not a
// security boundary, and libcrypto uses the CPU's SHA instructions (0.7 us
// for a 1 KB body here, against 7 us for Boost.UUID's portable SHA-1 that
// computed the same digests before). Any libcrypto failure disables the
// fingerprint of that message (finish() returns ""): it is then matched by
// Message-ID only.
struct FingerprintBuilder::Hash {
    EVP_MD_CTX* ctx = nullptr;
    bool ok = false;
    static const EVP_MD* sha1() {
        static const EVP_MD* md = EVP_MD_fetch(nullptr, "SHA1", nullptr);  // once: fetching is not free
        return md;
    }
    Hash() : ctx(EVP_MD_CTX_new()) { ok = ctx && sha1() && EVP_DigestInit_ex(ctx, sha1(), nullptr) == 1; }
    ~Hash() { EVP_MD_CTX_free(ctx); }
    Hash(const Hash&) = delete;
    Hash& operator=(const Hash&) = delete;
    void update(const void* p, std::size_t n) {
        if (ok && n) ok = EVP_DigestUpdate(ctx, p, n) == 1;
    }
    // The digest of everything fed, and the context restarted for a new one.
    bool digest(unsigned char (&out)[20]) {
        unsigned int len = 0;
        ok = ok && EVP_DigestFinal_ex(ctx, out, &len) == 1 && len == 20 &&
             EVP_DigestInit_ex(ctx, sha1(), nullptr) == 1;
        return ok;
    }
};

FingerprintBuilder::FingerprintBuilder(FingerprintParts parts, std::size_t body_limit,
                                       std::shared_ptr<const re2::RE2> subject_ignore)
    : parts_(parts),
      body_limit_(body_limit),
      subject_ignore_(std::move(subject_ignore)),
      body_hash_(std::make_unique<Hash>()) {}
FingerprintBuilder::~FingerprintBuilder() = default;
FingerprintBuilder::FingerprintBuilder(FingerprintBuilder&&) noexcept = default;
FingerprintBuilder& FingerprintBuilder::operator=(FingerprintBuilder&&) noexcept = default;

void FingerprintBuilder::sender(std::string_view envelope_sender) {
    std::string_view s = envelope_sender;
    while (!s.empty() && (is_wsp(s.front()) || s.front() == '<')) s.remove_prefix(1);
    while (!s.empty() && (is_wsp(s.back()) || s.back() == '>')) s.remove_suffix(1);
    sender_ = text::ascii_lower(s.substr(0, std::min<std::size_t>(s.size(), 1024)));
}

void FingerprintBuilder::header(std::string_view name, std::string_view value) {
    if (value.size() > 64 * 1024) value = value.substr(0, 64 * 1024);
    // every header of every message passes here: compare without copying
    auto is = [name](std::string_view lower_name) { return text::iequals(name, lower_name); };
    if (!have_subject_ && is("subject")) {
        subject_ = normalize_subject(value);
        if (subject_ignore_ && parts_.subject && RE2::GlobalReplace(&subject_, *subject_ignore_, "") > 0)
            subject_ = normalize_subject(subject_);  // trimmed again where a match left blanks
        have_subject_ = true;
    } else if (is("content-type")) {
        note_boundary(value);
    }
}

void FingerprintBuilder::note_boundary(std::string_view text) {
    auto b = boundary_param(text);
    if (b.empty() || boundaries_.size() >= kMaxBoundaries) return;
    if (std::find(boundaries_.begin(), boundaries_.end(), b) == boundaries_.end())
        boundaries_.push_back(std::move(b));
}

void FingerprintBuilder::feed(std::string_view bytes) {
    // whitespace never counts: re-wrapping and line endings hash the same
    char buf[512];
    std::size_t n = 0;
    for (char c : bytes) {
        if (is_wsp(c)) continue;
        buf[n++] = c;
        if (n == sizeof buf) {
            body_hash_->update(buf, n);
            n = 0;
        }
    }
    if (n) body_hash_->update(buf, n);
}

void FingerprintBuilder::body_line(std::string_view line) {
    while (!line.empty() && is_wsp(line.back())) line.remove_suffix(1);
    if (line.size() >= 2 && line[0] == '-' && line[1] == '-') {
        std::string_view rest = line.substr(2);
        for (const auto& b : boundaries_) {
            if (rest == b) return feed("\x01--B");
            if (rest.size() == b.size() + 2 && rest.substr(0, b.size()) == b && rest.substr(b.size()) == "--")
                return feed("\x01--B--");
        }
    }
    auto pos = std::string_view::npos;
    for (std::size_t i = 0; i + 9 <= line.size(); ++i)
        if (text::ascii_lower(line[i]) == 'b' && text::istarts_with(line.substr(i), "boundary=")) {
            pos = i;
            break;
        }
    if (pos != std::string_view::npos) {
        note_boundary(line.substr(pos > 0 ? pos - 1 : pos));
        feed(line.substr(0, pos));
        return feed("boundary=\x01B");
    }
    if (!line.empty() && line.back() == '=') line.remove_suffix(1);  // quoted-printable soft break
    feed(line);
}

void FingerprintBuilder::flush_line() {
    if (!line_overflow_) body_line(line_);
    line_.clear();
    line_overflow_ = false;
}

void FingerprintBuilder::body(std::string_view chunk) {
    if (!parts_.body || body_seen_ >= body_limit_) return;
    if (chunk.size() > body_limit_ - body_seen_) chunk = chunk.substr(0, body_limit_ - body_seen_);
    body_seen_ += chunk.size();
    while (!chunk.empty()) {
        auto nl = chunk.find('\n');
        std::string_view piece = chunk.substr(0, nl);
        if (line_overflow_) {
            feed(piece);
        } else if (line_.size() + piece.size() > kMaxLine) {
            // a line this long is no boundary: hash it as it comes
            feed(line_);
            feed(piece);
            line_.clear();
            line_overflow_ = true;
        } else {
            line_.append(piece);
        }
        if (nl == std::string_view::npos) break;
        flush_line();
        chunk.remove_prefix(nl + 1);
    }
}

std::string FingerprintBuilder::finish() {
    if (!parts_.any() || !body_hash_) return {};
    if (parts_.body && (!line_.empty() || line_overflow_)) flush_line();
    Hash& h = *body_hash_;
    unsigned char body_digest[20] = {};
    if (!h.digest(body_digest)) {
        body_hash_.reset();
        return {};
    }
    // the same context, restarted, hashes the parts
    auto put = [&h](std::string_view tag, std::string_view v) {
        h.update(tag.data(), tag.size());
        h.update(v.data(), v.size());
        h.update("\0", 1);
    };
    put("v1", "");
    if (parts_.sender) put("s:", sender_);
    if (parts_.subject) put("j:", subject_);
    if (parts_.body)
        put("b:", std::string_view(reinterpret_cast<const char*>(body_digest), sizeof body_digest));
    unsigned char out[20];
    bool ok = h.digest(out);
    body_hash_.reset();
    return ok ? hex(out, sizeof out) : std::string();
}

}  // namespace retryguard
