# Ledger: the contract suite against a real Redis (label redis). The test
# harness starts its own redis-server on a free loopback port per test process.
add_executable(retryguard_redis_tests ${CMAKE_CURRENT_SOURCE_DIR}/ledger/ledger_redis_test.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/ledger/ledger_redis_event_key_test.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/ledger/ledger_redis_bulk_test.cpp)
target_include_directories(retryguard_redis_tests PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
target_link_libraries(retryguard_redis_tests PRIVATE retryguard_core GTest::gtest GTest::gtest_main)
gtest_discover_tests(retryguard_redis_tests TEST_PREFIX "redis." PROPERTIES LABELS redis DISCOVERY_TIMEOUT 60)

# The same contract as the ACL user of tests/e2e/fleet-redis.conf, and
# ledger.redis.password_file against requirepass and ACL users (label redis).
add_executable(retryguard_redis_auth_tests ${CMAKE_CURRENT_SOURCE_DIR}/ledger/ledger_redis_auth_test.cpp)
target_include_directories(retryguard_redis_auth_tests PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
target_link_libraries(retryguard_redis_auth_tests PRIVATE retryguard_core GTest::gtest GTest::gtest_main)
gtest_discover_tests(retryguard_redis_auth_tests TEST_PREFIX "redis." PROPERTIES LABELS redis DISCOVERY_TIMEOUT 60)
