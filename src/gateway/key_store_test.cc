#include "gateway/key_store.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "gtest/gtest.h"
#include "util/mapped_file.h"
#include "util/status.h"

namespace deepinfer::gateway {
namespace {

std::string DigestHex(std::string_view key) {
  Digest d = Sha256(key);
  return ToHex(d.data(), d.size());
}

std::string TempPath(const std::string& name) {
  std::string dir = ::testing::TempDir();
  return dir + (dir.empty() || dir.back() == '/' ? "" : "/") + name + "." +
         std::to_string(::getpid());
}

TEST(KeyStoreTest, Sha256MatchesKnownVector) {
  EXPECT_EQ(DigestHex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(KeyStoreTest, AuthenticatesByDigestAndReportsKeyId) {
  std::string text = "{\"version\":1,\"keys\":[{\"id\":\"alice\",\"sha256\":\"" +
                     DigestHex("sk-alice") +
                     "\",\"max_concurrent\":3},{\"id\":\"bob\",\"sha256\":\"" +
                     DigestHex("sk-bob") + "\",\"admin\":true}]}";
  auto store = KeyStore::Parse(text);
  ASSERT_TRUE(store.ok()) << store.status();
  AuthOutcome a = (*store)->Authenticate("sk-alice", 1000);
  EXPECT_EQ(a.result, AuthResult::kOk);
  EXPECT_EQ(a.key.id, "alice");
  EXPECT_EQ(a.key.max_concurrent, 3);
  EXPECT_FALSE(a.key.admin);
  AuthOutcome b = (*store)->Authenticate("sk-bob", 1000);
  EXPECT_EQ(b.result, AuthResult::kOk);
  EXPECT_TRUE(b.key.admin);
  EXPECT_EQ((*store)->Authenticate("sk-alicf", 1000).result, AuthResult::kInvalid);
  EXPECT_EQ((*store)->Authenticate("", 1000).result, AuthResult::kMissing);
}

TEST(KeyStoreTest, ExpiredKeyIsReportedAsExpired) {
  std::string text =
      "{\"keys\":[{\"id\":\"old\",\"sha256\":\"" + DigestHex("k") + "\",\"expires_unix\":500}]}";
  auto store = KeyStore::Parse(text);
  ASSERT_TRUE(store.ok());
  EXPECT_EQ((*store)->Authenticate("k", 499).result, AuthResult::kOk);
  EXPECT_EQ((*store)->Authenticate("k", 500).result, AuthResult::kExpired);
}

TEST(KeyStoreTest, RejectsMalformedStores) {
  const std::string d = DigestHex("x");
  const char* bad[] = {
      "",
      "[]",
      "{\"keys\":{}}",
      "{\"version\":2,\"keys\":[]}",
      "{\"keys\":[{\"sha256\":\"00\"}]}",
      "{\"keys\":[{\"id\":\"a\"}]}",
      "{\"keys\":[{\"id\":\"a b\",\"sha256\":\"DIGEST\"}]}",
      "{\"keys\":[{\"id\":\"a\",\"sha256\":\"DIGEST\",\"max_concurent\":1}]}",
      "{\"keys\":[{\"id\":\"a\",\"sha256\":\"DIGEST\",\"max_concurrent\":-1}]}",
      "{\"keys\":[{\"id\":\"a\",\"sha256\":\"DIGEST\"},{\"id\":\"a\",\"sha256\":\""
      "0000000000000000000000000000000000000000000000000000000000000000\"}]}",
      "{\"keys\":[{\"id\":\"a\",\"sha256\":\"DIGEST\"},{\"id\":\"b\",\"sha256\":\"DIGEST\"}]}",
      "{\"keys\":[],\"extra\":1}",
  };
  for (const char* b : bad) {
    std::string text = b;
    for (size_t p; (p = text.find("DIGEST")) != std::string::npos;) text.replace(p, 6, d);
    auto store = KeyStore::Parse(text);
    EXPECT_FALSE(store.ok()) << text;
    if (!store.ok()) {
      EXPECT_EQ(ErrorCodeOf(store.status()), "bad_key_store") << text;
    }
  }
}

TEST(KeyStoreTest, GeneratedKeysAreDistinctAndWellFormed) {
  auto a = GenerateKey();
  auto b = GenerateKey();
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE(*a, *b);
  EXPECT_EQ(a->rfind("sk-di-", 0), 0u);
  EXPECT_EQ(a->size(), 6u + 43u);
}

TEST(KeyStoreTest, AddKeyStoresOnlyTheDigestAndTheKeyAuthenticates) {
  std::string path = TempPath("keys.json");
  ::unlink(path.c_str());
  auto key = AddKeyToFile(path, {"svc-1", 2, 0, false});
  ASSERT_TRUE(key.ok()) << key.status();
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ASSERT_EQ(::chmod(path.c_str(), 0640), 0);
  auto admin = AddKeyToFile(path, {"ops", 0, 0, true});
  ASSERT_TRUE(admin.ok()) << admin.status();
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0640u) << "an existing store keeps its mode";
  auto text = util::ReadFile(path);
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(text->find(*key), std::string::npos) << "the key itself must not be stored";
  EXPECT_NE(text->find(DigestHex(*key)), std::string::npos);
  auto store = KeyStore::Parse(*text);
  ASSERT_TRUE(store.ok());
  AuthOutcome a = (*store)->Authenticate(*key, 1);
  EXPECT_EQ(a.result, AuthResult::kOk);
  EXPECT_EQ(a.key.id, "svc-1");
  EXPECT_EQ(a.key.max_concurrent, 2);
  EXPECT_TRUE((*store)->Authenticate(*admin, 1).key.admin);
  auto again = AddKeyToFile(path, {"svc-1", 0, 0, false});
  EXPECT_EQ(ErrorCodeOf(again.status()), "key_id_exists");
  EXPECT_EQ(ErrorCodeOf(AddKeyToFile(path, {"bad id", 0, 0, false}).status()), "bad_key_id");
  ::unlink(path.c_str());
}

TEST(KeyStoreTest, AddKeyRefusesToRewriteAnInvalidStore) {
  std::string path = TempPath("broken-keys.json");
  ASSERT_TRUE(util::WriteFileAtomically(path, "{not json").ok());
  EXPECT_EQ(ErrorCodeOf(AddKeyToFile(path, {"a", 0, 0, false}).status()), "bad_key_store");
  EXPECT_EQ(*util::ReadFile(path), "{not json");
  ::unlink(path.c_str());
}

}  // namespace
}  // namespace deepinfer::gateway
