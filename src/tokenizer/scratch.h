#pragma once

#include <cstddef>

namespace deepinfer::tokenizer {

// Per-thread scratch buffers keep their capacity from call to call, which makes the common small
// request allocation-free. Call this after use so that one huge request does not leave a thread
// holding its buffers forever.
template <typename Buffer>
void TrimScratch(Buffer& buffer, size_t keep_elements = size_t{1} << 20) {
  if (buffer.capacity() > keep_elements) Buffer().swap(buffer);
}

}  // namespace deepinfer::tokenizer
