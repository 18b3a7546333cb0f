// logline_fuzz.cpp -- fuzz target for the log parser: arbitrary bytes split into
// lines through one parser (so year inference state carries across lines),
// the same bytes as a journald-style record, and both output forms. Checks the
// parser's invariants; any crash, sanitizer report or abort is a bug.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "retryguard/log/event_json.hpp"
#include "retryguard/log/log_parser.hpp"

namespace {

void check(bool ok) {
    if (!ok) std::abort();
}

void exercise(const retryguard::Event& ev) {
    std::string json =
        retryguard::event_to_json(ev).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    check(!json.empty());
    check(!retryguard::event_to_text(ev).empty());
    std::string direct;
    retryguard::append_event_json(ev, direct);
    check(nlohmann::json::accept(direct));
    check(ev.text.size() <= retryguard::kMaxLogLineLength);
    check(ev.fields.size() <= 64);
    check((ev.kind == retryguard::EventKind::unknown) == !ev.unknown_kind.empty());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    std::string_view input(reinterpret_cast<const char*>(data), size);
    retryguard::LogParserOptions options;
    options.local_time = false;
    options.reference_time = retryguard::from_micros(1795996800000000);
    if (!input.empty() && (input[0] & 1)) options.year = 2024;
    retryguard::LogParser parser(options);
    retryguard::Event ev;
    std::size_t lines = 0;
    while (!input.empty()) {
        std::size_t nl = input.find('\n');
        std::string_view line = input.substr(0, nl);
        parser.parse(line, ev);
        exercise(ev);
        ++lines;
        input = nl == std::string_view::npos ? std::string_view{} : input.substr(nl + 1);
    }
    const auto& st = parser.stats();
    check(st.lines == lines);
    check(st.lines == st.recognised + st.unknown);

    std::string_view all(reinterpret_cast<const char*>(data), size);
    retryguard::LogRecord record;
    std::size_t cut = all.find(' ');
    record.identifier = all.substr(0, cut == std::string_view::npos ? 0 : cut);
    record.message = cut == std::string_view::npos ? all : all.substr(cut + 1);
    record.time = retryguard::from_micros(1795985297000000);
    parser.parse_record(record, ev);
    exercise(ev);
    return 0;
}
