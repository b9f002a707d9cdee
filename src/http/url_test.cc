#include "http/url.h"

#include "gtest/gtest.h"
#include "util/status.h"

namespace deepinfer::http {
namespace {

// Moved from tools/smoke_test.cc (smoke's ParseServerUrl before this one).
TEST(UrlTest, SplitsHostPortAndPrefix) {
  auto url = ParseUrl("http://127.0.0.1:8900/v1/");
  ASSERT_TRUE(url.ok()) << url.status();
  EXPECT_EQ(url->host(), "127.0.0.1");
  EXPECT_EQ(url->port(), 8900);
  EXPECT_EQ(url->path(), "/v1");
  EXPECT_EQ(url->origin(), "http://127.0.0.1:8900");
  EXPECT_EQ(url->host_port(), "127.0.0.1:8900");
  EXPECT_EQ(url->ToString(), "http://127.0.0.1:8900/v1");
  auto v6 = ParseUrl("http://[::1]:81");
  ASSERT_TRUE(v6.ok());
  EXPECT_EQ(v6->host(), "::1");
  EXPECT_EQ(v6->port(), 81);
  auto plain = ParseUrl("http://example");
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->port(), 80);
  EXPECT_EQ(plain->path(), "");
  EXPECT_EQ(plain->origin(), "http://example:80");
}

TEST(UrlTest, RejectsWhatSmokeCannotProbe) {
  for (const char* url : {"https://x/v1", "ftp://x", "http://:80", "http://x:0", "http://x:99999",
                          "http://x/v1?a=b", "http://u:p@x/v1", "x:80"}) {
    EXPECT_FALSE(ParseUrl(url).ok()) << url;
  }
}

TEST(UrlTest, BracketedIpv6HostsKeepTheirBracketsOnlyInTheOrigin) {
  auto v6 = ParseUrl("http://[::1]:81/proxy");
  ASSERT_TRUE(v6.ok()) << v6.status();
  EXPECT_EQ(v6->host(), "::1");
  EXPECT_EQ(v6->port(), 81);
  EXPECT_EQ(v6->origin(), "http://[::1]:81");
  EXPECT_EQ(v6->host_port(), "[::1]:81");
  EXPECT_EQ(ParseUrl("http://[::1]")->port(), 80);
  EXPECT_EQ(Url("::1", 9000).origin(), "http://[::1]:9000");
}

TEST(UrlTest, LowerCasesSchemeAndHostButNotThePath) {
  auto url = ParseUrl("HTTP://Example.COM:8000/Proxy/V1/");
  ASSERT_TRUE(url.ok()) << url.status();
  EXPECT_EQ(url->origin(), "http://example.com:8000");
  EXPECT_EQ(url->path(), "/Proxy/V1");
}

TEST(UrlTest, OriginParsesBackToItself) {
  for (const char* text :
       {"http://Example.com:80", "http://[::1]:9", "http://10.0.0.1", "http://[fe80::1]:8000/x"}) {
    auto a = ParseUrl(text);
    ASSERT_TRUE(a.ok()) << text;
    auto b = ParseUrl(a->origin());
    ASSERT_TRUE(b.ok()) << a->origin();
    EXPECT_EQ(a->origin(), b->origin());
  }
}

TEST(UrlTest, RefusesWhatIsNotAPlainHttpAddress) {
  for (const char* bad : {"https://h:1",    "ftp://x",         "h:1",
                          "127.0.0.1:8900", "http://",         "http://:80",
                          "http://h:0",     "http://h:70000",  "http://h:99999",
                          "http://h:",      "http://h:12ab",   "http://h:x",
                          "http://u@h:1",   "http://u:p@x/v1", "http://x/v1?a=b",
                          "http://x#top",   "http://[::1",     "http://[::1]x",
                          "http://a:b:1",   "http://h\x01:1",  "http://[::1%eth0]:1",
                          "http://h\"x:1",  "http://h x",      "http://h/a b",
                          "http://h/a\tb"}) {
    auto r = ParseUrl(bad);
    EXPECT_FALSE(r.ok()) << bad;
    if (!r.ok()) {
      EXPECT_EQ(ErrorCodeOf(r.status()), "bad_url") << bad;
      EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    }
  }
}

TEST(UrlTest, ErrorsNameTheUrlAndTheReason) {
  auto r = ParseUrl("https://example.com");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(std::string(r.status().message()).find("'https://example.com'"), std::string::npos);
  EXPECT_NE(std::string(r.status().message()).find("https"), std::string::npos);
  EXPECT_NE(std::string(ParseUrl("http://h:0").status().message()).find("port"), std::string::npos);
}

TEST(UrlTest, HttpsIsParsedOnlyWhenAskedForAndDefaultsToPort443) {
  auto url = ParseUrl("HTTPS://Images.Example.com/a/b.png", UrlSchemes::kHttpOrHttps);
  ASSERT_TRUE(url.ok()) << url.status();
  EXPECT_TRUE(url->tls());
  EXPECT_EQ(url->port(), 443);
  EXPECT_EQ(url->origin(), "https://images.example.com:443");
  EXPECT_EQ(url->host_port(), "images.example.com:443");
  EXPECT_EQ(url->path(), "/a/b.png");
  auto v6 = ParseUrl("https://[::1]:8443", UrlSchemes::kHttpOrHttps);
  ASSERT_TRUE(v6.ok()) << v6.status();
  EXPECT_EQ(v6->host_port(), "[::1]:8443");
  auto plain = ParseUrl("http://h", UrlSchemes::kHttpOrHttps);
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE(plain->tls());
  EXPECT_EQ(plain->port(), 80);
  EXPECT_EQ(ErrorCodeOf(ParseUrl("ftp://h", UrlSchemes::kHttpOrHttps).status()), "bad_url");
  EXPECT_EQ(ErrorCodeOf(ParseUrl("https://u@h", UrlSchemes::kHttpOrHttps).status()), "bad_url");
  EXPECT_FALSE(ParseUrl("https://h").ok());  // plain http unless asked
}

}  // namespace
}  // namespace deepinfer::http
