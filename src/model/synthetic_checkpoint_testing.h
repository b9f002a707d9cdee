#pragma once

// For tests only (needs the DI_SOURCE_DIR and DI_TESTDATA_DIR definitions of di_cc_test).

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "gtest/gtest.h"
#include "model/safetensors.h"
#include "model/synthetic_checkpoint.h"
#include "nlohmann/json.hpp"

namespace deepinfer::model {

// The tiny DeepSeek test checkpoint `name` (a folder of tests/golden/<family>, family
// "deepseek_v3" or "deepseek_v4"), generated from its weight recipe into the build tree on first
// use (see SyntheticCheckpoint).
inline absl::StatusOr<std::string> DeepseekTestCheckpoint(const std::string& name,
                                                          const std::string& family = "deepseek_v3") {
  return SyntheticCheckpoint(std::string(DI_SOURCE_DIR) + "/tests/golden/" + family + "/" + name,
                             std::string(DI_TESTDATA_DIR) + "/" + family);
}

// The golden folder of `name` (golden.json, logits.json.gz).
inline std::string DeepseekGoldenDir(const std::string& name,
                                     const std::string& family = "deepseek_v3") {
  return std::string(DI_SOURCE_DIR) + "/tests/golden/" + family + "/" + name;
}

// A private copy of the test checkpoint `name` in a temporary folder, for tests that break it
// (edit config.json, patch bytes of a shard). Removed with the object.
class CheckpointCopy {
 public:
  explicit CheckpointCopy(const std::string& name, const std::string& family = "deepseek_v3") {
    auto source = DeepseekTestCheckpoint(name, family);
    EXPECT_TRUE(source.ok()) << source.status();
    CopyFrom(source.ok() ? *source : "");
  }
  // A copy of the checkpoint folder `folder` (e.g. one SyntheticCheckpoint wrote).
  struct Folder {
    std::string path;
  };
  explicit CheckpointCopy(const Folder& folder) { CopyFrom(folder.path); }
  ~CheckpointCopy() { std::filesystem::remove_all(dir_); }
  const std::string& dir() const { return dir_; }
  std::string path(const std::string& f) const { return dir_ + "/" + f; }

  void EditConfig(const std::string& key, const nlohmann::json& value) {
    std::ifstream in(path("config.json"));
    auto j = nlohmann::json::parse(in);
    j[key] = value;
    std::ofstream(path("config.json")) << j.dump(2);
  }
  // Overwrites bytes of `file` at `offset`.
  void Patch(const std::string& file, size_t offset, const void* bytes, size_t n) {
    std::fstream f(path(file), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(offset));
    f.write(static_cast<const char*>(bytes), static_cast<std::streamsize>(n));
  }
  // Byte offset of a tensor's data inside a shard.
  size_t TensorOffset(const std::string& file, const std::string& tensor) {
    auto st = SafetensorsFile::Open(path(file));
    EXPECT_TRUE(st.ok()) << st.status();
    for (const auto& t : (*st)->tensors()) {
      if (t.name == tensor) {
        auto mapped = (*st)->TakeFile();
        return static_cast<size_t>(t.data - mapped->data());
      }
    }
    ADD_FAILURE() << "no tensor " << tensor;
    return 0;
  }

 private:
  void CopyFrom(const std::string& source) {
    char tmpl[] = "/tmp/di_hf_test_XXXXXX";
    dir_ = mkdtemp(tmpl);
    if (!source.empty()) {
      std::filesystem::copy(source, dir_, std::filesystem::copy_options::recursive);
    }
  }

  std::string dir_;
};

}  // namespace deepinfer::model
