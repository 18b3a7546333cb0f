// state_dump.cpp -- prints, in a canonical text form, everything the kill -9
// loop tests compare between a clean run and a killed-and-resumed one: the
// saved engine state (as JSON), the verdict high-water mark, verdict counts,
// every flag row and every destination's ladder state and open episode.
// usage: retryguard_state_dump LEDGER-SPEC
#include <cstdio>
#include <string>

#include "retryguard/ingest/ingest.hpp"
#include "retryguard/ledger/ledger.hpp"

using namespace retryguard;

namespace {

std::string t(const std::optional<TimePoint>& p) {
    return p ? std::to_string(to_micros(*p)) : std::string("-");
}

int fail(const std::string& what, const Error& e) {
    std::fprintf(stderr, "state_dump: %s: %s\n", what.c_str(), e.message.c_str());
    return 2;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 2) {
        std::fprintf(stderr, "usage: %s LEDGER-SPEC\n", argv[0]);
        return 2;
    }
    auto ledger = open_ledger(argv[1]);
    if (!ledger) return fail("open", ledger.error());
    Ledger& l = **ledger;
    auto state = l.get_state(Ingestor::kStateKey);
    if (!state) return fail("state", state.error());
    if (!*state) {
        std::printf("state: none\n");
    } else {
        auto view = describe_saved_state(**state);
        if (!view) return fail("state", view.error());
        std::printf("state version %d\nengine %s\n", view->version, view->engine_json.c_str());
    }
    auto mark = l.verdict_mark();
    if (!mark) return fail("mark", mark.error());
    std::printf("verdict mark %llu\n", static_cast<unsigned long long>(*mark));
    auto counts = l.verdict_counts();
    if (!counts) return fail("counts", counts.error());
    for (const auto& [name, n] : *counts)
        std::printf("count %s %lld\n", name.c_str(), static_cast<long long>(n));
    auto flags = l.list_flags(std::nullopt, TimePoint{}, true);
    if (!flags) return fail("flags", flags.error());
    for (const auto& f : *flags)
        std::printf("flag %lld %s set %s expires %s cleared %s reason %s\n", static_cast<long long>(f.id),
                    f.destination.c_str(), t(f.set_at).c_str(), t(f.expires_at).c_str(),
                    t(f.cleared_at).c_str(), f.reason.c_str());
    DestinationFilter all;
    all.limit = 1000000;
    auto dests = l.list_destinations(all);
    if (!dests) return fail("destinations", dests.error());
    for (const auto& d : *dests) {
        std::printf("destination %s %s state '%s' changed %s success %s deferral %s",
                    std::string(to_string(d.kind)).c_str(), d.name.c_str(), d.state.c_str(),
                    t(d.state_changed).c_str(), t(d.last_success).c_str(), t(d.last_deferral).c_str());
        if (d.episode)
            std::printf(" episode %s..%s attempts %lld messages %lld", t(d.episode->first_deferral).c_str(),
                        t(d.episode->last_deferral).c_str(), static_cast<long long>(d.episode->attempts),
                        static_cast<long long>(d.episode->messages));
        std::printf("\n");
    }
    return 0;
}
