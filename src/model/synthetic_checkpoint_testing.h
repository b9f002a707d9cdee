#pragma once

// For tests only (needs the DI_SOURCE_DIR and DI_TESTDATA_DIR definitions of di_cc_test).

#include <string>

#include "model/synthetic_checkpoint.h"

namespace deepinfer::model {

// The tiny DeepSeek test checkpoint `name` (a folder of tests/golden/deepseek_v3), generated from
// its weight recipe into the build tree on first use (see SyntheticCheckpoint).
inline absl::StatusOr<std::string> DeepseekTestCheckpoint(const std::string& name) {
  return SyntheticCheckpoint(std::string(DI_SOURCE_DIR) + "/tests/golden/deepseek_v3/" + name,
                             std::string(DI_TESTDATA_DIR) + "/deepseek_v3");
}

// The golden folder of `name` (golden.json, logits.json.gz).
inline std::string DeepseekGoldenDir(const std::string& name) {
  return std::string(DI_SOURCE_DIR) + "/tests/golden/deepseek_v3/" + name;
}

}  // namespace deepinfer::model
