cmake_minimum_required(VERSION 3.22)  # as the project (IN_LIST)
# Run by gpureap_add_gtest_suites (GtestSuites.cmake) after a link: lists the binary's
# suites and writes one add_test per suite to `output`.
execute_process(COMMAND "${binary}" --gtest_list_tests
                WORKING_DIRECTORY "${workdir}"
                OUTPUT_VARIABLE listing RESULT_VARIABLE rc TIMEOUT 30)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${binary} --gtest_list_tests failed (${rc}):\n${listing}")
endif()
string(REPLACE "\n" ";" lines "${listing}")
# A suite whose every test skipped (GTEST_SKIP: not root, no such device) is reported
# skipped, as gtest_discover_tests reports such a test; one with a failure stays failed.
set(skip_regex "\\[  PASSED  \\] 0 tests\\.\n(\\[  SKIPPED \\][^\n]*\n)+$")
set(content "")
set(count 0)
string(REPLACE "," ";" split "${split}")
macro(add_one name filter)
  string(APPEND content
         "add_test([==[${name}]==] [==[${binary}]==] [==[--gtest_filter=${filter}]==])\n"
         "set_tests_properties([==[${name}]==] PROPERTIES LABELS [==[${labels}]==] "
         "TIMEOUT ${timeout} WORKING_DIRECTORY [==[${workdir}]==] "
         "SKIP_REGULAR_EXPRESSION [==[${skip_regex}]==])\n")
  math(EXPR count "${count} + 1")
endmacro()
set(suite "")
foreach(line IN LISTS lines)
  # A suite's line: "Suite." or "Prefix/Suite/0.  # TypeParam = ..."; its tests follow,
  # indented: "  Name" or "  Name/0  # GetParam() = ...".
  if(line MATCHES "^([A-Za-z_][A-Za-z0-9_/]*)\\.( .*)?$")
    set(suite "${CMAKE_MATCH_1}")
    if(NOT suite IN_LIST split)
      add_one("${suite}" "${suite}.*")
    endif()
  elseif(suite IN_LIST split AND line MATCHES "^  ([A-Za-z_][A-Za-z0-9_/]*)( .*)?$")
    add_one("${suite}.${CMAKE_MATCH_1}" "${suite}.${CMAKE_MATCH_1}")
  endif()
endforeach()
if(count EQUAL 0)
  message(FATAL_ERROR "${binary} lists no test suite")
endif()
file(WRITE "${output}" "${content}")
