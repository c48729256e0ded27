# witcert_test(NAME name SOURCES a.cc b.cc LIBS lib1 lib2 [LABELS l1])
# One GoogleTest binary per concept; CTest discovers its cases. Tests run from the source
# root so fixture paths are stable.
function(witcert_test)
  cmake_parse_arguments(T "" "NAME" "SOURCES;LIBS;LABELS" ${ARGN})
  add_executable(${T_NAME} ${T_SOURCES})
  target_link_libraries(${T_NAME} PRIVATE ${T_LIBS} GTest::gtest GTest::gtest_main)
  gtest_discover_tests(${T_NAME}
    WORKING_DIRECTORY ${PROJECT_SOURCE_DIR}
    PROPERTIES LABELS "${T_LABELS}"
    DISCOVERY_TIMEOUT 60)
endfunction()
