// rules_fuzz.cpp -- libFuzzer target for classifier rule files: any bytes as
// YAML, parsed as a rule layer and compiled over the shipped rules. A bad file
// must give an Error with a position, never a crash or an exception.
#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <cstdlib>
#include <string>

#include "retryguard/classify/classifier.hpp"

namespace {

const retryguard::RuleFile& shipped() {
    static const retryguard::RuleFile f = [] {
        auto r = retryguard::parse_rules_file(std::filesystem::path(RETRYGUARD_SOURCE_DIR) / "conf" /
                                              "classifier.yaml");
        if (!r) std::abort();
        return std::move(r).value();
    }();
    return f;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size > 65536) return 0;
    YAML::Node node;
    try {
        node = YAML::Load(std::string(reinterpret_cast<const char*>(data), size));
    } catch (const YAML::Exception&) {
        return 0;  // not YAML at all: parse_rules_file reports these, tested elsewhere
    }
    auto rules = retryguard::parse_rules(node, "fuzz.yaml");
    if (!rules) {
        if (rules.error().message.rfind("fuzz.yaml", 0) != 0) std::abort();
        return 0;
    }
    auto classifier = retryguard::Classifier::build(shipped(), {*rules});
    if (classifier) (void)classifier->classify_reason("451 4.3.5 System config error");
    return 0;
}
