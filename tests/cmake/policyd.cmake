# Daemon tests: start the real retryguard-policyd on a free loopback port and a
# temporary UNIX socket and speak the policy protocol to it.
if(TARGET retryguard-policyd)
  add_executable(policyd_daemon_tests ${CMAKE_CURRENT_SOURCE_DIR}/policyd/policyd_daemon_test.cpp)
  target_compile_definitions(policyd_daemon_tests PRIVATE
    RETRYGUARD_POLICYD="$<TARGET_FILE:retryguard-policyd>"
    RETRYGUARD_FIXTURES="${CMAKE_CURRENT_SOURCE_DIR}/fixtures")
  target_link_libraries(policyd_daemon_tests PRIVATE GTest::gtest GTest::gtest_main Threads::Threads)
  add_dependencies(policyd_daemon_tests retryguard-policyd)
  gtest_discover_tests(policyd_daemon_tests TEST_PREFIX "policyd." PROPERTIES LABELS policyd
                       DISCOVERY_TIMEOUT 60)
endif()

# End-to-end with a private loopback Postfix instance (needs root, postfix, swaks;
# skipped otherwise).
if(TARGET retryguard-policyd)
  add_test(NAME e2e.policyd_postfix
           COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/e2e/policyd_postfix.sh $<TARGET_FILE:retryguard-policyd>)
  set_tests_properties(e2e.policyd_postfix PROPERTIES LABELS e2e SKIP_RETURN_CODE 77 TIMEOUT 120)
endif()

# End-to-end with the real state: Postfix defers, the daemon follows its log
# and answers the configured action (needs root, postfix, swaks; skipped otherwise).
if(TARGET retryguard-policyd)
  add_test(NAME e2e.policyd_live_postfix
           COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/e2e/policyd_live_postfix.sh $<TARGET_FILE:retryguard-policyd>)
  set_tests_properties(e2e.policyd_live_postfix PROPERTIES LABELS e2e SKIP_RETURN_CODE 77 TIMEOUT 180)
endif()
