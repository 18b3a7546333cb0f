// journal_fuzz.cpp -- libFuzzer target for the engine journal's reader
// (core/ledger/journal.cpp): any bytes as a stored entry, the form a ledger
// hands back to a restoring engine (a Redis ledger is shared by a fleet, a
// SQLite file can be damaged). Checks invariants beyond "no crash": a refused
// entry adds no record; an accepted one re-encodes to events that decode the
// same; its compressed form (when the input compresses) reads back to the same
// records; decompressing a stored entry never changes what it reads as.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "retryguard/ledger/ledger.hpp"

namespace {

using retryguard::EngineJournalRecord;

std::vector<std::string> encoded(const std::vector<EngineJournalRecord>& records) {
    std::vector<std::string> out;
    for (const auto& r : records) {
        switch (r.kind) {
            case EngineJournalRecord::Kind::event:
                out.push_back(retryguard::encode_journal_event(r.item));
                break;
            case EngineJournalRecord::Kind::tick:
                out.push_back(retryguard::encode_journal_tick(r.time));
                break;
            case EngineJournalRecord::Kind::clear_flag:
                out.push_back(retryguard::encode_journal_clear_flag(r.destination, r.time));
                break;
        }
    }
    return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    using namespace retryguard;
    const std::string_view in(reinterpret_cast<const char*>(data), size);
    std::vector<EngineJournalRecord> records;
    const bool ok = decode_journal_entry(in, records);
    if (!ok && !records.empty()) std::abort();
    const std::vector<std::string> first = encoded(records);
    // What the records re-encode to reads back as the same records.
    for (const auto& e : first) {
        std::vector<EngineJournalRecord> again;
        if (!decode_journal_entry(e, again) || again.size() != 1) std::abort();
        if (encoded(again).front() != e) std::abort();
    }
    // The plain form of a stored entry reads as the entry does.
    std::string scratch;
    const std::string_view plain = plain_journal_entry(in, scratch);
    std::vector<EngineJournalRecord> from_plain;
    const bool plain_ok = decode_journal_entry(plain, from_plain);
    if (plain_ok != ok || encoded(from_plain) != first) std::abort();
    // The input compressed (when it would be) reads back as the input does.
    std::string z;
    if (compress_journal_entry(in, z)) {
        std::vector<EngineJournalRecord> from_z;
        const bool z_ok = decode_journal_entry(z, from_z);
        // Only a batch entry is read from the compressed form.
        const bool batch = !in.empty() && in.front() == kJournalBatchTag.front();
        if (z_ok != (ok && batch)) std::abort();
        if (z_ok && encoded(from_z) != first) std::abort();
    }
    return 0;
}
