#pragma once

// For the DeepSeek parity tests only: golden loading (tests/golden/<family>/<case>: golden.json,
// transformers' logits.json.gz), loading and building a checkpoint, a paged KV cache with a
// scrambled block table, running a prompt through a CausalLm in chunks, the top-1 parity loop
// over a case's prompts, and the two forms of an MTP module.

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
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

// Loads the checkpoint folder `dir` (or reports the error that kept it from being made), lets
// `prepare` edit the model (e.g. attach Engram token classes), and builds it with `create`.
// Returns false after a test failure (model and lm then as far as they got).
template <typename Lm>
bool LoadAndCreate(const absl::StatusOr<std::string>& dir,
                   absl::StatusOr<std::unique_ptr<Lm>> (*create)(const model::Model&,
                                                                 ExpertExchange*),
                   std::unique_ptr<model::Model>& model, std::unique_ptr<Lm>& lm,
                   absl::FunctionRef<void(model::Model&)> prepare = [](model::Model&) {}) {
  EXPECT_TRUE(dir.ok()) << dir.status();
  if (!dir.ok()) return false;
  auto m = model::LoadModel(*dir);
  EXPECT_TRUE(m.ok()) << m.status();
  if (!m.ok()) return false;
  model = std::move(*m);
  prepare(*model);
  auto built = create(*model, nullptr);
  EXPECT_TRUE(built.ok()) << built.status();
  if (!built.ok()) return false;
  lm = std::move(*built);
  return true;
}

// Allocates `kv` (and `window`, attached to it, when the layout has a window cache) as
// lm.kv_layout(block_size) asks, `blocks` blocks each.
inline void AllocateKv(const CausalLm& lm, int block_size, int blocks, KvCache& kv,
                       KvCache& window) {
  const KvLayout layout = lm.kv_layout(block_size);
  EXPECT_TRUE(kv.AllocateLayers(block_size, blocks, layout.floats).ok());
  if (layout.has_window()) {
    EXPECT_TRUE(window.AllocateLayers(block_size, blocks, layout.window_floats).ok());
    kv.window = &window;
  }
}

// A KV cache with a scrambled block table, so paging bugs show up. The window cache (if the
// layout has one) uses the same block ids through its own table, whose entries behind the window
// Release() sets to -1 as the engine does, so a read outside the window shows up too.
struct Cache {
  KvCache kv, window;
  std::vector<int32_t> table, window_table;
  int32_t window_tokens = 0;
  Cache(const CausalLm& lm, int tokens, int block_size = 16) {
    const int blocks = (tokens + block_size - 1) / block_size;
    AllocateKv(lm, block_size, blocks, kv, window);
    window_tokens = lm.kv_layout(block_size).window_tokens;
    table.resize(blocks);
    for (int i = 0; i < blocks; ++i) table[i] = (i * 7 + 3) % blocks;
    if (std::gcd(7, blocks) != 1) std::iota(table.begin(), table.end(), 0);
    window_table = table;
  }
  // Forgets the window blocks that a step starting at `start` never reads.
  void Release(int32_t start) {
    if (kv.window == nullptr) return;
    const int32_t dead = std::max(0, start - window_tokens + 1) / kv.block_size;
    for (int32_t b = 0; b < dead; ++b) window_table[b] = -1;
  }
  SequenceSlice Slice(int32_t offset, int32_t n, int32_t start, int32_t logits) const {
    return {offset, n, start, logits, table.data(), static_cast<int32_t>(table.size()),
            kv.window != nullptr ? window_table.data() : nullptr};
  }
};

// Logits of every position of `tokens`, fed in chunks of `chunk` tokens.
inline std::vector<float> RunTokens(CausalLm& lm, const std::vector<int32_t>& tokens, int chunk,
                                    util::ThreadPool& pool, int block_size = 16) {
  const int V = lm.config().vocab;
  Cache cache(lm, static_cast<int>(tokens.size()), block_size);
  std::vector<float> out(tokens.size() * V);
  for (size_t off = 0; off < tokens.size(); off += chunk) {
    const int n = static_cast<int>(std::min<size_t>(chunk, tokens.size() - off));
    ForwardBatch b;
    b.tokens = tokens.data() + off;
    b.num_tokens = n;
    cache.Release(static_cast<int32_t>(off));
    b.seqs.push_back(cache.Slice(0, n, static_cast<int32_t>(off), n));
    lm.Forward(b, cache.kv, out.data() + off * V, pool);
  }
  return out;
}

