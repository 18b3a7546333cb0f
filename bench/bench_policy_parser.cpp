// bench_policy_parser.cpp -- CPU cost of parsing one Postfix policy request,
// against two references measured in the same run: a memchr pass over the
// same bytes (the floor: every byte must be looked at once) and a typical
// std::map<std::string, std::string> line parser (what many policy servers do).
// Also the whole inline decision (parse + 100k-entry table lookup + answer).
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include "retryguard/policy/policy.hpp"
#include "retryguard/policy/policy_service.hpp"

using namespace retryguard;

namespace {

// A Postfix 3.7 RCPT-stage request in smtpd's own attribute order.
std::string make_request(int i) {
    return "request=smtpd_access_policy\nprotocol_state=RCPT\nprotocol_name=ESMTP\n"
           "client_address=198.51.100." +
           std::to_string(i % 250) +
           "\nclient_name=mta7-3.isp42.example\nclient_port=40123\n"
           "reverse_client_name=mta7-3.isp42.example\nserver_address=192.0.2.25\nserver_port=25\n"
           "helo_name=mta7-3.isp42.example\nsender=s123@d17.example\nrecipient=r9@rdom" +
           std::to_string(i % 20) +
           ".test\nrecipient_count=0\nqueue_id=\ninstance=1a2b.3c4d5e.6f7.0\nsize=12345\n"
           "etrn_domain=\nstress=\nsasl_method=\nsasl_username=\nsasl_sender=\nccert_subject=\n"
           "ccert_issuer=\nccert_fingerprint=\nccert_pubkey_fingerprint=\nencryption_protocol=TLSv1.3\n"
           "encryption_cipher=TLS_AES_256_GCM_SHA384\nencryption_keysize=256\npolicy_context=\n"
           "compatibility_level=3.6\nmail_version=3.7.11\n\n";
}

// 64 requests back to back, as a long-lived connection would see them.
const std::string& stream() {
    static const std::string s = [] {
        std::string all;
        for (int i = 0; i < 64; ++i) all += make_request(i);
        return all;
    }();
    return s;
}

void BM_Reference_Memchr(benchmark::State& state) {
    const std::string& s = stream();
    for (auto _ : state) {
        std::size_t lines = 0;
        const char* p = s.data();
        const char* end = p + s.size();
        while (const void* nl = std::memchr(p, '\n', static_cast<std::size_t>(end - p))) {
            ++lines;
            p = static_cast<const char*>(nl) + 1;
        }
        benchmark::DoNotOptimize(lines);
    }
    state.SetItemsProcessed(state.iterations() * 64);
}
BENCHMARK(BM_Reference_Memchr);

void BM_Reference_MapParser(benchmark::State& state) {
    const std::string& s = stream();
    for (auto _ : state) {
        std::map<std::string, std::string> attrs;
        std::size_t requests = 0;
        std::size_t pos = 0;
        while (pos < s.size()) {
            const std::size_t nl = s.find('\n', pos);
            if (nl == pos) {
                ++requests;
                benchmark::DoNotOptimize(attrs["recipient"]);
                attrs.clear();
            } else {
                const std::size_t eq = s.find('=', pos);
                attrs[s.substr(pos, eq - pos)] = s.substr(eq + 1, nl - eq - 1);
            }
            pos = nl + 1;
        }
        benchmark::DoNotOptimize(requests);
    }
    state.SetItemsProcessed(state.iterations() * 64);
}
BENCHMARK(BM_Reference_MapParser);

void BM_PolicyParser(benchmark::State& state) {
    const std::string& s = stream();
    PolicyParser parser;
    for (auto _ : state) {
        std::string_view in = s;
        std::size_t requests = 0;
        while (parser.feed(in) == PolicyParser::State::complete) ++requests;
        if (requests != 64) state.SkipWithError("parse failed");
        benchmark::DoNotOptimize(requests);
    }
    state.SetItemsProcessed(state.iterations() * 64);
}
BENCHMARK(BM_PolicyParser);

// Bytes arriving in 100-byte pieces (a slow or fragmented peer).
void BM_PolicyParserSplit100(benchmark::State& state) {
    const std::string& s = stream();
    PolicyParser parser;
    for (auto _ : state) {
        std::size_t requests = 0;
        for (std::size_t off = 0; off < s.size(); off += 100) {
            std::string_view in = std::string_view(s).substr(off, 100);
            while (!in.empty())
                if (parser.feed(in) == PolicyParser::State::complete) ++requests;
        }
        if (requests != 64) state.SkipWithError("parse failed");
    }
    state.SetItemsProcessed(state.iterations() * 64);
}
BENCHMARK(BM_PolicyParserSplit100);

// Parse, look the recipient's domain up in a 100,002-entry table, format the
// answer: the whole inline path of the daemon minus the socket.
void BM_ParseDecideAnswer100k(benchmark::State& state) {
    const auto path = std::filesystem::temp_directory_path() / "rg-bench-flagged";
    {
        std::ofstream f(path);
        f << "rdom3.test REJECT 5.7.1 recipient domain closed\nrdom7.test REJECT 5.7.1 recipient domain "
             "closed\n";
        for (int i = 20; i < 100020; ++i) f << "rdom" << i << ".test WARN flagged\n";
    }
    auto decider = StaticDestinationDecider::load(path.string());
    std::filesystem::remove(path);
    if (!decider) {
        state.SkipWithError(decider.error().message.c_str());
        return;
    }
    PolicyMetrics metrics;
    PolicyService service(PolicyStageSet::rcpt_only(), metrics);
    const std::string& s = stream();
    PolicyParser parser;
    std::string out;
    for (auto _ : state) {
        std::string_view in = s;
        out.clear();
        while (parser.feed(in) == PolicyParser::State::complete) {
            const auto& req = parser.request();
            if (!service.wants_decision(req)) {
                service.answer_dunno(out);
                continue;
            }
            bool failed = false;
            service.answer(out, service.decide_contained(**decider, req, PolicyClock::now(), failed));
        }
        benchmark::DoNotOptimize(out.data());
    }
    state.SetItemsProcessed(state.iterations() * 64);
}
BENCHMARK(BM_ParseDecideAnswer100k);

}  // namespace

// Prints the ratios against the references after the usual table.
class RatioReporter : public benchmark::ConsoleReporter {
  public:
    void ReportRuns(const std::vector<Run>& runs) override {
        ConsoleReporter::ReportRuns(runs);
        for (const Run& r : runs) {
            if (r.error_occurred || r.iterations == 0) continue;
            ns_per_request_[r.benchmark_name()] = r.GetAdjustedCPUTime() / 64.0;
        }
    }
    void Finalize() override {
        ConsoleReporter::Finalize();
        const double memchr = ns_per_request_["BM_Reference_Memchr"];
        const double map = ns_per_request_["BM_Reference_MapParser"];
        std::printf("\nns of CPU per request, and ratios (lower is better):\n");
        for (const auto& [name, ns] : ns_per_request_) {
            std::printf("  %-28s %8.0f ns/request   x memchr %5.1f   x map-parser %5.2f\n", name.c_str(), ns,
                        memchr > 0 ? ns / memchr : 0.0, map > 0 ? ns / map : 0.0);
        }
    }

  private:
    std::map<std::string, double> ns_per_request_;
};

int main(int argc, char** argv) {
    benchmark::Initialize(&argc, argv);
    RatioReporter reporter;
    benchmark::RunSpecifiedBenchmarks(&reporter);
    benchmark::Shutdown();
    return 0;
}
