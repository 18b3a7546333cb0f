# The month-long replay (tests/unit/replay_month_test.cpp) at full scale: about
# 800k generated lines and 20k domains imported with the CLI. The unit suite runs
# the same tests on a 5% month; this one is slow. Not in the sanitizer build:
# the unit suite's 5% month already runs there under ASan+UBSan, and the full
# month in a Debug+ASan build would take most of CI's time for no new path.
if(RETRYGUARD_SANITIZE)
  return()
endif()
add_test(NAME replay.month_full COMMAND retryguard_unit_tests --gtest_filter=ReplayMonth.*)
set_tests_properties(replay.month_full PROPERTIES LABELS slow TIMEOUT 900
                     ENVIRONMENT RETRYGUARD_REPLAY_SCALE=1)
