#pragma once

#include <optional>
#include <vector>

#include "model/model.h"

namespace deepinfer::arch {

// A rotary table's inverse frequencies and the factor transformers multiplies cos/sin by.
struct RopeFrequencies {
  std::vector<float> inv_freq;  // [rope_dim / 2]
  // YaRN's default attention_factor (the config's attention_factor, else the mscale /
  // mscale_all_dim ratio, else 0.1 ln(factor) + 1); 1 for plain RoPE. Models may override it.
  float attention_factor = 1.0f;
};

// Inverse frequencies of `rope_dim` rotary dims with base `theta`, plain or YaRN-scaled, computed
// in the same float32 steps as transformers so positions deep in the YaRN range still agree.
// Source: transformers modeling_rope_utils (_compute_default_rope_parameters,
//   _compute_yarn_parameters); Peng et al. 2023, "YaRN".
RopeFrequencies ComputeRopeFrequencies(int rope_dim, double theta,
                                       const std::optional<model::YarnScaling>& yarn);

// YaRN's magnitude correction 0.1 * mscale * ln(scale) + 1 (1 when scale <= 1).
double YarnMscale(double scale, double mscale);

}  // namespace deepinfer::arch