inline double MaxAbsDiff(const float* a, const float* b, int64_t n);

// Batching: one Forward over one shared cache with c's decode token (299 tokens of the 300-token
// prompt cached), the whole 7-token prompt a and the last 4 tokens of the 64-token prompt b (60
// cached), each sequence with its own block table. Returns the largest difference of each from
// its single-sequence run: {decode, prefill, chunk}.
// REQUIRES: prompts as the golden.json of the DeepSeek goldens (1, 7, 64 and 300 tokens).
inline std::array<double, 3> BatchedVsSingle(CausalLm& lm,
                                             const std::vector<std::vector<int32_t>>& prompts,
                                             util::ThreadPool& pool) {
  const std::vector<int32_t>& a = prompts[1];
  const std::vector<int32_t>& b = prompts[2];
  const std::vector<int32_t>& c = prompts[3];
  const int V = lm.config().vocab;
  const std::vector<float> ra = RunTokens(lm, a, 7, pool);
  const std::vector<float> rb = RunTokens(lm, b, 64, pool);
  const std::vector<float> rc = RunTokens(lm, c, 300, pool);
  KvCache shared, shared_window;
  const int blocks_a = 1, blocks_b = 4, blocks_c = 19;
  AllocateKv(lm, 16, blocks_a + blocks_b + blocks_c, shared, shared_window);
  // The window tables are the main ones (window blocks are never released here).
  std::vector<int32_t> ta(blocks_a), tb(blocks_b), tc(blocks_c);
  std::iota(tc.begin(), tc.end(), 0);
  std::iota(tb.begin(), tb.end(), blocks_c);
  std::iota(ta.begin(), ta.end(), blocks_c + blocks_b);
  auto prefill = [&](const std::vector<int32_t>& t, int n, std::vector<int32_t>& table) {
    ForwardBatch fb;
    fb.tokens = t.data();
    fb.num_tokens = n;
    fb.seqs.push_back({0, n, 0, 0, table.data(), static_cast<int32_t>(table.size()),
                       table.data()});
    lm.Forward(fb, shared, nullptr, pool);
  };
  prefill(b, 60, tb);
  prefill(c, 299, tc);
  std::vector<int32_t> tokens = {c[299]};
  tokens.insert(tokens.end(), a.begin(), a.end());
  tokens.insert(tokens.end(), b.begin() + 60, b.end());
  ForwardBatch fb;
  fb.tokens = tokens.data();
  fb.num_tokens = static_cast<int32_t>(tokens.size());
  fb.seqs.push_back({0, 1, 299, 1, tc.data(), blocks_c, tc.data()});
  fb.seqs.push_back({1, 7, 0, 7, ta.data(), blocks_a, ta.data()});
  fb.seqs.push_back({8, 4, 60, 2, tb.data(), blocks_b, tb.data()});
  std::vector<float> out(10 * V);
  lm.Forward(fb, shared, out.data(), pool);
  return {MaxAbsDiff(out.data(), rc.data() + 299 * V, V),
          MaxAbsDiff(out.data() + V, ra.data(), 7 * V),
          MaxAbsDiff(out.data() + 8 * V, rb.data() + 62 * V, 2 * V)};
}

// BatchedVsSingle, printed as "<label>: batched vs single: ..." and each difference below `bound`.
inline void ExpectBatchedEqualsSingle(CausalLm& lm, const std::vector<std::vector<int32_t>>& prompts,
                                      const char* label, double bound, util::ThreadPool& pool) {
  const auto [dc, da, db] = BatchedVsSingle(lm, prompts, pool);
  std::printf("%s: batched vs single: decode %.3g, prefill %.3g, chunk %.3g\n", label, dc, da, db);
  EXPECT_LT(dc, bound) << label;
  EXPECT_LT(da, bound) << label;
  EXPECT_LT(db, bound) << label;
}

