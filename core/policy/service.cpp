// service.cpp -- stage selection, fail-open answers and metrics for the policy
// daemon.
//
// Owns the per-request bookkeeping shared by every way of running a decider.
// Must never block or throw: it runs on the daemon's event loop.
#include <cctype>

#include <fmt/format.h>

#include "retryguard/policy/policy_service.hpp"
#include "retryguard/text/text.hpp"

namespace retryguard {
namespace {

constexpr std::array<std::string_view, kPolicyStageCount> kStageNames = {
    "CONNECT", "EHLO", "HELO", "MAIL", "RCPT", "DATA", "END-OF-MESSAGE", "VRFY", "ETRN", "other"};
constexpr std::array<std::string_view, kFailOpenReasonCount> kFailOpenNames = {"timeout", "decider_error",
                                                                               "overload"};

}  // namespace

std::string_view to_string(PolicyStage stage) noexcept {
    return kStageNames[static_cast<std::size_t>(stage)];
}
std::string_view to_string(FailOpenReason reason) noexcept {
    return kFailOpenNames[static_cast<std::size_t>(reason)];
}

PolicyStage policy_stage_of(std::string_view state) noexcept {
    // RCPT first: it is nearly every request.
    if (state == "RCPT") return PolicyStage::rcpt;
    for (std::size_t i = 0; i + 1 < kPolicyStageCount; ++i) {
        if (state == kStageNames[i]) return static_cast<PolicyStage>(i);
    }
    return PolicyStage::other;
}

Result<PolicyStageSet> PolicyStageSet::parse(std::string_view text) {
    PolicyStageSet set;
    while (!text.empty()) {
        const auto sep = text.find_first_of(", ");
        const std::string_view word = text.substr(0, sep);
        text.remove_prefix(sep == std::string_view::npos ? text.size() : sep + 1);
        if (word.empty()) continue;
        bool found = false;
        for (std::size_t i = 0; i + 1 < kPolicyStageCount; ++i) {
            if (text::iequals(word, kStageNames[i])) {
                set.add(static_cast<PolicyStage>(i));
                found = true;
            }
        }
        if (!found) {
            return make_error(
                ErrorKind::config,
                fmt::format("unknown SMTP stage '{}' (expected CONNECT, EHLO, HELO, MAIL, RCPT, "
                            "DATA, END-OF-MESSAGE, VRFY or ETRN)",
                            word));
        }
    }
    return set;
}

std::string PolicyStageSet::to_string() const {
    std::string out;
    for (std::size_t i = 0; i + 1 < kPolicyStageCount; ++i) {
        if (!contains(static_cast<PolicyStage>(i))) continue;
        if (!out.empty()) out += ',';
        out += kStageNames[i];
    }
    return out;
}

void PolicyMetrics::latency(std::uint64_t us) noexcept {
    std::size_t i = 0;
    while (i < kLatencyBoundsUs.size() && us > kLatencyBoundsUs[i]) ++i;
    add(latency_buckets_[i]);
    latency_sum_us_.fetch_add(us, std::memory_order_relaxed);
}

std::string PolicyMetrics::render_prometheus() const {
    std::string o;
    o.reserve(4096);
    auto counter = [&](std::string_view name, std::string_view help) {
        fmt::format_to(std::back_inserter(o), "# HELP {} {}\n# TYPE {} counter\n", name, help, name);
    };
    counter("retryguard_policy_requests_total", "Policy requests answered, by SMTP stage.");
    for (std::size_t i = 0; i < kPolicyStageCount; ++i)
        fmt::format_to(std::back_inserter(o), "retryguard_policy_requests_total{{stage=\"{}\"}} {}\n",
                       kStageNames[i], get(requests_[i]));
    counter("retryguard_policy_actions_total", "Answers sent, by action kind.");
    for (std::size_t i = 0; i < kActionKindCount; ++i)
        fmt::format_to(std::back_inserter(o), "retryguard_policy_actions_total{{action=\"{}\"}} {}\n",
                       to_string(static_cast<ActionKind>(i)), get(actions_[i]));
    counter("retryguard_policy_fail_open_total", "Requests answered DUNNO because the decision failed.");
    for (std::size_t i = 0; i < kFailOpenReasonCount; ++i)
        fmt::format_to(std::back_inserter(o), "retryguard_policy_fail_open_total{{reason=\"{}\"}} {}\n",
                       kFailOpenNames[i], get(fail_open_[i]));
    counter("retryguard_policy_malformed_total", "Connections closed for a malformed request, by reason.");
    for (std::size_t i = 1; i < kPolicyErrorCount; ++i)
        fmt::format_to(std::back_inserter(o), "retryguard_policy_malformed_total{{reason=\"{}\"}} {}\n",
                       to_string(static_cast<PolicyError>(i)), get(malformed_[i]));
    counter("retryguard_policy_unknown_attributes_total", "Request attributes this version does not know.");
    fmt::format_to(std::back_inserter(o), "retryguard_policy_unknown_attributes_total {}\n",
                   get(unknown_attributes_));
    counter("retryguard_policy_idle_timeouts_total", "Connections closed by the idle or request timeout.");
    fmt::format_to(std::back_inserter(o), "retryguard_policy_idle_timeouts_total {}\n", get(idle_timeouts_));
    counter("retryguard_policy_reloads_total", "Reloads (SIGHUP), by result.");
    fmt::format_to(std::back_inserter(o),
                   "retryguard_policy_reloads_total{{result=\"ok\"}} {}\n"
                   "retryguard_policy_reloads_total{{result=\"failed\"}} {}\n",
                   get(reloads_ok_), get(reloads_failed_));
    counter("retryguard_policy_connections_total", "Connections accepted.");
    fmt::format_to(std::back_inserter(o), "retryguard_policy_connections_total {}\n",
                   get(connections_total_));
    counter("retryguard_policy_connections_refused_total", "Connections refused at the connection limit.");
    fmt::format_to(std::back_inserter(o), "retryguard_policy_connections_refused_total {}\n",
                   get(connections_refused_));
    fmt::format_to(std::back_inserter(o),
                   "# HELP retryguard_policy_open_connections Connections open now.\n"
                   "# TYPE retryguard_policy_open_connections gauge\n"
                   "retryguard_policy_open_connections {}\n",
                   open_connections_.load(std::memory_order_relaxed));
    fmt::format_to(std::back_inserter(o),
                   "# HELP retryguard_policy_destinations Destinations in the decider's table.\n"
                   "# TYPE retryguard_policy_destinations gauge\n"
                   "retryguard_policy_destinations {}\n",
                   get(destinations_));
    o += "# HELP retryguard_policy_decision_seconds Time from a complete request to its answer.\n"
         "# TYPE retryguard_policy_decision_seconds histogram\n";
    std::uint64_t cumulative = 0;
    for (std::size_t i = 0; i < kLatencyBoundsUs.size(); ++i) {
        cumulative += get(latency_buckets_[i]);
        fmt::format_to(std::back_inserter(o), "retryguard_policy_decision_seconds_bucket{{le=\"{}\"}} {}\n",
                       kLatencyBoundsUs[i] / 1e6, cumulative);
    }
    cumulative += get(latency_buckets_[kLatencyBoundsUs.size()]);
    fmt::format_to(std::back_inserter(o),
                   "retryguard_policy_decision_seconds_bucket{{le=\"+Inf\"}} {}\n"
                   "retryguard_policy_decision_seconds_sum {}\n"
                   "retryguard_policy_decision_seconds_count {}\n",
                   cumulative, get(latency_sum_us_) / 1e6, cumulative);
    if (const auto extra = extra_.load()) o += *extra;
    return o;
}

bool PolicyService::wants_decision(const PolicyRequest& request) noexcept {
    const PolicyStage stage = policy_stage_of(request.get(PolicyAttr::protocol_state));
    metrics_.request(stage);
    if (request.unknown_attributes() != 0) metrics_.unknown_attributes(request.unknown_attributes());
    return stages_.contains(stage);
}

void PolicyService::answer(std::string& out, const Decision& decision) noexcept {
    metrics_.action(decision.kind);
    format_policy_answer(out, decision.action);
}

void PolicyService::answer_dunno(std::string& out) noexcept {
    metrics_.action(ActionKind::dunno);
    format_policy_answer(out, "DUNNO");
}

std::string_view PolicyService::answer_fail_open(std::string& out, FailOpenReason reason) noexcept {
    metrics_.fail_open(reason);
    const bool tempfail = reason == FailOpenReason::decider_error
                              ? tempfail_internal_.load(std::memory_order_relaxed)
                              : tempfail_timeout_.load(std::memory_order_relaxed);
    if (!tempfail) {
        answer_dunno(out);
        return "DUNNO";
    }
    tempfailed_.fetch_add(1, std::memory_order_relaxed);
    metrics_.action(ActionKind::defer_if_permit);
    format_policy_answer(
        out, reason == FailOpenReason::decider_error
                 ? "DEFER_IF_PERMIT retryguard: policy check failed, try again later"
                 : "DEFER_IF_PERMIT retryguard: policy check not completed in time, try again later");
    return "DEFER_IF_PERMIT";
}

Decision PolicyService::decide_contained(PolicyDecider& decider, const PolicyRequest& request,
                                         PolicyDeadline deadline, bool& failed) noexcept {
    failed = false;
    try {
        return decider.decide(request, deadline);
    } catch (...) {
        failed = true;
        return {};
    }
}

}  // namespace retryguard
