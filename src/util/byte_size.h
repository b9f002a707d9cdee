#pragma once

// Sizes written the way operators write them on a command line.

#include <cstdint>
#include <optional>
#include <string_view>

namespace deepinfer::util {

// Parses "1024", "64KiB", "2GiB", "1.5G", "500MB", "8 MiB": binary multiples for K/Ki/KiB (and M,
// G, T), decimal ones for KB/MB/GB/TB; case and spaces inside the unit do not matter.
// Units: bytes. nullopt for anything else, a negative or non-finite number, or more than 9e18.
std::optional<int64_t> ParseByteSize(std::string_view text);

}  // namespace deepinfer::util
