# Helpers that make every source folder a target with declared dependencies.
# -Wno-missing-field-initializers: designated initializers that leave members at their default
# member initializers are intended (option structs), and GCC warns about them.
set(DI_DEFAULT_COPTS -Wall -Wextra -Wno-unused-parameter -Wno-sign-compare
  -Wno-missing-field-initializers)
if(DI_WERROR)
  list(APPEND DI_DEFAULT_COPTS -Werror)
endif()
if(DI_SANITIZE)
  add_compile_options(-fsanitize=${DI_SANITIZE} -fno-omit-frame-pointer)
  add_link_options(-fsanitize=${DI_SANITIZE})
endif()

# di_cc_library(NAME foo SRCS a.cc DEPS x y [COPTS ...]) -> target di_foo, alias di::foo.
function(di_cc_library)
  cmake_parse_arguments(L "" "NAME" "SRCS;DEPS;COPTS" ${ARGN})
  add_library(di_${L_NAME} STATIC ${L_SRCS})
  add_library(di::${L_NAME} ALIAS di_${L_NAME})
  target_include_directories(di_${L_NAME} PUBLIC ${PROJECT_SOURCE_DIR}/src)
  target_compile_options(di_${L_NAME} PRIVATE ${DI_DEFAULT_COPTS} ${L_COPTS})
  target_link_libraries(di_${L_NAME} PUBLIC ${L_DEPS})
endfunction()

# di_cc_test(NAME foo_test SRCS foo_test.cc DEPS di::foo [LABELS unit]).
function(di_cc_test)
  if(NOT DI_BUILD_TESTS)
    return()
  endif()
  cmake_parse_arguments(T "" "NAME" "SRCS;DEPS;LABELS" ${ARGN})
  if(NOT T_LABELS)
    set(T_LABELS unit)
  endif()
  add_executable(${T_NAME} ${T_SRCS})
  # A test's own code at -O1 (the libraries it tests keep the build type's flags): it compiles
  # in 60% of -O3's time, and what a test computes itself is small.
  target_compile_options(${T_NAME} PRIVATE ${DI_DEFAULT_COPTS} -O1)
  target_compile_definitions(${T_NAME} PRIVATE
    DI_SOURCE_DIR="${PROJECT_SOURCE_DIR}" DI_TESTDATA_DIR="${CMAKE_BINARY_DIR}/testdata")
  target_link_libraries(${T_NAME} PRIVATE ${T_DEPS} GTest::gtest GTest::gtest_main)
  gtest_discover_tests(${T_NAME} PROPERTIES LABELS "${T_LABELS}" DISCOVERY_TIMEOUT 60
    WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
endfunction()
