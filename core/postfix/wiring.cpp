// wiring.cpp -- see postfix_wiring.hpp. Postfix list syntax: items separated by
// commas or white space; `{ ... }` groups one item with its options
// (`{ unix:x, default_action=DUNNO }`).
#include "retryguard/postfix/postfix_wiring.hpp"

#include <grp.h>
#include <pwd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <set>

#include "retryguard/file_access.hpp"

namespace retryguard {

std::string_view to_string(WiringFinding::Level level) noexcept {
    switch (level) {
        case WiringFinding::Level::ok: return "ok";
        case WiringFinding::Level::warning: return "warning";
        case WiringFinding::Level::error: return "error";
    }
    return "error";
}

namespace {

std::string_view trim(std::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
    return s;
}

std::map<std::string, std::string, std::less<>> parse_postconf(std::string_view text) {
    std::map<std::string, std::string, std::less<>> out;
    std::string last;
    while (!text.empty()) {
        auto nl = text.find('\n');
        std::string_view line = text.substr(0, nl);
        text = nl == std::string_view::npos ? std::string_view{} : text.substr(nl + 1);
        if (line.empty() || line.front() == '#') continue;
        if ((line.front() == ' ' || line.front() == '\t') && !last.empty()) {  // continuation
            out[last] += " " + std::string(trim(line));
            continue;
        }
        auto eq = line.find('=');
        if (eq == std::string_view::npos) continue;
        last = std::string(trim(line.substr(0, eq)));
        out[last] = std::string(trim(line.substr(eq + 1)));
    }
    return out;
}

// One list item: its first word (the endpoint or restriction) and whether it
// came from a `{ }` group.
struct Item {
    std::string head;
    std::string text;
};

std::vector<Item> split_list(std::string_view v) {
    std::vector<Item> items;
    std::size_t i = 0;
    auto is_sep = [](char c) { return c == ',' || c == ' ' || c == '\t' || c == '\n'; };
    while (i < v.size()) {
        while (i < v.size() && is_sep(v[i])) ++i;
        if (i >= v.size()) break;
        if (v[i] == '{') {
            auto close = v.find('}', i);
            std::string_view inner =
                v.substr(i + 1, close == std::string_view::npos ? v.npos : close - i - 1);
            i = close == std::string_view::npos ? v.size() : close + 1;
            std::size_t j = 0;
            while (j < inner.size() && is_sep(inner[j])) ++j;
            std::size_t k = j;
            while (k < inner.size() && !is_sep(inner[k])) ++k;
            items.push_back({std::string(inner.substr(j, k - j)), std::string(trim(inner))});
            continue;
        }
        std::size_t k = i;
        while (k < v.size() && !is_sep(v[k])) ++k;
        items.push_back({std::string(v.substr(i, k - i)), std::string(v.substr(i, k - i))});
        i = k;
    }
    return items;
}

// Canonical form of an endpoint for comparison: "unix:/abs/path" or "inet:host:port".
std::string canonical_postfix(std::string_view ep, std::string_view queue_dir) {
    if (ep.starts_with("unix:")) {
        std::string p(ep.substr(5));
        if (!p.starts_with("/")) p = std::string(queue_dir) + "/" + p;
        return "unix:" + p;
    }
    if (ep.starts_with("inet:")) ep.remove_prefix(5);
    std::string s(ep);
    if (s == "localhost" || s.starts_with("localhost:")) s.replace(0, 9, "127.0.0.1");
    return "inet:" + s;
}

std::string canonical_ours(const config::SocketSpec& s) {
    if (s.kind == config::SocketSpec::Kind::unix_path) return "unix:" + s.path;
    std::string host = s.host == "localhost" ? "127.0.0.1" : s.host;
    if (s.kind == config::SocketSpec::Kind::inet6) host = "[" + host + "]";
    return "inet:" + host + ":" + std::to_string(s.port);
}

std::string get(const std::map<std::string, std::string, std::less<>>& p, std::string_view key,
                std::string def = {}) {
    auto it = p.find(key);
    return it == p.end() ? def : it->second;
}

bool is_permit(std::string_view r) {
    return r == "permit" || r == "permit_mynetworks" || r == "permit_sasl_authenticated" ||
           r == "permit_tls_clientcerts" || r == "permit_tls_all_clientcerts";
}

}  // namespace

std::string postfix_endpoint(const config::SocketSpec& socket, std::string_view queue_directory) {
    if (socket.kind == config::SocketSpec::Kind::unix_path) {
        std::string prefix = std::string(queue_directory) + "/";
        if (socket.path.starts_with(prefix)) return "unix:" + socket.path.substr(prefix.size());
        return "unix:" + socket.path;
    }
    std::string host = socket.kind == config::SocketSpec::Kind::inet6 ? "[" + socket.host + "]" : socket.host;
    return "inet:" + host + ":" + std::to_string(socket.port);
}

std::vector<WiringFinding> check_postfix_wiring(std::string_view postconf_n, const config::Config& config) {
    using L = WiringFinding::Level;
    std::vector<WiringFinding> out;
    const auto p = parse_postconf(postconf_n);
    const std::string queue_dir = get(p, "queue_directory", "/var/spool/postfix");
    const std::string milter_want = canonical_ours(config.milter.socket);
    const std::string milter_text = postfix_endpoint(config.milter.socket, queue_dir);
    const std::string policy_want = canonical_ours(config.policy.socket);
    const std::string policy_text = postfix_endpoint(config.policy.socket, queue_dir);

    auto has_milter = [&](std::string_view param) {
        for (const auto& item : split_list(get(p, param)))
            if (canonical_postfix(item.head, queue_dir) == milter_want) return true;
        return false;
    };
    for (std::string_view param : {"smtpd_milters", "non_smtpd_milters"}) {
        const bool smtp = param == "smtpd_milters";
        if (has_milter(param)) {
            out.push_back(
                {L::ok, std::string(param) + " names retryguard's milter (" + milter_text + ")", ""});
        } else {
            out.push_back({L::error,
                           std::string(param) + " does not name retryguard's milter: " +
                               (smtp ? "resends over SMTP are not refused"
                                     : "resends with the sendmail command are not refused"),
                           "postconf -e '" + std::string(param) + " = " +
                               (smtp ? milter_text : std::string("$smtpd_milters")) + "'"});
        }
    }
    const std::string action = get(p, "milter_default_action", "tempfail");
    if (action == "accept") {
        out.push_back({L::ok, "milter_default_action = accept: mail flows when the milter is down", ""});
    } else {
        out.push_back({L::warning,
                       "milter_default_action = " + action +
                           ": when the milter is down Postfix applies that to every message (retryguard "
                           "itself always fails open)",
                       "postconf -e 'milter_default_action = accept'"});
    }

    bool found = false;
    for (std::string_view param : {"smtpd_recipient_restrictions", "smtpd_relay_restrictions"}) {
        const auto items = split_list(get(p, param));
        std::string permit_before;
        for (std::size_t i = 0; i < items.size(); ++i) {
            const auto& it = items[i];
            std::string head = it.head;
            std::string endpoint;
            if (head == "check_policy_service") {
                if (i + 1 < items.size()) endpoint = items[i + 1].head;
                ++i;
            } else {
                if (is_permit(head) && permit_before.empty()) permit_before = head;
                continue;
            }
            if (canonical_postfix(endpoint, queue_dir) != policy_want) continue;
            found = true;
            if (!permit_before.empty()) {
                out.push_back({L::warning,
                               std::string(param) + " asks retryguard's policy service only after " +
                                   permit_before + ": local and authenticated senders never reach it",
                               "move check_policy_service { " + policy_text +
                                   ", default_action=DUNNO } to the front of " + std::string(param)});
            } else {
                out.push_back({L::ok,
                               std::string(param) + " asks retryguard's policy service (" + policy_text + ")",
                               ""});
            }
            break;
        }
        if (found) break;
    }
    if (!found)
        out.push_back({L::error,
                       "no check_policy_service names retryguard's policy service (" + policy_text + ")",
                       "postconf -e \"smtpd_recipient_restrictions = check_policy_service { " + policy_text +
                           ", default_action=DUNNO } $(postconf -hx smtpd_recipient_restrictions)\""});
    return out;
}

WiringFinding check_source_readable(const config::SourceConfig& s, const std::string& user,
                                    bool unit_groups) {
    using L = WiringFinding::Level;
    struct stat st {};
    if (::stat(s.path.c_str(), &st) != 0)
        return {L::warning, "log source " + s.path + " does not exist (yet)",
                "check sources[].path; the policy daemon waits for it and says so in status"};
    const passwd* pw = ::getpwnam(user.c_str());
    if (!pw)
        return {L::warning, "user " + user + " (policy.user) does not exist: cannot check " + s.path,
                "install the package, or set policy.user"};
    std::set<gid_t> gids;
    const uid_t uid = pw->pw_uid;
    int n = 64;
    std::vector<gid_t> list(static_cast<std::size_t>(n));
    if (::getgrouplist(user.c_str(), pw->pw_gid, list.data(), &n) < 0) {
        list.resize(static_cast<std::size_t>(n));
        ::getgrouplist(user.c_str(), pw->pw_gid, list.data(), &n);
    }
    list.resize(static_cast<std::size_t>(std::max(n, 0)));
    gids.insert(list.begin(), list.end());
    if (unit_groups)
        for (const char* g : {"adm", "systemd-journal"})
            if (const group* gr = ::getgrnam(g)) gids.insert(gr->gr_gid);
    const bool readable = uid == 0 || (st.st_uid == uid && (st.st_mode & S_IRUSR)) ||
                          (gids.count(st.st_gid) && (st.st_mode & S_IRGRP)) || (st.st_mode & S_IROTH);
    const std::string grname = group_name(st.st_gid);
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    if (readable)
        return {L::ok,
                "log source " + s.path + " (group " + grname + ", mode " + mode + ") is readable by " + user +
                    (unit_groups ? " under its unit" : ""),
                ""};
    return {
        L::error,
        "log source " + s.path + " (group " + grname + ", mode " + mode + ") cannot be read by " + user +
            ": nothing feeds the ledger",
        "give the policy daemon's unit SupplementaryGroups=" + grname + " or choose a source it can read"};
}

std::vector<WiringFinding> check_sources_readable(const config::Config& config, const std::string& user,
                                                  bool unit_groups) {
    std::vector<WiringFinding> out;
    for (const auto& s : config.sources)
        if (s.type == config::SourceType::file) out.push_back(check_source_readable(s, user, unit_groups));
    return out;
}

std::vector<WiringFinding> check_sockets_reachable(const config::Config& config,
                                                   const std::string& postfix_user) {
    using L = WiringFinding::Level;
    std::vector<WiringFinding> out;
    const passwd* pw = ::getpwnam(postfix_user.c_str());
    if (!pw) return out;  // no Postfix here: the wiring check already says so
    const uid_t uid = pw->pw_uid;
    const gid_t gid = pw->pw_gid;
    auto may = [&](const struct stat& st, mode_t u, mode_t g, mode_t o) {
        return uid == 0 || (st.st_uid == uid   ? (st.st_mode & u) != 0
                            : st.st_gid == gid ? (st.st_mode & g) != 0
                                               : (st.st_mode & o) != 0);
    };
    auto describe = [](const struct stat& st) {
        char mode[8];
        std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
        return user_name(st.st_uid) + ":" + group_name(st.st_gid) + " " + mode;
    };
    const std::pair<const char*, const config::SocketSpec*> sockets[] = {
        {"retryguard-milter", &config.milter.socket}, {"retryguard-policyd", &config.policy.socket}};
    for (const auto& [daemon, spec] : sockets) {
        if (spec->kind != config::SocketSpec::Kind::unix_path) continue;
        const std::string dir = std::filesystem::path(spec->path).parent_path().string();
        struct stat ds {};
        if (::stat(dir.c_str(), &ds) != 0) {
            out.push_back({L::error, "socket directory " + dir + " does not exist",
                           "reinstall the package or run: systemd-tmpfiles --create retryguard.conf"});
            continue;
        }
        if (!may(ds, S_IXUSR, S_IXGRP, S_IXOTH)) {
            out.push_back({L::error,
                           "socket directory " + dir + " (" + describe(ds) + ") cannot be entered by " +
                               postfix_user + ": Postfix cannot reach " + daemon + " and skips it",
                           "systemd-tmpfiles --create retryguard.conf (makes it group " + postfix_user +
                               ", set-group-ID), then restart " + daemon});
            continue;
        }
        struct stat ss {};
        if (::stat(spec->path.c_str(), &ss) != 0) {
            out.push_back({L::warning, spec->path + " does not exist: is " + daemon + " running?",
                           "systemctl start " + std::string(daemon)});
            continue;
        }
        if (!may(ss, S_IWUSR, S_IWGRP, S_IWOTH)) {
            out.push_back({L::error,
                           spec->path + " (" + describe(ss) + ") cannot be opened by " + postfix_user +
                               ": Postfix cannot reach " + daemon + " and skips it",
                           "systemd-tmpfiles --create retryguard.conf, then restart " + std::string(daemon)});
            continue;
        }
        out.push_back({L::ok, spec->path + " (" + describe(ss) + ") can be reached by " + postfix_user, ""});
    }
    return out;
}

std::vector<WiringFinding> check_fleet_sources(const config::Config& config) {
    std::vector<WiringFinding> out;
    if (config.ledger.backend != config::LedgerBackend::redis) return out;
    for (std::size_t i = 0; i < config.sources.size(); ++i) {
        const auto& s = config.sources[i];
        if (!config::resumes_from_position(s) || s.name != config::default_source_name(s)) continue;
        out.push_back({WiringFinding::Level::warning,
                       "sources[" + std::to_string(i) +
                           "] keeps its position in the shared Redis ledger as '" + s.name +
                           "', the same name on every host: the hosts of a fleet overwrite each "
                           "other's position",
                       "give it a name of this host's own: sources[" + std::to_string(i) +
                           "].name (e.g. mx1:mail.log)"});
    }
    return out;
}

Result<std::string> run_postconf(const std::string& config_dir) {
    std::string cmd = "postconf -nx";
    if (!config_dir.empty()) {
        std::string quoted = "'";
        for (char c : config_dir) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
        cmd += " -c " + quoted + "'";
    }
    cmd += " 2>/dev/null";
    std::unique_ptr<FILE, int (*)(FILE*)> pipe(::popen(cmd.c_str(), "r"), ::pclose);
    if (!pipe) return make_error(ErrorKind::io, "cannot run postconf");
    std::string text;
    std::array<char, 4096> buf{};
    std::size_t n;
    while ((n = std::fread(buf.data(), 1, buf.size(), pipe.get())) > 0) text.append(buf.data(), n);
    const int status = ::pclose(pipe.release());
    if (status == -1 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
        return make_error(ErrorKind::io, "postconf -nx failed (is Postfix installed and configured?)");
    return text;
}

}  // namespace retryguard
