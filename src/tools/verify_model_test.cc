#include "tools/verify_model.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "gtest/gtest.h"
#include "util/mapped_file.h"

namespace deepinfer::tools {
namespace {

namespace fs = std::filesystem;

class ModelDir : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/verify_model_test.XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    Write("config.json", "{\"hidden\": 64}\n");
    Write("model-00001-of-00002.safetensors", std::string(300000, 'a'));
    Write("model-00002-of-00002.safetensors", std::string(123457, 'b'));
    Write("sub/tokenizer.json", "{}");
  }
  void TearDown() override { fs::remove_all(root_); }

  void Write(const std::string& rel, const std::string& bytes) {
    fs::create_directories(fs::path(root_ + "/" + rel).parent_path());
    std::ofstream(root_ + "/" + rel, std::ios::binary) << bytes;
  }

  Manifest Trusted() {
    auto m = BuildManifest(root_, "tiny", "rev1", VerifyOptions{});
    EXPECT_TRUE(m.ok()) << m.status();
    return *m;
  }

  std::string root_;
};

TEST(Sha256Test, MatchesTheStandardTestVectors) {
  EXPECT_EQ(Sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(Sha256Hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

TEST_F(ModelDir, HashOfAFileEqualsHashOfItsBytes) {
  std::atomic<uint64_t> done{0};
  auto digest = Sha256File(root_ + "/model-00002-of-00002.safetensors", &done);
  ASSERT_TRUE(digest.ok());
  EXPECT_EQ(*digest, Sha256Hex(std::string(123457, 'b')));
  EXPECT_EQ(done.load(), 123457u);
}

TEST_F(ModelDir, TrustedCopyMatchesItsOwnManifestInBothModes) {
  Manifest m = Trusted();
  ASSERT_EQ(m.files.size(), 4u);
  EXPECT_EQ(m.files[3].path, "sub/tokenizer.json");
  // The manifest survives a round trip through its file format.
  auto parsed = ParseManifest(ManifestJson(m));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->files.size(), 4u);
  EXPECT_EQ(parsed->revision, "rev1");
  for (bool full : {false, true}) {
    VerifyOptions options;
    options.full = full;
    options.num_threads = 3;
    auto report = VerifyModel(root_, *parsed, options);
    ASSERT_TRUE(report.ok());
    EXPECT_TRUE(report->ok()) << FormatVerifyReport(*report);
    EXPECT_EQ(report->hashed_bytes, full ? 300000u + 123457u + 15u + 2u : 0u);
  }
}

TEST_F(ModelDir, FullModeCatchesAFlippedByteThatSizesMiss) {
  Manifest m = Trusted();
  std::string bytes(300000, 'a');
  bytes[150000] ^= 0x01;
  Write("model-00001-of-00002.safetensors", bytes);
  auto fast = VerifyModel(root_, m, VerifyOptions{});
  ASSERT_TRUE(fast.ok());
  EXPECT_TRUE(fast->ok());
  VerifyOptions options;
  options.full = true;
  auto full = VerifyModel(root_, m, options);
  ASSERT_TRUE(full.ok());
  ASSERT_EQ(full->findings.size(), 1u);
  EXPECT_EQ(full->findings[0].kind, FindingKind::kHashMismatch);
  EXPECT_EQ(full->findings[0].path, "model-00001-of-00002.safetensors");
  EXPECT_NE(FormatVerifyReport(*full).find("FAIL: 1 hash_mismatch"), std::string::npos);
}

TEST_F(ModelDir, ReportsMissingExtraAndResizedFiles) {
  Manifest m = Trusted();
  fs::remove(root_ + "/sub/tokenizer.json");
  Write("stray.bin", "x");
  Write("config.json", "{}");
  auto report = VerifyModel(root_, m, VerifyOptions{});
  ASSERT_TRUE(report.ok());
  ASSERT_EQ(report->findings.size(), 3u) << FormatVerifyReport(*report);
  EXPECT_EQ(report->findings[0].kind, FindingKind::kSizeMismatch);  // config.json
  EXPECT_EQ(report->findings[1].kind, FindingKind::kExtra);         // stray.bin
  EXPECT_EQ(report->findings[2].kind, FindingKind::kMissing);       // sub/tokenizer.json
}

TEST_F(ModelDir, ExcludedPathsAreNeitherListedNorExtra) {
  Manifest m = Trusted();
  Write(".cache/huggingface/lock", "x");
  VerifyOptions options;
  options.excludes = {".cache/*"};
  auto report = VerifyModel(root_, m, options);
  ASSERT_TRUE(report.ok());
  EXPECT_TRUE(report->ok()) << FormatVerifyReport(*report);
}

TEST_F(ModelDir, SymlinkedFilesCountAsFiles) {
  // Hugging Face snapshot folders link every file to a blob elsewhere.
  Manifest m = Trusted();
  std::string blob = root_ + "-blob";
  std::ofstream(blob, std::ios::binary) << "{}";
  fs::remove(root_ + "/sub/tokenizer.json");
  fs::create_symlink(blob, root_ + "/sub/tokenizer.json");
  VerifyOptions options;
  options.full = true;
  auto report = VerifyModel(root_, m, options);
  fs::remove(blob);
  ASSERT_TRUE(report.ok());
  EXPECT_TRUE(report->ok()) << FormatVerifyReport(*report);
}

TEST(ParseManifestTest, RejectsPathsThatLeaveTheRootAndMalformedEntries) {
  const std::string digest(64, 'a');
  auto manifest = [&](const std::string& path, const std::string& extra = "") {
    return "{\"format\":\"deepinfer-manifest/1\",\"files\":[{\"path\":\"" + path +
           "\",\"size\":1,\"sha256\":\"" + digest + "\"}" + extra + "]}";
  };
  EXPECT_TRUE(ParseManifest(manifest("a/b.bin")).ok());
  for (const char* path : {"../x", "/etc/passwd", "a/../../x", "a//b", "./a", ""}) {
    EXPECT_FALSE(ParseManifest(manifest(path)).ok()) << path;
  }
  EXPECT_FALSE(
      ParseManifest(manifest("a", ",{\"path\":\"a\",\"size\":1,\"sha256\":\"" + digest + "\"}"))
          .ok());
  EXPECT_FALSE(ParseManifest("{\"format\":\"other\",\"files\":[]}").ok());
  EXPECT_FALSE(ParseManifest("{\"format\":\"deepinfer-manifest/1\",\"files\":[{\"path\":\"a\","
                             "\"size\":-1,\"sha256\":\"" +
                             digest + "\"}]}")
                   .ok());
  EXPECT_FALSE(ParseManifest("{\"format\":\"deepinfer-manifest/1\",\"files\":[{\"path\":\"a\","
                             "\"size\":1,\"sha256\":\"ABC\"}]}")
                   .ok());
  EXPECT_FALSE(ParseManifest("not json").ok());
}

TEST(VerifyModelTest, MissingRootIsAnError) {
  auto report = VerifyModel("/nonexistent/model", Manifest{}, VerifyOptions{});
  EXPECT_FALSE(report.ok());
}

}  // namespace
}  // namespace deepinfer::tools
