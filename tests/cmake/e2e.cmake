# End-to-end tests with real Postfix (tests/e2e/*_test.sh, harness in
# tests/e2e/lib.sh). Each script is one ctest with label e2e; it exits 77 when
# a prerequisite (root, postfix) is missing, which ctest reports as skipped.
# The programs under test are passed in the environment by path.
file(GLOB RETRYGUARD_E2E_TESTS CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/e2e/*_test.sh)
set(RETRYGUARD_E2E_ENV "RETRYGUARD_CLI=$<TARGET_FILE:retryguard>")
if(TARGET retryguard-milter)
  list(APPEND RETRYGUARD_E2E_ENV "RETRYGUARD_MILTER=$<TARGET_FILE:retryguard-milter>")
endif()
if(TARGET retryguard-policyd)
  list(APPEND RETRYGUARD_E2E_ENV "RETRYGUARD_POLICYD=$<TARGET_FILE:retryguard-policyd>")
endif()
foreach(script ${RETRYGUARD_E2E_TESTS})
  get_filename_component(name ${script} NAME_WE)
  add_test(NAME e2e.${name} COMMAND bash ${script})
  # The script's own watchdog ends it earlier; this is the backstop.
  set_tests_properties(e2e.${name} PROPERTIES LABELS e2e TIMEOUT 300 SKIP_RETURN_CODE 77
                       ENVIRONMENT "${RETRYGUARD_E2E_ENV}")
endforeach()
