#include "gateway/flow_control.h"

#include <atomic>
#include <future>
#include <random>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"

namespace deepinfer::gateway {
namespace {

using namespace std::chrono_literals;

FlowOptions Options(int max_active, int max_waiting, int timeout_ms, int patience_ms = 0) {
  FlowOptions o;
  o.max_active_per_backend = max_active;
  o.max_waiting = max_waiting;
  o.queue_timeout_ms = timeout_ms;
  o.affinity_patience_ms = patience_ms;
  o.wait_slice_ms = 5;
  return o;
}

struct Pool {
  explicit Pool(FlowOptions options, int n = 2) : flow(options, Names(n), &store) {
    flow.SetEligible(std::vector<bool>(n, true), true);
  }
  static std::vector<std::string> Names(int n) {
    std::vector<std::string> names;
    for (int i = 0; i < n; ++i) names.push_back("backend:" + std::to_string(i));
    return names;
  }
  AcquireResult Take(int preferred = -1, std::function<bool()> cancelled = nullptr) {
    return flow.Acquire({preferred, -1}, cancelled);
  }
  LocalCounterStore store;
  FlowControl flow;
};

TEST(FlowControlTest, SpreadsOverBackendsUpToTheCap) {
  Pool p(Options(2, 0, 100));
  std::vector<Slot> slots;
  for (int i = 0; i < 4; ++i) {
    AcquireResult r = p.Take();
    ASSERT_EQ(r.result, AdmitResult::kOk);
    slots.push_back(std::move(r.slot));
  }
  EXPECT_EQ(p.flow.Stats().active, (std::vector<int>{2, 2}));
  EXPECT_EQ(p.Take().result, AdmitResult::kQueueFull);  // no queue at all
  slots.clear();
  FlowStats s = p.flow.Stats();
  EXPECT_EQ(s.active, (std::vector<int>{0, 0}));
  EXPECT_EQ(s.acquired_total, 4u);
  EXPECT_EQ(s.released_total, 4u);
}

TEST(FlowControlTest, QueueFullAndQueueTimeout) {
  Pool p(Options(1, 1, 80), 1);
  AcquireResult held = p.Take();
  ASSERT_EQ(held.result, AdmitResult::kOk);
  auto waiter = std::async(std::launch::async, [&] { return p.Take(); });
  while (p.flow.Stats().waiting == 0) std::this_thread::sleep_for(1ms);
  EXPECT_EQ(p.Take().result, AdmitResult::kQueueFull);
  AcquireResult timed_out = waiter.get();
  EXPECT_EQ(timed_out.result, AdmitResult::kQueueTimeout);
  EXPECT_GE(timed_out.waited_seconds, 0.079);
  EXPECT_EQ(p.flow.Stats().waiting, 0);
  EXPECT_GE(p.flow.RetryAfterSeconds(), 1);
}

TEST(FlowControlTest, ReleasedSlotGoesToTheOldestWaiter) {
  Pool p(Options(1, 8, 5000), 1);
  AcquireResult held = p.Take();
  std::vector<int> order;
  absl::Mutex mu;  // guards order
  std::vector<std::thread> threads;
  for (int i = 0; i < 3; ++i) {
    threads.emplace_back([&, i] {
      AcquireResult r = p.Take();
      ASSERT_EQ(r.result, AdmitResult::kOk);
      {
        absl::MutexLock lock(&mu);
        order.push_back(i);
      }
      std::this_thread::sleep_for(2ms);
    });
    while (p.flow.Stats().waiting != i + 1) std::this_thread::sleep_for(1ms);
  }
  held.slot.Release();
  for (auto& t : threads) t.join();
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2}));
}

TEST(FlowControlTest, NoEligibleBackendTellsWhy) {
  Pool p(Options(1, 1, 100));
  p.flow.SetEligible({false, false}, true);
  EXPECT_EQ(p.Take().result, AdmitResult::kNoBackend);
  p.flow.SetEligible({false, false}, false);
  EXPECT_EQ(p.Take().result, AdmitResult::kAdmissionClosed);
  p.flow.SetEligible({false, true}, true);
  AcquireResult r = p.Take(/*preferred=*/0);
  ASSERT_EQ(r.result, AdmitResult::kOk);
  EXPECT_EQ(r.slot.backend(), 1);
  EXPECT_FALSE(r.spilled);  // the preferred backend left; this is a rebind, not a spill
}

TEST(FlowControlTest, QueuedRequestsFailWhenAdmissionCloses) {
  Pool p(Options(1, 4, 5000), 1);
  AcquireResult held = p.Take();
  auto waiter = std::async(std::launch::async, [&] { return p.Take(); });
  while (p.flow.Stats().waiting == 0) std::this_thread::sleep_for(1ms);
  p.flow.SetEligible({false}, false);
  EXPECT_EQ(waiter.get().result, AdmitResult::kAdmissionClosed);
}

TEST(FlowControlTest, PreferredBackendWinsWhileItHasRoom) {
  Pool p(Options(2, 4, 1000, 200));
  for (int i = 0; i < 2; ++i) {
    AcquireResult r = p.Take(1);
    EXPECT_EQ(r.slot.backend(), 1);
    EXPECT_FALSE(r.spilled);
  }
}

