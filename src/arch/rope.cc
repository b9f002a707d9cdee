#include "arch/rope.h"

#include <algorithm>
#include <cmath>

namespace deepinfer::arch {

double YarnMscale(double scale, double mscale) {
  return scale <= 1 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0;
}

RopeFrequencies ComputeRopeFrequencies(int rope_dim, double theta,
                                       const std::optional<model::YarnScaling>& yarn) {
  const int dim = rope_dim, half = dim / 2;
  std::vector<float> pos_freqs(half);
  for (int i = 0; i < half; ++i) {
    const float e = static_cast<float>(2 * i) / static_cast<float>(dim);
    pos_freqs[i] = static_cast<float>(std::pow(theta, static_cast<double>(e)));
  }
  RopeFrequencies out;
  out.inv_freq.resize(half);
  if (!yarn) {
    for (int i = 0; i < half; ++i) out.inv_freq[i] = 1.0f / pos_freqs[i];
    return out;
  }
  const model::YarnScaling& y = *yarn;
  const double factor = y.factor;
  if (y.attention_factor > 0) {
    out.attention_factor = y.attention_factor;
  } else if (y.mscale != 0 && y.mscale_all_dim != 0) {
    out.attention_factor =
        static_cast<float>(YarnMscale(factor, y.mscale) / YarnMscale(factor, y.mscale_all_dim));
  } else {
    out.attention_factor = static_cast<float>(YarnMscale(factor, 1.0));
  }
  auto correction_dim = [&](double rotations) {
    return (dim * std::log(y.original_max_position_embeddings / (rotations * 2 * M_PI))) /
           (2 * std::log(theta));
  };
  double low = correction_dim(y.beta_fast), high = correction_dim(y.beta_slow);
  if (y.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(dim - 1));
  if (low == high) high += 0.001;
  const float flow = static_cast<float>(low), fspan = static_cast<float>(high - low);
  for (int i = 0; i < half; ++i) {
    const float ramp = std::clamp((static_cast<float>(i) - flow) / fspan, 0.0f, 1.0f);
    const float extrap_factor = 1.0f - ramp;
    const float extrap = 1.0f / pos_freqs[i];
    const float interp = 1.0f / (static_cast<float>(factor) * pos_freqs[i]);
    out.inv_freq[i] = interp * (1.0f - extrap_factor) + extrap * extrap_factor;
  }
  return out;
}

}  // namespace deepinfer::arch
