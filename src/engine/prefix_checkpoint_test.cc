#include "engine/prefix_checkpoint.h"

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "util/mapped_file.h"
#include "util/status.h"

namespace deepinfer::engine {
namespace {

namespace fs = std::filesystem;

CheckpointLayout TestLayout() {
  CheckpointLayout l;
  l.architecture = "deepseek_v4";
  l.kv_dtype = "f32";
  l.numerics = "fast";
  l.block_size = 4;
  l.layer_bytes = {16, 8};
  l.window_layer_bytes = {12};
  l.window_tokens = 6;
  return l;
}

// A checkpoint of `blocks` blocks whose window keeps the last two blocks.
PrefixCheckpoint MakeCheckpoint(int blocks, int seed = 0) {
  PrefixCheckpoint c;
  c.header.model_revision = "rev-1";
  c.header.layout = TestLayout();
  c.header.cache_salt = 12345678901234567890ull;
  c.header.window_first_block = std::max(0, blocks - 2);
  for (int i = 0; i < blocks * 4; ++i) c.tokens.push_back(1000 + seed + i);
  const int64_t payload = (16 + 8) * 4 * blocks + 12 * 4 * (blocks - c.header.window_first_block);
  for (int64_t i = 0; i < payload; ++i) c.payload.push_back(static_cast<char>(i * 7 + seed));
  return c;
}

CheckpointExpect ExpectFor(const PrefixCheckpoint& c) {
  return {c.header.model_revision, c.header.layout, c.header.cache_salt,
          TokensSha256(c.tokens.data(), c.tokens.size())};
}

std::string Encode(PrefixCheckpoint& c) {
  auto file = EncodeCheckpoint(c);
  EXPECT_TRUE(file.ok()) << file.status();
  return file.ok() ? *file : std::string();
}

CheckpointReject RejectOf(std::string_view bytes, const CheckpointExpect& expect) {
  CheckpointReject reason = CheckpointReject::kBadFormat;
  auto decoded = DecodeCheckpoint(bytes, expect, &reason);
  EXPECT_FALSE(decoded.ok());
  if (!decoded.ok()) {
    EXPECT_EQ(ErrorCodeOf(decoded.status()), "bad_prefix_checkpoint");
    EXPECT_NE(decoded.status().message().find(CheckpointRejectName(reason)), std::string::npos);
  }
  return reason;
}

TEST(PrefixCheckpointTest, RoundTripsTokensPayloadAndHeader) {
  PrefixCheckpoint c = MakeCheckpoint(3);
  const std::string file = Encode(c);
  EXPECT_EQ(file.substr(0, 8), "DIPFXCK1");
  auto back = DecodeCheckpoint(file, ExpectFor(c));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->tokens, c.tokens);
  EXPECT_EQ(back->payload, c.payload);
  EXPECT_EQ(back->header.num_blocks(), 3);
  EXPECT_EQ(back->header.window_first_block, 1);
  EXPECT_EQ(back->header.cache_salt, c.header.cache_salt);
  EXPECT_EQ(back->header.layout, c.header.layout);
  // Without a fingerprint to compare (listing a folder), the file's own checks still apply.
  CheckpointExpect any = ExpectFor(c);
  any.tokens_sha256.clear();
  EXPECT_TRUE(DecodeCheckpoint(file, any).ok());
}

TEST(PrefixCheckpointTest, EncodeRefusesPartialBlocksAndAPayloadOfTheWrongSize) {
  PrefixCheckpoint c = MakeCheckpoint(2);
  c.tokens.pop_back();
  EXPECT_FALSE(EncodeCheckpoint(c).ok());
  c = MakeCheckpoint(2);
  c.payload.push_back('x');
  EXPECT_FALSE(EncodeCheckpoint(c).ok());
  c = MakeCheckpoint(2);
  c.header.window_first_block = 3;
  EXPECT_FALSE(EncodeCheckpoint(c).ok());
}

TEST(PrefixCheckpointTest, EveryTruncationIsRejected) {
  PrefixCheckpoint c = MakeCheckpoint(2);
  const std::string file = Encode(c);
  for (size_t n = 0; n < file.size(); ++n) {
    const CheckpointReject r = RejectOf(std::string_view(file).substr(0, n), ExpectFor(c));
    // Inside the JSON header a cut can read as a malformed header; past it, truncated.
    EXPECT_TRUE(r == CheckpointReject::kTruncated || r == CheckpointReject::kBadFormat) << n;
    if (n >= file.size() - c.payload.size()) {
      EXPECT_EQ(r, CheckpointReject::kTruncated) << n;
    }
  }
  EXPECT_EQ(RejectOf(file + "x", ExpectFor(c)), CheckpointReject::kBadFormat);
}

TEST(PrefixCheckpointTest, EveryFlippedBitIsRejected) {
  PrefixCheckpoint c = MakeCheckpoint(2);
  const std::string file = Encode(c);
  const size_t payload_start = file.size() - c.payload.size();
  const size_t tokens_start = payload_start - 4 * c.tokens.size();
  for (size_t i = 0; i < file.size(); ++i) {
    for (int bit : {0, 5}) {
      std::string bad = file;
      bad[i] = static_cast<char>(bad[i] ^ (1 << bit));
      const CheckpointReject r = RejectOf(bad, ExpectFor(c));
      if (i >= tokens_start) {
        EXPECT_EQ(r, CheckpointReject::kCorrupt) << i;
      }
    }
  }
}

TEST(PrefixCheckpointTest, RevisionLayoutFingerprintAndSaltMustMatch) {
  PrefixCheckpoint c = MakeCheckpoint(2);
  const std::string file = Encode(c);
  CheckpointExpect e = ExpectFor(c);
  e.model_revision = "rev-2";
  EXPECT_EQ(RejectOf(file, e), CheckpointReject::kWrongRevision);
  for (int field = 0; field < 5; ++field) {
    e = ExpectFor(c);
    switch (field) {
      case 0: e.layout.block_size = 8; break;
      case 1: e.layout.kv_dtype = "f16"; break;
      case 2: e.layout.layer_bytes.push_back(16); break;
      case 3: e.layout.numerics = "ggml"; break;
      case 4: e.layout.architecture = "llama"; break;
    }
    EXPECT_EQ(RejectOf(file, e), CheckpointReject::kWrongLayout) << field;
  }
  e = ExpectFor(c);
  const std::vector<int32_t> other(c.tokens.size(), 7);
  e.tokens_sha256 = TokensSha256(other.data(), other.size());
  EXPECT_EQ(RejectOf(file, e), CheckpointReject::kWrongFingerprint);
  e = ExpectFor(c);
  e.cache_salt = 1;
  EXPECT_EQ(RejectOf(file, e), CheckpointReject::kWrongFingerprint);
}

// The header JSON of an encoded file, edited by `edit`, with the rest of the file as it was.
std::string EditHeader(const std::string& file, const std::function<void(nlohmann::json&)>& edit) {
  uint32_t hlen = 0;
  for (int i = 0; i < 4; ++i) hlen |= uint32_t{static_cast<uint8_t>(file[8 + i])} << (8 * i);
  nlohmann::json j = nlohmann::json::parse(file.substr(12, hlen));
  edit(j);
  const std::string json = j.dump();
  std::string out = "DIPFXCK1";
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((json.size() >> (8 * i)) & 0xff));
  return out + json + file.substr(12 + hlen);
}

