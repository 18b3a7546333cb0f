# Reporting commands: the HTML report rendered in headless Chromium (label slow);
# the screenshot stays in the build tree for people to look at.
add_test(NAME cli_html_report_chromium
         COMMAND ${CMAKE_SOURCE_DIR}/tests/cli/html_report_test.sh $<TARGET_FILE:retryguard>
                 ${CMAKE_SOURCE_DIR}/tests/fixtures ${CMAKE_BINARY_DIR}/test-output/html-report)
set_tests_properties(cli_html_report_chromium PROPERTIES LABELS slow TIMEOUT 300)
# The period report of a generated month (bench/gen_month_log, 5% scale) at
# desktop and phone width in headless Chromium (label slow): screenshot sizes
# against docs/images/report-*.png, and the planted cases in the rendered DOM.
add_test(NAME cli_html_report_month
         COMMAND ${CMAKE_SOURCE_DIR}/tests/cli/html_report_month_test.sh $<TARGET_FILE:retryguard>
                 $<TARGET_FILE:gen_month_log> ${CMAKE_SOURCE_DIR} ${CMAKE_BINARY_DIR}/test-output/html-report-month)
set_tests_properties(cli_html_report_month PROPERTIES LABELS slow TIMEOUT 600)
# `retryguard import` into an empty Redis ledger (ledger.redis.bulk_load): the
# bulk load against batch by batch through the CLI, on a private redis-server
# (label redis).
add_test(NAME cli_import_bulk_load
         COMMAND ${CMAKE_SOURCE_DIR}/tests/cli/import_bulk_load_test.sh $<TARGET_FILE:retryguard>)
set_tests_properties(cli_import_bulk_load PROPERTIES LABELS redis TIMEOUT 180)
