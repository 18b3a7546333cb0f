// cmd_classify.cpp -- `retryguard classify`: explains how retryguard reads a
// remote reply or a Postfix status=... reason (category, codes, stage, whose
// fault, guidance, deciding rule), like `exim -brt` does for retry rules.
//
// Thin glue: parsing and classification live in the core. Must never stop at
// a bad input line: each gets its own error and the rest go on (exit 1).
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "commands.hpp"
#include "retryguard/classify/classifier.hpp"
#include "retryguard/reply/reply.hpp"
#include "retryguard/text/text.hpp"

namespace retryguard::cli {
namespace {

struct Options {
    bool json = false;
    std::string rules;
    std::vector<std::string> replies;
};

// One input, already split from the stream; `length` is its full size even
// when only a prefix was kept.
struct Input {
    std::string text;
    std::size_t length = 0;
};

// Reads lines of at most kMaxReplyLength bytes; longer lines keep a prefix
// and their true length, so a 1 GB line costs no more memory than a short one.
class LineReader {
  public:
    explicit LineReader(std::FILE* f) : f_(f) {}
    bool next(Input& out) {
        out.text.clear();
        out.length = 0;
        bool any = false;
        for (;;) {
            if (pos_ == end_) {
                end_ = std::fread(buf_, 1, sizeof buf_, f_);
                pos_ = 0;
                if (end_ == 0) return any;
            }
            any = true;
            while (pos_ < end_) {
                char c = buf_[pos_++];
                if (c == '\n') {
                    if (!out.text.empty() && out.text.back() == '\r' && out.length <= kMaxReplyLength + 1)
                        out.text.pop_back(), --out.length;
                    return true;
                }
                if (out.length <= kMaxReplyLength) out.text.push_back(c);
                ++out.length;
            }
        }
    }

