// reply_fuzz.cpp -- libFuzzer target for the reply parser and the classifier:
// any bytes as a wire reply, as a Postfix reason (with a dsn taken from the
// input's tail), then classified with the shipped rules. Checks invariants
// beyond "no crash": bounded text, codes that re-parse, a valid category.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "retryguard/classify/classifier.hpp"
#include "retryguard/reply/reply.hpp"

namespace {

const retryguard::Classifier& classifier() {
    static const retryguard::Classifier c = [] {
        auto r = retryguard::Classifier::load(std::filesystem::path(RETRYGUARD_SOURCE_DIR) / "conf" /
                                              "classifier.yaml");
        if (!r) std::abort();
        return std::move(r).value();
    }();
    return c;
}

void check(const retryguard::Reply& r) {
    using namespace retryguard;
    if (r.text.size() > kMaxReplyLength) std::abort();
    if (r.code != 0 && (r.code < 200 || r.code > 559)) std::abort();
    if (r.enhanced) {
        auto again = parse_enhanced_code(r.enhanced->str());
        if (!again || !(*again == *r.enhanced)) std::abort();
    }
    Classification c = classifier().classify(r);
    if (!category_from_string(to_string(c.category))) std::abort();
    if (c.retry_after && (c.retry_after->count() <= 0 || c.retry_after->count() > 7 * 24 * 3600))
        std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    std::string_view input(reinterpret_cast<const char*>(data), size);
    if (auto wire = retryguard::parse_smtp_reply(input)) check(*wire);
    std::string_view dsn = input.size() > 9 ? input.substr(input.size() - 9) : input;
    check(retryguard::parse_postfix_reason(input, dsn));
    check(retryguard::parse_postfix_reason(input));
    (void)retryguard::extract_retry_after(input);
    return 0;
}
