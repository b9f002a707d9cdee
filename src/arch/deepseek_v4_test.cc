// Parity of the DeepSeek-V4 forward pass with transformers 5.24 on tiny random checkpoints whose
// recipes and goldens come from tests/reference/make_deepseek_v4_golden.py, plus
// self-consistency: chunked prefill (1, 3, 128), prefix-cache hits at block boundaries and
// batching many sequences give the logits of one full prefill; and the schema's errors.

#include "arch/deepseek_v4.h"

#include <openssl/sha.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "arch/causal_lm.h"
#include "arch/deepseek_testing.h"
#include "arch/deepseek_v4_blocks.h"
#include "arch/deepseek_v4_ops.h"
#include "fmt/format.h"
#include "gtest/gtest.h"
#include "kernels/cpu/quant.h"
#include "model/hf_config.h"
#include "model/model.h"
#include "model/safetensors.h"
#include "model/synthetic_checkpoint_testing.h"
#include "util/status.h"
#include "util/thread_pool.h"

namespace deepinfer::arch {
namespace {

using testing::ArgMax;
using testing::Cache;
using testing::MaxAbsDiff;
using testing::RunTokens;

constexpr char kFamily[] = "deepseek_v4";

struct Golden : testing::GoldenFiles {
  std::unique_ptr<model::Model> model;
  std::unique_ptr<CausalLm> lm;
};

Golden Load(const std::string& name) {
  Golden g;
  if (g.Load(model::DeepseekGoldenDir(name, kFamily))) {
    testing::LoadAndCreate(model::DeepseekTestCheckpoint(name, kFamily), &CreateCausalLm, g.model,
                           g.lm);
  }
  return g;
}

class DeepseekV4ParityTest : public ::testing::TestWithParam<const char*> {};

TEST_P(DeepseekV4ParityTest, LogitsMatchTransformersAtEveryPosition) {
  Golden g = Load(GetParam());
  ASSERT_TRUE(g.lm);
  EXPECT_EQ(g.model->config.architecture, "deepseek_v4");
  util::ThreadPool pool(2);
  const double worst = testing::ExpectTop1AtEveryPosition(*g.lm, g, GetParam(), pool);
  // f32 math on identical bf16/f32 weights: only summation order differs.
  EXPECT_LT(worst, 1e-4) << GetParam();
}

INSTANTIATE_TEST_SUITE_P(Checkpoints, DeepseekV4ParityTest,
                         ::testing::Values("v4_flash_tiny", "v4_rates", "v4_hf_names",
                                           "v4_flash_tiny_fp8"),
                         [](const auto& info) { return std::string(info.param); });

class DeepseekV4ConsistencyTest : public ::testing::TestWithParam<const char*> {};

TEST_P(DeepseekV4ConsistencyTest, ChunkedPrefillEqualsOnePrefill) {
  Golden g = Load(GetParam());
  ASSERT_TRUE(g.lm);
  util::ThreadPool pool(2);
  const auto prompt = g.Prompts()[3];  // 300 tokens: past the window and several groups
  const int64_t n = static_cast<int64_t>(prompt.size());
  const std::vector<float> full = RunTokens(*g.lm, prompt, static_cast<int>(n), pool);
  for (int chunk : {1, 3, 128}) {
    const std::vector<float> got = RunTokens(*g.lm, prompt, chunk, pool);
    const double d = MaxAbsDiff(got.data(), full.data(), n * g.vocab);
    std::printf("%s: chunks of %d vs one prefill: max |diff| %.3g\n", GetParam(), chunk, d);
    EXPECT_LT(d, 1e-5) << "chunk " << chunk;
  }
  // An odd block size: entries sit whole in their group's last slot instead of spreading over
  // the group's slots (EntryCache), and groups straddle blocks.
  const std::vector<float> odd = RunTokens(*g.lm, prompt, 7, pool, /*block_size=*/5);
  EXPECT_LT(MaxAbsDiff(odd.data(), full.data(), n * g.vocab), 1e-5) << "block size 5";
}

// The compact layout on v4_flash_tiny (head_dim 64, index_head_dim 32, window 8, ratios
// 0 / 4 / 128 / 4): the main cache keeps only entries and index keys, (64 + 32) / 4 floats per
// token on CSA layers and 64 / block_size on the HCA layer; the window cache the last 128
// positions (the HCA group), whatever the sequence's length.
TEST(DeepseekV4LayoutTest, MainCacheKeepsEntriesOnlyAndTheWindowCoversTheLongestGroup) {
  Golden g = Load("v4_flash_tiny");
  ASSERT_TRUE(g.lm);
  const KvLayout l16 = g.lm->kv_layout(16);
  EXPECT_EQ(l16.floats, (std::vector<int64_t>{0, 24, 4, 24}));
  EXPECT_EQ(l16.window_floats, (std::vector<int64_t>{64, 64 + 4 * 64 + 4 * 32, 64 + 2 * 64,
                                                     64 + 4 * 64 + 4 * 32}));
  EXPECT_EQ(l16.window_tokens, 128);
  // 128-token blocks: 64 floats do not spread over 128 slots, so the HCA entry sits whole.
  EXPECT_EQ(g.lm->kv_layout(128).floats, (std::vector<int64_t>{0, 24, 64, 24}));
  EXPECT_EQ(g.lm->kv_layout(5).floats, (std::vector<int64_t>{0, 96, 64, 96}));
  EXPECT_EQ(g.lm->kv_floats_per_token(), 64);  // the MTP module's window key/value per token
}

TEST(DeepseekV4LayoutTest, EntriesSpreadOverTheSlotsTheBlockAllows) {
  using dsv4::EntryCache;
  EXPECT_EQ(EntryCache::Slots(4, 640, 16), 4);     // V4-Flash CSA: 160 floats per token
  EXPECT_EQ(EntryCache::Slots(128, 512, 16), 16);  // HCA, small blocks: the group's last block
  EXPECT_EQ(EntryCache::Slots(128, 512, 256), 128);
  EXPECT_EQ(EntryCache::Slots(4, 96, 5), 1);       // neither divides the other: whole
  EXPECT_EQ(EntryCache::Slots(4, 90, 16), 1);      // the entry does not divide: whole
  EXPECT_EQ(EntryCache::Slots(1, 640, 16), 1);
  EXPECT_EQ(EntryCache::Slots(0, 0, 16), 1);
}

// A prefix-cache hit: the main blocks of a prefix computed for one sequence, and the window
// blocks a step at the cut still reads (as the engine restores them), are shared by another that
// continues from the block boundary; its logits equal a full recompute. Window blocks further
// back are released (-1), so a read of one fails.
TEST_P(DeepseekV4ConsistencyTest, PrefixCacheHitAtBlockBoundaryEqualsFullRecompute) {
  Golden g = Load(GetParam());
  ASSERT_TRUE(g.lm);
  util::ThreadPool pool(2);
  const auto prompt = g.Prompts()[3];
  const int n = static_cast<int>(prompt.size()), V = g.vocab, L = g.model->config.num_layers;
  auto copy_block = [&](KvCache& from, int32_t fb, KvCache& to, int32_t tb) {
    for (int l = 0; l < L; ++l) {
      const float* src = from.Slot(l, fb, 0);
      std::copy(src, src + from.block_size * from.layer_floats[l], to.Slot(l, tb, 0));
    }
  };
  for (int block : {4, 16}) {
    const std::vector<float> full = RunTokens(*g.lm, prompt, n, pool, block);
    for (int cut : {block * 3, block * 9, block * (n / block - 1)}) {
      Cache shared(*g.lm, n, block);
      ASSERT_NE(shared.kv.window, nullptr);
      ForwardBatch a;
      a.tokens = prompt.data();
      a.num_tokens = cut + 2;  // the first sequence ran past the cut; its later slots are unused
      a.seqs.push_back(shared.Slice(0, cut + 2, 0, 0));
      g.lm->Forward(a, shared.kv, nullptr, pool);
      // The second sequence: the first cut/block blocks of the first, then its own blocks.
      Cache own(*g.lm, n, block);
      own.Release(cut);
      for (int b = 0; b < cut / block; ++b) {
        copy_block(shared.kv, shared.table[b], own.kv, own.table[b]);
        if (own.window_table[b] >= 0) {
          copy_block(shared.window, shared.window_table[b], own.window, own.window_table[b]);
        }
      }
      ForwardBatch b;
      b.tokens = prompt.data() + cut;
      b.num_tokens = n - cut;
      b.seqs.push_back(own.Slice(0, n - cut, cut, n - cut));
      std::vector<float> got(static_cast<size_t>(n - cut) * V);
      g.lm->Forward(b, own.kv, got.data(), pool);
      const double d = MaxAbsDiff(got.data(), full.data() + int64_t{cut} * V, int64_t{n - cut} * V);
      std::printf("%s: prefix hit at %d (block %d): max |diff| %.3g\n", GetParam(), cut, block, d);
      EXPECT_LT(d, 1e-5) << "cut " << cut << " block " << block;
    }
  }
}

TEST_P(DeepseekV4ConsistencyTest, BatchedSequencesEqualSingleSequences) {
  Golden g = Load(GetParam());
  ASSERT_TRUE(g.lm);
  util::ThreadPool pool(2);
  testing::ExpectBatchedEqualsSingle(*g.lm, g.Prompts(), GetParam(), 1e-5, pool);
}

INSTANTIATE_TEST_SUITE_P(Checkpoints, DeepseekV4ConsistencyTest,
                         ::testing::Values("v4_flash_tiny", "v4_rates", "v4_flash_tiny_fp8"),
                         [](const auto& info) { return std::string(info.param); });

// The MTP module (no transformers reference: DeepSeek's MTPBlock is the description, the greedy
// identity under speculation in engine_spec_test the end-to-end check): its prefill form over a
// prompt and its one-token-at-a-time draft form give the same logits, and drafts depend on the
// main model's streams.
TEST(DeepseekV4MtpTest, PrefillAndTokenByTokenDraftsAgree) {
  Golden g = Load("v4_flash_tiny");
  ASSERT_TRUE(g.lm);
  ASSERT_NE(g.lm->draft_heads(), nullptr);
  ASSERT_EQ(g.lm->draft_heads()->num_mtp_layers(), 1);
  util::ThreadPool pool(2);
  const auto prompt = g.Prompts()[2];  // 64 tokens: past the window
  const int n = static_cast<int>(prompt.size()), V = g.vocab;
  const int64_t D = g.lm->draft_heads()->mtp_hidden_size();
  EXPECT_EQ(D, 4 * g.model->config.hidden);
  const std::vector<float> streams = testing::FinalStates(*g.lm, prompt, pool);
  const std::vector<float> all = testing::MtpLogits(*g.lm, prompt, streams.data(), false, pool);
  const std::vector<float> steps = testing::MtpLogits(*g.lm, prompt, streams.data(), true, pool);
  EXPECT_EQ(MaxAbsDiff(steps.data(), all.data(), int64_t{n - 1} * V), 0.0);
  // Other main-model streams give other drafts.
  const std::vector<float> zeros(n * D, 0.5f);
  const std::vector<float> other = testing::MtpLogits(*g.lm, prompt, zeros.data(), false, pool);
  EXPECT_GT(MaxAbsDiff(other.data(), all.data(), int64_t{n - 1} * V), 1e-3);
}

// DeepSeek's inference numerics (fake-quantized cache values) are the default for a checkpoint in
// the released formats; transformers' (float) numerics stay selectable and are the default
// otherwise. The quantized path is still exactly chunking and batching invariant.
TEST(DeepseekV4NumericsTest, ReleaseFormatsDefaultToDeepseekQat) {
  Golden fp8 = Load("v4_flash_tiny_fp8");
  Golden bf16 = Load("v4_flash_tiny");
  ASSERT_TRUE(fp8.lm && bf16.lm);
  EXPECT_EQ(fp8.lm->default_numerics(), Numerics::kDeepseekQat);
  EXPECT_EQ(bf16.lm->default_numerics(), Numerics::kFast);
  EXPECT_FALSE(bf16.lm->SetNumerics(Numerics::kGgml));
  EXPECT_EQ(NumericsFromName("deepseek-qat"), Numerics::kDeepseekQat);
  EXPECT_EQ(NumericsFromName("auto"), std::nullopt);
}

TEST(DeepseekV4NumericsTest, QatMovesLogitsSlightlyAndKeepsChunkingExact) {
  Golden g = Load("v4_flash_tiny_fp8");
  ASSERT_TRUE(g.lm);
  util::ThreadPool pool(2);
  const auto prompt = g.Prompts()[3];
  const int64_t n = static_cast<int64_t>(prompt.size());
  const std::vector<float> fast = RunTokens(*g.lm, prompt, static_cast<int>(n), pool);
  ASSERT_TRUE(g.lm->SetNumerics(Numerics::kDeepseekQat));
  const std::vector<float> qat = RunTokens(*g.lm, prompt, static_cast<int>(n), pool);
  const double moved = MaxAbsDiff(qat.data(), fast.data(), n * g.vocab);
  int agree = 0;
  for (int64_t t = 0; t < n; ++t) {
    agree += ArgMax(qat.data() + t * g.vocab, g.vocab) == ArgMax(fast.data() + t * g.vocab, g.vocab);
  }
  std::printf("deepseek-qat vs fast: max |diff| %.3g, top-1 agrees %d/%lld\n", moved, agree,
              static_cast<long long>(n));
  // The quantizers act, and only perturb: on this random model (FP8 keeps 3 mantissa bits; FP4
  // index scores reorder the top-k) about 1.6 at most, three quarters of the top-1 kept.
  EXPECT_GT(moved, 1e-4);
  EXPECT_LT(moved, 5.0);
  EXPECT_GT(agree, n / 2);
  for (int chunk : {1, 3, 128}) {
    const std::vector<float> got = RunTokens(*g.lm, prompt, chunk, pool);
    EXPECT_EQ(MaxAbsDiff(got.data(), qat.data(), n * g.vocab), 0.0) << chunk;
  }
  ASSERT_TRUE(g.lm->SetNumerics(Numerics::kFast));
  const std::vector<float> back = RunTokens(*g.lm, prompt, static_cast<int>(n), pool);
  EXPECT_EQ(MaxAbsDiff(back.data(), fast.data(), n * g.vocab), 0.0);
}

// The release formats are used as they are: FP8 and FP4 weights stay in the mapped files (no
// copy at load), so the weights in memory are the bytes on disk.
TEST(DeepseekV4FormatTest, ReleaseFormatsAreReadInPlace) {
  Golden g = Load("v4_flash_tiny_fp8");
  ASSERT_TRUE(g.lm);
  int fp8 = 0, fp4 = 0;
  for (const auto& [name, t] : g.model->tensors) {
    if (t.dtype == tensor::DType::kF8E4M3) {
      ++fp8;
      EXPECT_EQ(t.scale_block_rows, 128) << name;
    }
    if (t.dtype == tensor::DType::kFp4E2M1) {
      ++fp4;
      EXPECT_EQ(t.scale_block_cols, 32) << name;
      EXPECT_EQ(t.size_bytes * 2, static_cast<size_t>(t.num_elements())) << name;
    }
    EXPECT_TRUE(t.scale == nullptr || kernels::IsBlockScaled(t.dtype)) << name;
  }
  // wq_a, wq_b, wkv, wo_a, wo_b, shared w1-3 per block (4 layers, the MTP module); 2 indexers.
  EXPECT_EQ(fp8, 5 * 8 + 2);
  EXPECT_EQ(fp4, 5 * 8 * 3);  // routed experts
  // None of them was copied (only small plain tensors that sit misaligned in this tiny file are).
  for (const auto& [name, t] : g.model->tensors) {
    if (!kernels::IsBlockScaled(t.dtype)) continue;
    for (const auto& o : g.model->owned) {
      EXPECT_FALSE(t.data >= o.data() && t.data < o.data() + o.size()) << name << " was copied";
    }
  }
}

// The reader's decoding of the FP8 / FP4 weights equals the reference's dequantized values bit for
// bit (golden sha256 of every quantized tensor's float32 values).
TEST(DeepseekV4FormatTest, DequantizedWeightsAreBitIdenticalToTheReference) {
  Golden g = Load("v4_flash_tiny_fp8");
  ASSERT_TRUE(g.lm);
  std::ifstream r(model::DeepseekGoldenDir("v4_flash_tiny_fp8", kFamily) + "/weights.json");
  const auto shas = nlohmann::json::parse(r)["quant"]["sha256"];
  int checked = 0;
  for (const auto& [name, want] : shas.items()) {
    const tensor::TensorView* t = g.model->Find(name);
    ASSERT_NE(t, nullptr) << name;
    std::vector<float> values(static_cast<size_t>(t->num_elements()));
    for (int64_t row = 0; row < t->rows(); ++row) {
      kernels::DequantizeScaledRow(*t, row, values.data() + row * t->cols());
    }
    unsigned char md[SHA256_DIGEST_LENGTH];
    SHA256(reinterpret_cast<const unsigned char*>(values.data()), values.size() * 4, md);
    std::string hex;
    for (unsigned char c : md) hex += fmt::format("{:02x}", c);
    EXPECT_EQ(hex, want["dequant_f32"].get<std::string>()) << name;
    ++checked;
  }
  EXPECT_EQ(checked, 42 + 120);
}

// The grouped output projection with a block-scaled wo_a: each group's rows take their own block
// scales (rows past the first scale block once read the first block's), against a double
// reference on the dequantized weights; a group that straddles scale blocks without starting on
// one is a shape error.
TEST(DeepseekV4OpsTest, GroupedOutputScalesEachGroupWithItsOwnBlockScales) {
  // 40 tokens take the groups one at a time, 2 tokens all at once (GroupedOutput's batches).
  const int64_t groups = 3, olr = 128, gin = 64, H = 16, T = 40, w = groups * gin;
  std::mt19937 rng(3);
  std::vector<uint8_t> codes(static_cast<size_t>(groups * olr * gin));
  for (uint8_t& c : codes) {
    c = static_cast<uint8_t>(rng() & 0xff);
    if ((c & 0x7f) == 0x7f) c ^= 1;  // no NaN codes
  }
  std::vector<uint8_t> scales = {120, 127, 131};  // one 128 x 128 block per group
  tensor::TensorView wo_a;
  wo_a.name = "attn.wo_a.weight";
  wo_a.dtype = tensor::DType::kF8E4M3;
  wo_a.shape = {groups * olr, gin};
  wo_a.data = codes.data();
  wo_a.size_bytes = codes.size();
  wo_a.scale = scales.data();
  wo_a.scale_block_rows = 128;
  wo_a.scale_block_cols = 128;
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> wo_b_values(static_cast<size_t>(H * groups * olr)), attn(T * w);
  for (float& v : wo_b_values) v = normal(rng);
  for (float& v : attn) v = normal(rng);
  tensor::TensorView wo_b;
  wo_b.name = "attn.wo_b.weight";
  wo_b.dtype = tensor::DType::kF32;
  wo_b.shape = {H, groups * olr};
  wo_b.data = reinterpret_cast<const uint8_t*>(wo_b_values.data());
  wo_b.size_bytes = wo_b_values.size() * sizeof(float);
  auto parts = dsv4::OutputGroups(wo_a, groups, olr);
  ASSERT_TRUE(parts.ok()) << parts.status();
  std::vector<float> out(T * H);
  dsv4::Scratch scratch;
  util::ThreadPool pool(2);
  dsv4::GroupedOutput(parts->data(), wo_b, groups, olr, attn.data(), T, w, scratch, out.data(),
                      pool);
  std::vector<float> first_two(2 * H);
  dsv4::GroupedOutput(parts->data(), wo_b, groups, olr, attn.data(), 2, w, scratch,
                      first_two.data(), pool);
  EXPECT_EQ(first_two, std::vector<float>(out.begin(), out.begin() + 2 * H));
  std::vector<float> dense(static_cast<size_t>(groups * olr * gin));
  for (int64_t r = 0; r < groups * olr; ++r) kernels::DequantizeScaledRow(wo_a, r, &dense[r * gin]);
  for (int64_t t = 0; t < T; ++t) {
    std::vector<double> c(static_cast<size_t>(groups * olr));
    for (int64_t r = 0; r < groups * olr; ++r) {
      const int64_t g = r / olr;
      for (int64_t k = 0; k < gin; ++k)
        c[r] += double{dense[r * gin + k]} * attn[t * w + g * gin + k];
    }
    for (int64_t h = 0; h < H; ++h) {
      double want = 0, mag = 0;
      for (int64_t r = 0; r < groups * olr; ++r) {
        want += double{wo_b_values[h * groups * olr + r]} * c[r];
        mag += std::fabs(double{wo_b_values[h * groups * olr + r]} * c[r]);
      }
      EXPECT_NEAR(out[t * H + h], want, 1e-5 * mag) << "token " << t << " output " << h;
    }
  }
  // Groups of 16 rows lie within one scale block each (the tiny test checkpoints); groups of 96
  // rows: the second straddles the first two blocks.
  auto small = dsv4::OutputGroups(wo_a, 24, 16);
  ASSERT_TRUE(small.ok()) << small.status();
  EXPECT_EQ((*small)[9].scale, scales.data() + 1);
  auto straddling = dsv4::OutputGroups(wo_a, 4, 96);
  ASSERT_FALSE(straddling.ok());
  EXPECT_EQ(ErrorCodeOf(straddling.status()), "shape_mismatch");
}

// --- Bad checkpoints: one-line errors with stable codes. ---

void ExpectLoadOrCreateError(const std::string& dir, const std::string& code) {
  auto m = model::LoadModel(dir);
  absl::Status st = m.status();
  if (m.ok()) st = CreateCausalLm(**m).status();
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(ErrorCodeOf(st), code) << st;
  EXPECT_EQ(OneLineError(st).find('\n'), std::string::npos);
}

TEST(DeepseekV4SchemaTest, UnknownCompressRatioIsUnsupported) {
  model::CheckpointCopy c("v4_flash_tiny", kFamily);
  c.EditConfig("compress_ratios", nlohmann::json::array({0, 4, 64, 4}));
  ExpectLoadOrCreateError(c.dir(), "unsupported_config");
}

TEST(DeepseekV4SchemaTest, ConfigImplyingOtherShapesIsAShapeMismatch) {
  model::CheckpointCopy c("v4_flash_tiny", kFamily);
  c.EditConfig("o_lora_rank", 8);
  ExpectLoadOrCreateError(c.dir(), "shape_mismatch");
}

TEST(DeepseekV4SchemaTest, MissingLayerIsReported) {
  model::CheckpointCopy c("v4_flash_tiny", kFamily);
  c.EditConfig("num_hidden_layers", 5);
  c.EditConfig("compress_ratios", nlohmann::json::array({0, 4, 128, 4, 0}));
  ExpectLoadOrCreateError(c.dir(), "missing_tensor");
}

TEST(DeepseekV4SchemaTest, TensorWithoutAPlaceIsReported) {
  // Three layers configured, four stored: layer 3's tensors have no place.
  model::CheckpointCopy c("v4_flash_tiny", kFamily);
  c.EditConfig("num_hidden_layers", 3);
  ExpectLoadOrCreateError(c.dir(), "unexpected_tensor");
}

TEST(DeepseekV4SchemaTest, HashTableNamingAnExpertOutOfRangeIsReported) {
  model::CheckpointCopy c("v4_flash_tiny", kFamily);
  const size_t off = c.TensorOffset("model.safetensors", "layers.0.ffn.gate.tid2eid");
  const int64_t bad = 8;  // 8 experts: ids 0..7
  c.Patch("model.safetensors", off + 8 * 5, &bad, 8);
  ExpectLoadOrCreateError(c.dir(), "bad_tensor");
}

TEST(DeepseekV4SchemaTest, NanInSinkIsReported) {
  model::CheckpointCopy c("v4_flash_tiny", kFamily);
  const size_t off = c.TensorOffset("model.safetensors", "layers.1.attn.attn_sink");
  const uint32_t nan = 0x7fc00000u;
  c.Patch("model.safetensors", off + 4, &nan, 4);
  ExpectLoadOrCreateError(c.dir(), "nan_in_weights");
}

TEST(DeepseekV4ConfigTest, ReleaseAndTransformersKeysGiveTheSameSchedule) {
  const std::string release = R"({"model_type": "deepseek_v4", "num_hidden_layers": 4,
    "compress_ratios": [0, 4, 128, 4, 0], "num_hash_layers": 1, "qk_rope_head_dim": 64,
    "num_nextn_predict_layers": 1,
    "rope_scaling": {"type": "yarn", "factor": 16, "original_max_position_embeddings": 65536,
                     "beta_fast": 32, "beta_slow": 1}})";
  const std::string hf = R"({"model_type": "deepseek_v4", "num_hidden_layers": 4,
    "layer_types": ["sliding_attention", "compressed_sparse_attention",
                    "heavily_compressed_attention", "compressed_sparse_attention"],
    "mlp_layer_types": ["hash_moe", "moe", "moe", "moe"], "partial_rotary_factor": 0.125,
    "num_nextn_predict_layers": 1,
    "rope_parameters": {"main": {"rope_type": "default", "rope_theta": 10000.0,
                                 "partial_rotary_factor": 0.125},
                        "compress": {"rope_type": "yarn", "rope_theta": 160000.0, "factor": 16,
                                     "original_max_position_embeddings": 65536,
                                     "beta_fast": 32, "beta_slow": 1,
                                     "partial_rotary_factor": 0.125, "attention_factor": 1.0}}})";
  auto a = model::ParseHfConfig(release);
  auto b = model::ParseHfConfig(hf);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  for (const auto* c : {&*a, &*b}) {
    const auto& d = *c->deepseek_v4;
    EXPECT_EQ(c->rope_dim, 64);
    EXPECT_EQ(d.compress_ratio, (std::vector<int>{0, 4, 128, 4, 0}));  // MTP last, window only
    EXPECT_EQ(d.hash_routed, (std::vector<bool>{true, false, false, false}));
    ASSERT_TRUE(d.compress_yarn.has_value());
    EXPECT_EQ(d.compress_yarn->factor, 16.0f);
    EXPECT_EQ(d.compress_rope_theta, 160000.0f);
    EXPECT_EQ(d.compress_rope_mscale, 1.0f);
    EXPECT_EQ(c->rope_theta, 10000.0f);
  }
}

