#pragma once

// For the DeepSeek parity tests only: golden loading (tests/golden/<family>/<case>: golden.json,
// transformers' logits.json.gz), a paged KV cache with a scrambled block table, and running a
// prompt through a CausalLm in chunks.

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "arch/causal_lm.h"
#include "gtest/gtest.h"
#include "model/model.h"
#include "model/synthetic_checkpoint_testing.h"
#include "nlohmann/json.hpp"
#include "util/mapped_file.h"

namespace deepinfer::arch::testing {

// A case's goldens: golden.json and transformers' logits ({"logits_<n>": {"shape", "data"}}).
struct GoldenFiles {
  nlohmann::json json;
  nlohmann::json logits;
  std::map<std::string, std::vector<float>> tables;
  int vocab = 0;

  bool Load(const std::string& dir) {
    std::ifstream in(dir + "/golden.json");
    EXPECT_TRUE(in) << "golden missing in " << dir << ": run tests/reference/make_deepseek_*.py";
    if (!in) return false;
    json = nlohmann::json::parse(in);
    vocab = json["vocab"].get<int>();
    auto text = util::ReadGzipFile(dir + "/logits.json.gz");
    EXPECT_TRUE(text.ok()) << text.status();
    if (!text.ok()) return false;
    logits = nlohmann::json::parse(*text);
    return true;
  }
  // transformers' logits `name`: [rows, vocab] f32.
  const float* Ref(const std::string& name, int64_t rows) {
    auto it = tables.find(name);
    if (it == tables.end()) {
      if (!logits.contains(name)) {
        ADD_FAILURE() << "no golden logits " << name;
        return nullptr;
      }
      const nlohmann::json& entry = logits[name];
      EXPECT_EQ(entry["shape"].get<std::vector<int64_t>>(), (std::vector<int64_t>{rows, vocab}));
      it = tables.emplace(name, entry["data"].get<std::vector<float>>()).first;
    }
    EXPECT_EQ(static_cast<int64_t>(it->second.size()), rows * vocab);
    return it->second.data();
  }
  std::vector<std::vector<int32_t>> Prompts() const {
    return json["prompts"].get<std::vector<std::vector<int32_t>>>();
  }
};

// A KV cache with a scrambled block table, so paging bugs show up.
struct Cache {
  KvCache kv;
  std::vector<int32_t> table;
  Cache(const CausalLm& lm, int layers, int tokens, int block_size = 16) {
    const int blocks = (tokens + block_size - 1) / block_size;
    EXPECT_TRUE(kv.Allocate(layers, block_size, blocks, lm.kv_floats_per_token()).ok());
    table.resize(blocks);
    for (int i = 0; i < blocks; ++i) table[i] = (i * 7 + 3) % blocks;
    if (std::gcd(7, blocks) != 1) std::iota(table.begin(), table.end(), 0);
  }
  SequenceSlice Slice(int32_t offset, int32_t n, int32_t start, int32_t logits) const {
    return {offset, n, start, logits, table.data(), static_cast<int32_t>(table.size())};
  }
};

// Logits of every position of `tokens`, fed in chunks of `chunk` tokens.
inline std::vector<float> RunTokens(CausalLm& lm, const std::vector<int32_t>& tokens, int chunk,
                                    util::ThreadPool& pool, int block_size = 16) {
  const int V = lm.config().vocab;
  Cache cache(lm, lm.config().num_layers, static_cast<int>(tokens.size()), block_size);
  std::vector<float> out(tokens.size() * V);
  for (size_t off = 0; off < tokens.size(); off += chunk) {
    const int n = static_cast<int>(std::min<size_t>(chunk, tokens.size() - off));
    ForwardBatch b;
    b.tokens = tokens.data() + off;
    b.num_tokens = n;
    b.seqs.push_back(cache.Slice(0, n, static_cast<int32_t>(off), n));
    lm.Forward(b, cache.kv, out.data() + off * V, pool);
  }
  return out;
}

inline double MaxAbsDiff(const float* a, const float* b, int64_t n) {
  double worst = 0;
  for (int64_t i = 0; i < n; ++i) worst = std::max(worst, std::fabs(double{a[i]} - b[i]));
  return worst;
}

inline int ArgMax(const float* x, int n) {
  return static_cast<int>(std::max_element(x, x + n) - x);
}

}  // namespace deepinfer::arch::testing