inline double MaxAbsDiff(const float* a, const float* b, int64_t n) {
  double worst = 0;
  for (int64_t i = 0; i < n; ++i) worst = std::max(worst, std::fabs(double{a[i]} - b[i]));
  return worst;
}

inline int ArgMax(const float* x, int n) {
  return static_cast<int>(std::max_element(x, x + n) - x);
}

// Every prompt of the case through `lm` as one prefill, against transformers' logits_<n>: the
// top-1 token must agree at every position. Prints one line per prompt ("parity <label> ...").
// Returns the largest |logit difference| over all prompts (infinity when a golden is missing).
inline double ExpectTop1AtEveryPosition(CausalLm& lm, GoldenFiles& g, const std::string& label,
                                        util::ThreadPool& pool) {
  double worst = 0;
  for (const auto& prompt : g.Prompts()) {
    const int64_t n = static_cast<int64_t>(prompt.size());
    const float* ref = g.Ref("logits_" + std::to_string(n), n);
    if (ref == nullptr) return INFINITY;
    const std::vector<float> got = RunTokens(lm, prompt, static_cast<int>(n), pool);
    const double diff = MaxAbsDiff(got.data(), ref, n * g.vocab);
    int agree = 0;
    for (int64_t t = 0; t < n; ++t) {
      const float* r = ref + t * g.vocab;
      const int want = ArgMax(r, g.vocab), have = ArgMax(got.data() + t * g.vocab, g.vocab);
      agree += want == have;
      EXPECT_EQ(want, have) << label << " prompt " << n << " position " << t << " (reference "
                            << r[want] << " vs " << r[have] << ")";
    }
    std::printf("parity %-20s %3lld tokens: max |logit diff| %.3g, top-1 agrees %d/%lld\n",
                label.c_str(), static_cast<long long>(n), diff, agree, static_cast<long long>(n));
    worst = std::max(worst, diff);
  }
  return worst;
}

// The main model's final states [n, mtp_hidden_size()] after one prefill of `prompt`.
inline std::vector<float> FinalStates(CausalLm& lm, const std::vector<int32_t>& prompt,
                                      util::ThreadPool& pool) {
  const int n = static_cast<int>(prompt.size());
  Cache cache(lm, n);
  ForwardBatch b;
  b.tokens = prompt.data();
  b.num_tokens = n;
  b.seqs.push_back(cache.Slice(0, n, 0, 0));
  lm.Forward(b, cache.kv, nullptr, pool);
  std::vector<float> states(n * lm.draft_heads()->mtp_hidden_size());
  lm.draft_heads()->FinalHidden(states.data());
  return states;
}

// MTP module 0's logits [n - 1, vocab] for the next tokens prompt[1, n) with the main states
// `states` (FinalStates rows 0 .. n - 2), over an MTP cache of its own (one block of n slots): the
// prefill form (one call over all of them), or, when `one_by_one`, the draft form (one token per
// call).
inline std::vector<float> MtpLogits(CausalLm& lm, const std::vector<int32_t>& prompt,
                                    const float* states, bool one_by_one,
                                    util::ThreadPool& pool) {
  DraftHeads& heads = *lm.draft_heads();
  const int n = static_cast<int>(prompt.size()), V = lm.config().vocab;
  const int64_t D = heads.mtp_hidden_size();
  const std::vector<int32_t> next(prompt.begin() + 1, prompt.end());
  // As the engine's MTP cache: per token, kv_floats_per_token() floats, no window cache.
  KvCache mtp_kv;
  EXPECT_TRUE(mtp_kv.Allocate(heads.num_mtp_layers(), n, 1, lm.kv_floats_per_token()).ok());
  const int32_t table[1] = {0};
  std::vector<float> logits(static_cast<size_t>(n - 1) * V);
  const int step = one_by_one ? 1 : n - 1;
  for (int i = 0; i < n - 1; i += step) {
    ForwardBatch b;
    b.tokens = next.data() + i;
    b.num_tokens = step;
    b.seqs.push_back({0, step, i, step, table, 1});
    heads.ForwardMtp(0, b, states + int64_t{i} * D, mtp_kv, logits.data() + int64_t{i} * V,
                     nullptr, pool);
  }
  return logits;
}

}  // namespace deepinfer::arch::testing
