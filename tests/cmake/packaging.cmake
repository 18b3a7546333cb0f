# The Debian package tests. Slow; none in the sanitizer and fuzz builds (they
# would only rebuild the same package; the tests check the package and the
# README's commands, not a build).
if(RETRYGUARD_SANITIZE OR RETRYGUARD_FUZZ)
  return()
endif()

# packaging.deb (tests/packaging/test-deb.sh): builds the .deb, lintian,
# installs it on the machine it runs on, starts the units' commands, the e2e
# checks against the installed programs, reinstall and purge. Exits 77
# (skipped) without root or the packaging tools (scripts/install-deps.sh
# --package). RUN_SERIAL: it installs a package and a system user.
#
# It is registered where it runs once: inside the fresh Debian 12 tree of
# packaging.debootstrap (marker file), whose `scripts/test.sh` runs it on a
# machine that has nothing but what the README's commands installed and which
# fails unless it passed there. On this machine the same script with the same
# sources would only run a second time (about 4 minutes of a CI run, 11 with
# a cold compiler cache); run it here by hand with
# `sudo tests/packaging/test-deb.sh`.
if(EXISTS /etc/retryguard-debootstrap-tree)
  message(STATUS "packaging.deb registered: this is the fresh tree made by packaging.debootstrap")
  add_test(NAME packaging.deb COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/packaging/test-deb.sh)
  set_tests_properties(packaging.deb PROPERTIES LABELS "slow;packaging" TIMEOUT 1800 SKIP_RETURN_CODE 77
                       RUN_SERIAL TRUE)
  return()
endif()

# The installed package on a real Postfix host: a fresh Debian 12 tree
# (debootstrap), Postfix, rsyslog and the .deb installed from nothing, the
# documented admin steps, the daemons started as their units start them, then
# resends over SMTP and sendmail refused, verdicts in /var/log/mail.log, a
# restart that loses nothing, the journal as the source, and purge. Not inside
# a tree made by the debootstrap test (it would nest trees).
add_test(NAME packaging.installed_host COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/packaging/installed-host-test.sh)
set_tests_properties(packaging.installed_host PROPERTIES LABELS "slow;packaging" TIMEOUT 2400
                     SKIP_RETURN_CODE 77 RUN_SERIAL TRUE)
