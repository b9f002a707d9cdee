# Cross build for 64-bit Arm Linux with Debian's cross toolchain (crossbuild-essential-arm64) and
# the multiarch `:arm64` packages (scripts/setup.sh installs both, `scripts/run_arm_tests.sh
# --packages` lists them; docs/benchmarks.md, "Arm (aarch64)"). Libraries and pkg-config files
# come from /usr/lib/aarch64-linux-gnu, headers from /usr/include (shared by every architecture)
# and /usr/include/aarch64-linux-gnu.
#   cmake -S . -B build-arm64 -G Ninja -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake
# (-DDI_CORE_ONLY=ON: only the layers below the engine, which need fewer :arm64 packages.)
# Test binaries run under qemu-user (CMAKE_CROSSCOMPILING_EMULATOR), so ctest and
# gtest_discover_tests work as in a native build.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)

# The multiarch layout keeps the target's libraries beside the build machine's under /, so no
# sysroot: find_package searches /usr/lib/aarch64-linux-gnu/cmake (CMAKE_LIBRARY_ARCHITECTURE),
# and pkg-config must read only the arm64 .pc files (and the architecture-independent ones).
set(ENV{PKG_CONFIG_LIBDIR} "/usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig")
set(ENV{PKG_CONFIG_PATH} "")
# simdjson: the native package's header with the arm64 runtime library (the folder's
# simdjson-config.cmake says why). Boost is headers only: FindBoost finds them in /usr/include.
set(simdjson_DIR ${CMAKE_CURRENT_LIST_DIR}/aarch64-linux-gnu)

find_program(DI_QEMU_AARCH64 qemu-aarch64)
if(DI_QEMU_AARCH64)
  # libc6:arm64 puts the arm64 loader in /lib and its libraries in /lib/aarch64-linux-gnu, so
  # qemu needs no -L prefix.
  set(CMAKE_CROSSCOMPILING_EMULATOR ${DI_QEMU_AARCH64})
endif()