TEST(FlowControlTest, FullPreferredBackendWaitsForPatienceThenSpills) {
  Pool p(Options(1, 4, 1000, 60));
  AcquireResult held = p.Take(0);
  ASSERT_EQ(held.slot.backend(), 0);
  auto start = Clock::now();
  AcquireResult r = p.Take(0);
  ASSERT_EQ(r.result, AdmitResult::kOk);
  EXPECT_EQ(r.slot.backend(), 1);
  EXPECT_TRUE(r.spilled);
  EXPECT_GE(Clock::now() - start, 55ms);
}

TEST(FlowControlTest, FullPreferredBackendThatFreesInTimeKeepsTheSession) {
  Pool p(Options(1, 4, 1000, 500));
  AcquireResult held = p.Take(0);
  std::thread releaser([&] {
    std::this_thread::sleep_for(30ms);
    held.slot.Release();
  });
  AcquireResult r = p.Take(0);
  releaser.join();
  ASSERT_EQ(r.result, AdmitResult::kOk);
  EXPECT_EQ(r.slot.backend(), 0);
  EXPECT_FALSE(r.spilled);
}

TEST(FlowControlTest, ExcludedBackendIsNeverChosen) {
  Pool p(Options(4, 0, 100));
  for (int i = 0; i < 3; ++i) {
    AcquireResult r = p.flow.Acquire({0, 0}, nullptr);
    ASSERT_EQ(r.result, AdmitResult::kOk);
    EXPECT_EQ(r.slot.backend(), 1);
  }
  Pool single(Options(4, 0, 100), 1);
  EXPECT_EQ(single.flow.Acquire({-1, 0}, nullptr).result, AdmitResult::kNoBackend);
}

TEST(FlowControlTest, CancelledWaiterLeavesTheQueue) {
  Pool p(Options(1, 4, 5000), 1);
  AcquireResult held = p.Take();
  std::atomic<bool> gone{false};
  auto waiter =
      std::async(std::launch::async, [&] { return p.Take(-1, [&] { return gone.load(); }); });
  while (p.flow.Stats().waiting == 0) std::this_thread::sleep_for(1ms);
  auto start = Clock::now();
  gone = true;
  EXPECT_EQ(waiter.get().result, AdmitResult::kCancelled);
  // Left because it was cancelled, not at the 5 s queue timeout. The bound is not a latency
  // target (one wait slice plus scheduling): under a loaded 2-core machine the waiter thread
  // took 55 ms to run again, so a tight bound failed where nothing was wrong.
  EXPECT_LT(Clock::now() - start, 2s);
  EXPECT_EQ(p.flow.Stats().waiting, 0);
  held.slot.Release();
  FlowStats s = p.flow.Stats();
  EXPECT_EQ(s.acquired_total, s.released_total);
}

TEST(FlowControlTest, SlotMovesReleaseExactlyOnce) {
  Pool p(Options(1, 0, 100), 1);
  Slot a = std::move(p.Take().slot);
  Slot b = std::move(a);
  EXPECT_FALSE(a.valid());
  EXPECT_TRUE(b.valid());
  b.Release();
  b.Release();
  FlowStats s = p.flow.Stats();
  EXPECT_EQ(s.released_total, 1u);
  EXPECT_EQ(s.active[0], 0);
  EXPECT_EQ(*p.store.Total("backend:0"), 0);
}

// Many clients that are served, rejected, time out or leave while queued: afterwards every
// slot is back and no backend ever went above its cap.
TEST(FlowControlTest, NoSlotLeaksUnderChurn) {
  Pool p(Options(3, 6, 30, 10), 3);
  std::atomic<int> in_flight[3] = {0, 0, 0};
  std::atomic<int> peak[3] = {0, 0, 0};
  std::atomic<int> outcomes[7] = {};
  std::vector<std::thread> threads;
  for (int t = 0; t < 16; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(t);
      for (int i = 0; i < 150; ++i) {
        bool leave = rng() % 4 == 0;
        auto deadline = Clock::now() + std::chrono::milliseconds(rng() % 20);
        AcquireResult r = p.Take(static_cast<int>(rng() % 4) - 1,
                                 [&] { return leave && Clock::now() > deadline; });
        outcomes[static_cast<int>(r.result)]++;
        if (r.result != AdmitResult::kOk) continue;
        int b = r.slot.backend();
        int now = ++in_flight[b];
        int old = peak[b].load();
        while (now > old && !peak[b].compare_exchange_weak(old, now)) {
        }
        std::this_thread::sleep_for(std::chrono::microseconds(rng() % 3000));
        --in_flight[b];
        if (rng() % 2) r.slot.Release();  // else the destructor releases it
      }
    });
  }
  for (auto& t : threads) t.join();
  FlowStats s = p.flow.Stats();
  EXPECT_EQ(s.acquired_total, s.released_total);
  EXPECT_EQ(s.active, (std::vector<int>{0, 0, 0}));
  EXPECT_EQ(s.waiting, 0);
  for (int b = 0; b < 3; ++b) {
    EXPECT_LE(peak[b].load(), 3);
    EXPECT_EQ(*p.store.Total("backend:" + std::to_string(b)), 0);
  }
  EXPECT_GT(outcomes[static_cast<int>(AdmitResult::kOk)].load(), 0);
  EXPECT_EQ(s.acquired_total, static_cast<uint64_t>(outcomes[0].load()));
}

}  // namespace
}  // namespace deepinfer::gateway
