// sqlite_prune.hpp -- the one outside hook into the SQLite ledger's prune: a
// function run between its passes, when it holds no transaction, so that a
// test can commit on another connection exactly there (the passes themselves
// are in sqlite_ledger.cpp, docs/ledger.md "Retention"). Included by the
// ledger's tests and sqlite_ledger.cpp only.
#pragma once

#include <functional>

#include "retryguard/ledger/ledger.hpp"

namespace retryguard::ledger_detail {

// No effect on a ledger of another backend; an empty hook removes it.
void set_prune_pass_hook(Ledger& ledger, std::function<void()> hook);

}  // namespace retryguard::ledger_detail
