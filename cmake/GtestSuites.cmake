# One ctest test per GoogleTest suite of a unit-test binary, not one per test.
#
# gtest_discover_tests starts the binary once per test: ~970 unit tests cost ~970
# process starts, about 25 ms each on a 2-core machine, more than most tests take
# (`make unit` spent most of its test time starting processes). A suite runs its
# tests in one process (`--gtest_filter=Suite.*`); a failure still names the test
# in gtest's output. Suites are listed after each link, as gtest_discover_tests does.
# A suite named in SPLIT runs one test a process: its tests mostly wait (a hung
# driver's deadline, a release delay), and one after another they would be the
# longest test of `make unit`.
#
#   gpureap_add_gtest_suites(target LABELS label... TIMEOUT seconds [SPLIT suite...])

set(GPUREAP_GTEST_SUITES_SCRIPT "${CMAKE_CURRENT_LIST_DIR}/gtest_suites_add.cmake")

function(gpureap_add_gtest_suites target)
  cmake_parse_arguments(arg "" "TIMEOUT" "LABELS;SPLIT" ${ARGN})
  if(NOT arg_TIMEOUT)
    set(arg_TIMEOUT 120)
  endif()
  set(listed "${CMAKE_CURRENT_BINARY_DIR}/${target}_suites.cmake")
  set(include "${CMAKE_CURRENT_BINARY_DIR}/${target}_suites_include.cmake")
  string(REPLACE ";" "\\;" labels "${arg_LABELS}")
  string(REPLACE ";" "," split "${arg_SPLIT}")
  add_custom_command(TARGET ${target} POST_BUILD
    COMMAND "${CMAKE_COMMAND}" "-Dbinary=$<TARGET_FILE:${target}>" "-Doutput=${listed}"
            "-Dlabels=${labels}" "-Dtimeout=${arg_TIMEOUT}" "-Dsplit=${split}"
            "-Dworkdir=${CMAKE_CURRENT_BINARY_DIR}" -P "${GPUREAP_GTEST_SUITES_SCRIPT}"
    BYPRODUCTS "${listed}"
    VERBATIM)
  # Before the binary is built, ctest lists one test that says so.
  file(WRITE "${include}"
       "if(EXISTS \"${listed}\")\n"
       "  include(\"${listed}\")\n"
       "else()\n"
       "  add_test(${target}_NOT_BUILT ${target}_NOT_BUILT)\n"
       "endif()\n")
  set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES "${include}")
endfunction()
