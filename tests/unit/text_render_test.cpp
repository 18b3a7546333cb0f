// text_render_test.cpp -- property tests of the renderers of outside text
// (include/retryguard/text/text.hpp) over thousands of deterministic, seeded random
// byte strings built from the pieces remote servers actually send: ASCII, ESC
// and OSC sequences, BEL, CR, NUL, valid and invalid UTF-8, C1 and bidi code
// points. Each renderer's output is read back by its reader.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "retryguard/text/text.hpp"

namespace retryguard {
namespace {

constexpr int kCases = 5000;

// Random text from a fixed seed: the same cases on every run.
class HostileBytes {
  public:
    explicit HostileBytes(std::uint32_t seed) : rng_(seed) {}
    std::string next(std::size_t max_pieces = 24) {
        static const std::vector<std::string> pieces = {"451 4.3.5 System config error",
                                                        " ",
                                                        "\"",
                                                        "\\",
                                                        "=",
                                                        ": ",
                                                        "verdict=flagged",
                                                        "\x1b]0;t\x07",
                                                        "\x1b[2J",
                                                        "\r",
                                                        "\n",
                                                        "\t",
                                                        std::string(1, '\0'),
                                                        "\x7f",
                                                        "\xc3\x28",
                                                        "\xc3\xa9",
                                                        "\xe2\x82\xac",
                                                        "\xe2\x82",
                                                        "\xf0\x9f\x98\x80",
                                                        "\xf0\x9f\x98",
                                                        "\xed\xa0\x80",
                                                        "\xf4\x90\x80\x80",
                                                        "\xc0\xaf",
                                                        "\xc2\x9b",
                                                        "\xc2\x85",
                                                        "\xe2\x80\xae",
                                                        "\xe2\x81\xa6",
                                                        "\xe2\x80\xa8",
                                                        "\xef\xbf\xbd",
                                                        "<b>&'",
                                                        "\xff",
                                                        "\xfe",
                                                        "\x80",
                                                        "\xbf"};
        std::string out;
        const std::size_t n = rng_() % (max_pieces + 1);
        for (std::size_t i = 0; i < n; ++i) {
            if (rng_() % 3 == 0)
                out += static_cast<char>(rng_() & 0xff);  // any byte at all
            else
                out += pieces[rng_() % pieces.size()];
        }
        return out;
    }

