// config_errors_test.cpp -- every class of configuration error is reported
// with the exact file:line:column (1-based) and message, all errors are
// collected, and broken input never crashes the loader.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "retryguard/config/config.hpp"

namespace cfg = retryguard::config;

namespace {

std::vector<std::string> errors_of(const std::string& yaml) {
    auto out = cfg::load_string(yaml, "t.yaml");
    std::vector<std::string> lines;
    for (const auto& d : out.errors) lines.push_back(d.to_string());
    EXPECT_EQ(out.ok(), lines.empty());
    return lines;
}

std::string only_error(const std::string& yaml) {
    auto e = errors_of(yaml);
    EXPECT_EQ(e.size(), 1u) << (e.empty() ? "no error" : e.front());
    return e.empty() ? "" : e.front();
}

}  // namespace

TEST(ConfigErrors, YamlSyntaxErrorHasLineAndColumn) {
    EXPECT_EQ(only_error("ledger:\n  backend: sqlite\n   bad: indent\n"),
              "t.yaml:3:7: error: YAML syntax error: illegal map value");
    EXPECT_EQ(only_error("a: [1, 2\nb: 3\n"),
              "t.yaml:2:2: error: YAML syntax error: end of sequence flow not found");
}

TEST(ConfigErrors, UnknownKeySuggestsClosest) {
    EXPECT_EQ(only_error("ledger:\n  backnd: sqlite\n"),
              "t.yaml:2:3: error: unknown key 'ledger.backnd'; did you mean 'ledger.backend'?");
    EXPECT_EQ(only_error("ledger:\n  timeout: 1s\n"),
              "t.yaml:2:3: error: unknown key 'ledger.timeout'; did you mean 'ledger.redis.timeout'?");
    EXPECT_EQ(only_error("colour: blue\n"), "t.yaml:1:1: error: unknown key 'colour'");
    EXPECT_EQ(only_error("categories:\n  receiver-config:\n    escalate_after: 1h\n"),
              "t.yaml:2:3: error: unknown key 'categories.receiver-config'; did you mean "
              "'categories.receiver_config'?");
}

TEST(ConfigErrors, WrongType) {
    EXPECT_EQ(only_error("spread:\n  window: [1]\n"),
              "t.yaml:2:11: error: 'spread.window' must be a duration, got a list");
    EXPECT_EQ(only_error("ledger: sqlite\n"),
              "t.yaml:1:9: error: 'ledger' is a section and must be a mapping, got a scalar");
    EXPECT_EQ(only_error("dry_run: yes\n"), "t.yaml:1:10: error: 'dry_run' must be true or false, got 'yes'");
    EXPECT_EQ(only_error("flags:\n  episodes: three\n"),
              "t.yaml:2:13: error: 'flags.episodes' must be a whole number, got 'three'");
    EXPECT_EQ(only_error("flags:\n  categories: receiver_config\n"),
              "t.yaml:2:15: error: 'flags.categories' must be a list (e.g. [receiver_config]), got a scalar");
    EXPECT_EQ(only_error("- a\n- b\n"),
              "t.yaml:1:1: error: the configuration must be a mapping of keys, got a list");
    EXPECT_EQ(only_error("flags:\n  ttl:\n"),
              "t.yaml:2:3: error: missing value for 'flags.ttl' (expected a duration)");
}

TEST(ConfigErrors, BadDurations) {
    EXPECT_EQ(only_error("retry:\n  min_interval: 30\n"),
              "t.yaml:2:17: error: bad duration '30' for 'retry.min_interval': a duration needs a unit: ms, "
              "s, m, h, "
              "d or w (e.g. \"30m\")");
    EXPECT_EQ(only_error("retry:\n  min_interval: 30 minutes\n"),
              "t.yaml:2:17: error: bad duration '30 minutes' for 'retry.min_interval': missing unit after a "
              "number");
    EXPECT_EQ(only_error("retry:\n  min_interval: 30y\n"),
              "t.yaml:2:17: error: bad duration '30y' for 'retry.min_interval': unknown duration unit 'y' "
              "(use ms, s, "
              "m, h, d or w)");
    EXPECT_EQ(
        only_error("retry:\n  min_interval: m\n"),
        "t.yaml:2:17: error: bad duration 'm' for 'retry.min_interval': expected a number before the unit");
}