  private:
    std::FILE* f_;
    char buf_[65536];
    std::size_t pos_ = 0, end_ = 0;
};

// Bad input is shown through the terminal renderer, so the terminal is never driven by it.
std::string printable(std::string_view s) {
    return text::terminal(s);
}

std::optional<std::string> validate(const Input& in) {
    if (in.length > kMaxReplyLength)
        return "line too long (" + std::to_string(in.length) + " bytes; the limit is " +
               std::to_string(kMaxReplyLength) + ")";
    bool blank = true;
    for (std::size_t i = 0; i < in.text.size(); ++i) {
        auto c = static_cast<unsigned char>(in.text[i]);
        if ((c < 0x20 && c != '\t' && c != '\n' && c != '\r') || c == 0x7f) {
            char hex[8];
            std::snprintf(hex, sizeof hex, "0x%02x", c);
            return std::string("binary data (byte ") + hex + " at offset " + std::to_string(i) + ")";
        }
        if (c != ' ' && c != '\t' && c != '\r' && c != '\n') blank = false;
    }
    if (blank) return std::string("empty input: give a reply such as \"451 4.3.5 System config error\"");
    return std::nullopt;
}

// Accepts a wire reply, a Postfix reason text (with or without its
// parentheses), or a whole Postfix log line with dsn= and status=.
Reply read_reply(std::string_view line) {
    while (!line.empty() && (line.front() == ' ' || line.front() == '\t')) line.remove_prefix(1);
    while (!line.empty() && (line.back() == ' ' || line.back() == '\t' || line.back() == '\r'))
        line.remove_suffix(1);
    std::string_view dsn;
    if (auto st = line.find(" status="); st != std::string_view::npos) {
        if (auto d = line.find(" dsn="); d != std::string_view::npos && d < st) {
            dsn = line.substr(d + 5);
            dsn = dsn.substr(0, dsn.find_first_of(", "));
        }
        auto open = line.find(" (", st);
        if (open != std::string_view::npos && line.back() == ')') {
            line = line.substr(open + 2, line.size() - open - 3);
            return parse_postfix_reason(line, dsn);
        }
        return parse_postfix_reason(line.substr(st + 8), dsn);
    }
    if (line.size() >= 2 && line.front() == '(' && line.back() == ')') line = line.substr(1, line.size() - 2);
    if (line.find('\n') != std::string_view::npos) {
        auto wire = parse_smtp_reply(line);
        if (wire) return std::move(wire).value();
    }
    return parse_postfix_reason(line);
}

std::string codes_text(const Reply& r, const Classification& c) {
    std::string out;
    if (r.code)
        out += std::to_string(r.code);
    else
        out += "no remote reply";
    if (r.enhanced) {
        out += ' ' + r.enhanced->str();
        if (!c.code_name.empty()) out += " \"" + std::string(c.code_name) + "\"";
    }
    if (r.local != LocalFailure::none) out += ", Postfix: " + std::string(to_string(r.local));
    out += ", stage " + std::string(to_string(r.stage));
    return out;
}

std::string decider_text(Decider d) {
    switch (d) {
        case Decider::user_rule: return "your rule";
        case Decider::local_failure: return "Postfix's own failure text";
        case Decider::enhanced_code: return "the enhanced status code";
        case Decider::text_refinement: return "the reply text, refining the code";
        case Decider::text: return "the reply text";
        case Decider::basic_code: return "the basic reply code";
        case Decider::success: return "success";
        case Decider::none: return "no rule";
    }
    return "no rule";
}

void print_human(std::string_view input, const Reply& r, const Classification& c) {
    std::cout << text::terminal(input) << '\n';
    if (c.delivered) {
        std::cout << "  category     none: delivered ("
                  << (r.code ? std::to_string(r.code) : std::string("local")) << "), nothing to retry\n\n";
        return;
    }
    const auto& info = c.info();
    std::cout << "  category     " << info.name;
    if (c.decided_by == Decider::none)
        std::cout << "  (no rule matched; recorded, no guess made)";
    else
        std::cout << "  (decided by " << decider_text(c.decided_by) << ": rule " << c.rule << ", "
                  << std::filesystem::path(c.rule_origin).filename().string() << ")";
    std::cout << "\n  codes        " << codes_text(r, c) << '\n';
    if (!r.remote_host.empty())
        std::cout << "  remote       " << text::terminal(r.remote_host)
                  << (r.remote_addr.empty() ? "" : "[" + text::terminal(r.remote_addr) + "]") << '\n';
    std::cout << "  whose fault  " << info.fault << '\n';
    std::cout << "  guidance     " << info.guidance << '\n';
    if (c.retry_after)
        std::cout << "  retry after  " << c.retry_after->count() << " s (asked by the receiver)\n";
    if (auto note = c.note(r); !note.empty()) std::cout << "  note         " << note << '\n';
    if (r.truncated) std::cout << "  warning      input was truncated to " << kMaxReplyLength << " bytes\n";
    std::cout << '\n';
}

nlohmann::json to_json(std::string_view input, const Reply& r, const Classification& c) {
    using nlohmann::json;
    json j;
    j["input"] = std::string(input);
    j["code"] = r.code ? json(r.code) : json(nullptr);
    j["enhanced"] = r.enhanced ? json(r.enhanced->str()) : json(nullptr);
    j["enhanced_name"] = c.code_name.empty() ? json(nullptr) : json(std::string(c.code_name));
    j["stage"] = std::string(to_string(r.stage));
    j["local"] = r.local == LocalFailure::none ? json(nullptr) : json(std::string(to_string(r.local)));
    j["remote_host"] = r.remote_host.empty() ? json(nullptr) : json(r.remote_host);
    j["remote_addr"] = r.remote_addr.empty() ? json(nullptr) : json(r.remote_addr);
    j["text"] = r.text;
    j["delivered"] = c.delivered;
    j["category"] = c.delivered ? json(nullptr) : json(std::string(c.info().name));
    j["fault"] = c.delivered ? json(nullptr) : json(std::string(c.info().fault));
    j["guidance"] = c.delivered ? json(nullptr) : json(std::string(c.info().guidance));
    j["system_condition"] = !c.delivered && c.info().system_condition;
    j["decided_by"] = std::string(to_string(c.decided_by));
    j["rule"] = c.rule.empty() ? json(nullptr) : json(std::string(c.rule));
    j["rule_origin"] = c.rule_origin.empty() ? json(nullptr) : json(std::string(c.rule_origin));
    j["retry_after_s"] = c.retry_after ? json(c.retry_after->count()) : json(nullptr);
    const std::string note = c.note(r);
    j["note"] = note.empty() ? json(nullptr) : json(note);
    return j;
}

void emit_json(const nlohmann::json& j) {
    std::cout << text::json_dump(j) << '\n';
}

int run(const Options& opt) {
    auto classifier = Classifier::load({}, opt.rules);
    if (!classifier) {
        std::cerr << "retryguard classify: " << classifier.error().message << '\n';
        return kExitUsage;
    }
    bool bad = false;
    std::map<std::string, int> summary;
    std::size_t count = 0;
    auto handle = [&](const Input& in) {
        ++count;
        std::string shown = printable(text::utf8_prefix(in.text, 200));
        if (in.text.size() > 200) shown += "...";
        if (auto err = validate(in)) {
            bad = true;
            ++summary["(bad input)"];
            if (opt.json) {
                emit_json({{"input", shown}, {"error", *err}});
            } else {
                std::cout << (shown.empty() ? std::string("(empty line)") : shown) << "\n  error        "
                          << *err << "\n\n";
            }
            return;
        }
        Reply r = read_reply(in.text);
        Classification c = (*classifier).classify(r);
        ++summary[c.delivered ? std::string("(delivered)") : std::string(c.info().name)];
        if (opt.json)
            emit_json(to_json(in.text, r, c));
        else
            print_human(in.text, r, c);
    };
    if (!opt.replies.empty()) {
        for (const auto& s : opt.replies)
            handle(Input{s.size() > kMaxReplyLength ? s.substr(0, kMaxReplyLength + 1) : s, s.size()});
    } else {
        LineReader reader(stdin);
        Input in;
        while (reader.next(in)) handle(in);
    }
    if (!opt.json && count > 1) {
        std::cout << count << " replies:";
        bool first = true;
        for (const auto& [name, n] : summary)
            std::cout << (first ? " " : ", ") << n << ' ' << name, first = false;
        std::cout << '\n';
    }
    std::cout.flush();
    return bad ? kExitAttention : kExitOk;
}

}  // namespace

void add_classify_command(CLI::App& app) {
    auto opt = std::make_shared<Options>();
    CLI::App* cmd = app.add_subcommand(
        "classify",
        "Explain how retryguard reads remote replies or Postfix status=... reasons: category, codes, stage, "
        "whose "
        "fault, guidance and the deciding rule. Reads lines from standard input when no reply is given.");
    cmd->add_flag("--json", opt->json, "one JSON object per input line");
    cmd->add_option("--rules", opt->rules, "a YAML rule file layered over the shipped rules")
        ->check(CLI::ExistingFile);
    cmd->add_option(
        "reply", opt->replies,
        "a reply (\"451 4.3.5 System config error\"), a Postfix reason text, or a whole log line");
    cmd->callback([opt] { exit_code() = run(*opt); });
}

}  // namespace retryguard::cli
