// text_report_test.cpp -- the reporting renderers (core/report) over documents
// whose outside text is hostile: what a person sees holds no raw control, the
// escalation note keeps its own lines and gains none from a reply, JSON stays
// valid, and the HTML page escapes markup. Documents are built by hand with
// the keys the renderers read, so every field is exercised without a ledger.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "retryguard/report/report.hpp"
#include "retryguard/text/text.hpp"

namespace retryguard {
namespace {

using nlohmann::json;

const std::string kReply =
    "451 4.3.5 \x1b]0;owned\x07 \xc3\x28 \r\nSubject: forged\r\n\xc2\x9b"
    "31m \xe2\x80\xae <b>&";
const std::string kName = "esc\x1b[2J.test: verdict=flagged destination=victim.test";

::testing::AssertionResult no_raw_control(const std::string& s, bool allow_ours = false) {
    if (!text::is_valid_utf8(s)) return ::testing::AssertionFailure() << "invalid UTF-8";
    for (std::size_t i = 0; i < s.size(); ++i) {
        const auto c = static_cast<unsigned char>(s[i]);
        if (c == '\n') continue;
        if (allow_ours && c == 0x1b) continue;  // our colours, when asked for
        if (c < 0x20 || c == 0x7f)
            return ::testing::AssertionFailure()
                   << "byte " << int(c) << " at " << i << ": " << s.substr(0, i);
        if (c == 0xC2 && static_cast<unsigned char>(s[i + 1]) <= 0x9F)
            return ::testing::AssertionFailure() << "C1";
        if (s.compare(i, 3, "\xe2\x80\xae") == 0) return ::testing::AssertionFailure() << "bidi";
    }
    return ::testing::AssertionSuccess();
}

json destination() {
    return json{{"kind", "domain"},
                {"name", kName},
                {"state", "escalate"},
                {"category", "receiver-config"},
                {"first_deferral", "2026-11-29T09:00:00Z"},
                {"last_deferral", "2026-11-30T09:00:00Z"},
                {"attempts", 14},
                {"messages", 3},
                {"flagged", true},
                {"flag_reason", kReply},
                {"last_reply", kReply},
                {"last_relay", "mx." + kName + "[192.0.2.1]:25"},
                {"contact", "postmaster@x.test\x1b]0;t\x07"},
                {"fault", "the receiving system"},
                {"guidance", "Let the queue retry."}};
}

TEST(TextReport, DestinationsTableShowsNoRawControl) {
    report::RenderOptions ro;
    const std::string out = report::render_destinations(json{{"destinations", {destination()}}}, ro);
    EXPECT_TRUE(no_raw_control(out)) << out;
    EXPECT_NE(out.find("esc\\x1b[2J.test"), std::string::npos) << out;
    // Exactly a header and one row: nothing in the reply started a new line.
    EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 2) << out;
    ro.colour = true;
    EXPECT_TRUE(
        no_raw_control(report::render_destinations(json{{"destinations", {destination()}}}, ro), true));
}

TEST(TextReport, EscalationNoteKeepsItsLinesAndGainsNone) {
    json e = destination();
    const std::string note = report::escalation_note(e);
    EXPECT_TRUE(no_raw_control(note)) << note;
    EXPECT_EQ(note.find("\nSubject: forged"), std::string::npos) << note;
    EXPECT_EQ(note.rfind("Subject: Mail to esc\\x1b[2J.test", 0), 0u) << note;
    e["note"] = note;
    const std::string out = report::render_escalations(json{{"escalations", {e}}}, report::RenderOptions{});
    EXPECT_TRUE(no_raw_control(out)) << out;
    EXPECT_NE(out.find("\nHello postmaster,\n"), std::string::npos) << out;  // the note's own lines survive
    EXPECT_NE(out.find("Reply received:  451 4.3.5 \\x1b]0;owned\\x07 \\xc3( \\x0d\\x0aSubject: forged"),
              std::string::npos)
        << out;
}

TEST(TextReport, FlagsAndExplainShowNoRawControl) {
    const json flags{{"flags",
                      {{{"destination", kName},
                        {"set_at", "2026-11-29T09:00:00Z"},
                        {"expires_at", nullptr},
                        {"cleared_at", nullptr},
                        {"reason", kReply}}}}};
    EXPECT_TRUE(no_raw_control(report::render_flags(flags, report::RenderOptions{})));

    const json recipient{{"address", "u\x1b]0;x\x07@" + kName},
                         {"state", "pending"},
                         {"attempts", 3},
                         {"reply", kReply},
                         {"category", "receiver-config"},
                         {"fault", "the receiving system"},
                         {"guidance", "Let the queue retry."},
                         {"next", nullptr}};
    const json message{{"queue_id", "A00000001"},
                       {"message_id", "<id\x1b]0;x\x07@h>"},
                       {"sender", "\xff@h"},
                       {"recipients", {recipient}}};
    const json doc{{"chains",
                    {{{"queue_ids", {"A00000001"}},
                      {"messages", {message}},
                      {"refused_resends", json::array()},
                      {"timeline",
                       {{{"time", "2026-11-29T09:00:00Z"},
                         {"queue_id", "A00000001"},
                         {"what", "first deferral"},
                         {"detail", kReply}}}}}}}};
    const std::string out = report::render_explain(doc, report::RenderOptions{});
    EXPECT_TRUE(no_raw_control(out)) << out;
    EXPECT_NE(out.find("Message-ID: <id\\x1b]0;x\\x07@h>"), std::string::npos) << out;
    // The same document as --json prints it: valid, and the reply reads back as the replacement rule says.
    const json back = json::parse(text::json_dump(doc, 2));
    EXPECT_EQ(back.at("chains").at(0).at("timeline").at(0).at("detail"), text::replace_invalid_utf8(kReply));
}

TEST(TextReport, TableColumnsAlignOnCharactersNotBytes) {
    report::Table t({"A", "B"});
    t.add({"caf\xc3\xa9", "x"});
    t.add({"abcd", "y"});
    const std::string out = t.render();
    EXPECT_NE(out.find("caf\xc3\xa9  x\n"), std::string::npos) << out;
    EXPECT_NE(out.find("abcd  y\n"), std::string::npos) << out;
}

}  // namespace
}  // namespace retryguard
