# Config module: in libFuzzer builds, instrument the core library for coverage
# too (-fsanitize=fuzzer-no-link), so the fuzzer is guided by the loader's and
# every other core module's branches and not only by the fuzz target's own file.
if(RETRYGUARD_FUZZ)
  target_compile_options(retryguard_core PRIVATE -fsanitize=fuzzer-no-link)
endif()
