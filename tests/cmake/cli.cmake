# Reporting commands: the HTML report rendered in headless Chromium (label slow);
# the screenshot stays in the build tree for people to look at.
add_test(NAME cli_html_report_chromium
         COMMAND ${CMAKE_SOURCE_DIR}/tests/cli/html_report_test.sh $<TARGET_FILE:retryguard>
                 ${CMAKE_SOURCE_DIR}/tests/fixtures ${CMAKE_BINARY_DIR}/test-output/html-report)
set_tests_properties(cli_html_report_chromium PROPERTIES LABELS slow TIMEOUT 300)
