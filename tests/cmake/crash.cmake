# Crash tests: kill -9 loops against `retryguard import` and retryguard-policyd
# on both ledger backends (tests/crash/kill_loop.sh); a clean run and a run
# killed five times must end in the same engine state, ledger effects and
# verdict lines. Label crash (and redis for the Redis ones).
add_executable(retryguard_state_dump ${CMAKE_CURRENT_SOURCE_DIR}/crash/state_dump.cpp)
target_link_libraries(retryguard_state_dump PRIVATE retryguard_core)
if(TARGET retryguard AND TARGET retryguard-policyd)
  foreach(mode import policyd)
    foreach(backend sqlite redis)
      add_test(NAME crash.kill_loop_${mode}_${backend}
               COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/crash/kill_loop.sh ${mode} ${backend}
                       $<TARGET_FILE:retryguard> $<TARGET_FILE:retryguard-policyd>
                       $<TARGET_FILE:retryguard_state_dump>)
      set(labels crash)
      if(backend STREQUAL "redis")
        list(APPEND labels redis)
      endif()
      set_tests_properties(crash.kill_loop_${mode}_${backend} PROPERTIES LABELS "${labels}" TIMEOUT 180)
    endforeach()
  endforeach()
endif()
