// text_json_fuzz.cpp -- libFuzzer target for the JSON renderer of outside text
// (include/retryguard/text/text.hpp): any bytes as a string, a key and inside a
// document. Checks beyond "no crash": the output is valid UTF-8 without raw
// control bytes, nlohmann parses it, and it reads back as the replacement rule
// applied to the input; json_dump of a document holding the bytes parses too.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "retryguard/text/text.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    using namespace retryguard;
    const std::string_view in(reinterpret_cast<const char*>(data), size);
    const std::string out = text::json_string(in);
    if (!text::is_valid_utf8(out)) std::abort();
    for (unsigned char c : out)
        if (c < 0x20 || c == 0x7f) std::abort();
    nlohmann::json back = nlohmann::json::parse(out, nullptr, false);
    if (back.is_discarded() || !back.is_string()) std::abort();
    if (back.get<std::string>() != text::replace_invalid_utf8(in)) std::abort();

    nlohmann::json doc = {{std::string(in), {std::string(in), 1, nullptr, {{"k", std::string(in)}}}}};
    for (int indent : {-1, 2}) {
        nlohmann::json again = nlohmann::json::parse(text::json_dump(doc, indent), nullptr, false);
        if (again.is_discarded()) std::abort();
        const std::string want = text::replace_invalid_utf8(in);
        if (again.at(want).at(0) != want || again.at(want).at(3).at("k") != want) std::abort();
    }
    return 0;
}
