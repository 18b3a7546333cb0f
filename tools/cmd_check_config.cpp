// cmd_check_config.cpp -- `retryguard check-config [FILE] [--explain DOMAIN
// [--mx HOST]] [--json]`: validates a config file and shows which destination
// rule applies to a domain. Also prints the generated reference and default
// file (--dump-docs, --dump-default). Thin glue over retryguard/config/config.hpp;
// must never decide policy or change the file.
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "retryguard/config/config.hpp"
#include "retryguard/postfix/postfix_wiring.hpp"
#include "retryguard/runtime/runtime.hpp"
#include "retryguard/text/text.hpp"

namespace retryguard::cli {
namespace {

namespace cfg = retryguard::config;

struct Options {
    std::string file;
    std::vector<std::string> overrides;  // -o key=value
    std::string explain;
    std::string mx;
    bool json = false;
    bool dump_docs = false;
    bool dump_default = false;
    std::string postfix = "auto";  // auto | yes | no: also check the Postfix side
    std::string postfix_config;    // postconf -c DIR
};

std::string default_file() {
    const char* etc = "/etc/retryguard/retryguard.yaml";
    if (std::filesystem::exists(etc)) return etc;
    // Run from a source tree: use its documented default.
    if (std::filesystem::exists("conf/retryguard.yaml")) return "conf/retryguard.yaml";
    return etc;
}

const char* rule_kind(const cfg::DestinationRule& r) {
    switch (r.kind) {
        case cfg::DestinationRule::Kind::exact: return "domain";
        case cfg::DestinationRule::Kind::wildcard: return "wildcard";
        case cfg::DestinationRule::Kind::mx: return "mx";
    }
    return "";
}

struct Difference {
    std::string key, value, global;
};

std::vector<Difference> differences(const cfg::Config& c, const cfg::Settings& s) {
    std::vector<Difference> out;
    for (const auto& k : cfg::key_table()) {
        if (k.scope != cfg::Scope::overridable) continue;
        auto mine = cfg::show_setting(s, k.key), global = cfg::show_setting(c.global, k.key);
        if (mine != global) out.push_back({std::string(k.key), mine, global});
    }
    return out;
}

int run(const Options& o) {
    if (o.dump_docs) {
        std::cout << cfg::render_docs_markdown();
        return kExitOk;
    }
    if (o.dump_default) {
        std::cout << cfg::render_default_yaml();
        return kExitOk;
    }
    if (!o.mx.empty() && o.explain.empty()) {
        std::cerr << "retryguard check-config: --mx needs --explain DOMAIN\n";
        return kExitUsage;
    }
    const std::string file = o.file.empty() ? default_file() : o.file;
    auto out = cfg::load_file(file, o.overrides);
    // What the daemons would refuse beyond the file itself (the classifier
    // rules, compiled as they compile them): a file that passes here starts.
    if (out.ok()) {
        out.errors = runtime_checks(*out.config);
        if (!out.errors.empty()) out.config = nullptr;
    }
    nlohmann::json j;
    j["file"] = file;
    j["ok"] = out.ok();
    j["errors"] = nlohmann::json::array();
    for (const auto& d : out.errors) {
        j["errors"].push_back(
            {{"file", d.file}, {"line", d.line}, {"column", d.column}, {"message", d.message}});
        if (!o.json) std::cerr << d.to_string() << "\n";
    }
    if (!out.ok()) {
        if (o.json)
            std::cout << text::json_dump(j) << "\n";
        else
            std::cerr << file << ": " << out.errors.size() << (out.errors.size() == 1 ? " error" : " errors")
                      << "\n";
        return kExitUsage;
    }
    const auto& c = *out.config;
    if (o.explain.empty()) {
        // The Postfix side: on an installed host (the default file) or when asked.
        const bool installed = file == kDefaultConfigPath && std::filesystem::exists("/usr/sbin/postconf");
        std::vector<WiringFinding> findings;
        if (o.postfix == "yes" || (o.postfix == "auto" && installed)) {
            auto pc = run_postconf(o.postfix_config);
            if (pc) {
                findings = check_postfix_wiring(*pc, c);
            } else {
                findings.push_back({WiringFinding::Level::error, pc.error().message,
                                    "install and configure Postfix, or pass --postfix no"});
            }
            for (auto& f : check_sources_readable(c, c.policy.user)) findings.push_back(std::move(f));
            for (auto& f : check_sockets_reachable(c)) findings.push_back(std::move(f));
        }
        // Not Postfix's side, but the same kind of finding: settings that work
        // on one host and break a fleet.
        for (auto& f : check_fleet_sources(c)) findings.push_back(std::move(f));
        int errors = 0;
        j["postfix"] = nlohmann::json::array();
        for (const auto& f : findings) {
            errors += f.level == WiringFinding::Level::error;
            j["postfix"].push_back({{"level", to_string(f.level)}, {"what", f.what}, {"fix", f.fix}});
        }
        if (errors) j["ok"] = false;
        if (o.json) {
            std::cout << text::json_dump(j) << "\n";
        } else {
            std::cout << file << ": OK (" << c.sources.size() << " log source(s), " << c.destinations.size()
                      << " destination rule(s))\n";
            for (const auto& f : findings) {
                std::cout << "postfix: " << to_string(f.level) << ": " << text::terminal(f.what) << "\n";
                if (!f.fix.empty()) std::cout << "    fix: " << text::terminal(f.fix) << "\n";
            }
        }
        return errors ? kExitAttention : kExitOk;
    }
    auto res = c.resolve(o.explain, o.mx);
    auto diffs = differences(c, *res.settings);
    if (o.json) {
        nlohmann::json e;
        e["domain"] = o.explain;
        e["mx"] = o.mx.empty() ? nlohmann::json(nullptr) : nlohmann::json(o.mx);
        if (res.rule) {
            e["rule"] = {{"index", res.rule->index},
                         {"kind", rule_kind(*res.rule)},
                         {"pattern", res.rule->pattern},
                         {"line", res.rule->line},
                         {"column", res.rule->column}};
        } else {
            e["rule"] = nullptr;
        }
        e["reason"] = res.reason();
        e["also_matched"] = nlohmann::json::array();
        for (const auto* r : res.also_matched)
            e["also_matched"].push_back(
                {{"index", r->index}, {"kind", rule_kind(*r)}, {"pattern", r->pattern}, {"line", r->line}});
        e["contact"] =
            res.settings->contact.empty() ? nlohmann::json(nullptr) : nlohmann::json(res.settings->contact);
        e["differs_from_global"] = nlohmann::json::object();
        for (const auto& d : diffs)
            e["differs_from_global"][d.key] = {{"value", d.value}, {"global", d.global}};
        j["explain"] = e;
        std::cout << text::json_dump(j) << "\n";
        return kExitOk;
    }
    std::cout << "domain:  " << text::terminal(o.explain) << "\n";
    if (!o.mx.empty()) std::cout << "mx:      " << text::terminal(o.mx) << "\n";
    if (res.rule)
        std::cout << "rule:    destinations[" << res.rule->index << "] " << rule_kind(*res.rule) << " '"
                  << res.rule->pattern << "' at " << c.source << ":" << res.rule->line << ":"
                  << res.rule->column << "\n";
    else
        std::cout << "rule:    none (global settings)\n";
    std::cout << "why:     " << res.reason() << "\n";
    for (const auto* r : res.also_matched)
        std::cout << "also:    " << rule_kind(*r) << " '" << r->pattern << "' at line " << r->line
                  << " matches too, but has lower precedence\n";
    if (!res.settings->contact.empty()) std::cout << "contact: " << res.settings->contact << "\n";
    if (diffs.empty()) {
        std::cout << "effective settings: the global ones\n";
    } else {
        std::cout << "effective settings that differ from the global ones:\n";
        for (const auto& d : diffs)
            std::cout << "  " << d.key << ": " << d.value << "   (global: " << d.global << ")\n";
    }
    return kExitOk;
}

}  // namespace

void add_check_config_command(CLI::App& app) {
    auto opts = std::make_shared<Options>();
    auto* cmd = app.add_subcommand("check-config",
                                   "Check a configuration file; explain which destination rule applies");
    cmd->add_option(
        "file", opts->file,
        "Config file (default /etc/retryguard/retryguard.yaml, or conf/retryguard.yaml in a source tree)");
    cmd->add_option("-o", opts->overrides,
                    "KEY=VALUE: check the file with this key set as a daemon's -o would set it (repeatable)")
        ->allow_extra_args(false);  // one KEY=VALUE per -o: the words after it are arguments
    cmd->add_option("--explain", opts->explain, "Show which destination rule applies to DOMAIN and why");
    cmd->add_option("--mx", opts->mx, "Relay (MX) host of the domain, for MX-group rules");
    cmd->add_flag("--json", opts->json, "Print one JSON object");
    cmd->add_flag("--dump-docs", opts->dump_docs,
                  "Print the configuration reference (docs/configuration.md)");
    cmd->add_flag("--dump-default", opts->dump_default,
                  "Print the documented default file (conf/retryguard.yaml)");
    cmd->add_option("--postfix", opts->postfix,
                    "Also check that Postfix uses retryguard (postconf -nx) and that the policy daemon's "
                    "user can read its log sources: auto (when checking the installed file), yes, no")
        ->check(CLI::IsMember({"auto", "yes", "no"}))
        ->capture_default_str();
    cmd->add_option("--postfix-config", opts->postfix_config,
                    "Postfix configuration directory (postconf -c)");
    cmd->callback([opts] { exit_code() = run(*opts); });
}

}  // namespace retryguard::cli
