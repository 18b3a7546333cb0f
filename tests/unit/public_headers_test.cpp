// public_headers_test.cpp -- the public headers (include/retryguard/) compile
// on their own, together, and without yaml-cpp's or RE2's headers: those
// libraries are the core's business (core/config, core/classify), and a
// program that reads the configuration or the classifier's results does not
// compile them.
#include "retryguard/actions/actions.hpp"
#include "retryguard/category.hpp"
#include "retryguard/classify/classifier.hpp"
#include "retryguard/classify/status_codes.hpp"
#include "retryguard/config/config.hpp"
#include "retryguard/config/config_engine.hpp"
#include "retryguard/file_access.hpp"
#include "retryguard/follow/follower.hpp"
#include "retryguard/follow/position.hpp"
#include "retryguard/identity/identity.hpp"
#include "retryguard/identity/identity_filter.hpp"
#include "retryguard/identity/resend.hpp"
#include "retryguard/identity/resend_config.hpp"
#include "retryguard/ingest/ingest.hpp"
#include "retryguard/ledger/ledger.hpp"
#include "retryguard/log/event_json.hpp"
#include "retryguard/log/events.hpp"
#include "retryguard/log/log_parser.hpp"
#include "retryguard/log/log_reader.hpp"
#include "retryguard/logging/logging.hpp"
#include "retryguard/policy/ledger_decider.hpp"
#include "retryguard/policy/policy.hpp"
#include "retryguard/policy/policy_service.hpp"
#include "retryguard/postfix/postfix_wiring.hpp"
#include "retryguard/reply/reply.hpp"
#include "retryguard/report/report.hpp"
#include "retryguard/result.hpp"
#include "retryguard/rules/engine.hpp"
#include "retryguard/rules/verdict.hpp"
#include "retryguard/rules/verdict_log.hpp"
#include "retryguard/runtime/daemon_guard.hpp"
#include "retryguard/runtime/privileges.hpp"
#include "retryguard/runtime/runtime.hpp"
#include "retryguard/runtime/threads.hpp"
#include "retryguard/text/text.hpp"
#include "retryguard/time.hpp"

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
