// report_queue.cpp -- `retryguard queue`: the deferred queue (postqueue -j)
// by age bucket and category, joined with the ledger when one is open.
// Reads only.
#include "retryguard/report/report.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <map>
#include <set>

#include "report/report_internal.hpp"
#include "retryguard/ingest/ingest.hpp"
#include "retryguard/postfix/postfix_wiring.hpp"
#include "retryguard/reply/reply.hpp"
#include "retryguard/text/text.hpp"

namespace retryguard::report {

using nlohmann::json;
using namespace detail;

namespace {
// qshape's default buckets, in minutes: T 5 10 20 40 80 160 320 640 1280 1280+.
constexpr std::array<int, 9> kBucketMinutes = {5, 10, 20, 40, 80, 160, 320, 640, 1280};
std::size_t bucket_of(Duration age) {
    auto m = std::chrono::duration_cast<std::chrono::minutes>(age).count();
    for (std::size_t i = 0; i < kBucketMinutes.size(); ++i)
        if (m < kBucketMinutes[i]) return i;
    return kBucketMinutes.size();
}
}  // namespace

Result<json> queue(std::string_view text, const Classifier& classifier, LedgerReports* ledger, TimePoint now,
                   const Page& page) {
    struct Dest {
        std::int64_t total = 0;
        std::vector<std::int64_t> buckets = std::vector<std::int64_t>(kBucketMinutes.size() + 1, 0);
        std::map<std::string, std::int64_t> categories;
    };
    std::map<std::string, Dest> dests;
    std::map<std::string, std::int64_t> by_category;
    std::map<std::string, std::int64_t> by_queue;
    std::int64_t messages = 0, recipients = 0, bad_lines = 0;
    std::size_t lines = 0;
    std::size_t pos = 0;
    while (pos < text.size()) {
        auto nl = text.find('\n', pos);
        std::string_view line =
            text.substr(pos, nl == std::string_view::npos ? std::string_view::npos : nl - pos);
        pos = nl == std::string_view::npos ? text.size() : nl + 1;
        if (line.empty()) continue;
        if (++lines > kMaxQueueLines)
            return make_error(ErrorKind::limit,
                              fmt::format("postqueue output has more than {} lines", kMaxQueueLines));
        if (line.size() > kMaxQueueLineBytes) {
            ++bad_lines;
            continue;
        }
        json m = json::parse(line, nullptr, false);
        if (m.is_discarded() || !m.is_object() || !m.contains("recipients") || !m["recipients"].is_array()) {
            ++bad_lines;
            continue;
        }
        ++messages;
        std::string qname = m.value("queue_name", "");
        ++by_queue[qname];
        TimePoint arrival = now;
        if (m.contains("arrival_time") && m["arrival_time"].is_number_integer())
            arrival = TimePoint{std::chrono::seconds(m["arrival_time"].get<std::int64_t>())};
        std::size_t b = bucket_of(now - arrival);
        for (const auto& r : m["recipients"]) {
            if (!r.is_object()) continue;
            ++recipients;
            std::string domain = domain_of(r.value("address", ""));
            if (domain.empty()) domain = "(local)";
            std::string reason = r.value("delay_reason", "");
            std::string cat = "none";
            if (!reason.empty())
                cat = std::string(to_string(classifier.classify_reason(reason).category));
            else if (qname == "active" || qname == "incoming")
                cat = "in-flight";
            else if (qname == "hold")
                cat = "on-hold";
            auto& d = dests[domain];
            ++d.total;
            ++d.buckets[b];
            ++d.categories[cat];
            ++by_category[cat];
        }
    }
    json labels = json::array();
    for (int m : kBucketMinutes) labels.push_back(fmt::format("<{}m", m));
    labels.push_back(fmt::format(">={}m", kBucketMinutes.back()));
    std::vector<std::pair<std::string, Dest>> sorted(dests.begin(), dests.end());
    std::stable_sort(sorted.begin(), sorted.end(),
                     [](const auto& a, const auto& b) { return a.second.total > b.second.total; });
    // The ledger is asked only about the rows shown.
    json da = json::array();
    for (std::size_t i = 0; i < sorted.size(); ++i) {
        const auto& [name, d] = sorted[i];
        json j{{"domain", name}, {"total", d.total}, {"buckets", d.buckets}, {"categories", d.categories}};
        j["state"] = nullptr;
        const bool shown = i >= page.offset && (!page.limit || i - page.offset < *page.limit);
        if (ledger && shown && name != "(local)") {
            auto info = ledger->get_destination(DestinationKind::domain, name);
            if (!info) return info.error();
            if (*info) j["state"] = (*info)->state.empty() ? std::string("none") : (*info)->state;
        }
        da.push_back(std::move(j));
    }
    json ca = json::array();
    for (const auto& [cat, n] : by_category) {
        json j{{"category", cat}, {"recipients", n}};
        if (auto c = category_from_string(cat)) {
            j["fault"] = std::string(info(*c).fault);
            j["guidance"] = std::string(info(*c).guidance);
        } else {
            j["fault"] = "";
            j["guidance"] = cat == "in-flight" ? "Being delivered now; nothing to do."
                            : cat == "on-hold" ? "On hold: released only by an operator (postsuper -H)."
                                               : "";
        }
        ca.push_back(std::move(j));
    }
    json doc{{"now", format_rfc3339(now)},
             {"messages", messages},
             {"recipients", recipients},
             {"bad_lines", bad_lines},
             {"queues", by_queue},
             {"bucket_labels", labels},
             {"categories", ca}};
    put_page(doc, "destinations", std::move(da), page);
    return doc;
}

std::string render_queue(const json& raw, const RenderOptions& ro) {
    // Outside text is rendered for the terminal once, before any of it is formatted.
    const json doc = text::terminal_document(raw);
    std::string out =
        fmt::format("{} messages, {} recipients in the queue", doc.at("messages").get<std::int64_t>(),
                    doc.at("recipients").get<std::int64_t>());
    if (doc.at("bad_lines").get<std::int64_t>() > 0)
        out += fmt::format(" ({} unreadable lines skipped)", doc.at("bad_lines").get<std::int64_t>());
    out += "\n\n";
    if (doc.at("destinations").empty() && doc.value("total", std::size_t{0}) == 0) return out;
    std::vector<std::string> head{"DOMAIN", "STATE", "TOTAL"};
    for (const auto& l : doc.at("bucket_labels")) head.push_back(l.get<std::string>());
    head.push_back("CATEGORIES");
    Table t(head);
    for (const auto& d : doc.at("destinations")) {
        std::vector<std::string> row{
            d.at("domain").get<std::string>(),
            d.at("state").is_string() ? state_colour(ro, d["state"].get<std::string>()) : "-",
            std::to_string(d.at("total").get<std::int64_t>())};
        for (const auto& b : d.at("buckets")) row.push_back(std::to_string(b.get<std::int64_t>()));
        std::string cats;
        for (auto& [k, v] : d.at("categories").items())
            cats += (cats.empty() ? "" : " ") + fmt::format("{}={}", k, v.get<std::int64_t>());
        row.push_back(cats);
        t.add(std::move(row));
    }
    if (t.size() > 0) out += t.render(ro.colour);
    out += page_footer(doc, "destinations");
    out += "\n" + colour(ro, "1", "By category") + "\n";
    for (const auto& c : doc.at("categories")) {
        out += fmt::format(
            "  {} ({} recipients){}\n", c.at("category").get<std::string>(),
            c.at("recipients").get<std::int64_t>(),
            c.at("fault").get<std::string>().empty() ? "" : ": " + c.at("fault").get<std::string>());
        if (!c.at("guidance").get<std::string>().empty())
            out += fmt::format("    {}\n", c.at("guidance").get<std::string>());
    }
    return out;
}

}  // namespace retryguard::report
