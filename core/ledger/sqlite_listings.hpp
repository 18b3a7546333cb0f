// sqlite_listings.hpp -- the statements of the SQLite ledger's reads for the
// reports (destinations listed and counted, the episodes of a period), shared
// with the ledger's tests, which check with EXPLAIN QUERY PLAN that each reads
// what it needs: on a relay's month (394k destinations) a statement that seeks
// each row through the wrong index, or walks every row to find a few, costs
// seconds where the right one costs milliseconds. Included by the ledger's
// tests and sqlite_ledger.cpp only.
#pragma once

// The columns read_destination reads, in its order.
#define RG_DESTINATION_COLUMNS                                                                        \
    "kind, name, state, state_changed, last_success, last_deferral, ep_first, ep_last, ep_attempts, " \
    "ep_messages, ep_categories, ep_last_reply, ep_last_relay"

// list_destinations' filter; every statement below takes its parameters:
// ?1 kind, ?2 state (each NULL: any), ?3 1 for open episodes only, ?4 limit
// (-1: none), ?5 offset.
#define RG_DESTINATION_FILTER \
    "(?1 IS NULL OR kind = ?1) AND (?2 IS NULL OR state = ?2) AND (?3 = 0 OR ep_first IS NOT NULL)"

namespace retryguard::ledger_detail {

// Every row, or those of one kind: in (kind, name) order through
// destinations_key, nothing sorted (each row a seek of its own).
inline constexpr const char* kListDestinationsSql =
    "SELECT " RG_DESTINATION_COLUMNS " FROM destinations WHERE " RG_DESTINATION_FILTER
    " ORDER BY kind, name LIMIT ?4 OFFSET ?5";

// A state: its rows found through destinations_state, then sorted. (The
// filter's `?2 IS NULL OR` form alone hides the index from SQLite.)
inline constexpr const char* kListDestinationsInStateSql =
    "SELECT " RG_DESTINATION_COLUMNS " FROM destinations WHERE state = ?2 AND " RG_DESTINATION_FILTER
    " ORDER BY kind, name LIMIT ?4 OFFSET ?5";

// Open episodes (no index holds them): one pass over the table in its own
// order, then the few that match sorted. `+kind` keeps SQLite from reading
// every row through destinations_key for the order's sake.
inline constexpr const char* kListOpenDestinationsSql =
    "SELECT " RG_DESTINATION_COLUMNS
    " FROM destinations WHERE ep_first IS NOT NULL AND " RG_DESTINATION_FILTER
    " ORDER BY +kind, name LIMIT ?4 OFFSET ?5";

// The index destinations_state alone.
inline constexpr const char* kCountDestinationsByStateSql =
    "SELECT state, COUNT(*) FROM destinations GROUP BY state";

// No index on last_success: one pass over the table (`+kind`, as above).
inline constexpr const char* kCountDestinationsDeliveredSql =
    "SELECT COUNT(*) FROM destinations WHERE +kind = ?1 AND last_success >= ?2";

// The ended episodes whose first deferral lies in [?1, ?2], in the order of
// episodes_destination (kind, name, first_deferral, then the row id it
// holds), so nothing is sorted: every entry of the index is compared (a walk
// of the index alone, about 0.1 s for 350k episodes) and only the rows in the
// period are read. Not `ended >= ?1` through episodes_ended: an episode may
// end before its first deferral (a success logged out of order closes it),
// and one of those that starts in the period would be missed.
inline constexpr const char* kEpisodesBetweenSql =
    "SELECT kind, name, first_deferral, last_deferral, ended, attempts, messages, categories, last_reply, "
    "last_relay FROM episodes WHERE first_deferral BETWEEN ?1 AND ?2 ORDER BY kind, name, first_deferral, id";
// How many: the index episodes_destination alone.
inline constexpr const char* kCountEpisodesBetweenSql =
    "SELECT COUNT(*) FROM episodes WHERE first_deferral BETWEEN ?1 AND ?2";

}  // namespace retryguard::ledger_detail
