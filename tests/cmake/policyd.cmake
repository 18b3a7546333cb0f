# Daemon tests: start the real retryguard-policyd on a free loopback port and a
# temporary UNIX socket and speak the policy protocol to it.
if(TARGET retryguard-policyd)
  add_executable(policyd_daemon_tests ${CMAKE_CURRENT_SOURCE_DIR}/policyd/policyd_daemon_test.cpp)
  target_compile_definitions(policyd_daemon_tests PRIVATE
    RETRYGUARD_POLICYD="$<TARGET_FILE:retryguard-policyd>")
  target_link_libraries(policyd_daemon_tests PRIVATE GTest::gtest GTest::gtest_main Threads::Threads)
  add_dependencies(policyd_daemon_tests retryguard-policyd)
  gtest_discover_tests(policyd_daemon_tests TEST_PREFIX "policyd." PROPERTIES LABELS policyd
                       DISCOVERY_TIMEOUT 60)
endif()
