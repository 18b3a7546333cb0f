// runtime.cpp -- opens configuration, ledger and classifier the same way for
// every program (see runtime.hpp).
#include "retryguard/runtime/runtime.hpp"

#include <sys/stat.h>

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "retryguard/runtime/privileges.hpp"

namespace retryguard {

LedgerOptions ledger_options_from(const config::Config& c) {
    LedgerOptions o;
    if (c.ledger.backend == config::LedgerBackend::sqlite) {
        o.spec = "sqlite:" + c.ledger.sqlite_path;
    } else {
        const std::string& a = c.ledger.redis_address;
        o.spec = a.starts_with("unix:") ? "redis+unix:" + a.substr(5)
                                        : "redis://" + a + "/" + std::to_string(c.ledger.redis_database);
    }
    if (c.ledger.sqlite_busy_timeout.count() > 0) o.busy_timeout = c.ledger.sqlite_busy_timeout;
    o.sqlite_gather_wal_writes = c.ledger.sqlite_gather_wal_writes;
    if (!c.ledger.redis_key_prefix.empty()) o.key_prefix = c.ledger.redis_key_prefix;
    if (c.ledger.redis_timeout.count() > 0) o.command_timeout = o.connect_timeout = c.ledger.redis_timeout;
    if (c.ledger.redis_reconnect_max_backoff.count() > 0) {
        o.reconnect_max = c.ledger.redis_reconnect_max_backoff;
        o.reconnect_min = std::min(o.reconnect_min, o.reconnect_max);
    }
    return o;
}

Result<std::shared_ptr<const Classifier>> classifier_from(const config::Config& c) {
    auto shipped_path = find_shipped_rules();
    if (!shipped_path) return shipped_path.error();
    auto shipped = parse_rules_file(*shipped_path);
    if (!shipped) return shipped.error();
    std::vector<RuleFile> user;
    if (c.classifier.rules && *c.classifier.rules && c.classifier.rules->IsSequence() &&
        c.classifier.rules->size() > 0) {
        auto layer =
            parse_rules(*c.classifier.rules, c.classifier.file.empty() ? c.source : c.classifier.file);
        if (!layer) return layer.error();
        user.push_back(std::move(layer.value()));
    }
    auto built = Classifier::build(*shipped, user);
    if (!built) return built.error();
    return std::make_shared<const Classifier>(std::move(built.value()));
}

Result<RedisCredentials> read_redis_password_file(const std::string& path) {
    const std::string what = "ledger.redis.password_file " + path;
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0)
        return make_error(ErrorKind::config, what + ": " + std::strerror(errno));
    if (!S_ISREG(st.st_mode)) return make_error(ErrorKind::config, what + ": not a regular file");
    // Group read is allowed: the daemons drop to the service user after start
    // (the policy daemon's pruner opens the ledger then) and members of the
    // service group run the CLI, so the file is root:<service group> 0640.
    // Anything for others, or a group that could change it, is refused.
    if (st.st_mode & S_IRWXO)
        return make_error(ErrorKind::config,
                          fmt::format("{}: mode {:04o} lets others read the password; chmod 0640 "
                                      "(owner root, group of the service user) or 0600 it",
                                      what, st.st_mode & 07777));
    if (st.st_mode & (S_IWGRP | S_IXGRP))
        return make_error(ErrorKind::config,
                          fmt::format("{}: mode {:04o} lets the group change the password; chmod 0640 it",
                                      what, st.st_mode & 07777));
    std::ifstream in(path);
    std::string line;
    if (!in || !std::getline(in, line))
        return make_error(ErrorKind::config, what + ": cannot read a password from it");
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t'))
        line.pop_back();
    if (line.empty()) return make_error(ErrorKind::config, what + ": the first line is empty");
    RedisCredentials c;
    if (auto colon = line.find(':'); colon != std::string::npos && colon > 0) {
        c.username = line.substr(0, colon);
        c.password = line.substr(colon + 1);
    } else {
        c.password = line;
    }
    return c;
}

