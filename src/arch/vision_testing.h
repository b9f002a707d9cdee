#pragma once

// For the DeepSeek-V4.1 image tests only (vision_tower_test, deepseek_v41_vision_test): reading
// the vision goldens' gzipped NumPy files and an image's pixel values as the reference computed
// them (../shared/goldens/deepseek_v41_vision/README.md, "preprocess/").

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "fmt/format.h"
#include "model/model.h"
#include "model/synthetic_checkpoint.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "util/mapped_file.h"
#include "util/sha256.h"

namespace deepinfer::arch::testing {

// A folder of ../shared/goldens/deepseek_v41_vision (beside the checkout).
inline std::string CaseDir(const std::string& name) {
  return std::string(DI_SOURCE_DIR) + "/../shared/goldens/deepseek_v41_vision/" + name;
}

// The case's weights written from its recipe (once per test data folder) and loaded; null
// (with the failure recorded) when either fails.
inline std::unique_ptr<model::Model> LoadCaseModel(const std::string& dir) {
  auto folder =
      model::SyntheticCheckpoint(dir, std::string(DI_TESTDATA_DIR) + "/deepseek_v41_vision");
  EXPECT_TRUE(folder.ok()) << folder.status();
  if (!folder.ok()) return nullptr;
  auto m = model::LoadModel(*folder);
  EXPECT_TRUE(m.ok()) << m.status();
  return m.ok() ? std::move(*m) : nullptr;
}

// Skips the test with a clear message when the goldens are absent (a user's clone has none).
#define DI_SKIP_WITHOUT_VISION_GOLDENS(name)                                                     \
  if (!std::filesystem::exists(::deepinfer::arch::testing::CaseDir(name))) {                     \
    GTEST_SKIP() << "../shared/goldens/deepseek_v41_vision is absent (a user's clone has none)"; \
  }

inline std::string Hex(const util::Sha256Digest& d) {
  std::string s;
  for (uint8_t b : d) s += fmt::format("{:02x}", b);
  return s;
}

// A gzipped NumPy .npy file (version 1, C order): its dtype string, shape and raw data.
struct Npy {
  std::string descr;
  std::vector<int64_t> shape;
  std::string data;
};

inline Npy ReadNpyGz(const std::string& path) {
  Npy npy;
  auto text = util::ReadGzipFile(path);
  EXPECT_TRUE(text.ok()) << text.status();
  if (!text.ok() || text->size() < 10 || text->compare(1, 5, "NUMPY") != 0) {
    ADD_FAILURE() << path << " is not a .npy file";
    return npy;
  }
  const size_t header_len = static_cast<uint8_t>((*text)[8]) | static_cast<uint8_t>((*text)[9]) << 8;
  const std::string header = text->substr(10, header_len);
  const size_t d = header.find("'descr': '") + 10;
  npy.descr = header.substr(d, header.find('\'', d) - d);
  EXPECT_NE(header.find("'fortran_order': False"), std::string::npos) << path;
  const size_t s = header.find("'shape': (") + 10;
  std::string dims = header.substr(s, header.find(')', s) - s);
  for (size_t p = 0; p < dims.size();) {
    const size_t comma = dims.find(',', p);
    const std::string dim = dims.substr(p, comma == std::string::npos ? std::string::npos : comma - p);
    if (dim.find_first_of("0123456789") != std::string::npos) npy.shape.push_back(std::stoll(dim));
    if (comma == std::string::npos) break;
    p = comma + 1;
  }
  npy.data = text->substr(10 + header_len);
  return npy;
}

// pixel_values from `<stem>.pixel_values.npy.gz` when the case stores it, else from the resized
// uint8 image through the value table (the README's formula), checked against the sha256 the
// reference printed either way.
inline std::vector<float> PixelValues(const std::string& dir, const nlohmann::json& rec,
                                      const nlohmann::json& value_table) {
  const int64_t h = rec["plan"]["n_vit_h"], w = rec["plan"]["n_vit_w"], n = h * w;
  const std::string image = rec["image"];
  const std::string stem = std::filesystem::path(image).stem();
  std::vector<float> pv(n * 3 * 14 * 14);
  const std::string stored = dir + "/" + stem + ".pixel_values.npy.gz";
  if (std::filesystem::exists(stored)) {
    const Npy npy = ReadNpyGz(stored);
    EXPECT_EQ(npy.descr, "<f4");
    EXPECT_EQ(npy.shape, (std::vector<int64_t>{n, 3, 14, 14}));
    if (npy.data.size() == pv.size() * 4) std::memcpy(pv.data(), npy.data.data(), npy.data.size());
  } else {
    const Npy npy = ReadNpyGz(dir + "/" + rec["resized_rgb"].get<std::string>());
    EXPECT_EQ(npy.descr, "|u1");
    EXPECT_EQ(npy.shape, (std::vector<int64_t>{h * 14, w * 14, 3}));
    if (npy.data.size() != pv.size()) return pv;
    const std::vector<float> table = value_table.get<std::vector<float>>();
    const auto* u8 = reinterpret_cast<const uint8_t*>(npy.data.data());
    for (int64_t p = 0; p < n; ++p) {
      for (int c = 0; c < 3; ++c) {
        for (int i = 0; i < 14; ++i) {
          for (int j = 0; j < 14; ++j) {
            const int64_t y = (p / w) * 14 + i, x = (p % w) * 14 + j;
            pv[((p * 3 + c) * 14 + i) * 14 + j] = table[u8[(y * w * 14 + x) * 3 + c]];
          }
        }
      }
    }
  }
  EXPECT_EQ(Hex(util::Sha256(std::string_view(reinterpret_cast<const char*>(pv.data()),
                                               pv.size() * sizeof(float)))),
            rec["pixel_values_sha256"].get<std::string>())
      << stem;
  return pv;
}

}  // namespace deepinfer::arch::testing
