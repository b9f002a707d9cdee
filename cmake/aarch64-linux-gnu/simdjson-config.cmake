# simdjson for the aarch64 cross build (cmake/aarch64-linux-gnu.cmake points simdjson_DIR here).
# Debian's libsimdjson-dev is not Multi-Arch: its :arm64 copy cannot be installed beside the
# native one the native build needs. So the header comes from the native package (simdjson.h is
# the same for every architecture: one amalgamated file that picks its kernels when compiled) and
# the library from the arm64 runtime package libsimdjson14:arm64 of the same Debian version; the
# soname (14) is the ABI both are built for. Only the gateway's request reader links it.
set(DI_SIMDJSON_ARM64_LIB /usr/lib/aarch64-linux-gnu/libsimdjson.so.14)
if(NOT EXISTS ${DI_SIMDJSON_ARM64_LIB} OR NOT EXISTS /usr/include/simdjson.h)
  set(simdjson_FOUND FALSE)
  set(simdjson_NOT_FOUND_MESSAGE "needs ${DI_SIMDJSON_ARM64_LIB} (libsimdjson14:arm64) and "
      "/usr/include/simdjson.h (libsimdjson-dev)")
  return()
endif()
if(NOT TARGET simdjson::simdjson)
  # No include directory: /usr/include is on the cross compiler's own search path (an explicit
  # -isystem /usr/include would break libstdc++'s #include_next).
  add_library(simdjson::simdjson SHARED IMPORTED)
  set_target_properties(simdjson::simdjson PROPERTIES IMPORTED_LOCATION ${DI_SIMDJSON_ARM64_LIB})
endif()
set(simdjson_FOUND TRUE)
