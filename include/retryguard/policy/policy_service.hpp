// policy_service.hpp -- what the policy daemon does with one parsed request,
// independent of sockets: which SMTP stages are consulted, fail-open, and the
// counters behind the Prometheus endpoint.
//
// Owns: stage selection, the answer for a request (asking the decider, or
// DUNNO when the stage is not configured or the decider failed), and metrics.
// Must never block, throw, or touch a socket; the daemon owns I/O and threads.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "retryguard/policy/policy.hpp"

namespace retryguard {

// protocol_state values Postfix sends (SMTPD_POLICY_README), plus "other".
enum class PolicyStage : std::uint8_t {
    connect,
    ehlo,
    helo,
    mail,
    rcpt,
    data,
    end_of_message,
    vrfy,
    etrn,
    other
};
inline constexpr std::size_t kPolicyStageCount = 10;
std::string_view to_string(PolicyStage stage) noexcept;  // Postfix's spelling: "RCPT", "END-OF-MESSAGE"
PolicyStage policy_stage_of(std::string_view protocol_state) noexcept;

class PolicyStageSet {
  public:
    static PolicyStageSet rcpt_only() noexcept {
        PolicyStageSet s;
        s.add(PolicyStage::rcpt);
        return s;
    }
    // "RCPT,DATA,END-OF-MESSAGE" (case-insensitive, comma or space separated).
    static Result<PolicyStageSet> parse(std::string_view text);
    void add(PolicyStage s) noexcept { bits_ |= 1u << static_cast<unsigned>(s); }
    bool contains(PolicyStage s) const noexcept { return (bits_ >> static_cast<unsigned>(s)) & 1u; }
    std::string to_string() const;

  private:
    std::uint32_t bits_ = 0;
};

enum class FailOpenReason : std::uint8_t { timeout, decider_error, overload };
inline constexpr std::size_t kFailOpenReasonCount = 3;
std::string_view to_string(FailOpenReason reason) noexcept;

// Counters for the metrics endpoint. Updated from the event loop and worker
// threads, read by the HTTP handler: relaxed atomics, no locks.
class PolicyMetrics {
  public:
    // Upper bounds of the latency histogram, in microseconds.
    static constexpr std::array<std::uint32_t, 14> kLatencyBoundsUs = {
        10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 25000, 50000, 100000, 250000};

    void request(PolicyStage stage) noexcept { add(requests_[idx(stage)]); }
    void action(ActionKind kind) noexcept { add(actions_[idx(kind)]); }
    void fail_open(FailOpenReason reason) noexcept { add(fail_open_[idx(reason)]); }
    void malformed(PolicyError error) noexcept { add(malformed_[idx(error)]); }
    void unknown_attributes(std::uint32_t n) noexcept {
        unknown_attributes_.fetch_add(n, std::memory_order_relaxed);
    }
    void idle_timeout() noexcept { add(idle_timeouts_); }
    void reload(bool ok) noexcept { add(ok ? reloads_ok_ : reloads_failed_); }
    void connection_opened() noexcept {
        add(connections_total_);
        open_connections_.fetch_add(1, std::memory_order_relaxed);
    }
    void connection_closed() noexcept { open_connections_.fetch_sub(1, std::memory_order_relaxed); }
    void connection_refused() noexcept { add(connections_refused_); }
    void latency(std::uint64_t microseconds) noexcept;
    void set_destinations(std::uint64_t n) noexcept { destinations_.store(n, std::memory_order_relaxed); }
    // Lines the ingest thread renders (follower, ledger, engine state) and
    // publishes whole; appended to the exposition as they are.
    void set_extra(std::shared_ptr<const std::string> text) noexcept { extra_.store(std::move(text)); }
    // What keeps the daemon from doing its job (e.g. a log source it cannot
    // read), one line each; /health answers 503 with them. Null or "" = none.
    void set_problems(std::shared_ptr<const std::string> text) noexcept { problems_.store(std::move(text)); }
    std::shared_ptr<const std::string> problems() const noexcept { return problems_.load(); }

