// classify_util.hpp -- the shipped classifier rules (conf/classifier.yaml),
// loaded once, for the classifier tests.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>

#include "retryguard/classify/classifier.hpp"

namespace retryguard::test {

inline const std::filesystem::path kShippedRules =
    std::filesystem::path(RETRYGUARD_SOURCE_DIR) / "conf" / "classifier.yaml";

inline const Classifier& shipped_classifier() {
    static const Classifier c = [] {
        auto r = Classifier::load(kShippedRules);
        if (!r) ADD_FAILURE() << r.error().message;
        return std::move(r).value();
    }();
    return c;
}

}  // namespace retryguard::test
