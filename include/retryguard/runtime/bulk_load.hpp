// bulk_load.hpp -- `retryguard import` into an empty Redis ledger
// (ledger.redis.bulk_load; docs/ledger.md, "Bulk load into an empty Redis
// ledger"): the ledger is claimed, the files are imported into a temporary
// SQLite ledger that takes the Redis ledger's event-key secret, and its rows
// are copied into Redis, most of them while the import runs. The caller gives
// the import itself and prints what happened.
#pragma once

#include <functional>
#include <string>

#include "retryguard/ledger/ledger.hpp"
#include "retryguard/runtime/runtime.hpp"

namespace retryguard {

struct BulkLoadOutcome {
    enum class Kind {
        not_done,   // not claimed (the ledger holds data, or the claim failed): import batch by batch
        done,       // imported and copied
        refused,    // another writer came first: nothing copied, import the files batch by batch
        attention,  // another load runs or died on another host, or the copy failed: exit, say why
    };
    Kind kind = Kind::not_done;
    int import_rc = 0;        // done: what the import into the temporary ledger returned
    BulkLoadStats stats;      // done
    double copy_seconds = 0;  // done: the copy after the import ended
};

// `rt` holds the Redis ledger; `import` imports the files into the runtime it
// is given (the temporary ledger's); `say` gets each line to print.
BulkLoadOutcome run_bulk_load(Runtime& rt, const std::function<int(Runtime&)>& import,
                              const std::function<void(const std::string&)>& say);

}  // namespace retryguard
