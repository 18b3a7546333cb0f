# The Debian package test: builds the .deb, lintian, installs it on this
# machine, starts the units' commands, reinstall and purge. Slow (a full
# package build); run with `ctest -L packaging`. Exits 77 (skipped) without
# root or the packaging tools (scripts/install-deps.sh --package).
add_test(NAME packaging.deb COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/packaging/test-deb.sh)
set_tests_properties(packaging.deb PROPERTIES LABELS "slow;packaging" TIMEOUT 1800 SKIP_RETURN_CODE 77)
