#include "engine/block_manager.h"

#include <vector>

#include "gtest/gtest.h"

namespace deepinfer::engine {
namespace {

TEST(BlockManagerTest, AllocateIsAllOrNothing) {
  BlockManager bm(4, 2, true);
  std::vector<int32_t> a;
  EXPECT_TRUE(bm.Allocate(3, a));
  EXPECT_EQ(a.size(), 3u);
  EXPECT_FALSE(bm.Allocate(2, a));
  EXPECT_EQ(a.size(), 3u);
  EXPECT_EQ(bm.num_available(), 1);
  bm.Free(a);
  EXPECT_EQ(bm.num_available(), 4);
}

TEST(BlockManagerTest, CommittedBlocksAreFoundByPrefix) {
  BlockManager bm(8, 2, true);
  std::vector<int32_t> tokens = {1, 2, 3, 4, 5, 6};
  std::vector<int32_t> blocks;
  ASSERT_TRUE(bm.Allocate(3, blocks));
  uint64_t h0 = bm.Commit(blocks[0], 0, &tokens[0], 0);
  uint64_t h1 = bm.Commit(blocks[1], h0, &tokens[2], 0);
  bm.Free(blocks);

  std::vector<int32_t> got;
  std::vector<uint64_t> hashes;
  EXPECT_EQ(bm.MatchPrefix(tokens.data(), 3, 0, got, hashes), 2);
  EXPECT_EQ(got[0], blocks[0]);
  EXPECT_EQ(got[1], blocks[1]);
  EXPECT_EQ(hashes[1], h1);
  EXPECT_EQ(bm.num_in_use(), 2);
  bm.Free(got);
}

TEST(BlockManagerTest, DifferentSaltOrParentDoesNotMatch) {
  BlockManager bm(4, 2, true);
  std::vector<int32_t> tokens = {7, 8};
  std::vector<int32_t> blocks;
  ASSERT_TRUE(bm.Allocate(1, blocks));
  bm.Commit(blocks[0], 0, tokens.data(), 42);
  bm.Free(blocks);
  std::vector<int32_t> got;
  std::vector<uint64_t> hashes;
  EXPECT_EQ(bm.MatchPrefix(tokens.data(), 1, 0, got, hashes), 0);
  EXPECT_EQ(bm.MatchPrefix(tokens.data(), 1, 42, got, hashes), 1);
  bm.Free(got);
}

TEST(BlockManagerTest, EvictsLeastRecentlyFreedCachedBlockFirst) {
  BlockManager bm(2, 1, true);
  std::vector<int32_t> a, b;
  int32_t t1 = 1, t2 = 2;
  ASSERT_TRUE(bm.Allocate(1, a));
  bm.Commit(a[0], 0, &t1, 0);
  ASSERT_TRUE(bm.Allocate(1, b));
  bm.Commit(b[0], 0, &t2, 0);
  bm.Free(a);  // freed first: evicted first
  bm.Free(b);
  std::vector<int32_t> c;
  ASSERT_TRUE(bm.Allocate(1, c));
  EXPECT_EQ(c[0], a[0]);
  std::vector<int32_t> got;
  std::vector<uint64_t> hashes;
  EXPECT_EQ(bm.MatchPrefix(&t1, 1, 0, got, hashes), 0);
  EXPECT_EQ(bm.MatchPrefix(&t2, 1, 0, got, hashes), 1);
}

TEST(BlockManagerTest, DisabledPrefixCachingNeverMatches) {
  BlockManager bm(2, 1, false);
  std::vector<int32_t> a;
  int32_t t = 5;
  ASSERT_TRUE(bm.Allocate(1, a));
  bm.Commit(a[0], 0, &t, 0);
  bm.Free(a);
  std::vector<int32_t> got;
  std::vector<uint64_t> hashes;
  EXPECT_EQ(bm.MatchPrefix(&t, 1, 0, got, hashes), 0);
  EXPECT_EQ(bm.num_available(), 2);
}

}  // namespace
}  // namespace deepinfer::engine