TEST(ConfigErrors, BadSizes) {
    EXPECT_EQ(only_error("policy:\n  max_request_size: 64\n"),
              "t.yaml:2:21: error: bad size '64' for 'policy.max_request_size': a size needs a unit: B, KiB, "
              "MiB or "
              "GiB (e.g. \"64KiB\")");
    EXPECT_EQ(only_error("policy:\n  max_request_size: 64KB\n"),
              "t.yaml:2:21: error: bad size '64KB' for 'policy.max_request_size': unknown size unit 'KB' "
              "(use B, KiB, "
              "MiB or GiB)");
}

TEST(ConfigErrors, OutOfRange) {
    EXPECT_EQ(only_error("policy:\n  max_attributes: 5\n"),
              "t.yaml:2:19: error: 'policy.max_attributes' is out of range: 5 is not between 8 and 10000");
    EXPECT_EQ(only_error("policy:\n  deadline: 1h\n"),
              "t.yaml:2:13: error: 'policy.deadline' is out of range: 1h is not between 1ms and 10s");
    EXPECT_EQ(
        only_error("policy:\n  max_request_size: 512B\n"),
        "t.yaml:2:21: error: 'policy.max_request_size' is out of range: 512B is not between 1KiB and 16MiB");
    EXPECT_EQ(only_error("milter:\n  socket_mode: \"1777\"\n"),
              "t.yaml:2:16: error: 'milter.socket_mode' must be at most 0777");
}

TEST(ConfigErrors, BadEnumSuggests) {
    EXPECT_EQ(only_error("log:\n  facility: mial\n"),
              "t.yaml:2:13: error: bad value 'mial' for 'log.facility': expected one of mail, daemon, user, "
              "local0, "
              "local1, local2, local3, local4, local5, local6, local7; did you mean 'mail'?");
    EXPECT_EQ(only_error("reinjection:\n  action: drop\n"),
              "t.yaml:2:11: error: bad value 'drop' for 'reinjection.action': expected one of reject, hold, "
              "drop_duplicates, tag, log_only");
    EXPECT_EQ(
        only_error("flags:\n  categories: [receiver_config, reciever_system]\n"),
        "t.yaml:2:33: error: bad value 'reciever_system' in 'flags.categories': expected one of "
        "receiver_config, receiver_config_permanent, receiver_system, greylisting, rate_limited, policy, "
        "mailbox, address, network, routing, content, expired, local, unknown; did you mean "
        "'receiver_system'?");
    EXPECT_EQ(only_error("reinjection:\n  fingerprint:\n    parts: [body, body]\n"),
              "t.yaml:3:19: error: 'body' is listed twice in 'reinjection.fingerprint.parts'");
    EXPECT_EQ(only_error("reinjection:\n  match_by: []\n"),
              "t.yaml:2:13: error: 'reinjection.match_by' needs between 1 and 2 items");
}

TEST(ConfigErrors, BadSocketSpecs) {
    EXPECT_EQ(
        only_error("milter:\n  socket: tcp:8891@localhost\n"),
        "t.yaml:2:11: error: bad socket 'tcp:8891@localhost' for 'milter.socket': unknown socket type 'tcp' "
        "(expected unix, local, inet or inet6)");
    EXPECT_EQ(only_error("policy:\n  socket: inet:99999@127.0.0.1\n"),
              "t.yaml:2:11: error: bad socket 'inet:99999@127.0.0.1' for 'policy.socket': bad port '99999' "
              "(0-65535)");
    EXPECT_EQ(only_error("policy:\n  socket: unix:relative/path\n"),
              "t.yaml:2:11: error: bad socket 'unix:relative/path' for 'policy.socket': a socket path must "
              "be absolute");
    EXPECT_EQ(only_error("policy:\n  socket: inet:10040\n"),
              "t.yaml:2:11: error: bad socket 'inet:10040' for 'policy.socket': inet sockets are written "
              "inet:port@host");
    EXPECT_EQ(only_error("policy:\n  socket: inet:10040@::1\n"),
              "t.yaml:2:11: error: bad socket 'inet:10040@::1' for 'policy.socket': use inet6: for an IPv6 "
              "address");
    EXPECT_EQ(only_error("policy:\n  socket: unix:/var/spool/postfix/retryguard/milter.sock\n"),
              "t.yaml:2:11: error: policy.socket and milter.socket are the same socket "
              "'unix:/var/spool/postfix/retryguard/milter.sock'");
}

