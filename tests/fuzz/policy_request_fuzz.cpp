// policy_request_fuzz.cpp -- feeds arbitrary bytes to the policy request
// parser, split at a point the input chooses, and checks the invariants the
// daemon relies on: no crash, progress on every feed, bounded buffering, and
// that a request parsed in one piece parses the same when split.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "retryguard/policy/policy.hpp"

using namespace retryguard;

namespace {

// Parses all of `in` in pieces of at most `piece` bytes; returns a digest of
// the requests seen (recipient domains and attribute counts), then "ERR" if
// the input was refused.
std::string run(std::string_view in, std::size_t piece) {
    PolicyLimits limits;
    limits.max_line_bytes = 256;
    limits.max_attributes = 16;
    limits.max_request_bytes = 1024;
    PolicyParser p(limits);
    std::string digest;
    while (!in.empty()) {
        std::string_view chunk = in.substr(0, piece);
        in.remove_prefix(chunk.size());
        for (;;) {
            const std::size_t before = chunk.size();
            const auto st = p.feed(chunk);
            // The reason may differ with the split (a control byte can be seen
            // before the line limit is), the requests before it may not.
            if (st == PolicyParser::State::error) {
                if (p.error() == PolicyError::none) std::abort();
                return digest + "ERR";
            }
            if (st == PolicyParser::State::need_more) {
                if (!chunk.empty()) std::abort();  // need_more must consume everything
                break;
            }
            if (chunk.size() >= before && before != 0) std::abort();  // complete must consume bytes
            const PolicyRequest& r = p.request();
            if (r.attribute_count() > limits.max_attributes) std::abort();
            if (r.get(PolicyAttr::request) != "smtpd_access_policy") std::abort();
            digest += std::string(r.recipient_domain()) + "/" + std::to_string(r.attribute_count()) + ";";
            if (chunk.empty()) break;
        }
    }
    return digest;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size == 0) return 0;
    const std::size_t piece = 1 + data[0] % 64;
    const std::string_view in(reinterpret_cast<const char*>(data) + 1, size - 1);
    const std::string whole = run(in, in.size() + 1);
    const std::string split = run(in, piece);
    if (whole != split) std::abort();
    std::string decoded;
    (void)xtext_decode(in.substr(0, 128), decoded);
    (void)parse_action(in.substr(0, 600));
    return 0;
}
