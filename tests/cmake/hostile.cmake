# Hostile input: the real CLI over the generated hostile-log corpus
# (tests/fixtures/hostile/), and the policy daemon fed a request whose queue id
# and recipient try to forge verdict fields.
find_package(Python3 COMPONENTS Interpreter)
if(Python3_Interpreter_FOUND)
  add_test(NAME cli_hostile_corpus
           COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tests/cli/hostile_cli_test.py
                   $<TARGET_FILE:retryguard> ${CMAKE_SOURCE_DIR} ${CMAKE_BINARY_DIR}/test-output/hostile)
  set_tests_properties(cli_hostile_corpus PROPERTIES LABELS hostile TIMEOUT 300)
endif()

if(TARGET retryguard-policyd)
  add_executable(policyd_forgery_tests ${CMAKE_CURRENT_SOURCE_DIR}/policyd/policyd_forgery_test.cpp)
  target_compile_definitions(policyd_forgery_tests PRIVATE
    RETRYGUARD_POLICYD="$<TARGET_FILE:retryguard-policyd>")
  target_link_libraries(policyd_forgery_tests PRIVATE retryguard_core GTest::gtest GTest::gtest_main)
  add_dependencies(policyd_forgery_tests retryguard-policyd)
  gtest_discover_tests(policyd_forgery_tests TEST_PREFIX "policyd." PROPERTIES LABELS hostile
                       DISCOVERY_TIMEOUT 60)
endif()
