// Memory read bandwidth of this machine: sums a 1 GiB buffer with 1..N threads (each thread reads
// its own contiguous slice), best of several passes. This is the roofline that single-stream
// decode (which streams every weight once per token) is compared against.
//
// Build: c++ -O3 -march=native -pthread bench/membw.cc -o membw
// Run:   membw [--size-mib 1024] [--threads 1,2] [--passes 7] [--json]
// Prints one line per thread count: "threads N read_gbps X" (GB = 1e9 bytes), or one JSON object.

#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

// Reads [begin, end) with wide loads and four independent accumulators so the loop is limited by
// memory, not by the add latency.
uint64_t SumSlice(const uint64_t* begin, const uint64_t* end) {
#if defined(__AVX2__)
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
  const uint64_t* p = begin;
  for (; p + 16 <= end; p += 16) {
    a0 = _mm256_add_epi64(a0, _mm256_load_si256(reinterpret_cast<const __m256i*>(p)));
    a1 = _mm256_add_epi64(a1, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + 4)));
    a2 = _mm256_add_epi64(a2, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + 8)));
    a3 = _mm256_add_epi64(a3, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + 12)));
  }
  __m256i s = _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3));
  alignas(32) uint64_t lanes[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), s);
  uint64_t total = lanes[0] + lanes[1] + lanes[2] + lanes[3];
  for (; p < end; ++p) total += *p;
  return total;
#else
  uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  const uint64_t* p = begin;
  for (; p + 4 <= end; p += 4) {
    s0 += p[0];
    s1 += p[1];
    s2 += p[2];
    s3 += p[3];
  }
  for (; p < end; ++p) s0 += *p;
  return s0 + s1 + s2 + s3;
#endif
}

double MeasureGbps(const uint64_t* data, size_t words, int threads, int passes) {
  double best = 0;
  volatile uint64_t sink = 0;
  for (int pass = 0; pass < passes; ++pass) {
    std::vector<uint64_t> sums(threads, 0);
    std::vector<std::thread> pool;
    auto t0 = std::chrono::steady_clock::now();
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        // Slices aligned to 64 bytes (8 words).
        size_t per = (words / threads) & ~size_t{7};
        const uint64_t* b = data + per * t;
        const uint64_t* e = t == threads - 1 ? data + words : b + per;
        sums[t] = SumSlice(b, e);
      });
    }
    for (auto& th : pool) th.join();
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    for (uint64_t v : sums) sink = sink + v;
    best = std::max(best, static_cast<double>(words * sizeof(uint64_t)) / s / 1e9);
  }
  (void)sink;
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  size_t size_mib = 1024;
  std::string thread_list = "1,2";
  int passes = 7;
  bool json = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "membw: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--size-mib") {
      size_mib = std::strtoul(next(), nullptr, 10);
    } else if (a == "--threads") {
      thread_list = next();
    } else if (a == "--passes") {
      passes = std::atoi(next());
    } else if (a == "--json") {
      json = true;
    } else {
      std::fprintf(stderr, "usage: membw [--size-mib N] [--threads 1,2] [--passes N] [--json]\n");
      return 2;
    }
  }
  if (size_mib == 0 || passes <= 0) return 2;
  size_t bytes = size_mib << 20;
  size_t words = bytes / sizeof(uint64_t);
  auto* data = static_cast<uint64_t*>(std::aligned_alloc(64, bytes));
  if (data == nullptr) {
    std::fprintf(stderr, "membw: cannot allocate %zu MiB\n", size_mib);
    return 1;
  }
  // Touch every page (and give it non-zero contents) before timing.
  for (size_t i = 0; i < words; ++i) data[i] = i;

  std::vector<int> counts;
  for (size_t start = 0; start < thread_list.size();) {
    size_t comma = thread_list.find(',', start);
    if (comma == std::string::npos) comma = thread_list.size();
    int n = std::atoi(thread_list.substr(start, comma - start).c_str());
    if (n <= 0) return 2;
    counts.push_back(n);
    start = comma + 1;
  }
  if (json) std::printf("{\"size_mib\": %zu, \"passes\": %d, \"read_gbps\": {", size_mib, passes);
  for (size_t k = 0; k < counts.size(); ++k) {
    double gbps = MeasureGbps(data, words, counts[k], passes);
    if (json) {
      std::printf("%s\"%d\": %.2f", k ? ", " : "", counts[k], gbps);
    } else {
      std::printf("threads %d read_gbps %.2f\n", counts[k], gbps);
    }
  }
  if (json) std::printf("}}\n");
  std::free(data);
  return 0;
}