TEST(ConfigErrors, BadRegexAndGlob) {
    EXPECT_EQ(
        only_error("reinjection:\n  fingerprint:\n    subject_ignore: \"(unclosed\"\n"),
        "t.yaml:3:21: error: bad regular expression for 'reinjection.fingerprint.subject_ignore': missing ): "
        "(unclosed");
    EXPECT_EQ(only_error("destinations:\n  - mx: \"mx[1-3.provider.net\"\n"),
              "t.yaml:2:9: error: bad mx glob 'mx[1-3.provider.net' in destinations[0]: unclosed '[' in glob "
              "'mx[1-3.provider.net'");
    EXPECT_EQ(only_error("destinations:\n  - mx: \"mx(1|2).provider.net\"\n"),
              "t.yaml:2:9: error: bad mx glob 'mx(1|2).provider.net' in destinations[0]: character '(' is "
              "not allowed "
              "in a host glob");
    EXPECT_EQ(only_error("destinations:\n  - domain: \"foo.*.com\"\n"),
              "t.yaml:2:13: error: bad domain 'foo.*.com' in destinations[0]: '*' is only allowed as the "
              "whole first "
              "label ('*.example.com')");
}

TEST(ConfigErrors, DuplicateRulesAndKeys) {
    EXPECT_EQ(only_error("destinations:\n  - domain: example.com\n  - domain: Example.COM.\n"),
              "t.yaml:3:13: error: duplicate destination rule for domain example.com (first at line 2)");
    EXPECT_EQ(only_error("destinations:\n  - mx: \"mx*.p.net\"\n    contact: a\n  - mx: \"MX*.p.net\"\n"),
              "t.yaml:4:9: error: duplicate destination rule for mx mx*.p.net (first at line 2)");
    EXPECT_EQ(only_error("dry_run: true\ndry_run: false\n"), "t.yaml:2:1: error: duplicate key 'dry_run'");
}

TEST(ConfigErrors, DestinationRuleShape) {
    EXPECT_EQ(only_error("destinations:\n  - contact: nobody\n"),
              "t.yaml:2:5: error: destinations[0]: a rule needs 'domain' (example.com, *.example.com) or "
              "'mx' (a host "
              "glob)");
    EXPECT_EQ(only_error("destinations:\n  - domain: a.example\n    mx: \"mx.a.example\"\n"),
              "t.yaml:3:9: error: destinations[0]: a rule has either 'domain' or 'mx', not both");
    EXPECT_EQ(only_error("destinations:\n  - domain: a.example\n    ledger:\n      backend: redis\n"),
              "t.yaml:3:5: error: 'ledger' cannot be overridden per destination (global only)");
    EXPECT_EQ(only_error("destinations:\n  - domain: a.example\n    spread:\n      window: 1h\n"),
              "t.yaml:3:5: error: 'spread' cannot be overridden per destination (global only)");
    EXPECT_EQ(only_error("destinations:\n  - domain: a.example\n    flags:\n      episods: 2\n"),
              "t.yaml:4:7: error: unknown key 'flags.episods' in a destination rule; did you mean "
              "'flags.episodes'?");
    EXPECT_EQ(
        only_error("destinations:\n  - domain: bücher.example\n"),
        "t.yaml:2:13: error: bad domain 'bücher.example' in destinations[0]: use the ASCII (xn--) form of an "
        "international domain");
    EXPECT_EQ(only_error("destinations:\n  - domian: a.example\n"),
              "t.yaml:2:5: error: unknown key 'domian' in a destination rule; did you mean 'domain'?");
    EXPECT_EQ(only_error("destinations: {domain: a.example}\n"),
              "t.yaml:1:15: error: 'destinations' must be a list of rules, got a mapping");
}

