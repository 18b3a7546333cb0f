// pending_store.cpp -- the PendingStore over the ledger (SQLite or Redis, as
// the spec says). Glue only: the ledger decides what "pending" means.
#include "pending_store.hpp"

#include <fmt/format.h>

#include "retryguard/ledger.hpp"

namespace retryguard::milter {

namespace {

class LedgerStore final : public PendingStore {
  public:
    LedgerStore(std::unique_ptr<Ledger> ledger, std::string spec)
        : ledger_(std::move(ledger)), spec_(std::move(spec)) {}

    Result<std::vector<PendingCopy>> find_pending(const MessageFacts& msg) override {
        PendingCopyQuery q;
        q.message_id = msg.message_id;
        q.fingerprint = msg.fingerprint;
        q.recipients = msg.recipients;
        q.exclude_queue_id = msg.queue_id;
        return ledger_->find_pending_copies(q);
    }

    Status record(const MessageFacts& msg, TimePoint when) override {
        MessageIdentity id;
        id.queue_id = msg.queue_id;
        id.message_id = msg.message_id;
        id.fingerprint = msg.fingerprint;
        id.sender = msg.sender;
        id.recipients = msg.recipients;
        id.time = when;
        return ledger_->record_identity(id);
    }

    std::string describe() const override { return fmt::format("{}({})", ledger_->backend(), spec_); }

  private:
    std::unique_ptr<Ledger> ledger_;
    std::string spec_;
};

}  // namespace

Result<std::unique_ptr<PendingStore>> open_pending_store(const std::string& spec) {
    if (spec == "none") return std::unique_ptr<PendingStore>();
    auto ledger = open_ledger(spec);
    if (!ledger) return std::move(ledger).error();
    return std::unique_ptr<PendingStore>(new LedgerStore(std::move(*ledger), spec));
}

}  // namespace retryguard::milter
