#include "gateway/backends.h"

#include "gtest/gtest.h"
#include "util/status.h"

namespace deepinfer::gateway {
namespace {

TEST(BackendUrlTest, NormalizesUrls) {
  EXPECT_EQ(ParseBackendUrl("http://127.0.0.1:8000")->origin(), "http://127.0.0.1:8000");
  EXPECT_EQ(ParseBackendUrl("HTTP://Example.COM:8000/")->origin(), "http://example.com:8000");
  EXPECT_EQ(ParseBackendUrl("http://host")->port(), 80);
  auto v6 = ParseBackendUrl("http://[::1]:9000");
  ASSERT_TRUE(v6.ok());
  EXPECT_EQ(v6->host(), "::1");
  EXPECT_EQ(v6->origin(), "http://[::1]:9000");
}

// Regression (found by gateway_fuzz): a host with ':' outside brackets normalized into an IPv6
// URL that parsed differently.
TEST(BackendUrlTest, NormalizedUrlParsesBackToItself) {
  for (const char* url : {"http://Example.com:80", "http://[::1]:9", "http://10.0.0.1"}) {
    auto a = ParseBackendUrl(url);
    ASSERT_TRUE(a.ok()) << url;
    auto b = ParseBackendUrl(a->origin());
    ASSERT_TRUE(b.ok());
    EXPECT_EQ(a->origin(), b->origin());
  }
}

TEST(BackendUrlTest, RejectsWhatIsNotAPlainBackend) {
  for (const char* bad :
       {"https://h:1", "h:1", "http://", "http://h:0", "http://h:70000", "http://h:1/v1",
        "http://u@h:1", "http://h:x", "http://[::1", "http://a:b:1", "http://h\x01:1",
        "http://[::1%eth0]:1", "http://h\"x:1"}) {
    auto r = ParseBackendUrl(bad);
    EXPECT_FALSE(r.ok()) << bad;
    if (!r.ok()) {
      EXPECT_EQ(ErrorCodeOf(r.status()), "bad_backend_url");
    }
  }
}

BackendTable Table() {
  return BackendTable({*ParseBackendUrl("http://a:1"), *ParseBackendUrl("http://b:2")},
                      HealthOptions{3, 2});
}

TEST(BackendTableTest, FailureThresholdThenSuccessThreshold) {
  BackendTable t = Table();
  EXPECT_TRUE(t.healthy(0));
  EXPECT_FALSE(t.RecordProbe(0, false, false, "timeout", 1));
  EXPECT_FALSE(t.RecordProbe(0, false, false, "timeout", 2));
  EXPECT_TRUE(t.RecordProbe(0, false, false, "timeout", 3));
  EXPECT_FALSE(t.healthy(0));
  EXPECT_FALSE(t.RecordProbe(0, true, false, "", 4));
  EXPECT_FALSE(t.healthy(0));
  EXPECT_TRUE(t.RecordProbe(0, true, false, "", 5));
  EXPECT_TRUE(t.healthy(0));
  EXPECT_EQ(t.Snapshot()[0].ejections, 1u);
}

TEST(BackendTableTest, OneGoodProbeResetsTheFailureCount) {
  BackendTable t = Table();
  t.RecordProbe(0, false, false, "x", 1);
  t.RecordProbe(0, false, false, "x", 2);
  t.RecordProbe(0, true, false, "", 3);
  t.RecordProbe(0, false, false, "x", 4);
  t.RecordProbe(0, false, false, "x", 5);
  EXPECT_TRUE(t.healthy(0));
}

TEST(BackendTableTest, ConnectionFailureEjectsAtOnce) {
  BackendTable t = Table();
  EXPECT_TRUE(t.RecordProbe(1, false, true, "refused", 1));
  EXPECT_FALSE(t.healthy(1));
  BackendTable u = Table();
  EXPECT_TRUE(u.Eject(0, "refused", 1));
  EXPECT_FALSE(u.Eject(0, "refused", 2));
  EXPECT_EQ(u.HealthyMask(), (std::vector<bool>{false, true}));
}

TEST(BackendTableTest, StateRoundTripsThroughTheFile) {
  BackendTable t = Table();
  t.Eject(1, "refused", 42);
  std::string text = t.SerializeState();
  BackendTable u = Table();
  ASSERT_TRUE(u.LoadState(text).ok());
  EXPECT_EQ(u.HealthyMask(), (std::vector<bool>{true, false}));
  EXPECT_EQ(u.Snapshot()[1].changed_unix, 42);
  EXPECT_EQ(u.Snapshot()[1].last_error, "refused");
  EXPECT_EQ(ErrorCodeOf(u.LoadState("nope")), "bad_backend_state");
}

}  // namespace
}  // namespace deepinfer::gateway
