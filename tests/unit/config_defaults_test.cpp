// config_defaults_test.cpp -- the table, the shipped conf/retryguard.yaml and
// the generated docs/configuration.md agree; the defaults follow the guidance.
#include <gtest/gtest.h>
#include <re2/re2.h>

#include <fstream>
#include <sstream>

#include "retryguard/config/config.hpp"

namespace cfg = retryguard::config;
using namespace std::chrono_literals;

namespace {

std::string read(const std::string& path) {
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

const std::string kSource = RETRYGUARD_SOURCE_DIR;

}  // namespace

TEST(ConfigDefaults, TableDefaultsParseWithoutProblems) {
    auto d = cfg::defaults();
    ASSERT_NE(d, nullptr);
    // Every default goes through the same parser as user input; a typo in the table shows up here.
    auto empty = cfg::load_string("", "empty.yaml");
    ASSERT_TRUE(empty.ok());
    EXPECT_EQ(cfg::show_setting(empty.config->global, "retry.min_interval"), "30m");
    ASSERT_EQ(d->sources.size(), 1u);
    EXPECT_EQ(d->sources[0].path, "/var/log/mail.log");
    EXPECT_EQ(d->sources[0].name, "file:/var/log/mail.log");
}

// A source's position is stored under its name: hosts of a fleet that follow
// the same path into one Redis keep their own positions by naming their
// sources. Unnamed sources keep the ids their positions were saved under.
TEST(ConfigDefaults, ASourcesNameIsWhereItsPositionIsKept) {
    auto loaded = cfg::load_string(
        "sources:\n"
        "  - {type: file, path: /var/log/mail.log}\n"
        "  - {type: file, name: \"mx1:mail.log\", path: /srv/mx1/mail.log}\n"
        "  - {type: journald}\n"
        "  - {type: journald, name: mx1-journal, journal_match: SYSLOG_IDENTIFIER=postfix/smtp}\n"
        "  - {type: syslog_unix, path: /run/retryguard/log.sock}\n",
        "sources.yaml");
    ASSERT_TRUE(loaded.ok());
    const auto& s = loaded.config->sources;
    ASSERT_EQ(s.size(), 5u);
    EXPECT_EQ(cfg::position_id(s[0]), "file:/var/log/mail.log");
    EXPECT_EQ(cfg::position_id(s[1]), "mx1:mail.log");
    EXPECT_EQ(cfg::position_id(s[2]), "journal");
    EXPECT_EQ(cfg::position_id(s[3]), "mx1-journal");
    EXPECT_TRUE(cfg::resumes_from_position(s[0]));
    EXPECT_TRUE(cfg::resumes_from_position(s[2]));
    EXPECT_FALSE(cfg::resumes_from_position(s[4]));
}

TEST(ConfigDefaults, FollowTheGuidance) {
    const auto& g = cfg::defaults()->global;
    using retryguard::Category;
    EXPECT_EQ(g.thresholds(Category::receiver_config).escalate_after, 24h);
    EXPECT_EQ(g.thresholds(Category::receiver_system).escalate_after, 72h);
    EXPECT_EQ(g.retry.min_interval, 30min);                    // RFC 5321
    EXPECT_EQ(g.retry.min_interval_after_greylisting, 15min);  // never within 15 minutes
    EXPECT_EQ(g.reinjection.action, cfg::ReinjectionAction::reject);
    // Reply prefixes count for the fingerprint by default: stripping them would
    // let a reply hash like the message it answers (identity.hpp).
    EXPECT_EQ(g.reinjection.subject_ignore_re, nullptr);
    auto stripping = cfg::load_string(
        "reinjection:\n  fingerprint:\n    subject_ignore: "
        "'(?i)^\\s*((re|fwd?|aw|wg|tr)(\\[\\d+\\])?\\s*:\\s*)+'\n");
    ASSERT_TRUE(stripping.ok()) << (stripping.errors.empty() ? "" : stripping.errors[0].to_string());
    ASSERT_NE(stripping.config->global.reinjection.subject_ignore_re, nullptr);
    std::string subject = "Re: Fwd: RE[2]: quarterly report";
    RE2::Replace(&subject, *stripping.config->global.reinjection.subject_ignore_re, "");
    EXPECT_EQ(subject, "quarterly report");
    // Categories without a ladder of their own borrow unknown's thresholds.
    EXPECT_EQ(&g.thresholds(Category::mailbox), &g.thresholds(Category::unknown));
    const auto& c = *cfg::defaults();
    EXPECT_EQ(c.errors.ledger_unavailable, cfg::ErrorAction::accept);
    EXPECT_EQ(c.errors.timeout, cfg::ErrorAction::accept);
    EXPECT_EQ(c.errors.internal, cfg::ErrorAction::accept);
    EXPECT_EQ(c.errors.bad_input, cfg::ErrorAction::accept);
    EXPECT_EQ(c.metrics.listen.host, "127.0.0.1");
    EXPECT_EQ(c.milter.socket.kind, cfg::SocketSpec::Kind::unix_path);
    EXPECT_EQ(c.milter.socket_mode, 0660u);
    EXPECT_FALSE(g.dry_run);
}

TEST(ConfigDefaults, CategoryNamesMatchTheCategoryTable) {
    // flags.categories accepts every category, spelled with underscores.
    const auto* k = cfg::find_key("flags.categories");
    ASSERT_NE(k, nullptr);
    ASSERT_EQ(k->allowed.size(), retryguard::all_categories().size());
    for (std::size_t i = 0; i < k->allowed.size(); ++i) {
        std::string hyphen(k->allowed[i]);
        std::replace(hyphen.begin(), hyphen.end(), '_', '-');
        auto c = retryguard::category_from_string(hyphen);
        ASSERT_TRUE(c.has_value()) << hyphen;
        EXPECT_EQ(static_cast<std::size_t>(*c), i) << hyphen;
    }
}

TEST(ConfigDefaults, ShippedFileIsCompleteAndLoadsCleanly) {
    auto out = cfg::load_file(kSource + "/conf/retryguard.yaml");
    for (const auto& e : out.errors) ADD_FAILURE() << e.to_string();
    ASSERT_TRUE(out.ok());
    for (const auto& k : cfg::key_table())
        EXPECT_TRUE(out.keys_present.count(std::string(k.key))) << "conf/retryguard.yaml lacks " << k.key;
    // Nothing unknown: an unknown key would have been an error above. Every table key has a doc and a type.
    for (const auto& k : cfg::key_table()) {
        EXPECT_FALSE(k.doc.empty()) << k.key;
        EXPECT_EQ(k.key.find_first_of("ABCDEFGHIJKLMNOPQRSTUVWXYZ-"), std::string_view::npos) << k.key;
    }
    // The shipped file's values are the table's defaults.
    const auto& shipped = *out.config;
    for (const auto& k : cfg::key_table()) {
        if (k.scope != cfg::Scope::overridable) continue;
        EXPECT_EQ(cfg::show_setting(shipped.global, k.key), cfg::show_setting(cfg::defaults()->global, k.key))
            << k.key;
    }
    // Its example rules use the reserved .invalid TLD so they never touch real mail.
    for (const auto& r : shipped.destinations) EXPECT_TRUE(r.pattern.ends_with(".invalid")) << r.pattern;
}

TEST(ConfigDefaults, ShippedFileAndDocsMatchTheGenerators) {
    // Compared as booleans: a diff of two whole files is unreadable in a test log.
    EXPECT_TRUE(read(kSource + "/conf/retryguard.yaml") == cfg::render_default_yaml())
        << "conf/retryguard.yaml is stale; regenerate: retryguard check-config --dump-default > "
           "conf/retryguard.yaml";
    EXPECT_TRUE(read(kSource + "/docs/configuration.md") == cfg::render_docs_markdown())
        << "docs/configuration.md is stale; regenerate: retryguard check-config --dump-docs > "
           "docs/configuration.md";
    auto docs = cfg::render_docs_markdown();
    for (const auto& k : cfg::key_table())
        EXPECT_NE(docs.find("`" + std::string(k.key) + "`"), std::string::npos) << k.key;
}