TEST(PrefixCheckpointTest, ImagesMakeVersionTwoAndArePartOfTheFingerprint) {
  PrefixCheckpoint text = MakeCheckpoint(3);
  const std::string text_file = Encode(text);
  EXPECT_EQ(text_file.find("\"images\""), std::string::npos);
  EXPECT_NE(text_file.find("\"version\":1"), std::string::npos);

  PrefixCheckpoint c = MakeCheckpoint(3);
  // The second span starts inside the 12-token prefix and ends after it.
  c.header.images = {{1, 4, 0xabcdef0123456789ull}, {6, 9, 42}};
  const std::string file = Encode(c);
  EXPECT_NE(file.find("\"version\":2"), std::string::npos);
  EXPECT_NE(file.find("\"content_hash\":\"abcdef0123456789\""), std::string::npos);
  CheckpointExpect e = ExpectFor(c);
  e.images = c.header.images;
  auto back = DecodeCheckpoint(file, e);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->header.images, c.header.images);
  // Same tokens, other images (or none): not this prefix.
  e.images[1].content_hash = 43;
  EXPECT_EQ(RejectOf(file, e), CheckpointReject::kWrongFingerprint);
  e.images.clear();
  EXPECT_EQ(RejectOf(file, e), CheckpointReject::kWrongFingerprint);
  CheckpointExpect text_expect = ExpectFor(text);
  text_expect.images = c.header.images;
  EXPECT_EQ(RejectOf(text_file, text_expect), CheckpointReject::kWrongFingerprint);
  // Listing (no fingerprint) reads it with its images.
  e.tokens_sha256.clear();
  back = DecodeCheckpoint(file, e);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->header.images.size(), 2u);

  // Malformed images, or images and version that disagree, are bad_format.
  const std::vector<std::function<void(nlohmann::json&)>> edits = {
      [](nlohmann::json& j) { j["version"] = 1; },
      [](nlohmann::json& j) { j.erase("images"); },
      [](nlohmann::json& j) { j["images"] = nlohmann::json::array(); },
      [](nlohmann::json& j) { j["images"][1]["position"] = 3; },    // overlaps the first
      [](nlohmann::json& j) { j["images"][1]["position"] = 12; },   // outside the prefix
      [](nlohmann::json& j) { j["images"][0]["length"] = 0; },
      [](nlohmann::json& j) { j["images"][0]["content_hash"] = "ABCDEF0123456789"; },
      [](nlohmann::json& j) { j["images"][0]["content_hash"] = "abc"; },
      [](nlohmann::json& j) { j["images"][0] = 5; },
      [](nlohmann::json& j) { j["images"] = "x"; },
  };
  for (size_t i = 0; i < edits.size(); ++i) {
    EXPECT_EQ(RejectOf(EditHeader(file, edits[i]), e), CheckpointReject::kBadFormat) << i;
  }
  // The text file with images added is version 1 with images: bad_format too.
  EXPECT_EQ(RejectOf(EditHeader(text_file,
                                [&](nlohmann::json& j) {
                                  j["images"] = {{{"position", 0}, {"length", 2},
                                                  {"content_hash", "0000000000000001"}}};
                                }),
                     ExpectFor(text)),
            CheckpointReject::kBadFormat);

  // The writer refuses images out of order or outside the prefix.
  PrefixCheckpoint bad = MakeCheckpoint(3);
  bad.header.images = {{6, 2, 1}, {1, 2, 2}};
  EXPECT_FALSE(EncodeCheckpoint(bad).ok());
  bad.header.images = {{12, 2, 1}};
  EXPECT_FALSE(EncodeCheckpoint(bad).ok());
}

