#pragma once

// A std::vector whose storage starts on a 64-byte boundary (a cache line, and one AVX-512
// register). Hot scratch buffers use it so a kernel's loads and stores do not split cache lines
// depending on where malloc happened to place the buffer: with plain std::vector, V3 prefill
// moved by 4% between two builds of the same arithmetic as glibc placed large blocks on the heap
// (16-byte aligned) or in mmap (page + 16 bytes); with a fixed mmap threshold, by under 1%.
// Threads: as std::vector.

#include <cstddef>
#include <cstdint>
#include <new>
#include <vector>

namespace deepinfer::util {

template <typename T, std::size_t kAlign = 64>
struct AlignedAllocator {
  using value_type = T;
  // Needed because the non-type template parameter stops allocator_traits from deducing rebind.
  template <typename U>
  struct rebind {
    using other = AlignedAllocator<U, kAlign>;
  };
  AlignedAllocator() = default;
  template <typename U>
  AlignedAllocator(const AlignedAllocator<U, kAlign>&) noexcept {}
  // Throws std::bad_alloc as operator new does.
  T* allocate(std::size_t n) {
    return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t{kAlign}));
  }
  void deallocate(T* p, std::size_t) noexcept { ::operator delete(p, std::align_val_t{kAlign}); }
  template <typename U>
  bool operator==(const AlignedAllocator<U, kAlign>&) const noexcept {
    return true;
  }
};

// Scratch vector of T, 64-byte aligned.
template <typename T>
using AlignedVector = std::vector<T, AlignedAllocator<T>>;

// Grows a scratch vector to at least n elements; never shrinks (scratch is reused across calls,
// so steady-state steps allocate nothing).
template <typename V>
void Grow(V& v, int64_t n) {
  if (static_cast<int64_t>(v.size()) < n) v.resize(static_cast<size_t>(n));
}

}  // namespace deepinfer::util
