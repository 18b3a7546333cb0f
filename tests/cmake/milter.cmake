# retryguard-milter at the protocol level: Debian's miltertest drives the built
# milter (tests/milter/protocol.lua) against a real SQLite ledger. Fast, no Postfix.
if(TARGET retryguard-milter)
  add_test(NAME milter.miltertest COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/milter/miltertest_test.sh)
  set_tests_properties(milter.miltertest PROPERTIES LABELS milter TIMEOUT 120 SKIP_RETURN_CODE 77
    ENVIRONMENT "RETRYGUARD_MILTER=$<TARGET_FILE:retryguard-milter>;RETRYGUARD_CLI=$<TARGET_FILE:retryguard>")
endif()