  private:
    std::mt19937 rng_;
};

// No raw control of any kind: C0, DEL, C1 and the bidi/line-separator code points.
::testing::AssertionResult screen_safe(const std::string& s) {
    if (!text::is_valid_utf8(s)) return ::testing::AssertionFailure() << "invalid UTF-8";
    for (std::size_t i = 0; i < s.size();) {
        const auto c = static_cast<unsigned char>(s[i]);
        if (c < 0x20 || c == 0x7f) return ::testing::AssertionFailure() << "control byte " << int(c);
        const std::size_t len = text::utf8_sequence_length(s, i);
        if (len == 2 && c == 0xC2 && static_cast<unsigned char>(s[i + 1]) <= 0x9F)
            return ::testing::AssertionFailure() << "C1 control";
        if (len == 3 && c == 0xE2) {
            const std::string seq = s.substr(i, 3);
            for (const char* bad : {"\xe2\x80\xa8", "\xe2\x80\xa9", "\xe2\x80\xaa", "\xe2\x80\xab",
                                    "\xe2\x80\xac", "\xe2\x80\xad", "\xe2\x80\xae", "\xe2\x81\xa6",
                                    "\xe2\x81\xa7", "\xe2\x81\xa8", "\xe2\x81\xa9"})
                if (seq == bad) return ::testing::AssertionFailure() << "bidi or separator";
        }
        i += len;
    }
    return ::testing::AssertionSuccess();
}

TEST(TextUtf8, DecoderFollowsRfc3629) {
    EXPECT_TRUE(text::is_valid_utf8("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 \xf4\x8f\xbf\xbf"));
    for (const char* bad : {"\xc3\x28", "\xc0\xaf", "\xe0\x80\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80",
                            "\xff", "\x80", "\xe2\x82", "\xf8\x88\x80\x80\x80"})
        EXPECT_FALSE(text::is_valid_utf8(bad)) << bad;
    // One U+FFFD per byte that is not part of a well-formed sequence.
    EXPECT_EQ(text::replace_invalid_utf8("a\xc3\x28z"), "a\xef\xbf\xbd(z");
    EXPECT_EQ(text::replace_invalid_utf8("\xe2\x82!"), "\xef\xbf\xbd\xef\xbf\xbd!");
}

TEST(TextJson, EveryStringParsesBackAsTheReplacementRuleAppliedToIt) {
    HostileBytes gen(20261201);
    for (int i = 0; i < kCases; ++i) {
        const std::string in = gen.next();
        const std::string out = text::json_string(in);
        ASSERT_TRUE(screen_safe(out)) << out;
        const nlohmann::json back = nlohmann::json::parse(out);  // throws on invalid JSON
        ASSERT_EQ(back.get<std::string>(), text::replace_invalid_utf8(in)) << out;
    }
}

TEST(TextJson, DocumentsWithHostileKeysAndValuesDumpAndParse) {
    HostileBytes gen(7);
    for (int i = 0; i < kCases / 5; ++i) {
        const std::string a = gen.next(), b = gen.next();
        nlohmann::json doc{{"reply", a}, {"nested", {{"list", {a, b, 3, 2.5, true, nullptr}}, {b, a}}}};
        for (int indent : {-1, 2}) {
            const std::string out = text::json_dump(doc, indent);
            ASSERT_TRUE(text::is_valid_utf8(out));
            const nlohmann::json back = nlohmann::json::parse(out);
            EXPECT_EQ(back.at("reply"), text::replace_invalid_utf8(a));
            EXPECT_EQ(back.at("nested").at("list").at(1), text::replace_invalid_utf8(b));
            EXPECT_EQ(back.at("nested").at(text::replace_invalid_utf8(b)), text::replace_invalid_utf8(a));
        }
    }
}

TEST(TextJson, LayoutIsNlohmannsForOrdinaryDocuments) {
    // Keeps `--json` output byte-identical to what it was for ordinary text.
    nlohmann::json doc{{"now", "2026-11-30T10:00:00Z"},
                       {"destinations", {{{"name", "example.com"}, {"attempts", 14}, {"ratio", 0.25}}}},
                       {"empty_list", nlohmann::json::array()},
                       {"empty_object", nlohmann::json::object()},
                       {"flag", false},
                       {"none", nullptr},
                       {"text", "caf\xc3\xa9 \"q\" \\ / \t\n"}};
    EXPECT_EQ(text::json_dump(doc, 2), doc.dump(2));
    EXPECT_EQ(text::json_dump(doc), doc.dump());
    EXPECT_EQ(text::json_dump(nlohmann::json("x")), "\"x\"");
}

TEST(TextJson, InvalidUtf8ThatMadeNlohmannThrowIsReplaced) {
    nlohmann::json doc{{"last_reply", "451 \xc3\x28 bad"}};
    EXPECT_THROW((void)doc.dump(), nlohmann::json::type_error);
    EXPECT_EQ(text::json_dump(doc), "{\"last_reply\":\"451 \xef\xbf\xbd( bad\"}");
    EXPECT_EQ(text::json_string("\x1b]0;x\x07\xc2\x9b"), "\"\\u001b]0;x\\u0007\\u009b\"");
}

TEST(TextTerminal, OutputHoldsNoControlAndKeepsValidText) {
    HostileBytes gen(42);
    for (int i = 0; i < kCases; ++i) {
        const std::string in = gen.next();
        const std::string out = text::terminal(in);
        ASSERT_TRUE(screen_safe(out)) << out;
        EXPECT_EQ(text::terminal(out), out);  // rendering twice changes nothing
    }
    EXPECT_EQ(text::terminal("caf\xc3\xa9 \xe2\x82\xac 451 4.3.5"), "caf\xc3\xa9 \xe2\x82\xac 451 4.3.5");
    EXPECT_EQ(text::terminal("\x1b]0;owned\x07"), "\\x1b]0;owned\\x07");
    EXPECT_EQ(text::terminal(std::string("a\r\n\t\0b\x7f", 7)), "a\\x0d\\x0a\\x09\\x00b\\x7f");
    EXPECT_EQ(text::terminal("\xc3\x28"), "\\xc3(");
    EXPECT_EQ(text::terminal("\xc2\x9b"
                             "31m \xe2\x80\xae"),
              "\\u009b31m \\u202e");
}

TEST(TextTerminal, DocumentsAreRenderedKeysAndAll) {
    nlohmann::json doc{{"a\x1b", {"\x07", 1}}, {"b", {{"c", "\xff"}}}};
    nlohmann::json out = text::terminal_document(doc);
    EXPECT_EQ(out.at("a\\x1b").at(0), "\\x07");
    EXPECT_EQ(out.at("a\\x1b").at(1), 1);
    EXPECT_EQ(out.at("b").at("c"), "\\xff");
}

TEST(TextHtml, MarkupAndControlsAreEscaped) {
    HostileBytes gen(99);
    for (int i = 0; i < kCases; ++i) {
        const std::string out = text::html(gen.next());
        ASSERT_TRUE(screen_safe(out)) << out;
        ASSERT_EQ(out.find_first_of("<>\"'"), std::string::npos) << out;
    }
    EXPECT_EQ(text::html("<script>&'\"\x1b"), "&lt;script&gt;&amp;&#39;&quot;\\x1b");
}

TEST(TextCut, PrefixNeverEndsInsideACharacter) {
    HostileBytes gen(5);
    for (int i = 0; i < kCases / 2; ++i) {
        const std::string in = gen.next();
        const std::string whole = text::replace_invalid_utf8(in);
        for (std::size_t max = 0; max <= in.size() + 1; ++max) {
            const std::string_view cut = text::utf8_prefix(in, max);
            ASSERT_LE(cut.size(), max);
            ASSERT_GE(cut.size() + 3, std::min(max, in.size()));  // at most one character dropped
            // Cut at a boundary: both halves decode to exactly the whole.
            ASSERT_EQ(text::replace_invalid_utf8(cut) + text::replace_invalid_utf8(in.substr(cut.size())),
                      whole)
                << max;
        }
    }
    EXPECT_EQ(text::utf8_prefix("ab\xe2\x82\xac", 4), "ab");
    EXPECT_EQ(text::utf8_prefix("ab\xe2\x82\xac", 5), "ab\xe2\x82\xac");
    EXPECT_EQ(text::utf8_prefix("ab\xe2\x82z", 3), "ab\xe2");  // a stray byte is a unit of its own
}

TEST(TextCut, PolicyAnswerTextIsBoundedAndClean) {
    HostileBytes gen(11);
    for (int i = 0; i < kCases; ++i) {
        const std::string in = gen.next();
        const std::size_t max = static_cast<std::size_t>(i % 64);
        const std::string out = text::policy_text(in, max);
        ASSERT_LE(out.size(), max);
        ASSERT_TRUE(text::is_valid_utf8(out));
        for (unsigned char c : out) ASSERT_TRUE(c >= 0x20 && c != 0x7f) << int(c);
    }
    // The reply cut at 200 bytes in the middle of a character: now before it.
    const std::string reply = std::string(199, 'x') + "\xc3\xa9" + "tail";
    EXPECT_EQ(text::policy_text(reply, 200), std::string(199, 'x'));
    EXPECT_EQ(text::policy_text("451\r\n\x1b[1m \xc3\x28", 200), "451   [1m ?(");
}

TEST(TextCut, ClipAndWidthCountCharactersNotBytes) {
    EXPECT_EQ(text::display_width("caf\xc3\xa9"), 4u);
    EXPECT_EQ(text::display_width("\x1b[1;31mescalate\x1b[0m"), 8u);
    EXPECT_EQ(text::clip("\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9", 5), "\xc3\xa9\xc3\xa9...");
    EXPECT_EQ(text::clip("short", 70), "short");
}

}  // namespace
}  // namespace retryguard
