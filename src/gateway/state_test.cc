#include "gateway/state.h"

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>

#include "fmt/format.h"
#include "gateway/redis_state.h"
#include "gtest/gtest.h"
#include "util/mapped_file.h"
#include "util/status.h"

namespace deepinfer::gateway {
namespace {

TEST(LocalCounterStoreTest, TakesTheLeastUsedBelowTheCap) {
  LocalCounterStore store;
  EXPECT_EQ(*store.TryAcquire({"a", "b"}, 2), 0);
  EXPECT_EQ(*store.TryAcquire({"a", "b"}, 2), 1);
  EXPECT_EQ(*store.TryAcquire({"b", "a"}, 2), 0);  // tie: the earlier name
  EXPECT_EQ(*store.TryAcquire({"a", "b"}, 2), 0);
  EXPECT_EQ(*store.TryAcquire({"a", "b"}, 2), -1);
  store.Release("b");
  EXPECT_EQ(*store.TryAcquire({"a", "b"}, 2), 1);
  EXPECT_EQ(*store.Total("a"), 2);
  store.Release("zzz");  // unknown names are ignored
  EXPECT_EQ(*store.Total("zzz"), 0);
}

TEST(LocalBindingStoreTest, BindsOnceAndExpiresWhenIdle) {
  LocalBindingStore store("", /*ttl_ms=*/1000, 100);
  EXPECT_FALSE(store.Lookup("s", 0)->has_value());
  EXPECT_EQ(*store.BindIfAbsent("s", "http://a:1", 0), "http://a:1");
  // A second first-request of the same session keeps the first binding.
  EXPECT_EQ(*store.BindIfAbsent("s", "http://b:2", 10), "http://a:1");
  EXPECT_EQ(**store.Lookup("s", 900), "http://a:1");
  EXPECT_EQ(**store.Lookup("s", 1800), "http://a:1");  // the lookup at 900 refreshed it
  EXPECT_FALSE(store.Lookup("s", 2801)->has_value());
  EXPECT_EQ(store.size(), 0u);
}

TEST(LocalBindingStoreTest, RebindMovesTheSession) {
  LocalBindingStore store("", 60000, 100);
  ASSERT_TRUE(store.BindIfAbsent("s", "http://a:1", 0).ok());
  ASSERT_TRUE(store.Rebind("s", "http://b:2", 1).ok());
  EXPECT_EQ(**store.Lookup("s", 2), "http://b:2");
  EXPECT_EQ(store.CountByBackend(), (std::map<std::string, int64_t>{{"http://b:2", 1}}));
}

TEST(LocalBindingStoreTest, EvictsTheLeastRecentlyUsedOverTheBound) {
  LocalBindingStore store("", 1 << 30, 10);
  for (int i = 0; i < 11; ++i) {
    ASSERT_TRUE(store.BindIfAbsent(fmt::format("s{}", i), "http://a:1", i).ok());
  }
  EXPECT_LE(store.size(), 10u);
  EXPECT_FALSE(store.Lookup("s0", 100)->has_value());
  EXPECT_TRUE(store.Lookup("s10", 100)->has_value());
}

TEST(LocalBindingStoreTest, FileRoundTripsAndIsWrittenAtomically) {
  std::string path = ::testing::TempDir() + "/bindings-" + std::to_string(::getpid()) + ".json";
  ::unlink(path.c_str());
  {
    LocalBindingStore store(path, 60000, 100);
    ASSERT_TRUE(store.Load(0).ok());
    ASSERT_TRUE(store.BindIfAbsent("s1", "http://a:1", 1000).ok());
    ASSERT_TRUE(store.BindIfAbsent("s2", "http://b:2", 1000).ok());
    store.Maintain(5000);
    EXPECT_TRUE(util::ReadFile(path).ok());
    ASSERT_TRUE(store.Rebind("s2", "http://a:1", 5100).ok());
    store.Flush(5200);
  }
  LocalBindingStore again(path, 60000, 100);
  ASSERT_TRUE(again.Load(6000).ok());
  EXPECT_EQ(**again.Lookup("s1", 6000), "http://a:1");
  EXPECT_EQ(**again.Lookup("s2", 6000), "http://a:1");
  LocalBindingStore expired(path, 60000, 100);
  ASSERT_TRUE(expired.Load(1000000).ok());
  EXPECT_EQ(expired.size(), 0u);
  ASSERT_TRUE(util::WriteFileAtomically(path, "garbage").ok());
  EXPECT_EQ(ErrorCodeOf(expired.Load(0)), "bad_bindings_file");
  ::unlink(path.c_str());
}

// A private redis-server on a free loopback port (skipped when redis-server is absent).
class RedisTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!RedisSupported()) GTEST_SKIP() << "built without hiredis";
    if (::access("/usr/bin/redis-server", X_OK) != 0) GTEST_SKIP() << "redis-server not found";
    int s = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(s, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    socklen_t len = sizeof(addr);
    ::getsockname(s, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    ::close(s);
    pid_ = ::fork();
    if (pid_ == 0) {
      std::string port = std::to_string(port_);
      ::execl("/usr/bin/redis-server", "redis-server", "--port", port.c_str(), "--bind",
              "127.0.0.1", "--save", "", "--appendonly", "no", "--loglevel", "warning",
              static_cast<char*>(nullptr));
      ::_exit(127);
    }
    for (int i = 0; i < 200; ++i) {
      auto c = RedisClient::Connect("redis://127.0.0.1:" + std::to_string(port_), 200);
      if (c.ok()) {
        client_ = std::move(*c);
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    FAIL() << "redis-server did not start";
  }
  void TearDown() override {
    client_.reset();
    if (pid_ > 0) {
      ::kill(pid_, SIGTERM);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  std::unique_ptr<RedisClient> Client() {
    return std::move(*RedisClient::Connect("redis://127.0.0.1:" + std::to_string(port_), 500));
  }
  int port_ = 0;
  pid_t pid_ = -1;
  std::unique_ptr<RedisClient> client_;
};

TEST_F(RedisTest, TwoInstancesShareOneCap) {
  auto c1 = Client();
  auto c2 = Client();
  RedisCounterStore a(c1.get(), "t1:");
  RedisCounterStore b(c2.get(), "t1:");
  EXPECT_EQ(*a.TryAcquire({"backend:x"}, 3), 0);
  EXPECT_EQ(*b.TryAcquire({"backend:x"}, 3), 0);
  EXPECT_EQ(*a.TryAcquire({"backend:x"}, 3), 0);
  EXPECT_EQ(*b.TryAcquire({"backend:x"}, 3), -1);
  EXPECT_EQ(*a.Total("backend:x"), 3);
  b.Release("backend:x");
  EXPECT_EQ(*a.TryAcquire({"backend:x"}, 3), 0);
  EXPECT_EQ(*b.TryAcquire({"backend:x", "backend:y"}, 3), 1);
}

TEST_F(RedisTest, UnitsOfADeadInstanceDoNotCount) {
  auto c1 = Client();
  auto c2 = Client();
  RedisCounterStore a(c1.get(), "t2:");
  auto b = std::make_unique<RedisCounterStore>(c2.get(), "t2:");
  EXPECT_EQ(*b->TryAcquire({"k"}, 2), 0);
  EXPECT_EQ(*b->TryAcquire({"k"}, 2), 0);
  EXPECT_EQ(*a.TryAcquire({"k"}, 2), -1);
  // Its liveness key vanishes (as when it crashes and the key expires).
  ASSERT_TRUE(client_->Command({"DEL", "t2:i:" + b->instance_id()}).ok());
  EXPECT_EQ(*a.TryAcquire({"k"}, 2), 0);
  EXPECT_EQ(*a.Total("k"), 1);
}

TEST_F(RedisTest, HeartbeatRepairsAReleaseThatNeverArrived) {
  auto c1 = Client();
  RedisCounterStore a(c1.get(), "t3:");
  EXPECT_EQ(*a.TryAcquire({"k"}, 5), 0);
  EXPECT_EQ(*a.TryAcquire({"k"}, 5), 0);
  // Someone (a lost reply, a manual edit) leaves the shared count wrong.
  ASSERT_TRUE(client_->Command({"HSET", "t3:c:k", a.instance_id(), "4"}).ok());
  EXPECT_EQ(*a.Total("k"), 4);
  ASSERT_TRUE(a.Heartbeat().ok());
  EXPECT_EQ(*a.Total("k"), 2);
}

TEST_F(RedisTest, BindingsAreSharedAndFirstBindWins) {
  auto c1 = Client();
  auto c2 = Client();
  RedisBindingStore a(c1.get(), "t4:", 60000);
  RedisBindingStore b(c2.get(), "t4:", 60000);
  EXPECT_FALSE(a.Lookup("s", 0)->has_value());
  EXPECT_EQ(*a.BindIfAbsent("s", "http://a:1", 0), "http://a:1");
  EXPECT_EQ(*b.BindIfAbsent("s", "http://b:2", 0), "http://a:1");
  EXPECT_EQ(**b.Lookup("s", 0), "http://a:1");
  ASSERT_TRUE(b.Rebind("s", "http://b:2", 0).ok());
  EXPECT_EQ(**a.Lookup("s", 0), "http://b:2");
}

TEST_F(RedisTest, UnreachableRedisIsAStateError) {
  auto c1 = Client();
  RedisCounterStore a(c1.get(), "t5:");
  ::kill(pid_, SIGKILL);
  ::waitpid(pid_, nullptr, 0);
  pid_ = -1;
  auto r = a.TryAcquire({"k"}, 1);
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(ErrorCodeOf(r.status()), "shared_state_unavailable");
  client_.reset();
}

}  // namespace
}  // namespace deepinfer::gateway
