# The month-long replay (tests/unit/replay_month_test.cpp) at full scale: about
# 800k generated lines and 20k domains imported with the CLI. The unit suite runs
# the same tests on a 5% month; this one is slow.
add_test(NAME replay.month_full COMMAND retryguard_unit_tests --gtest_filter=ReplayMonth.*)
set_tests_properties(replay.month_full PROPERTIES LABELS slow TIMEOUT 900
                     ENVIRONMENT RETRYGUARD_REPLAY_SCALE=1)