TEST(PrefixCheckpointTest, HostileHeadersAreBadFormat) {
  PrefixCheckpoint c = MakeCheckpoint(1);
  const CheckpointExpect e = ExpectFor(c);
  auto with_header = [](std::string json) {
    std::string f = "DIPFXCK1";
    for (int i = 0; i < 4; ++i) f.push_back(static_cast<char>((json.size() >> (8 * i)) & 0xff));
    return f + json;
  };
  EXPECT_EQ(RejectOf("NOTACKPT0000", e), CheckpointReject::kBadFormat);
  EXPECT_EQ(RejectOf(std::string("DIPFXCK1\xff\xff\xff\xff", 12), e), CheckpointReject::kBadFormat);
  EXPECT_EQ(RejectOf(with_header("[]"), e), CheckpointReject::kBadFormat);
  EXPECT_EQ(RejectOf(with_header("{\"format\":\"deepinfer-prefix-checkpoint\"}"), e),
            CheckpointReject::kBadFormat);
  // Sizes that would overflow or exceed the bounds never allocate.
  const std::string huge =
      R"({"format":"deepinfer-prefix-checkpoint","version":1,"model_revision":"rev-1",)"
      R"("layout":{"architecture":"a","kv_dtype":"f32","numerics":"fast","block_size":65536,)"
      R"("layer_bytes":[16777216,16777216],"window_layer_bytes":[],"window_tokens":0},)"
      R"("cache_salt":"1","num_tokens":16777216,"window_first_block":0,)"
      R"("tokens_sha256":"","payload_bytes":9223372036854775807,"payload_sha256":""})";
  EXPECT_EQ(RejectOf(with_header(huge), e), CheckpointReject::kBadFormat);
}

class CheckpointStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("dipc-test-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(CheckpointStoreTest, SavesAtomicallyAndNeverOverwrites) {
  auto store = CheckpointStore::Open(dir_.string(), 1 << 20);
  ASSERT_TRUE(store.ok()) << store.status();
  PrefixCheckpoint c = MakeCheckpoint(2);
  const std::string file = Encode(c);
  EXPECT_FALSE((*store)->Exists(42));
  ASSERT_TRUE((*store)->Save(42, MakeCheckpoint(2)));
  (*store)->Flush();
  EXPECT_TRUE((*store)->Exists(42));
  EXPECT_EQ((*store)->PathOf(42), (dir_ / "000000000000002a.dipc").string());
  auto read = util::ReadFile((*store)->PathOf(42));
  ASSERT_TRUE(read.ok());
  EXPECT_EQ(*read, file);
  // A second save of the chain leaves the first file alone.
  PrefixCheckpoint other = MakeCheckpoint(2, 5);
  ASSERT_TRUE((*store)->Save(42, other));
  (*store)->Flush();
  EXPECT_EQ(*util::ReadFile((*store)->PathOf(42)), file);
  const auto n = (*store)->counters();
  EXPECT_EQ(n.saved, 1);
  EXPECT_EQ(n.skipped_existing, 1);
  EXPECT_EQ((*store)->bytes(), static_cast<int64_t>(file.size()));
  // No temp files are left behind.
  int entries = 0;
  for (const auto& e : fs::directory_iterator(dir_)) entries += e.is_regular_file();
  EXPECT_EQ(entries, 1);
}

TEST_F(CheckpointStoreTest, OldestFilesGoFirstToStayWithinTheBudget) {
  PrefixCheckpoint c = MakeCheckpoint(2);
  const std::string file = Encode(c);
  auto store = CheckpointStore::Open(dir_.string(), static_cast<int64_t>(2 * file.size()));
  ASSERT_TRUE(store.ok());
  const auto now = fs::file_time_type::clock::now();
  for (uint64_t h = 1; h <= 3; ++h) {
    ASSERT_TRUE((*store)->Save(h, MakeCheckpoint(2)));
    (*store)->Flush();
    // Distinct modification times whatever the file system's resolution.
    fs::last_write_time((*store)->PathOf(h), now + std::chrono::seconds(h) - std::chrono::hours(1));
  }
  EXPECT_FALSE((*store)->Exists(1));
  EXPECT_TRUE((*store)->Exists(2));
  EXPECT_TRUE((*store)->Exists(3));
  EXPECT_EQ((*store)->counters().evicted, 1);
  EXPECT_EQ((*store)->bytes(), static_cast<int64_t>(2 * file.size()));
  // A file larger than the whole budget is dropped, not written.
  PrefixCheckpoint big = MakeCheckpoint(2);
  big.payload.resize(3 * file.size());
  EXPECT_FALSE((*store)->Save(9, big));
  EXPECT_EQ((*store)->counters().dropped, 1);
  // A reopened store counts what the folder holds.
  store->reset();
  auto reopened = CheckpointStore::Open(dir_.string(), 1 << 20);
  ASSERT_TRUE(reopened.ok());
  EXPECT_EQ((*reopened)->bytes(), static_cast<int64_t>(2 * file.size()));
}

