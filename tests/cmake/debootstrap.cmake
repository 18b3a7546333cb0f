# The README's two commands on a fresh Debian 12 tree made with debootstrap
# (tests/packaging/debootstrap-test.sh): slow, labels `debootstrap` and
# `packaging` (the suite it runs in the tree includes packaging.deb). The suite
# run inside that tree does not register it again (marker file), and the
# sanitizer and fuzz builds do not run it (it tests the commands, not a build).
if(RETRYGUARD_SANITIZE OR RETRYGUARD_FUZZ)
  return()
endif()
if(EXISTS /etc/retryguard-debootstrap-tree)
  message(STATUS "debootstrap test not registered: this is the tree it made")
  return()
endif()
add_test(NAME packaging.debootstrap COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/packaging/debootstrap-test.sh)
# RUN_SERIAL: it shares this machine's loopback with the daemons inside the tree.
set_tests_properties(packaging.debootstrap PROPERTIES LABELS "slow;debootstrap;packaging" TIMEOUT 3600
                     SKIP_RETURN_CODE 77 RUN_SERIAL TRUE)
