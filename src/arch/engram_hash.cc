#include "arch/engram_hash.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "util/status.h"

namespace deepinfer::arch {
namespace {

// numpy/random/bit_generator.pyx SeedSequence constants.
constexpr uint32_t kInitA = 0x43b0d7e5, kMultA = 0x931e8875, kInitB = 0x8b51f9dd,
                   kMultB = 0x58f38ded, kMixMultL = 0xca01f9dd, kMixMultR = 0x4973f715;
constexpr int kXShift = 16, kPoolSize = 4;

uint32_t HashMix(uint32_t value, uint32_t* hash_const) {
  value ^= *hash_const;
  *hash_const *= kMultA;
  value *= *hash_const;
  value ^= value >> kXShift;
  return value;
}

uint32_t Mix(uint32_t x, uint32_t y) {
  uint32_t r = kMixMultL * x - kMixMultR * y;
  r ^= r >> kXShift;
  return r;
}

using u128 = unsigned __int128;

struct Pcg64 {
  u128 state = 0, inc = 0;
  static constexpr u128 kMultiplier =
      (static_cast<u128>(0x2360ED051FC65DA4ULL) << 64) | 0x4385DF649FCCF645ULL;
  void Step() { state = state * kMultiplier + inc; }
  uint64_t Next() {
    Step();
    const uint64_t x = static_cast<uint64_t>(state >> 64) ^ static_cast<uint64_t>(state);
    const unsigned rot = static_cast<unsigned>(state >> 122);
    return (x >> rot) | (x << ((64 - rot) & 63));
  }
};

bool IsPrime(int64_t n) {
  if (n < 2) return false;
  for (int64_t d = 2; d * d <= n; ++d) {
    if (n % d == 0) return false;
  }
  return true;
}

}  // namespace

std::vector<int64_t> NumpyDefaultRngIntegers(uint32_t seed, int64_t high, int n) {
  DI_CHECK(high > (int64_t{1} << 32));
  // SeedSequence(seed): the pool, then generate_state(4, uint64).
  uint32_t pool[kPoolSize];
  uint32_t hash_const = kInitA;
  for (int i = 0; i < kPoolSize; ++i) pool[i] = HashMix(i == 0 ? seed : 0u, &hash_const);
  for (int src = 0; src < kPoolSize; ++src) {
    for (int dst = 0; dst < kPoolSize; ++dst) {
      if (src != dst) pool[dst] = Mix(pool[dst], HashMix(pool[src], &hash_const));
    }
  }
  uint32_t words[8];
  uint32_t hb = kInitB;
  for (int i = 0; i < 8; ++i) {
    uint32_t v = pool[i % kPoolSize];
    v ^= hb;
    hb *= kMultB;
    v *= hb;
    v ^= v >> kXShift;
    words[i] = v;
  }
  uint64_t val[4];
  for (int i = 0; i < 4; ++i) val[i] = static_cast<uint64_t>(words[2 * i]) | (uint64_t{words[2 * i + 1]} << 32);
  // PCG64 seeded as numpy does: state = val[0:2], increment = val[2:4] (high word first).
  Pcg64 rng;
  const u128 init_state = (static_cast<u128>(val[0]) << 64) | val[1];
  const u128 init_seq = (static_cast<u128>(val[2]) << 64) | val[3];
  rng.inc = (init_seq << 1) | 1;
  rng.Step();
  rng.state += init_state;
  rng.Step();
  // integers(0, high): Lemire's method on 64-bit draws over [0, high - 1].
  const uint64_t range = static_cast<uint64_t>(high - 1), excl = range + 1;
  std::vector<int64_t> out;
  for (int i = 0; i < n; ++i) {
    u128 m = static_cast<u128>(rng.Next()) * excl;
    uint64_t leftover = static_cast<uint64_t>(m);
    if (leftover < excl) {
      const uint64_t threshold = (std::numeric_limits<uint64_t>::max() - range) % excl;
      while (leftover < threshold) {
        m = static_cast<u128>(rng.Next()) * excl;
        leftover = static_cast<uint64_t>(m);
      }
    }
    out.push_back(static_cast<int64_t>(m >> 64));
  }
  return out;
}

EngramLayout EngramLayout::Make(const std::vector<int>& layer_ids, int max_ngram_size,
                                int n_heads, int64_t vocab_size, int compressed_vocab_size) {
  EngramLayout l;
  l.max_ngram_size = max_ngram_size;
  l.n_heads = n_heads;
  l.compressed_vocab_size = compressed_vocab_size;
  std::vector<int64_t> seen;
  auto next_prime = [&](int64_t start) {
    int64_t c = start + 1;
    while (!IsPrime(c) || std::find(seen.begin(), seen.end(), c) != seen.end()) ++c;
    seen.push_back(c);
    return c;
  };
  const int64_t bound = (std::numeric_limits<int64_t>::max() / compressed_vocab_size) / 2;
  for (int layer : layer_ids) {
    std::vector<int64_t> primes, offsets;
    int64_t total = 0;
    for (int g = 0; g < max_ngram_size - 1; ++g) {
      int64_t current = vocab_size - 1;
      for (int h = 0; h < n_heads; ++h) {
        current = next_prime(current);
        primes.push_back(current);
      }
    }
    for (int64_t p : primes) {
      offsets.push_back(total);
      total += p;
    }
    std::vector<int64_t> mult = NumpyDefaultRngIntegers(static_cast<uint32_t>(10007 * layer),
                                                        std::max<int64_t>(bound, 1),
                                                        max_ngram_size);
    for (int64_t& m : mult) m = m * 2 + 1;
    l.primes.push_back(std::move(primes));
    l.offsets.push_back(std::move(offsets));
    l.multipliers.push_back(std::move(mult));
    l.table_rows.push_back(total);
  }
  return l;
}

void EngramLayout::Hash(int e, const int32_t* classes, int32_t pad_class, int64_t* out) const {
  const std::vector<int64_t>& m = multipliers[e];
  bool blocked = false;
  // int64 products and XORs wrap as numpy's do (unsigned arithmetic, same bits).
  uint64_t rolling = 0;
  for (int k = 0; k < max_ngram_size; ++k) {
    blocked = blocked || classes[k] < 0;
    const int64_t t = blocked ? pad_class : classes[k];
    const uint64_t product = static_cast<uint64_t>(t) * static_cast<uint64_t>(m[k]);
    if (k == 0) {
      rolling = product;
      continue;
    }
    rolling ^= product;
    const int64_t value = static_cast<int64_t>(rolling);
    for (int h = 0; h < n_heads; ++h) {
      const int64_t prime = primes[e][(k - 1) * n_heads + h];
      int64_t r = value % prime;
      if (r < 0) r += prime;  // Python's modulo is non-negative for a positive divisor
      out[(k - 1) * n_heads + h] = r + offsets[e][(k - 1) * n_heads + h];
    }
  }
}

}  // namespace deepinfer::arch
