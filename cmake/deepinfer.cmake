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

# Precompiled headers: the standard and third-party headers most sources include
# (nlohmann/json, absl::Status, fmt; GoogleTest in the tests) are compiled once per group of
# targets with the same flags rather than once per source: one header for the libraries and
# binaries (the build type's flags), one for the tests (-O1); the fuzz build adds its own
# (tests/fuzz/CMakeLists.txt). They take about a fifth off the compile time of GCC's sources
# (less on small ones, which pay to load the header; the test sources' -O1 code generation is
# the rest) and a third off the clang fuzz build's.
# A header precompiled with other flags is rejected (clang: an error; GCC: -Winvalid-pch, and
# the slow path), so a source with options of its own (set_source_files_properties
# COMPILE_OPTIONS: -mavx2, -ffp-contract=off) sets SKIP_PRECOMPILE_HEADERS. -DDI_PCH=OFF builds
# without them, which also checks that every source includes what it uses (the thread_safety
# test's clang does so for the sources it reads).
option(DI_PCH "Precompile the common headers" ON)
set(DI_PCH_HEADERS <algorithm> <chrono> <cmath> <cstdint> <cstring> <filesystem> <fstream>
  <functional> <map> <memory> <optional> <random> <string> <string_view> <thread> <vector>
  <absl/status/status.h> <absl/status/statusor.h> <absl/strings/str_cat.h> <fmt/format.h>
  <nlohmann/json.hpp>)

# di_pch_target(NAME OPTIONS ... [DEFINITIONS ...] [DEPS ...] [HEADERS ...]): the target
# di_pch_NAME, whose precompiled header (DI_PCH_HEADERS and HEADERS) the targets of one group
# reuse (di_use_pch). OPTIONS and DEFINITIONS are the group's; its usage requirements are
# di::util's (which every library but di_tensor links), so the headers see the same macros.
function(di_pch_target name)
  cmake_parse_arguments(P "" "" "OPTIONS;DEFINITIONS;DEPS;HEADERS" ${ARGN})
  add_library(di_pch_${name} OBJECT ${PROJECT_SOURCE_DIR}/cmake/pch.cc)
  target_compile_options(di_pch_${name} PRIVATE ${P_OPTIONS})
  target_compile_definitions(di_pch_${name} PRIVATE ${P_DEFINITIONS})
  target_link_libraries(di_pch_${name} PRIVATE absl::status absl::statusor absl::strings
    fmt::fmt spdlog::spdlog nlohmann_json::nlohmann_json ${P_DEPS})
  target_precompile_headers(di_pch_${name} PRIVATE ${DI_PCH_HEADERS} ${P_HEADERS})
endfunction()

# di_pch_groups(SUFFIX [DEPS ...]): the groups of di_cc_library and the binaries (lib<SUFFIX>)
# and of di_cc_test (test<SUFFIX>), with DEPS' usage requirements too. The top CMakeLists.txt
# defines the plain ones once the packages are found; src/gateway adds its own (hiredis defines
# _FILE_OFFSET_BITS).
function(di_pch_groups suffix)
  cmake_parse_arguments(G "" "" "DEPS" ${ARGN})
  if(NOT DI_PCH)
    return()
  endif()
  di_pch_target(lib${suffix} OPTIONS ${DI_DEFAULT_COPTS} DEPS ${G_DEPS})
  if(DI_BUILD_TESTS)
    di_pch_target(test${suffix} OPTIONS ${DI_DEFAULT_COPTS} -O1
      DEFINITIONS DI_SOURCE_DIR="${PROJECT_SOURCE_DIR}"
        DI_TESTDATA_DIR="${CMAKE_BINARY_DIR}/testdata"
      DEPS GTest::gtest ${G_DEPS} HEADERS <gtest/gtest.h>)
  endif()
endfunction()

# di_use_pch(TARGET GROUP...): TARGET's sources use the first defined GROUP's precompiled header
# (in place of the one they used, if any).
function(di_use_pch target)
  foreach(group ${ARGN})
    if(TARGET di_pch_${group})
      set_property(TARGET ${target} PROPERTY PRECOMPILE_HEADERS_REUSE_FROM di_pch_${group})
      add_dependencies(${target} di_pch_${group})
      return()
    endif()
  endforeach()
endfunction()

# di_cc_library(NAME foo SRCS a.cc DEPS x y [COPTS ...] [NO_PCH]) -> target di_foo, alias
# di::foo. NO_PCH (here and in di_cc_test): a target that does not link di::util, so sees other
# macros than the precompiled header did.
function(di_cc_library)
  cmake_parse_arguments(L "NO_PCH" "NAME" "SRCS;DEPS;COPTS" ${ARGN})
  add_library(di_${L_NAME} STATIC ${L_SRCS})
  add_library(di::${L_NAME} ALIAS di_${L_NAME})
  target_include_directories(di_${L_NAME} PUBLIC ${PROJECT_SOURCE_DIR}/src)
  target_compile_options(di_${L_NAME} PRIVATE ${DI_DEFAULT_COPTS} ${L_COPTS})
  target_link_libraries(di_${L_NAME} PUBLIC ${L_DEPS})
  if(NOT L_NO_PCH AND NOT L_COPTS)
    di_use_pch(di_${L_NAME} lib)
  endif()
endfunction()

# di_cc_test(NAME foo_test SRCS foo_test.cc DEPS di::foo [LABELS unit] [NO_PCH]).
function(di_cc_test)
  if(NOT DI_BUILD_TESTS)
    return()
  endif()
  cmake_parse_arguments(T "NO_PCH" "NAME" "SRCS;DEPS;LABELS" ${ARGN})
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
  if(NOT T_NO_PCH)
    di_use_pch(${T_NAME} test)
  endif()
  gtest_discover_tests(${T_NAME} PROPERTIES LABELS "${T_LABELS}" DISCOVERY_TIMEOUT 60
    WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
endfunction()
