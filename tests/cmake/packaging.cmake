# The Debian package test: builds the .deb, lintian, installs it on this
# machine, starts the units' commands, reinstall and purge. Slow (a full
# package build); run with `ctest -L packaging`. Exits 77 (skipped) without
# root or the packaging tools (scripts/install-deps.sh --package).
# Once per tree: the sanitizer build would only rebuild the same package.
if(RETRYGUARD_SANITIZE OR RETRYGUARD_FUZZ)
  return()
endif()
# RUN_SERIAL: it installs a package and a system user on this machine.
add_test(NAME packaging.deb COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/packaging/test-deb.sh)
set_tests_properties(packaging.deb PROPERTIES LABELS "slow;packaging" TIMEOUT 1800 SKIP_RETURN_CODE 77
                     RUN_SERIAL TRUE)

# The installed package on a real Postfix host: a fresh Debian 12 tree
# (debootstrap), Postfix, rsyslog and the .deb installed from nothing, the
# documented admin steps, the daemons started as their units start them, then
# resends over SMTP and sendmail refused, verdicts in /var/log/mail.log, a
# restart that loses nothing, the journal as the source, and purge. Not inside
# a tree made by the debootstrap test (it would nest trees).
if(NOT EXISTS /etc/retryguard-debootstrap-tree)
  add_test(NAME packaging.installed_host COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/packaging/installed-host-test.sh)
  set_tests_properties(packaging.installed_host PROPERTIES LABELS "slow;packaging" TIMEOUT 2400
                       SKIP_RETURN_CODE 77 RUN_SERIAL TRUE DEPENDS packaging.deb)
endif()