TEST(ConfigErrors, LoopbackOnlyListeners) {
    EXPECT_EQ(
        only_error("metrics:\n  listen: 0.0.0.0:9487\n"),
        "t.yaml:2:11: error: metrics.listen '0.0.0.0:9487' is not loopback; set metrics.allow_non_loopback: "
        "true to expose it");
    EXPECT_TRUE(errors_of("metrics:\n  listen: 0.0.0.0:9487\n  allow_non_loopback: true\n").empty());
    EXPECT_TRUE(errors_of("metrics:\n  listen: \"[::1]:9487\"\n").empty());
    EXPECT_EQ(
        only_error("sources:\n  - type: syslog_udp\n    address: 192.0.2.1:514\n"),
        "t.yaml:3:14: error: sources[0]: address '192.0.2.1:514' is not loopback; set allow_non_loopback: "
        "true to accept log lines from the network");
    EXPECT_TRUE(
        errors_of(
            "sources:\n  - type: syslog_udp\n    address: 192.0.2.1:514\n    allow_non_loopback: true\n")
            .empty());
    EXPECT_EQ(
        only_error("sources:\n  - type: syslog_udp\n    address: localhost:514\n"),
        "t.yaml:3:14: error: sources[0]: address 'localhost:514' must be an IP address (127.0.0.1:PORT or "
        "[::1]:PORT on loopback): the listener binds it as written");
}

TEST(ConfigErrors, SourceEntries) {
    EXPECT_EQ(only_error("sources:\n  - type: file\n"),
              "t.yaml:2:5: error: sources[0]: a file source needs 'path'");
    EXPECT_EQ(only_error("sources:\n  - type: journald\n    path: /var/log/mail.log\n"),
              "t.yaml:3:11: error: sources[0]: 'path' does not apply to journald sources");
    EXPECT_EQ(
        only_error("sources:\n  - type: file\n    path: /var/log/mail.log\n    address: 127.0.0.1:514\n"),
        "t.yaml:4:14: error: sources[0]: 'address' applies only to syslog_udp sources");
    EXPECT_EQ(only_error("sources:\n  - {type: file, path: /var/log/mail.log}\n  - {type: file, path: "
                         "/var/log/mail.log}\n"),
              "t.yaml:3:5: error: sources[1]: duplicate source 'file:/var/log/mail.log' (first at line 2)");
    EXPECT_EQ(only_error("sources:\n  - type: file\n    path: /var/log/mail.log\n    ledger: x\n"),
              "t.yaml:4:5: error: 'ledger' is a top-level key, not a source setting");
    EXPECT_EQ(only_error("sources:\n  - type: file\n    pth: /var/log/mail.log\n    path: /x\n"),
              "t.yaml:3:5: error: unknown key 'pth' in a source entry; did you mean 'path'?");
}

TEST(ConfigErrors, PolicyActionsAndTexts) {
    EXPECT_EQ(only_error("actions:\n  flagged: \"PREPEND no header here\"\n"),
              "t.yaml:2:12: error: bad action 'PREPEND no header here' for 'actions.flagged': PREPEND needs "
              "a header: "
              "\"PREPEND Header-Name: value\"");
    EXPECT_EQ(only_error("actions:\n  escalated: \"WARN {domian}\"\n"),
              "t.yaml:2:14: error: bad action 'WARN {domian}' for 'actions.escalated': unknown placeholder "
              "'{domian}' (known: {domain}, {mx}, {category}, {since}, {reply}, {contact})");
    EXPECT_EQ(only_error("actions:\n  watch: \"DUNNO please\"\n"),
              "t.yaml:2:10: error: bad action 'DUNNO please' for 'actions.watch': DUNNO takes no text");
    EXPECT_EQ(
        only_error("actions:\n  watch: OK\n"),
        "t.yaml:2:10: error: bad action 'OK' for 'actions.watch': unknown policy action 'OK' (expected "
        "DUNNO, "
        "WARN, INFO, PREPEND, HOLD, DEFER_IF_PERMIT, REJECT, followed by text where Postfix allows it)");
    EXPECT_EQ(only_error("reinjection:\n  reject_text: \"queued as {queue_id}\"\n"),
              "t.yaml:2:16: error: 'reinjection.reject_text': unknown placeholder '{queue_id}' (known: "
              "{recipient}, "
              "{original}, {on_host}, {destination}, {reply}, {since}, {next_retry}, {more})");
    EXPECT_EQ(only_error("reinjection:\n  tag_header: \"X-Resend: yes\"\n"),
              "t.yaml:2:15: error: 'reinjection.tag_header' must be a header field name (printable, no ':' "
              "or space)");
}

