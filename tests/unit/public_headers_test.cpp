// public_headers_test.cpp -- the public headers (include/retryguard/) compile
// on their own, together, and without yaml-cpp's or RE2's headers: those
// libraries are the core's business (core/config, core/classify), and a
// program that reads the configuration or the classifier's results does not
// compile them.
#include "retryguard/actions.hpp"
#include "retryguard/category.hpp"
#include "retryguard/classifier.hpp"
#include "retryguard/config.hpp"
#include "retryguard/config_engine.hpp"
#include "retryguard/daemon_guard.hpp"
#include "retryguard/engine.hpp"
#include "retryguard/event_json.hpp"
#include "retryguard/events.hpp"
#include "retryguard/file_access.hpp"
#include "retryguard/follower.hpp"
#include "retryguard/identity.hpp"
#include "retryguard/identity_filter.hpp"
#include "retryguard/ingest.hpp"
#include "retryguard/ledger.hpp"
#include "retryguard/ledger_decider.hpp"
#include "retryguard/log_parser.hpp"
#include "retryguard/log_reader.hpp"
#include "retryguard/logging.hpp"
#include "retryguard/policy.hpp"
#include "retryguard/policy_service.hpp"
#include "retryguard/position.hpp"
#include "retryguard/postfix_wiring.hpp"
#include "retryguard/privileges.hpp"
#include "retryguard/reply.hpp"
#include "retryguard/report.hpp"
#include "retryguard/resend.hpp"
#include "retryguard/resend_config.hpp"
#include "retryguard/result.hpp"
#include "retryguard/runtime.hpp"
#include "retryguard/status_codes.hpp"
#include "retryguard/text.hpp"
#include "retryguard/time.hpp"
#include "retryguard/verdict.hpp"
#include "retryguard/verdict_log.hpp"

#include <gtest/gtest.h>

namespace {

#if defined(YAML_H_62B23520_7C8E_11DE_8A39_0800200C9A66) || defined(YAML_CPP_NODE_NODE_H_)
constexpr bool kYamlCppIncluded = true;
#else
constexpr bool kYamlCppIncluded = false;
#endif
#if defined(RE2_RE2_H_) || defined(RE2_SET_H_)
constexpr bool kRe2Included = true;
#else
constexpr bool kRe2Included = false;
#endif

TEST(PublicHeaders, LeaveYamlCppAndRe2ToTheCore) {
    EXPECT_FALSE(kYamlCppIncluded) << "a public header includes yaml-cpp";
    EXPECT_FALSE(kRe2Included) << "a public header includes RE2";
}

}  // namespace
