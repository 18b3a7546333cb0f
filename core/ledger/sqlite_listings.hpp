// sqlite_listings.hpp -- the statements of the SQLite ledger's reads for the
// reports (destinations listed and counted, the episodes of a period), shared
// with the ledger's tests, which check with EXPLAIN QUERY PLAN that each reads
// what it needs: on a relay's month (394k destinations) a statement that seeks
// each row through the wrong index, or walks every row to find a few, costs
// seconds where the right one costs milliseconds. Included by the ledger's
// tests and sqlite_ledger.cpp only.
#pragma once

namespace retryguard::ledger_detail {

// The index destinations_state alone.
inline constexpr const char* kCountDestinationsByStateSql =
    "SELECT state, COUNT(*) FROM destinations GROUP BY state";

}  // namespace retryguard::ledger_detail
