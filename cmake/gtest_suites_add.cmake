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
# A combined program (GtestSuites.cmake, gpureap_unit_programs): the label of the module
# whose files define each suite ("label<TAB>source" lines in `modules`).
set(suite_labels_known FALSE)
if(modules)
  set(suite_labels_known TRUE)
  file(STRINGS "${modules}" pairs)
  foreach(pair IN LISTS pairs)
    string(REGEX MATCH "^([^\t]+)\t(.+)$" _ "${pair}")
    set(module_label "${CMAKE_MATCH_1}")
    file(STRINGS "${CMAKE_MATCH_2}" defs
         REGEX "^[ \t]*(TEST|TEST_F|TEST_P|TYPED_TEST|TYPED_TEST_P)\\([ \t]*[A-Za-z_][A-Za-z0-9_]*")
    foreach(def IN LISTS defs)
      string(REGEX MATCH "\\([ \t]*([A-Za-z_][A-Za-z0-9_]*)" _ "${def}")
      list(APPEND "labels_of_${CMAKE_MATCH_1}" "${module_label}")
      list(REMOVE_DUPLICATES "labels_of_${CMAKE_MATCH_1}")
    endforeach()
  endforeach()
endif()
set(content "")
set(count 0)
string(REPLACE "," ";" split "${split}")
macro(add_one name filter)
  set(these_labels "${labels}")
  if(suite_labels_known)
    # "Prefix/Suite" (an instantiation) and "Suite/0" (a typed test) are Suite's.
    string(REGEX REPLACE "^[A-Za-z0-9_]+/([A-Za-z_][A-Za-z0-9_]*/)" "\\1" base "${suite}/")
    string(REGEX REPLACE "/.*$" "" base "${base}")
    if(NOT DEFINED "labels_of_${base}")
      message(FATAL_ERROR "${binary}: no source of this program defines suite ${suite} "
                          "(cmake/gtest_suites_add.cmake reads TEST(Suite, ...) lines)")
    endif()
    set(these_labels "${labels_of_${base}}")
  endif()
  string(APPEND content
         "add_test([==[${name}]==] [==[${binary}]==] [==[--gtest_filter=${filter}]==])\n"
         "set_tests_properties([==[${name}]==] PROPERTIES LABELS [==[${these_labels}]==] "
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