TEST(DeepseekV4ConfigTest, NestedRopeWithoutMainIsABadConfig) {
  // Found by the safetensors fuzz target: a missing "main" used to throw out of the parser.
  for (const char* rope : {R"({"compress": {"rope_type": "default"}})",
                           R"({"compress": {"rope_type": "default"}, "main": 3})",
                           R"({"compress": 1, "main": {"rope_type": "default"}})"}) {
    const std::string cfg = std::string(R"({"model_type": "deepseek_v4", "num_hidden_layers": 2,
      "compress_ratios": [0, 4], "qk_rope_head_dim": 64, "rope_parameters": )") + rope + "}";
    auto c = model::ParseHfConfig(cfg);
    ASSERT_FALSE(c.ok()) << rope;
    EXPECT_EQ(ErrorCodeOf(c.status()), "bad_config") << rope << ": " << c.status();
  }
}

void PatchScale(model::CheckpointCopy& c, const std::string& scale, int64_t index, uint8_t value) {
  const size_t off = c.TensorOffset("model.safetensors", scale);
  c.Patch("model.safetensors", off + index, &value, 1);
}

TEST(DeepseekV4SchemaTest, E8M0NanScaleIsReported) {
  model::CheckpointCopy c("v4_flash_tiny_fp8", kFamily);
  PatchScale(c, "layers.1.attn.wq_b.scale", 0, 0xff);
  ExpectLoadOrCreateError(c.dir(), "nan_in_weights");
  model::CheckpointCopy d("v4_flash_tiny_fp8", kFamily);
  PatchScale(d, "layers.2.ffn.experts.3.w2.scale", 1, 0xff);
  ExpectLoadOrCreateError(d.dir(), "nan_in_weights");
}

