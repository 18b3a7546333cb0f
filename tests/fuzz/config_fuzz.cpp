// config_fuzz.cpp -- YAML text in, the config loader must never crash, hang or
// leak, whatever the bytes; a config that loads must also resolve any domain.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "retryguard/config/config.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    std::string_view text(reinterpret_cast<const char*>(data), size);
    auto out = retryguard::config::load_string(text, "fuzz.yaml");
    for (const auto& e : out.errors) (void)e.to_string();
    if (out.ok()) {
        // Use the tail of the input as a domain and relay host, so matching sees hostile names too.
        std::string_view tail = text.substr(size > 64 ? size - 64 : 0);
        auto r = out.config->resolve(tail, tail);
        (void)r.reason();
        (void)out.config->resolve("a.example.com", "mx1.provider.net");
    }
    return 0;
}
