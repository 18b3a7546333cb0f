// replay_main.cpp -- runs a libFuzzer target over its corpus directory (or files)
// without libFuzzer, so ordinary and sanitizer builds exercise every fuzz target.
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

static void run_file(const std::filesystem::path& p) {
    std::ifstream in(p, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
}

int main(int argc, char** argv) {
    size_t count = 0;
    for (int i = 1; i < argc; ++i) {
        std::filesystem::path p(argv[i]);
        if (std::filesystem::is_directory(p)) {
            for (const auto& entry : std::filesystem::recursive_directory_iterator(p))
                if (entry.is_regular_file()) run_file(entry.path()), ++count;
        } else if (std::filesystem::is_regular_file(p)) {
            run_file(p), ++count;
        }
    }
    // Edge cases every target must survive whatever its corpus holds.
    const std::vector<std::string> edges = {"", std::string(1, '\0'), std::string(1 << 20, 'A'),
                                            "\xff\xfe\xfd", std::string(100000, '(')};
    for (const auto& e : edges)
        LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(e.data()), e.size()), ++count;
    std::printf("replayed %zu inputs\n", count);
    return count > 0 ? 0 : 1;
}
