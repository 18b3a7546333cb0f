// engine_state_fuzz.cpp -- libFuzzer target for the rules engine's saved state
// (Engine::load_state, core/text/cbor_reader.hpp): any bytes as a state, the
// form a ledger hands back to a restoring engine (a Redis ledger is shared by a
// fleet, a SQLite file can be damaged). A refused state leaves the engine as it
// was; an accepted one saves to bytes that load again and save the same.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "retryguard/rules/engine.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size > (1u << 20)) return 0;
    const std::string_view bytes(reinterpret_cast<const char*>(data), size);
    retryguard::Engine engine;
    const std::string before = engine.save_state();
    if (!engine.load_state(bytes).ok()) {
        if (engine.save_state() != before) std::abort();  // a refused state changed the engine
        return 0;
    }
    const std::string saved = engine.save_state();
    retryguard::Engine again;
    if (!again.load_state(saved).ok()) std::abort();  // its own state refused
    if (again.save_state() != saved) std::abort();    // not stable through a save and a load
    return 0;
}
