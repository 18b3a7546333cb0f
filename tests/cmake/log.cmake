# Log parser. Coverage-guided fuzzing (logline_fuzz and every other target)
# only finds its way through code that is instrumented, and the parser lives in
# retryguard_core, not in the fuzz target's own file.
if(RETRYGUARD_FUZZ)
  target_compile_options(retryguard_core PRIVATE -fsanitize=fuzzer-no-link)
endif()
