#pragma once

// Synthetic Hugging Face checkpoints for tests: the repository keeps only a weight recipe
// (tests/golden/<...>/<case>/weights.json, made by tests/reference/make_deepseek_v3_golden.py)
// and this module writes the safetensors from it, bit-identical to the Python generator
// (tests/reference/synthetic_weights.py, "splitmix64-uniform/1"), so no weights are committed.
//
// Recipe JSON: {"generator": "splitmix64-uniform/1", "seed": S, "shards": N,
//   "tensors": [{"name", "shape": [..], "dtype": "BF16" | "F32", "center", "half_width"} or
//   {"name", "shape": [rows, k], "dtype": "I64", "modulus": m}, ...],
//   optional "fp8": {"format": "e4m3fn", "block": 128, "tensors": [names]} (V3: F32
//   "_scale_inv"), optional "quant" (V4 / V4.1 release formats, below)}.
// A tensor with "draw_as": <name of an earlier tensor> takes that tensor's draws (key below with
// its index t) under its own centre and half-width: a scaled copy (tests' agreeing drafters).
// I64 tables (DeepSeek-V4's tid2eid): row r is (b_r + j) mod m for j < k, with b_r = z >> 40 of
// the row's first element (so k distinct values per row when k <= m).
// Element i of tensor t: key = mix64((S << 32) | t), z = mix64(key + (i + 1) * 0x9E3779B97F4A7C15),
// x = ((z >> 40) - 2^23) / 2^23, v = float32(center + half_width * x) in float64 arithmetic;
// BF16 stores v rounded to nearest even. FP8 tensors are quantized per block x block tile:
// scale = float32(max(amax, 1e-12) / 448) (float64 division), q = e4m3fn(w / scale) rounded to
// nearest even, stored with "<name>_scale_inv" = scale [ceil(out/128), ceil(in/128)] F32, as
// DeepSeek ships FP8 weights (and as torch.float8_e4m3fn rounds).
//
// Errors: bad_recipe (malformed JSON or an unknown generator / dtype / FP8 format),
// file_not_found, io_error. Thread-safety: the functions share no state.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/block_scales.h"
#include "model/fp8.h"
#include "nlohmann/json.hpp"

namespace deepinfer::model {

// One tensor as stored in a safetensors file: little-endian bytes of `dtype` ("BF16", "F32",
// "F8_E4M3"), row-major `shape`.
struct SafetensorsEntry {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

// The recipe's tensors in recipe order, before any FP8 quantization (BF16 / F32 bytes).
// Cost: one pass, ~5 ns per element.
absl::StatusOr<std::vector<SafetensorsEntry>> DrawSyntheticTensors(const nlohmann::json& recipe);


// DeepSeek-V4 / V4.1 release formats, as the goldens' recipes describe them ("quant" section:
// "fp8_e4m3_ue8m0_RxC", "engram_fp8_e4m3_ue8m0_1x32" (1 x 32) and "fp4_e2m1_ue8m0_1x32" tensor
// lists; the weight is stored quantized and "<prefix>.scale" holds its E8M0 scale bytes,
// replacing a recipe tensor of that name).
// FP8: per R x C block, amax = max |w| (at least 2^-100), s = 2^e with e the power-of-two ceiling
//   of float32(amax * float32(1 / 448)) read off its bits (exponent - 127 + (mantissa != 0)),
//   code = e4m3fn round-to-nearest-even of w / s; scale byte e + 127.
// FP4: per 1 x 32 block along a row, amax at least 6 * 2^-126, e from float32(amax * (1 / 6)),
//   code = e2m1 round-to-nearest-even of clamp(w / s, -6, 6) (sign bit 3, set for w < 0), packed
//   two per byte, the even element in the low nibble.
// dequant is code value * s (exact).
struct BlockQuantized {
  std::vector<uint8_t> codes;   // FP8: [rows, cols]; FP4: [rows, cols / 2] packed
  std::vector<uint8_t> scales;  // E8M0: FP8 [ceil(rows / R), ceil(cols / C)]; FP4 [rows, cols / 32]
  std::vector<float> dequant;   // [rows, cols]
};
BlockQuantized QuantizeFp8E8M0(const float* w, int64_t rows, int64_t cols, int64_t block_rows,
                               int64_t block_cols);
// REQUIRES: cols % 32 == 0.
BlockQuantized QuantizeFp4E8M0(const float* w, int64_t rows, int64_t cols);

// Writes `tensors` as one safetensors file (header padded to 8 bytes, {"format": "pt"}
// metadata), atomically (temporary file + rename).
absl::Status WriteSafetensors(const std::string& path,
                              const std::vector<const SafetensorsEntry*>& tensors);

// Reads `recipe_path` and writes its weights into `out_dir`: model.safetensors, or
// model-0000k-of-0000N.safetensors plus model.safetensors.index.json when "shards" > 1 (tensors
// split in recipe order, ceil(count / N) per shard, FP8 scales next to their weights).
absl::Status WriteSyntheticWeights(const std::string& recipe_path, const std::string& out_dir);

// Writes a loadable checkpoint for the recipe case folder `case_dir` (config.json, weights.json,
// optional tokenizer files) into `out_dir`: copies of the case's JSON files (not its goldens:
// golden.json, logits.json.gz) and the generated weights. `out_dir` may be `case_dir` itself.
absl::Status WriteSyntheticCheckpoint(const std::string& case_dir, const std::string& out_dir);

// The same as a cached folder `cache_dir`/<case name>, for tests. Made once and reused while
// weights.json is unchanged; concurrent callers (tests run in parallel processes) are safe: each
// builds in a private folder and renames it into place, and the loser of the race discards its
// copy. Returns the folder's path.
absl::StatusOr<std::string> SyntheticCheckpoint(const std::string& case_dir,
                                                const std::string& cache_dir);

}  // namespace deepinfer::model
