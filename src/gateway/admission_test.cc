#include "gateway/admission.h"

#include "gtest/gtest.h"

namespace deepinfer::gateway {
namespace {

std::vector<BackendAddress> Pool() {
  return {*ParseBackendUrl("http://127.0.0.1:9001"), *ParseBackendUrl("http://127.0.0.1:9002"),
          *ParseBackendUrl("http://localhost:9003")};
}

TEST(AdmissionTest, ListedBackendsAreAdmitted) {
  Admission a = ParseAdmission(
      std::string_view(R"({"admit": ["http://127.0.0.1:9001", "HTTP://LOCALHOST:9003/"]})"),
      Pool());
  EXPECT_TRUE(a.open);
  EXPECT_EQ(a.reason, "ok");
  EXPECT_EQ(a.admitted, (std::vector<bool>{true, false, true}));
}

TEST(AdmissionTest, EnabledPortsNameTheLoopbackBackendsAtThosePorts) {
  Admission a = ParseAdmission(std::string_view(R"({"enabled_ports": [9001, 9003]})"), Pool());
  EXPECT_TRUE(a.open);
  EXPECT_EQ(a.reason, "ok");
  EXPECT_EQ(a.admitted, (std::vector<bool>{true, false, true}));
  // The same fail-closed rules as "admit".
  for (const char* text : {R"({"enabled_ports": [9001, 9999]})", R"({"enabled_ports": ["9001"]})",
                           R"({"enabled_ports": [0]})", R"({"enabled_ports": [65536]})",
                           R"({"enabled_ports": [9001.5]})", R"({"enabled_ports": 9001})",
                           R"({"enabled_ports": [9001], "admit": []})"}) {
    Admission closed = ParseAdmission(std::string_view(text), Pool());
    EXPECT_FALSE(closed.open) << text;
    EXPECT_EQ(closed.reason.rfind("invalid", 0), 0u) << text << ": " << closed.reason;
  }
  EXPECT_EQ(ParseAdmission(std::string_view(R"({"enabled_ports": []})"), Pool()).reason,
            "no_backend_listed");
  // A port of a backend that is not on loopback names nothing.
  std::vector<BackendAddress> remote = {*ParseBackendUrl("http://10.0.0.9:9001")};
  EXPECT_FALSE(ParseAdmission(std::string_view(R"({"enabled_ports": [9001]})"), remote).open);
}

TEST(AdmissionTest, MissingEmptyOrInvalidFileClosesAdmission) {
  struct Case {
    std::optional<std::string_view> text;
    const char* reason_prefix;
  };
  const Case cases[] = {
      {std::nullopt, "file_missing"},
      {std::string_view(""), "file_empty"},
      {std::string_view(" \n\t"), "file_empty"},
      {std::string_view("{"), "invalid"},
      {std::string_view("[\"http://127.0.0.1:9001\"]"), "invalid"},
      {std::string_view(R"({"admit": "http://127.0.0.1:9001"})"), "invalid"},
      {std::string_view(R"({"admit": [1]})"), "invalid"},
      {std::string_view(R"({"admit": ["ftp://x:1"]})"), "invalid"},
      {std::string_view(R"({"admit": ["http://127.0.0.1:9001"], "also": 1})"), "invalid"},
      // A file for another pool must not half-open this one.
      {std::string_view(R"({"admit": ["http://127.0.0.1:9001", "http://10.0.0.9:9001"]})"),
       "invalid"},
      {std::string_view(R"({"admit": []})"), "no_backend_listed"},
  };
  for (const Case& c : cases) {
    Admission a = ParseAdmission(c.text, Pool());
    EXPECT_FALSE(a.open) << (c.text ? *c.text : "<missing>");
    EXPECT_EQ(a.admitted, (std::vector<bool>{false, false, false}));
    EXPECT_EQ(a.reason.rfind(c.reason_prefix, 0), 0u) << a.reason;
  }
}

}  // namespace
}  // namespace deepinfer::gateway