Result<std::unique_ptr<Ledger>> open_configured_ledger(const config::Config& c) {
    LedgerOptions lo = ledger_options_from(c);
    if (c.ledger.backend == config::LedgerBackend::redis && !c.ledger.redis_password_file.empty()) {
        auto cred = read_redis_password_file(c.ledger.redis_password_file);
        if (!cred) return cred.error();
        lo.redis_username = std::move(cred->username);
        lo.redis_password = std::move(cred->password);
    }
    return open_configured_ledger(lo);
}

Result<std::unique_ptr<Ledger>> open_configured_ledger(const LedgerOptions& lo) {
    if (lo.spec.starts_with("sqlite:")) {
        // The embedded default must work on first use: create its directory.
        std::error_code ec;
        std::filesystem::create_directories(std::filesystem::path(lo.spec.substr(7)).parent_path(), ec);
    }
    return open_ledger(lo);
}

namespace {

// "file:line:col: message" (the rule compiler's form) into a diagnostic; any
// other text stays whole, attributed to the file without a position.
config::Diagnostic diagnostic_from(const std::string& text, const std::string& file) {
    config::Diagnostic d{file, 0, 0, text};
    if (file.empty() || text.rfind(file + ":", 0) != 0) return d;
    std::size_t pos = file.size() + 1;
    auto number = [&](int& out) {
        const std::size_t start = pos;
        long v = 0;
        while (pos < text.size() && text[pos] >= '0' && text[pos] <= '9' && pos - start < 9)
            v = v * 10 + (text[pos++] - '0');
        out = static_cast<int>(v);
        return pos > start;
    };
    int line = 0, column = 0;
    if (!number(line) || pos >= text.size() || text[pos] != ':') return d;
    ++pos;
    if (!number(column) || text.compare(pos, 2, ": ") != 0) return d;
    d.line = line;
    d.column = column;
    d.message = text.substr(pos + 2);
    return d;
}

}  // namespace

std::vector<config::Diagnostic> runtime_checks(const config::Config& c) {
    std::vector<config::Diagnostic> out;
    auto classifier = classifier_from(c);
    if (!classifier) {
        const std::string file = c.classifier.file.empty() ? c.source : c.classifier.file;
        config::Diagnostic d = diagnostic_from(classifier.error().message, file);
        if (d.line == 0) d.message = "classifier: " + d.message;
        out.push_back(std::move(d));
    }
    return out;
}

Result<Runtime> open_runtime(const RuntimeOptions& options) {
    Runtime rt;
    std::string path = options.config_path;
    if (path.empty() && std::filesystem::exists(kDefaultConfigPath)) path = kDefaultConfigPath;
    if (path.empty() && options.overrides.empty()) {
        rt.config = config::defaults();
    } else {
        auto loaded = path.empty() ? config::load_string("", "<built-in defaults>", options.overrides)
                                   : config::load_file(path, options.overrides);
        if (!loaded.ok()) {
            std::string msg;
            for (const auto& d : loaded.errors) msg += (msg.empty() ? "" : "\n") + d.to_string();
            return make_error(ErrorKind::config, msg.empty() ? "cannot load " + path : msg);
        }
        rt.config = loaded.config;
        rt.config_path = path;
    }
    if (options.load_classifier) {
        auto c = classifier_from(*rt.config);
        if (!c) return c.error();
        rt.classifier = std::move(c.value());
    }
    if (options.open_ledger) {
        if (options.ledger_to_directory_owner && rt.config->ledger.backend == config::LedgerBackend::sqlite) {
            auto made = create_ledger_for_directory_owner(rt.config->ledger.sqlite_path);
            if (!made) return made.error();
            if (!made->created.empty()) rt.notices.push_back(made->created);
            if (!made->warning.empty()) rt.notices.push_back("warning: " + made->warning);
        }
        auto l = open_configured_ledger(*rt.config);
        if (!l) return l.error();
        rt.ledger = std::move(l.value());
    }
    return rt;
}

}  // namespace retryguard