    std::uint64_t requests(PolicyStage s) const noexcept { return get(requests_[idx(s)]); }
    std::uint64_t actions(ActionKind k) const noexcept { return get(actions_[idx(k)]); }
    std::uint64_t fail_opens(FailOpenReason r) const noexcept { return get(fail_open_[idx(r)]); }
    std::uint64_t malformed_count(PolicyError e) const noexcept { return get(malformed_[idx(e)]); }
    std::int64_t open_connections() const noexcept {
        return open_connections_.load(std::memory_order_relaxed);
    }

    // Prometheus text exposition format 0.0.4.
    std::string render_prometheus() const;

  private:
    using Counter = std::atomic<std::uint64_t>;
    template <typename E>
    static std::size_t idx(E e) noexcept {
        return static_cast<std::size_t>(e);
    }
    static void add(Counter& c) noexcept { c.fetch_add(1, std::memory_order_relaxed); }
    static std::uint64_t get(const Counter& c) noexcept { return c.load(std::memory_order_relaxed); }

    std::array<Counter, kPolicyStageCount> requests_{};
    std::array<Counter, kActionKindCount> actions_{};
    std::array<Counter, kFailOpenReasonCount> fail_open_{};
    std::array<Counter, kPolicyErrorCount> malformed_{};
    std::array<Counter, kLatencyBoundsUs.size() + 1> latency_buckets_{};
    Counter latency_sum_us_{0};
    Counter unknown_attributes_{0};
    Counter idle_timeouts_{0};
    Counter reloads_ok_{0};
    Counter reloads_failed_{0};
    Counter connections_total_{0};
    Counter connections_refused_{0};
    Counter destinations_{0};
    std::atomic<std::int64_t> open_connections_{0};
    std::atomic<std::shared_ptr<const std::string>> extra_;
    std::atomic<std::shared_ptr<const std::string>> problems_;
};

// The per-request steps that do not depend on how the decider is run.
class PolicyService {
  public:
    PolicyService(PolicyStageSet stages, PolicyMetrics& metrics) : stages_(stages), metrics_(metrics) {}

    // Counts the request; true if its stage is configured for a decision.
    // When false the answer is DUNNO (use answer_dunno()).
    bool wants_decision(const PolicyRequest& request) noexcept;
    // Appends the answer for `decision` to `out` and counts its action.
    void answer(std::string& out, const Decision& decision) noexcept;
    void answer_dunno(std::string& out) noexcept;
    // Appends the fallback answer and counts why the decision was abandoned:
    // DUNNO, or with tempfail set for that reason (errors.timeout for a
    // deadline or overload, errors.internal for a failed decider)
    // "DEFER_IF_PERMIT retryguard: ...", counted as tempfailed too.
    // Returns the verb answered: "DUNNO", or "DEFER_IF_PERMIT" when errors.* says tempfail.
    std::string_view answer_fail_open(std::string& out, FailOpenReason reason) noexcept;
    // errors.timeout and errors.internal: true = tempfail. Safe to call while
    // requests are answered (reload).
    void set_tempfail(bool on_timeout, bool on_internal) noexcept {
        tempfail_timeout_.store(on_timeout, std::memory_order_relaxed);
        tempfail_internal_.store(on_internal, std::memory_order_relaxed);
    }
    std::uint64_t tempfailed() const noexcept { return tempfailed_.load(std::memory_order_relaxed); }

    // Asks `decider` inline, containing any exception it lets escape.
    Decision decide_contained(PolicyDecider& decider, const PolicyRequest& request, PolicyDeadline deadline,
                              bool& failed) noexcept;

    PolicyMetrics& metrics() noexcept { return metrics_; }
    const PolicyStageSet& stages() const noexcept { return stages_; }

  private:
    PolicyStageSet stages_;
    PolicyMetrics& metrics_;
    std::atomic<bool> tempfail_timeout_{false}, tempfail_internal_{false};
    std::atomic<std::uint64_t> tempfailed_{0};
};

}  // namespace retryguard
