#pragma once

// DeepSeek-V4.1 Engram n-gram hashing: which table rows a position reads. Token ids are first
// mapped to token classes (the tokenizer-derived compressed vocabulary, supplied by the caller);
// each position then hashes the classes of the n-grams (2 .. max_ngram_size) ending at it, for
// every engram layer and head, into disjoint prime-sized bucket ranges of that layer's table.
//
// Layout (per engram layer, n-gram size and head): primes drawn in order above
// engram_vocab_size - 1, never reused across the model; a layer's columns are its (n-gram,
// head) pairs in that order and its bucket offsets their cumulative prime sums. Multipliers:
// per layer L, numpy.random.default_rng(10007 L).integers(0, B, size=max_ngram_size) with
// B = (INT64_MAX / compressed_vocab_size) / 2, each made odd (2 v + 1).
// Hash at position p: t_k = class of the token at p - k (the pad class once p - k < 0 or an
// earlier look-back was blocked); rolling = t_0 m_0, then for i = 1 .. N-1: rolling ^= t_i m_i,
// column (i, h) = rolling mod prime[i-1][h] + offset (int64 arithmetic, wrapping as numpy's).
// Source: transformers deepseek_v41 (commit 0a2080b4) EngramLayout, compute_hash_multipliers,
//   DeepseekV41NgramHashState; numpy's SeedSequence, PCG64 and bounded (Lemire) integers.

#include <cstdint>
#include <vector>

namespace deepinfer::arch {

// numpy.random.default_rng(seed).integers(0, high, size=n, dtype=int64) for a seed below 2^32
// and 2^32 < high (numpy's SeedSequence mixing, PCG64 XSL-RR, Lemire's bounded integers).
std::vector<int64_t> NumpyDefaultRngIntegers(uint32_t seed, int64_t high, int n);

struct EngramLayout {
  int max_ngram_size = 0;
  int n_heads = 0;
  int compressed_vocab_size = 0;
  // Per engram layer: primes [ngram - 1][heads] (flattened), offsets [(ngram - 1) heads],
  // multipliers [max_ngram_size].
  std::vector<std::vector<int64_t>> primes, offsets, multipliers;
  // Rows of each layer's table (the sum of its primes): the config's engram_num_embeddings.
  std::vector<int64_t> table_rows;

  int columns() const { return (max_ngram_size - 1) * n_heads; }

  // Builds the layout of `layer_ids` (their order in the config).
  static EngramLayout Make(const std::vector<int>& layer_ids, int max_ngram_size, int n_heads,
                           int64_t vocab_size, int compressed_vocab_size);

  // The row ids position `p` reads in engram layer `e`: classes[k] is the class at p - k for
  // k < max_ngram_size (classes[k] < 0: before the sequence start or blocked), pad_class the
  // pad token's class. Shapes: classes [max_ngram_size]; out [columns()].
  void Hash(int e, const int32_t* classes, int32_t pad_class, int64_t* out) const;
};

}  // namespace deepinfer::arch