TEST_F(CheckpointStoreTest, FindsTheLongestKnownChainAndVerifiesWhatItLoads) {
  PrefixCheckpoint c = MakeCheckpoint(2);
  const std::string file = Encode(c);
  // A file written by another process before Open, and one corrupted on disk.
  ASSERT_TRUE(util::WriteFileAtomically((dir_ / CheckpointFileName(5)).string(), file).ok());
  std::string flipped = file;
  flipped.back() = static_cast<char>(flipped.back() ^ 1);
  ASSERT_TRUE(util::WriteFileAtomically((dir_ / CheckpointFileName(6)).string(), flipped).ok());
  ASSERT_TRUE(util::WriteFileAtomically((dir_ / "notes.txt").string(), "not a checkpoint").ok());
  auto store = CheckpointStore::Open(dir_.string(), 1 << 20);
  ASSERT_TRUE(store.ok());
  EXPECT_EQ((*store)->Longest({1, 2, 5}, 1), 3);
  EXPECT_EQ((*store)->Longest({5, 9}, 1), 1);
  EXPECT_EQ((*store)->Longest({5, 9}, 2), 0);
  EXPECT_EQ((*store)->Longest({}, 0), 0);

  auto loaded = (*store)->Load(5, ExpectFor(c));
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->payload, c.payload);
  CheckpointExpect other = ExpectFor(c);
  other.model_revision = "rev-9";
  EXPECT_FALSE((*store)->Load(5, other).ok());
  EXPECT_FALSE((*store)->Load(6, ExpectFor(c)).ok());
  auto n = (*store)->counters();
  EXPECT_EQ(n.restored, 1);
  EXPECT_EQ(n.restored_tokens, 8);
  EXPECT_EQ(n.rejected[static_cast<int>(CheckpointReject::kWrongRevision)], 1);
  EXPECT_EQ(n.rejected[static_cast<int>(CheckpointReject::kCorrupt)], 1);
  // The corrupt file is gone (its name can be written again); the foreign one stays.
  EXPECT_FALSE(fs::exists(dir_ / CheckpointFileName(6)));
  EXPECT_EQ((*store)->Longest({6}, 1), 0);
  EXPECT_TRUE(fs::exists(dir_ / CheckpointFileName(5)));
  EXPECT_EQ((*store)->bytes(), static_cast<int64_t>(file.size()));

  // A file removed behind the store's back is forgotten, not counted as a rejection.
  fs::remove(dir_ / CheckpointFileName(5));
  auto gone = (*store)->Load(5, ExpectFor(c));
  ASSERT_FALSE(gone.ok());
  EXPECT_EQ(ErrorCodeOf(gone.status()), "file_not_found");
  EXPECT_EQ((*store)->Longest({5}, 1), 0);
}

TEST_F(CheckpointStoreTest, WaitWrittenWaitsForThatChainOnly) {
  auto store = CheckpointStore::Open(dir_.string(), 1 << 20);
  ASSERT_TRUE(store.ok());
  (*store)->WaitWritten(41);  // nothing queued: returns at once
  ASSERT_TRUE((*store)->Save(41, MakeCheckpoint(2)));
  ASSERT_TRUE((*store)->Save(42, MakeCheckpoint(1)));
  (*store)->WaitWritten(41);
  EXPECT_TRUE((*store)->Exists(41));
  (*store)->WaitWritten(42);
  EXPECT_TRUE((*store)->Exists(42));
  EXPECT_EQ((*store)->counters().saved, 2);
}

TEST_F(CheckpointStoreTest, AVanishedFolderCostsTheSaveNotTheProcess) {
  auto store = CheckpointStore::Open(dir_.string(), 1 << 20);
  ASSERT_TRUE(store.ok());
  fs::remove_all(dir_);
  PrefixCheckpoint c = MakeCheckpoint(1);
  ASSERT_TRUE((*store)->Save(7, c));
  (*store)->Flush();
  EXPECT_EQ((*store)->counters().failed, 1);
  EXPECT_EQ((*store)->counters().saved, 0);
  fs::create_directories(dir_);  // for TearDown
}

TEST_F(CheckpointStoreTest, OpenNeedsAnExistingFolderAndABudget) {
  auto missing = CheckpointStore::Open((dir_ / "absent").string(), 1 << 20);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(ErrorCodeOf(missing.status()), "bad_option");
  EXPECT_FALSE(CheckpointStore::Open(dir_.string(), 0).ok());
}

}  // namespace
}  // namespace deepinfer::engine