TEST(DeepseekV4SchemaTest, ScaleGridOfTheWrongShapeIsReported) {
  // 128x128 blocks: a config claiming 32x32 blocks needs a finer scale grid than stored.
  model::CheckpointCopy c("v4_flash_tiny_fp8", kFamily);
  nlohmann::json q = {{"quant_method", "fp8"}, {"fmt", "e4m3"}, {"weight_block_size", {32, 32}}};
  c.EditConfig("quantization_config", q);
  ExpectLoadOrCreateError(c.dir(), "shape_mismatch");
}

TEST(DeepseekV4SchemaTest, Fp4DataOfTheWrongLengthIsReported) {
  // An expert's packed rows shorter than its scales imply: the header says [out, in/2 - 8].
  model::CheckpointCopy c("v4_flash_tiny_fp8", kFamily);
  auto st = model::SafetensorsFile::Open(c.path("model.safetensors"));
  ASSERT_TRUE(st.ok());
  std::ifstream in(c.path("model.safetensors"), std::ios::binary);
  std::string file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  uint64_t n = 0;
  std::memcpy(&n, file.data(), 8);
  auto header = nlohmann::json::parse(file.substr(8, n));
  auto& t = header["layers.0.ffn.experts.0.w1.weight"];
  ASSERT_EQ(t["dtype"], "I8");
  const int64_t rows = t["shape"][0], cols = t["shape"][1];
  t["shape"] = {rows, cols - 8};
  const uint64_t begin = t["data_offsets"][0];
  t["data_offsets"] = {begin, begin + static_cast<uint64_t>(rows * (cols - 8))};
  std::string h = header.dump();
  h.append(n - std::min<size_t>(n, h.size()), ' ');
  ASSERT_EQ(h.size(), n);
  std::ofstream(c.path("model.safetensors"), std::ios::binary)
      << file.substr(0, 8) << h << file.substr(8 + n);
  ExpectLoadOrCreateError(c.dir(), "shape_mismatch");
}

}  // namespace
}  // namespace deepinfer::arch
