// identity_fuzz.cpp -- the milter's untrusted input through the core: a
// Message-ID header value, a Subject, a Content-Type and a body in arbitrary
// chunks must never crash, hang or break the fingerprint's invariants.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "retryguard/identity/identity.hpp"
#include "retryguard/identity/resend.hpp"

using namespace retryguard;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    std::string_view in(reinterpret_cast<const char*>(data), size);
    // the first bytes choose the split points, the rest is the message
    std::size_t a = size > 0 ? data[0] : 0, b = size > 1 ? data[1] : 0;
    std::string_view rest = in.substr(std::min<std::size_t>(2, size));
    std::string_view id = rest.substr(0, std::min(a, rest.size()));
    std::string_view body = rest.substr(id.size());

    if (auto mid = parse_message_id_header(id)) {
        if (mid->empty() || mid->size() > kMaxMessageIdLength) __builtin_trap();
        if (parse_message_id_header(*mid) != *mid) __builtin_trap();  // idempotent
    }
    (void)normalize_subject(id);

    FingerprintBuilder whole, chunked;
    for (auto* f : {&whole, &chunked}) {
        f->sender(id);
        f->header("Subject", id);
        f->header("Content-Type", id);
    }
    whole.body(body);
    std::size_t step = b + 1;
    for (std::size_t i = 0; i < body.size(); i += step) chunked.body(body.substr(i, step));
    auto x = whole.finish(), y = chunked.finish();
    if (x != y || x.size() != 40) __builtin_trap();  // chunking never changes the fingerprint

    (void)quote_value(id);
    return 0;
}
