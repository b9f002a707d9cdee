#pragma once

// A DeepSeek-V4.1 vision tower assembled in memory with random weights, for the tests that run
// without ../shared (vision_tower_test) and for bench/vision_tower_bench.cc (release shapes).

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "fmt/format.h"
#include "model/model.h"
#include "tensor/dtype.h"

namespace deepinfer::arch::testing {

// A model assembled in memory: `layers` vision layers of width D, `heads` heads, SwiGLU I, text
// width `dim`, downsample 3; random BF16 linears (uniform, std about 1/sqrt(in)) and span
// vectors, F32 norm scales 1 +- 0.2.
inline std::unique_ptr<model::Model> InMemoryVisionModel(int layers, int64_t D, int heads, int64_t I,
                                            int64_t dim, float theta = 10000.0f) {
  auto m = std::make_unique<model::Model>();
  m->config.hidden = static_cast<int>(dim);
  model::DeepseekV4Config ds;
  model::DeepseekV41VisionConfig v;
  v.num_layers = layers;
  v.hidden = static_cast<int>(D);
  v.num_heads = heads;
  v.intermediate = static_cast<int>(I);
  v.rope_theta = theta;
  ds.vision = v;
  m->config.deepseek_v4 = ds;
  uint64_t state = 42;
  auto add = [&](const std::string& name, std::vector<int64_t> shape, bool f32, float scale) {
    tensor::TensorView t;
    t.name = name;
    t.dtype = f32 ? tensor::DType::kF32 : tensor::DType::kBF16;
    t.shape = shape;
    const int64_t n = t.num_elements();
    std::vector<uint8_t>& bytes = m->owned.emplace_back(n * (f32 ? 4 : 2));
    for (int64_t i = 0; i < n; ++i) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      const float x = static_cast<float>(state >> 40) / (1 << 23) - 1.0f;  // [-1, 1)
      if (f32) {
        const float value = 1.0f + 0.2f * x;
        std::memcpy(bytes.data() + 4 * i, &value, 4);
      } else {
        const uint16_t b = tensor::Fp32ToBf16(scale * x);
        std::memcpy(bytes.data() + 2 * i, &b, 2);
      }
    }
    t.data = bytes.data();
    t.size_bytes = bytes.size();
    m->tensors[name] = t;
  };
  auto linear = [](int64_t in) { return 1.7f / std::sqrt(static_cast<float>(in)); };
  add("vision.patch_embed.proj.weight", {D, 588}, false, linear(588));
  add("vision.patch_embed.proj.bias", {D}, false, 0.1f);
  for (int l = 0; l < layers; ++l) {
    const std::string p = fmt::format("vision.blocks.{}.", l);
    add(p + "norm1.weight", {D}, true, 0);
    add(p + "norm2.weight", {D}, true, 0);
    add(p + "attn.wqkv.weight", {3 * D, D}, false, linear(D));
    add(p + "attn.wqkv.bias", {3 * D}, false, 0.1f);
    add(p + "attn.wo.weight", {D, D}, false, linear(D));
    add(p + "attn.wo.bias", {D}, false, 0.1f);
    add(p + "mlp.w1.weight", {2 * I, D}, false, linear(D));
    add(p + "mlp.w2.weight", {D, I}, false, linear(I));
  }
  add("vision.norm.weight", {D}, true, 0);
  add("aligner.w1.weight", {dim, 9 * D}, false, linear(9 * D));
  add("aligner.w1.bias", {dim}, false, 0.1f);
  add("aligner.w2.weight", {dim, dim}, false, linear(dim));
  add("aligner.w2.bias", {dim}, false, 0.1f);
  for (const char* name : {"image_start", "image_end", "image_newline"}) add(name, {dim}, false, 1);
  return m;
}

}  // namespace deepinfer::arch::testing
