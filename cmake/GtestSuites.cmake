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
#   gpureap_add_gtest_suites(target LABELS label... TIMEOUT seconds [SPLIT suite...]
#                            [MODULES file])
# MODULES: lines "label<TAB>source"; a suite defined in a source gets its label too.

set(GPUREAP_GTEST_SUITES_SCRIPT "${CMAKE_CURRENT_LIST_DIR}/gtest_suites_add.cmake")

function(gpureap_add_gtest_suites target)
  cmake_parse_arguments(arg "" "TIMEOUT;MODULES" "LABELS;SPLIT" ${ARGN})
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
            "-Dworkdir=${CMAKE_CURRENT_BINARY_DIR}" "-Dmodules=${arg_MODULES}" -P "${GPUREAP_GTEST_SUITES_SCRIPT}"
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

# Three unit-test programs, one per group of floors (docs/ARCHITECTURE.md's table; issue 48,
# the review's §7.4), instead of one per module: GoogleTest, gmock, nlohmann-json, CLI11 and
# the shared module headers are parsed and linked three times, not fifteen (the 7 fuzz-corpus
# replays are tests of the first). Each module still has its label (`unit-<module>`:
# `make test-proc` runs `ctest -L '^unit-proc$'`), given to each suite by the file that
# defines it (a suite in two modules' files has both labels).
#
#   gpureap_unit_tests(module PROGRAM program SOURCES file... [LIBS lib...]
#                      [DEFINITIONS def...] [RUNS target...] [SPLIT suite...] [LABEL label])
# records a module's test sources; gpureap_unit_programs() then builds each program.
function(gpureap_unit_tests module)
  cmake_parse_arguments(arg "" "PROGRAM;LABEL" "SOURCES;LIBS;DEFINITIONS;RUNS;SPLIT" ${ARGN})
  if(NOT arg_LABEL)
    set(arg_LABEL unit-${module})
  endif()
  set(p ${arg_PROGRAM})
  set_property(GLOBAL APPEND PROPERTY GPUREAP_UNIT_PROGRAMS ${p})
  foreach(what SOURCES LIBS DEFINITIONS RUNS SPLIT)
    set_property(GLOBAL APPEND PROPERTY GPUREAP_UNIT_${p}_${what} ${arg_${what}})
  endforeach()
  foreach(source IN LISTS arg_SOURCES)
    if(NOT source MATCHES "\\.cc$" OR source MATCHES "^\\$<")
      continue()  # an object library's objects
    endif()
    set_property(GLOBAL APPEND PROPERTY GPUREAP_UNIT_${p}_LABELED "${arg_LABEL}\t${source}\n")
  endforeach()
endfunction()

function(gpureap_unit_programs)
  get_property(programs GLOBAL PROPERTY GPUREAP_UNIT_PROGRAMS)
  list(REMOVE_DUPLICATES programs)
  foreach(p IN LISTS programs)
    foreach(what SOURCES LIBS DEFINITIONS RUNS SPLIT LABELED)
      get_property(${what} GLOBAL PROPERTY GPUREAP_UNIT_${p}_${what})
    endforeach()
    add_executable(${p} ${SOURCES})
    set_target_properties(${p} PROPERTIES UNITY_BUILD_BATCH_SIZE ${GPUREAP_TEST_BATCH})
    target_link_libraries(${p} PRIVATE ${LIBS} GTest::gtest GTest::gtest_main GTest::gmock)
    target_compile_definitions(${p} PRIVATE ${DEFINITIONS})
    if(RUNS)
      list(REMOVE_DUPLICATES RUNS)
      gpureap_runs(${p} ${RUNS})
    endif()
    # Which module's files define which suite: read after each link (a test added to a
    # file needs no reconfigure).
    string(REPLACE ";" "" LABELED "${LABELED}")
    file(WRITE "${CMAKE_CURRENT_BINARY_DIR}/${p}_modules.txt" "${LABELED}")
    gpureap_add_gtest_suites(${p} LABELS unit TIMEOUT 120 SPLIT ${SPLIT}
                             MODULES "${CMAKE_CURRENT_BINARY_DIR}/${p}_modules.txt")
    add_dependencies(unit_tests ${p})
  endforeach()
endfunction()
