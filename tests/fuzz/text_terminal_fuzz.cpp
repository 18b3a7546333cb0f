// text_terminal_fuzz.cpp -- libFuzzer target for the terminal and HTML
// renderers and the UTF-8-safe cutting (include/retryguard/text/text.hpp). Checks:
// terminal output is valid UTF-8 with no byte below 0x20, no DEL, no C1 or
// bidi code point, and is unchanged by a second rendering; HTML output holds no
// raw markup character; a cut prefix never ends inside a character; a policy
// answer value respects its byte limit.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "retryguard/text/text.hpp"

namespace {

using namespace retryguard;

void check_screen_safe(std::string_view s) {
    if (!text::is_valid_utf8(s)) std::abort();
    for (std::size_t i = 0; i < s.size();) {
        const auto c = static_cast<unsigned char>(s[i]);
        if (c < 0x20 || c == 0x7f) std::abort();
        if (c == 0xC2 && i + 1 < s.size() && static_cast<unsigned char>(s[i + 1]) <= 0x9F)
            std::abort();  // C1
        if (c == 0xE2 && i + 2 < s.size() && static_cast<unsigned char>(s[i + 1]) == 0x80) {
            const auto d = static_cast<unsigned char>(s[i + 2]);
            if (d == 0xA8 || d == 0xA9 || (d >= 0xAA && d <= 0xAE)) std::abort();
        }
        if (c == 0xE2 && i + 2 < s.size() && static_cast<unsigned char>(s[i + 1]) == 0x81) {
            const auto d = static_cast<unsigned char>(s[i + 2]);
            if (d >= 0xA6 && d <= 0xA9) std::abort();
        }
        i += text::utf8_sequence_length(s, i);
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string_view in(reinterpret_cast<const char*>(data), size);
    const std::string shown = text::terminal(in);
    check_screen_safe(shown);
    if (text::terminal(shown) != shown) std::abort();

    const std::string page = text::html(in);
    check_screen_safe(page);
    if (page.find_first_of("<>\"'") != std::string::npos) std::abort();

    const std::size_t limit = size == 0 ? 0 : data[0] % (size + 1);
    const std::string_view cut = text::utf8_prefix(in, limit);
    if (cut.size() > limit || cut.data() != in.data()) std::abort();
    if (cut.size() + 3 < limit && cut.size() < in.size()) std::abort();  // never more than one character lost
    // The rest starts where a character (or a stray byte) starts.
    if (cut.size() < in.size() &&
        text::replace_invalid_utf8(cut) + text::replace_invalid_utf8(in.substr(cut.size())) !=
            text::replace_invalid_utf8(in))
        std::abort();

    const std::string reply = text::policy_text(in, limit);
    if (reply.size() > limit) std::abort();
    if (!text::is_valid_utf8(reply)) std::abort();
    for (unsigned char c : reply)
        if (c < 0x20 || c == 0x7f) std::abort();
    return 0;
}