TEST(ConfigErrors, CrossKeyRetention) {
    EXPECT_EQ(
        only_error("flags:\n  period: 365d\n"),
        "t.yaml:2:11: error: flags.period (365d) is longer than ledger.retention.episodes (180d): episodes "
        "would be pruned before they count");
    EXPECT_EQ(
        only_error("destinations:\n  - domain: a.example\n    flags:\n      period: 200d\n"),
        "t.yaml:4:15: error: destinations[0]: flags.period (200d) is longer than ledger.retention.episodes "
        "(180d): episodes would be pruned before they count");
}

TEST(ConfigErrors, CollectsEveryErrorInFileOrder) {
    auto e = errors_of(
        "destinations:\n"
        "  - domain: a.example\n"
        "    flags: {ttl: 5}\n"
        "ledger:\n"
        "  backend: sqlit\n"
        "metrics:\n"
        "  listen: 0.0.0.0:1\n"
        "retry:\n"
        "  min_interval: 1x\n");
    ASSERT_EQ(e.size(), 4u);
    EXPECT_EQ(e[0].rfind("t.yaml:3:18: error: bad duration '5' for 'flags.ttl'", 0), 0u) << e[0];
    EXPECT_EQ(e[1].rfind("t.yaml:5:12: error: bad value 'sqlit' for 'ledger.backend'", 0), 0u) << e[1];
    EXPECT_EQ(e[2].rfind("t.yaml:7:11: error: metrics.listen", 0), 0u) << e[2];
    EXPECT_EQ(e[3].rfind("t.yaml:9:17: error: bad duration '1x'", 0), 0u) << e[3];
}

TEST(ConfigErrors, HostileInputNeverCrashes) {
    for (const std::string& text :
         {std::string(5000, '['), std::string(100000, '{'), std::string("a: &x [*x]\n"),
          std::string("\xff\xfe\x00", 3), std::string("? [a, b]\n: c\n"),
          std::string("destinations:\n  - *nothing\n"), std::string("!!binary x: 1\n"),
          std::string("destinations: [[[]]]\nsources: [1, [2]]\n")}) {
        auto out = cfg::load_string(text, "t.yaml");
        EXPECT_FALSE(out.ok());
        EXPECT_FALSE(out.errors.empty());
    }
    auto big = cfg::load_string(std::string(cfg::kMaxConfigBytes + 1, '#'), "t.yaml");
    ASSERT_EQ(big.errors.size(), 1u);
    EXPECT_EQ(big.errors[0].to_string(), "t.yaml: error: file larger than 4194304 bytes");
}

TEST(ConfigErrors, ErrorCountIsBounded) {
    std::string text;
    for (int i = 0; i < 5000; ++i) text += "unknown_" + std::to_string(i) + ": 1\n";
    auto out = cfg::load_string(text, "t.yaml");
    ASSERT_EQ(out.errors.size(), 201u);
    EXPECT_EQ(out.errors[0].to_string(), "t.yaml:1:1: error: unknown key 'unknown_0'");
    EXPECT_EQ(out.errors[200].to_string(), "t.yaml:201:1: error: too many errors; giving up here");
}

TEST(ConfigErrors, UnreadableFile) {
    auto out = cfg::load_file("/nonexistent/retryguard.yaml");
    ASSERT_EQ(out.errors.size(), 1u);
    EXPECT_EQ(out.errors[0].to_string(),
              "/nonexistent/retryguard.yaml: error: cannot open the file: No such file or directory");
}
