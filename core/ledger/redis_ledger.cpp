#include "ledger/internal.hpp"
namespace retryguard::ledger_detail {
Result<std::unique_ptr<Ledger>> open_redis_ledger(const std::string&, int, int, const std::string&,
                                                  const LedgerOptions&) {
    return make_error(ErrorKind::config, "not yet");
}
}  // namespace retryguard::ledger_detail
