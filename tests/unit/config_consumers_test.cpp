// config_consumers_test.cpp -- every key of the configuration table is read by
// someone: each names its consumers (key_consumers), and each has a proof here
// (a value set through -o changes what the consumer's core function returns)
// or in the explicit list of tests that show its effect. A key with neither
// fails EveryKeyHasAConsumerAndAProof.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "retryguard/config/config.hpp"
#include "retryguard/follow/follower.hpp"
#include "retryguard/identity/identity.hpp"
#include "retryguard/identity/resend_config.hpp"
#include "retryguard/report/report.hpp"
#include "retryguard/runtime/runtime.hpp"

namespace retryguard {
namespace {

namespace cfg = retryguard::config;
namespace fs = std::filesystem;

std::shared_ptr<const cfg::Config> with(std::vector<std::string> overrides) {
    auto out = cfg::load_string("", "<test>", overrides);
    if (!out.ok()) {
        for (const auto& e : out.errors) ADD_FAILURE() << e.to_string();
        return cfg::defaults();
    }
    return out.config;
}

std::string ledger_view(const cfg::Config& c) {
    const LedgerOptions o = ledger_options_from(c);
    return o.spec + "|" + std::to_string(o.busy_timeout.count()) + "|" + o.key_prefix + "|" +
           std::to_string(o.connect_timeout.count()) + "|" + std::to_string(o.command_timeout.count()) + "|" +
           std::to_string(o.reconnect_max.count()) + "|" + (o.sqlite_gather_wal_writes ? "gather" : "plain");
}

std::string retention_view(const cfg::Config& c) {
    const RetentionPolicy p = report::retention_from(c);
    return std::to_string(p.finished_messages.count()) + "|" + std::to_string(p.stale_messages.count()) +
           "|" + std::to_string(p.episodes.count()) + "|" + std::to_string(p.seen_events.count());
}

// Keys whose effect this file observes directly, with the non-default value used.
const std::map<std::string, std::string> kLedgerObserved = {
    {"ledger.backend", "redis"},
    {"ledger.sqlite.path", "/tmp/other.db"},
    {"ledger.sqlite.busy_timeout", "5s"},
    {"ledger.redis.key_prefix", "fleet2:"},
    {"ledger.redis.timeout", "750ms"},
    {"ledger.redis.reconnect_max_backoff", "2s"},
    {"ledger.sqlite.gather_wal_writes", "false"},
};
const std::map<std::string, std::string> kRedisObserved = {
    {"ledger.redis.address", "10.0.0.5:6380"},
    {"ledger.redis.database", "3"},
};
const std::map<std::string, std::string> kRetentionObserved = {
    {"ledger.retention.events", "90d"},
    {"ledger.retention.finished_messages", "2d"},
    {"ledger.retention.episodes", "400d"},
};

TEST(ConfigConsumers, LedgerKeysReachTheLedgerOptionsEveryProgramOpens) {
    const std::string base = ledger_view(*cfg::defaults());
    for (const auto& [key, value] : kLedgerObserved)
        EXPECT_NE(ledger_view(*with({key + "=" + value})), base) << key;
    const std::string redis = ledger_view(*with({"ledger.backend=redis"}));
    for (const auto& [key, value] : kRedisObserved)
        EXPECT_NE(ledger_view(*with({"ledger.backend=redis", key + "=" + value})), redis) << key;
    EXPECT_EQ(ledger_options_from(*with({"ledger.redis.key_prefix=fleet2:"})).key_prefix, "fleet2:");
    EXPECT_EQ(ledger_options_from(*with({"ledger.redis.reconnect_max_backoff=2s"})).reconnect_max,
              std::chrono::milliseconds(2000));
}

TEST(ConfigConsumers, RetentionKeysReachThePrunePolicy) {
    const std::string base = retention_view(*cfg::defaults());
    for (const auto& [key, value] : kRetentionObserved)
        EXPECT_NE(retention_view(*with({key + "=" + value})), base) << key;
}

TEST(ConfigConsumers, RedisPasswordFileIsReadAndItsModeChecked) {
    const fs::path dir = fs::temp_directory_path() / ("rg-pwfile-" + std::to_string(::getpid()));
    fs::create_directories(dir);
    const std::string file = (dir / "redis.pw").string();
    std::ofstream(file) << "s3cret\n";
    ::chmod(file.c_str(), 0644);
    auto open = read_redis_password_file(file);
    ASSERT_FALSE(open);
    EXPECT_NE(open.error().message.find("mode 0644 lets others read the password"), std::string::npos)
        << open.error().message;
    auto ledger =
        open_configured_ledger(*with({"ledger.backend=redis", "ledger.redis.password_file=" + file}));
    ASSERT_FALSE(ledger);
    EXPECT_NE(ledger.error().message.find("ledger.redis.password_file"), std::string::npos);
    ::chmod(file.c_str(), 0600);
    auto plain = read_redis_password_file(file);
    ASSERT_TRUE(plain) << plain.error().message;
    EXPECT_EQ(plain->username, "");
    EXPECT_EQ(plain->password, "s3cret");
    std::ofstream(file, std::ios::trunc) << "mta1:pa:ss\n";
    auto acl = read_redis_password_file(file);
    ASSERT_TRUE(acl) << acl.error().message;
    EXPECT_EQ(acl->username, "mta1");
    EXPECT_EQ(acl->password, "pa:ss");
    EXPECT_FALSE(read_redis_password_file((dir / "missing").string()));
    fs::remove_all(dir);
}

std::string fingerprint_of(const ResendSettings& s, std::string_view subject) {
    FingerprintBuilder b(s.fingerprint, s.fingerprint_body_limit, s.subject_ignore);
    b.sender("alice@example.org");
    b.header("Subject", subject);
    b.body("the same body\r\n");
    return b.finish();
}

TEST(ConfigConsumers, SubjectIgnoreReachesTheFingerprint) {
    const ResendSettings plain = resend_settings_from(*cfg::defaults());
    EXPECT_NE(fingerprint_of(plain, "[EXT] Invoice 42"), fingerprint_of(plain, "Invoice 42"));
    const ResendSettings tagged =
        resend_settings_from(*with({"reinjection.fingerprint.subject_ignore=^\\[ext\\] "}));
    EXPECT_EQ(fingerprint_of(tagged, "[EXT] Invoice 42"), fingerprint_of(tagged, "Invoice 42"));
    EXPECT_NE(fingerprint_of(tagged, "[EXT] Invoice 42"), fingerprint_of(tagged, "Invoice 43"));
}

TEST(ConfigConsumers, RejectTextIsTheMilterReply) {
    PendingCopy a;
    a.recipient = "bob@defer.example";
    a.queue_id = "AAA0000001";
    a.destination = "defer.example";
    a.first_deferral = TimePoint{std::chrono::seconds(1796006330)};
    a.last_reply = "451 4.3.5 System config error";
    PendingCopy b = a;
    b.recipient = "carol@defer.example";
    const auto s = resend_settings_from(
        *with({"reinjection.reject_text=held as {original} for {recipient}: {reply}{more}"}));
    EXPECT_EQ(
        resend_reply_text({a, b}, s.policy),
        "held as AAA0000001 for bob@defer.example: 451 4.3.5 System config error (and 1 more recipient(s))");
    // The shipped default keeps the wording the milter always had.
    const auto d = resend_settings_from(*cfg::defaults());
    EXPECT_EQ(
        resend_reply_text({a}, d.policy)
            .rfind("Not accepted again: a copy for <bob@defer.example> is already queued as AAA0000001 for "
                   "defer.example, retrying since ",
                   0),
        0u)
        << resend_reply_text({a}, d.policy);
    // Unknown placeholders are refused at load, naming the -o argument.
    auto bad = cfg::load_string("", "<test>", {"reinjection.reject_text=see {queue}"});
    ASSERT_FALSE(bad.ok());
    EXPECT_EQ(bad.errors[0].file, "-o reinjection.reject_text=see {queue}");
}

TEST(ConfigConsumers, JournalMatchIsValidatedForTheFollower) {
    EXPECT_TRUE(valid_journal_match("SYSLOG_FACILITY=2"));
    EXPECT_TRUE(valid_journal_match("SYSLOG_FACILITY=2 + _SYSTEMD_UNIT=postfix@-.service"));
    EXPECT_TRUE(valid_journal_match(""));
    std::string why;
    EXPECT_FALSE(valid_journal_match("syslog_facility=2", &why));
    EXPECT_NE(why.find("FIELD=value"), std::string::npos);
    auto bad = cfg::load_string("sources:\n  - {type: journald, journal_match: \"facility 2\"}\n");
    ASSERT_FALSE(bad.ok());
    EXPECT_NE(bad.errors[0].message.find("bad journal_match"), std::string::npos)
        << bad.errors[0].to_string();
}

TEST(ConfigConsumers, OverridesAreValidatedAndNamed) {
    auto unknown = cfg::load_string("", "<test>", {"ledger.sqlite.pth=/x"});
    ASSERT_FALSE(unknown.ok());
    EXPECT_EQ(unknown.errors[0].to_string(),
              "-o ledger.sqlite.pth=/x: error: unknown key 'ledger.sqlite.pth'; did you mean "
              "'ledger.sqlite.path'?");
    auto no_eq = cfg::load_string("", "<test>", {"ledger.backend"});
    ASSERT_FALSE(no_eq.ok());
    EXPECT_NE(no_eq.errors[0].message.find("expected key=value"), std::string::npos);
    auto item = cfg::load_string("", "<test>", {"sources[].path=/var/log/x"});
    ASSERT_FALSE(item.ok());
    // The override wins over the file, lists in flow syntax.
    auto out = cfg::load_string("policy:\n  stages: [rcpt]\n  deadline: 100ms\n", "<test>",
                                {"policy.stages=[rcpt, data]", "policy.deadline=20ms"});
    ASSERT_TRUE(out.ok()) << out.errors[0].to_string();
    EXPECT_EQ(out.config->policy.stages.size(), 2u);
    EXPECT_EQ(out.config->policy.deadline, std::chrono::milliseconds(20));
    EXPECT_TRUE(out.keys_present.count("policy.deadline"));
    // A scalar is taken as written: YAML syntax in it stays text.
    auto text = cfg::load_string("", "<test>", {"reinjection.reject_text=queued: {original}"});
    ASSERT_TRUE(text.ok()) << text.errors[0].to_string();
    EXPECT_EQ(text.config->global.reinjection.reject_text, "queued: {original}");
}

// Keys proven elsewhere: key -> (file, test). The test must exist in the file
// and must show the key's effect through its consumer (not only its validation).
struct Proof {
    const char* file;
    const char* test;  // "Suite, Name" as in the TEST() line, or a shell test's check
};
const std::map<std::string, Proof> kProofs = {
    {"ledger.redis.bulk_load",
     {"tests/cli/import_bulk_load_test.sh",
      "ledger.redis.bulk_load=false: batch by batch without a bulk load"}},
    {"ledger.redis.password_file",
     {"tests/ledger/ledger_redis_test.cpp", "LedgerRedis, AuthenticatesWithThePasswordFromTheConfiguration"}},
    {"ledger.retention.prune_interval",
     {"tests/policyd/policyd_daemon_test.cpp", "PolicydLive, PrunesTheLedgerWhileFollowing"}},
    {"sources",
     {"tests/policyd/policyd_daemon_test.cpp",
      "PolicydLive, FollowedDeferralsEscalateTheDomainAndItsMailGetsTheConfiguredAction"}},
    {"sources[].type",
     {"tests/policyd/policyd_daemon_test.cpp",
      "PolicydLive, FollowedDeferralsEscalateTheDomainAndItsMailGetsTheConfiguredAction"}},
    {"sources[].path",
     {"tests/policyd/policyd_daemon_test.cpp",
      "PolicydLive, FollowedDeferralsEscalateTheDomainAndItsMailGetsTheConfiguredAction"}},
    {"sources[].start",
     {"tests/policyd/policyd_daemon_test.cpp",
      "PolicydLive, FollowedDeferralsEscalateTheDomainAndItsMailGetsTheConfiguredAction"}},
    {"sources[].journal_match",
     {"tests/unit/follow_journal_test.cpp", "FollowJournal, JournalMatchSelectsEntries"}},
    {"ingest.batch_max_delay",
     {"tests/policyd/policyd_daemon_test.cpp",
      "PolicydLive, FollowedDeferralsEscalateTheDomainAndItsMailGetsTheConfiguredAction"}},
    {"milter.socket", {"tests/milter/miltertest_test.sh", "milter.socket=unix:"}},
    {"milter.socket_mode", {"tests/milter/miltertest_test.sh", "milter.socket_mode=0600"}},
    {"milter.user", {"tests/milter/miltertest_test.sh", "milter.user="}},
    {"milter.group", {"tests/milter/miltertest_test.sh", "milter.group="}},
    {"milter.filter_rescan", {"tests/milter/miltertest_test.sh", "milter.filter_rescan=1s"}},
    {"milter.minimal_backoff", {"tests/e2e/milter_lib.sh", "milter.minimal_backoff=3s"}},
    {"milter.maximal_backoff", {"tests/e2e/milter_lib.sh", "milter.maximal_backoff=6s"}},
    {"policy.socket", {"tests/policyd/policyd_daemon_test.cpp", "policy.socket=inet:0@127.0.0.1"}},
    {"policy.extra_sockets",
     {"tests/policyd/policyd_daemon_test.cpp",
      "PolicydDaemon, UnknownDestinationGetsDunnoFlaggedGetsConfiguredActionOverTcpAndUnix"}},
    {"policy.deadline", {"tests/policyd/policyd_daemon_test.cpp", "policy.deadline=50ms"}},
    {"policy.request_timeout",
     {"tests/policyd/policyd_daemon_test.cpp",
      "PolicydDaemon, OneBytePerSecondClientHitsTimeoutWithoutStallingOthers"}},
    {"policy.idle_timeout",
     {"tests/policyd/policyd_daemon_test.cpp", "PolicydDaemon, IdleConnectionIsClosedAfterIdleTimeout"}},
    {"policy.max_line_length",
     {"tests/policyd/policyd_daemon_test.cpp", "PolicydDaemon, OversizedRequestAndLongLineAreRejected"}},
    {"policy.max_request_size",
     {"tests/policyd/policyd_daemon_test.cpp", "PolicydDaemon, OversizedRequestAndLongLineAreRejected"}},
    {"policy.max_connections",
     {"tests/policyd/policyd_daemon_test.cpp",
      "PolicydDaemon, ConnectionsBeyondTheLimitAreRefusedAndCounted"}},
    {"policy.stages",
     {"tests/policyd/policyd_daemon_test.cpp",
      "PolicydDaemon, StagesOtherThanRcptAnswerDunnoUnlessConfigured"}},
    {"categories.receiver_config.watch_after_deferrals",
     {"tests/policyd/policyd_daemon_test.cpp",
      "PolicydLive, FollowedDeferralsEscalateTheDomainAndItsMailGetsTheConfiguredAction"}},
    {"categories.receiver_config.escalate_after",
     {"tests/policyd/policyd_daemon_test.cpp",
      "PolicydLive, FollowedDeferralsEscalateTheDomainAndItsMailGetsTheConfiguredAction"}},
    {"categories.receiver_system.escalate_after",
     {"tests/unit/config_engine_test.cpp", "ConfigEngineSettings, GlobalValuesReachTheEngine"}},
    {"flags.episodes",
     {"tests/unit/config_engine_test.cpp", "ConfigEngineSettings, GlobalValuesReachTheEngine"}},
    {"flags.deferrals",
     {"tests/unit/config_engine_test.cpp", "ConfigEngineSettings, GlobalValuesReachTheEngine"}},
    {"flags.deferrals_window",
     {"tests/unit/config_engine_test.cpp", "ConfigEngineSettings, GlobalValuesReachTheEngine"}},
    {"flags.enabled", {"tests/unit/config_engine_test.cpp", "ConfigEngineSettings, OffSpellings"}},
    {"spread.enabled", {"tests/unit/config_engine_test.cpp", "ConfigEngineSettings, OffSpellings"}},
    {"spread.window",
     {"tests/unit/config_engine_test.cpp", "ConfigEngineSettings, GlobalValuesReachTheEngine"}},
    {"spread.min_destinations",
     {"tests/unit/config_engine_test.cpp", "ConfigEngineSettings, GlobalValuesReachTheEngine"}},
    {"spread.quiet_period",
     {"tests/unit/config_engine_test.cpp", "ConfigEngineSettings, GlobalValuesReachTheEngine"}},
    {"reinjection.action", {"tests/milter/miltertest_test.sh", "reinjection: {action: hold}"}},
    {"sources[].name",
     {"tests/unit/config_defaults_test.cpp", "ConfigDefaults, ASourcesNameIsWhereItsPositionIsKept"}},
    {"reinjection.match_by",
     {"tests/unit/identity_resend_config_test.cpp", "ResendConfig, DestinationRulesBecomePerDomainActions"}},
    {"sources[].allow_non_loopback",
     {"tests/unit/follow_syslog_test.cpp", "FollowSyslogSocket, AllowNonLoopbackLetsTheAddressThrough"}},
    {"reinjection.tag_header",
     {"tests/unit/identity_resend_config_test.cpp",
      "ResendConfig, DestinationRulesCarryTheirTagTextAndDryRun"}},
    {"dry_run", {"tests/milter/miltertest_test.sh", "dry_run: true"}},
    {"reinjection.fingerprint.subject_ignore",
     {"tests/unit/config_consumers_test.cpp", "ConfigConsumers, SubjectIgnoreReachesTheFingerprint"}},
    {"reinjection.reject_text",
     {"tests/unit/config_consumers_test.cpp", "ConfigConsumers, RejectTextIsTheMilterReply"}},
    {"actions.escalated",
     {"tests/policyd/policyd_daemon_test.cpp",
      "PolicydLive, FollowedDeferralsEscalateTheDomainAndItsMailGetsTheConfiguredAction"}},
    {"errors.timeout",
     {"tests/policyd/policyd_daemon_test.cpp",
      "PolicydLive, ErrorsTimeoutTempfailDefersInsteadOfDunnoAndFollowsReload"}},
    {"errors.ledger_unavailable", {"tests/e2e/milter_ledger_down_test.sh", "ledger_unavailable: tempfail"}},
    {"log.target", {"tests/policyd/policyd_daemon_test.cpp", "log.target=stderr"}},
    {"log.level",
     {"tests/policyd/policyd_daemon_test.cpp", "PolicydDaemon, ForegroundLogsWhereTheConfigurationSays"}},
    {"log.verdicts",
     {"tests/policyd/policyd_daemon_test.cpp", "PolicydDaemon, ForegroundLogsWhereTheConfigurationSays"}},
    {"log.hostname", {"tests/e2e/milter_lib.sh", "log.hostname=sender"}},
    {"metrics.listen", {"tests/policyd/policyd_daemon_test.cpp", "metrics.listen=127.0.0.1:0"}},
    {"metrics.allow_non_loopback",
     {"tests/policyd/policyd_daemon_test.cpp", "PolicydLive, MetricsAllowNonLoopbackIsHonouredWithAWarning"}},
    {"metrics.max_connections",
     {"tests/policyd/policyd_daemon_test.cpp",
      "PolicydDaemon, MetricsConnectionsBeyondTheLimitAreClosedAndCounted"}},
    {"policy.user",
     {"tests/policyd/policyd_daemon_test.cpp",
      "PolicydLive, StartedAsRootRunsAsPolicyUserAndGroupWithItsSocketOwnedByThem"}},
    {"policy.group",
     {"tests/policyd/policyd_daemon_test.cpp",
      "PolicydLive, StartedAsRootRunsAsPolicyUserAndGroupWithItsSocketOwnedByThem"}},
    {"classifier.rules",
     {"tests/unit/config_classifier_test.cpp", "ConfigClassifierRules, KeptAsNodeWithFileAndPosition"}},
    {"destinations",
     {"tests/unit/config_engine_test.cpp", "ConfigEngineSettings, DestinationRulesThroughResolve"}},
    {"destinations[].domain",
     {"tests/unit/config_engine_test.cpp", "ConfigEngineSettings, DestinationRulesThroughResolve"}},
    {"destinations[].mx",
     {"tests/unit/config_engine_test.cpp", "ConfigEngineSettings, DestinationRulesThroughResolve"}},
    {"destinations[].contact",
     {"tests/unit/config_engine_test.cpp", "ConfigEngineSettings, DestinationRulesThroughResolve"}},
    {"notify.enabled",
     {"tests/unit/actions_test.cpp", "ActionsNotice, OnlyTheConfiguredCategoriesAndDestinations"}},
    {"notify.categories",
     {"tests/unit/actions_test.cpp", "ActionsNotice, OnlyTheConfiguredCategoriesAndDestinations"}},
    {"notify.from", {"tests/unit/actions_test.cpp", "ActionsConfig, KeysReachThePlannerAndTheRunner"}},
    {"notify.subject", {"tests/unit/actions_test.cpp", "ActionsConfig, KeysReachThePlannerAndTheRunner"}},
    {"notify.template", {"tests/unit/actions_test.cpp", "ActionsConfig, KeysReachThePlannerAndTheRunner"}},
    {"flush.enabled", {"tests/unit/actions_test.cpp", "ActionsFlush, ABlipOrADisabledFlushDoesNothing"}},
    {"flush.min_interval", {"tests/unit/actions_test.cpp", "ActionsConfig, KeysReachThePlannerAndTheRunner"}},
    {"flush.max_messages", {"tests/unit/actions_test.cpp", "ActionsFlush, MaxMessagesCapsOneFlush"}},
    {"flush.probe",
     {"tests/unit/actions_test.cpp",
      "ActionsFlush, AnEscalatedDestinationIsProbedNoMoreOftenThanTheInterval"}},
    {"flush.probe_interval",
     {"tests/unit/actions_test.cpp", "ActionsConfig, KeysReachThePlannerAndTheRunner"}},
    {"postfix.sendmail_path",
     {"tests/unit/actions_test.cpp", "ActionsConfig, KeysReachThePlannerAndTheRunner"}},
    {"postfix.postqueue_path",
     {"tests/unit/actions_test.cpp", "ActionsConfig, KeysReachThePlannerAndTheRunner"}},
    {"postfix.config_directory",
     {"tests/unit/actions_test.cpp", "ActionsConfig, KeysReachThePlannerAndTheRunner"}},
    {"postfix.maximal_queue_lifetime",
     {"tests/unit/actions_test.cpp", "ActionsConfig, KeysReachThePlannerAndTheRunner"}},
    {"postfix.command_timeout",
     {"tests/unit/actions_test.cpp", "ActionsConfig, KeysReachThePlannerAndTheRunner"}},
    {"categories.receiver_system.watch_after_deferrals",
     {"tests/unit/config_effects_engine_test.cpp",
      "ConfigEffects, WatchAfterDeferralsPerCategoryDecidesWhenADestinationIsWatched"}},
    {"categories.greylisting.watch_after_deferrals",
     {"tests/unit/config_effects_engine_test.cpp",
      "ConfigEffects, WatchAfterDeferralsPerCategoryDecidesWhenADestinationIsWatched"}},
    {"categories.rate_limited.watch_after_deferrals",
     {"tests/unit/config_effects_engine_test.cpp",
      "ConfigEffects, WatchAfterDeferralsPerCategoryDecidesWhenADestinationIsWatched"}},
    {"categories.policy.watch_after_deferrals",
     {"tests/unit/config_effects_engine_test.cpp",
      "ConfigEffects, WatchAfterDeferralsPerCategoryDecidesWhenADestinationIsWatched"}},
    {"categories.network.watch_after_deferrals",
     {"tests/unit/config_effects_engine_test.cpp",
      "ConfigEffects, WatchAfterDeferralsPerCategoryDecidesWhenADestinationIsWatched"}},
    {"categories.routing.watch_after_deferrals",
     {"tests/unit/config_effects_engine_test.cpp",
      "ConfigEffects, WatchAfterDeferralsPerCategoryDecidesWhenADestinationIsWatched"}},
    {"categories.local.watch_after_deferrals",
     {"tests/unit/config_effects_engine_test.cpp",
      "ConfigEffects, WatchAfterDeferralsPerCategoryDecidesWhenADestinationIsWatched"}},
    {"categories.unknown.watch_after_deferrals",
     {"tests/unit/config_effects_engine_test.cpp",
      "ConfigEffects, WatchAfterDeferralsPerCategoryDecidesWhenADestinationIsWatched"}},
    {"categories.greylisting.escalate_after",
     {"tests/unit/config_effects_engine_test.cpp",
      "ConfigEffects, EscalateAfterPerCategoryDecidesWhenAnEpisodeEscalates"}},
    {"categories.rate_limited.escalate_after",
     {"tests/unit/config_effects_engine_test.cpp",
      "ConfigEffects, EscalateAfterPerCategoryDecidesWhenAnEpisodeEscalates"}},
    {"categories.policy.escalate_after",
     {"tests/unit/config_effects_engine_test.cpp",
      "ConfigEffects, EscalateAfterPerCategoryDecidesWhenAnEpisodeEscalates"}},
    {"categories.network.escalate_after",
     {"tests/unit/config_effects_engine_test.cpp",
      "ConfigEffects, EscalateAfterPerCategoryDecidesWhenAnEpisodeEscalates"}},
    {"categories.routing.escalate_after",
     {"tests/unit/config_effects_engine_test.cpp",
      "ConfigEffects, EscalateAfterPerCategoryDecidesWhenAnEpisodeEscalates"}},
    {"categories.local.escalate_after",
     {"tests/unit/config_effects_engine_test.cpp",
      "ConfigEffects, EscalateAfterPerCategoryDecidesWhenAnEpisodeEscalates"}},
    {"categories.unknown.escalate_after",
     {"tests/unit/config_effects_engine_test.cpp",
      "ConfigEffects, EscalateAfterPerCategoryDecidesWhenAnEpisodeEscalates"}},
    {"retry.min_interval",
     {"tests/unit/config_effects_engine_test.cpp",
      "ConfigEffects, RetryMinIntervalIsTheShortestRetryNotReported"}},
    {"retry.min_interval_after_greylisting",
     {"tests/unit/config_effects_engine_test.cpp",
      "ConfigEffects, RetryMinIntervalAfterGreylistingAppliesAfterAGreylistingReply"}},
    {"retry.stalled_after",
     {"tests/unit/config_effects_engine_test.cpp",
      "ConfigEffects, StalledAfterDecidesWhenAQuietRecipientIsReported"}},
    {"retry.honor_retry_after_hint",
     {"tests/unit/config_effects_engine_test.cpp",
      "ConfigEffects, HonorRetryAfterHintRaisesTheMinimumToTheDelayAsked"}},
    {"flags.period",
     {"tests/unit/config_effects_engine_test.cpp",
      "ConfigEffects, FlagsPeriodIsTheWindowInWhichEpisodesCount"}},
    {"flags.ttl",
     {"tests/unit/config_effects_engine_test.cpp", "ConfigEffects, FlagsTtlDecidesWhenAFlagExpires"}},
    {"flags.categories",
     {"tests/unit/config_effects_engine_test.cpp", "ConfigEffects, FlagsCategoriesDecideWhichEpisodesFlag"}},
    {"spread.categories",
     {"tests/unit/config_effects_engine_test.cpp",
      "ConfigEffects, SpreadCategoriesDecideWhichDeferralsRevealALocalIncident"}},
    {"actions.watch",
     {"tests/unit/config_effects_engine_test.cpp",
      "ConfigEffects, ActionsWatchIsTheAnswerForADestinationInWatch"}},
    {"actions.flagged",
     {"tests/unit/config_effects_engine_test.cpp",
      "ConfigEffects, ActionsFlaggedIsTheAnswerForAFlaggedDestination"}},
    {"actions.local_incident",
     {"tests/unit/config_effects_engine_test.cpp",
      "ConfigEffects, ActionsLocalIncidentIsTheAnswerWhileAnIncidentIsOpen"}},
    {"sources[].address",
     {"tests/policyd/policyd_daemon_test.cpp",
      "PolicydLive, SyslogUdpSourcesListenOnTheirAddressAndCutAtTheirLineLength"}},
    {"sources[].max_line_length",
     {"tests/policyd/policyd_daemon_test.cpp",
      "PolicydLive, SyslogUdpSourcesListenOnTheirAddressAndCutAtTheirLineLength"}},
    {"milter.deadline", {"tests/milter/miltertest_test.sh", "FFF0000002: verdict=accept "}},
    {"milter.timeout", {"tests/milter/miltertest_test.sh", "stalled command: connection"}},
    {"milter.reject_code", {"tests/milter/miltertest_test.sh", "response=\"450 4.7.1\""}},
    {"milter.reject_xcode", {"tests/milter/miltertest_test.sh", "response=\"450 4.7.1\""}},
    {"milter.record_queue",
     {"tests/milter/miltertest_test.sh",
      "FFF0000003: could not record the message identity: record queue full"}},
    {"policy.socket_mode",
     {"tests/policyd/policyd_daemon_test.cpp", "PolicydDaemon, UnixPolicySocketGetsTheConfiguredMode"}},
    {"policy.worker_threads",
     {"tests/policyd/policyd_daemon_test.cpp",
      "PolicydDaemon, BlockingDecisionsRunOnAsManyThreadsAsConfigured"}},
    {"policy.max_attributes",
     {"tests/policyd/policyd_daemon_test.cpp",
      "PolicydDaemon, RequestWithMoreAttributesThanTheLimitIsRefused"}},
    {"reinjection.fingerprint.parts",
     {"tests/milter/miltertest_test.sh",
      "EEE0000001: verdict=reject path=smtp original=DDD0000001 .*matched=fingerprint"}},
    {"reinjection.fingerprint.body_limit",
     {"tests/milter/miltertest_test.sh",
      "EEE0000001: verdict=reject path=smtp original=DDD0000001 .*matched=fingerprint"}},
    {"log.facility",
     {"tests/policyd/policyd_daemon_test.cpp",
      "PolicydDaemon, SyslogLinesCarryTheConfiguredFacilityAndIdent"}},
    {"log.ident",
     {"tests/policyd/policyd_daemon_test.cpp",
      "PolicydDaemon, SyslogLinesCarryTheConfiguredFacilityAndIdent"}},
    {"metrics.enabled",
     {"tests/policyd/policyd_daemon_test.cpp", "PolicydDaemon, MetricsDisabledServesNoEndpoint"}},
    {"ingest.batch_max_events",
     {"tests/policyd/policyd_daemon_test.cpp", "PolicydLive, BatchMaxEventsBoundsTheLinesOfOneBatch"}},
    {"errors.internal",
     {"tests/policyd/policyd_daemon_test.cpp",
      "PolicydLive, ErrorsInternalDecidesTheAnswerToAFailedDecision"}},
    {"errors.bad_input",
     {"tests/milter/miltertest_test.sh", "GGG0000001: verdict=tempfail path=smtp failopen=input-limit"}},
};

// Keys read by a consumer (key_consumers) for which no test here or in
// kProofs shows the effect yet. Listed so the gap is explicit; a key added to
// the table must get a proof, not an entry here. Every key has one now.
const std::set<std::string> kNoProofYet = {};

bool file_has(const std::string& rel, const std::string& text) {
    std::ifstream in(std::string(RETRYGUARD_SOURCE_DIR) + "/" + rel);
    std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    return all.find(text) != std::string::npos;
}

TEST(ConfigConsumers, EveryKeyHasAConsumerAndAProof) {
    std::set<std::string> observed;
    for (const auto* m : {&kLedgerObserved, &kRedisObserved, &kRetentionObserved})
        for (const auto& [k, v] : *m) observed.insert(k);
    std::set<std::string> table;
    for (const auto& k : cfg::key_table()) {
        const std::string key(k.key);
        table.insert(key);
        EXPECT_FALSE(cfg::key_consumers(key).empty()) << key << ": no consumer named in table.cpp";
        const bool proven = observed.count(key) || kProofs.count(key);
        EXPECT_TRUE(proven || kNoProofYet.count(key))
            << key << ": read by " << cfg::key_consumers(key)
            << " but no test shows its effect: observe it here or add it to kProofs";
        EXPECT_FALSE(proven && kNoProofYet.count(key)) << key << ": proven, remove it from kNoProofYet";
    }
    for (const auto& [key, proof] : kProofs) {
        EXPECT_TRUE(table.count(key)) << key << ": not a key of the table";
        const std::string test = proof.test;
        const bool gtest = test.find(", ") != std::string::npos;
        EXPECT_TRUE(gtest ? file_has(proof.file, "TEST(" + test + ")") ||
                                file_has(proof.file, "TEST_F(" + test + ")")
                          : file_has(proof.file, test))
            << key << ": " << proof.file << " has no " << test;
    }
    for (const auto& key : kNoProofYet) EXPECT_TRUE(table.count(key)) << key << ": not a key of the table";
}

}  // namespace
}  // namespace retryguard
