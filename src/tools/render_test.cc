#include "tools/render.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "gtest/gtest.h"

namespace deepinfer::tools {
namespace {

const char kRecipe[] = R"({
  "format": "deepinfer-recipe/1",
  "name": "smollm2",
  "architecture": "x86_64",
  "model": {"id": "SmolLM2-135M-Instruct", "revision": "abc123",
            "file": "SmolLM2-135M-Instruct.Q4_1.gguf"},
  "deepinfer": {"version": "0.1.0",
                "sha256": "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
  "docker_image": "d@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"},
  "serve": {"served_model_name": "SmolLM2-135M-Instruct", "chat_template": "chatml",
            "max_model_len": 2048,
            "kv_cache_memory": "256MiB", "threads": 2, "prefix_caching": false, "seed": 7}
})";

const char kHost[] = R"({
  "format": "deepinfer-host/1",
  "instance": "smollm-a",
  "port": 8931,
  "paths": {"model": "/srv/models/smollm it's", "runtime": "/opt/deepinfer/0.1.0",
            "artifacts": "/var/lib/deepinfer/smollm-a"},
  "devices": {"kind": "cpu", "max_load": 3.5},
  "warmup": "/srv/warmup.json"
})";

std::string Replace(std::string s, const std::string& from, const std::string& to) {
  size_t at = s.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) s.replace(at, from.size(), to);
  return s;
}

// Runs `command` with the script in a temp file; returns the exit status.
int RunOnScript(const std::string& command, const std::string& script, std::string* output) {
  char path[] = "/tmp/render_test_XXXXXX.sh";
  int fd = ::mkstemps(path, 3);
  EXPECT_GE(fd, 0);
  ::write(fd, script.data(), script.size());
  ::close(fd);
  std::string full = command + " " + path + " 2>&1";
  FILE* pipe = ::popen(full.c_str(), "r");
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), pipe)) > 0) output->append(buf, n);
  int status = ::pclose(pipe);
  ::unlink(path);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

bool HasTool(const char* name) {
  return std::system((std::string("command -v ") + name + " >/dev/null 2>&1").c_str()) == 0;
}

TEST(RenderTest, ParsesTheRecipeIntoServeFlagsInAFixedOrder) {
  auto r = ParseRecipe(kRecipe);
  ASSERT_TRUE(r.ok()) << r.status();
  std::vector<std::pair<std::string, std::string>> expected = {
      {"--served-model-name", "SmolLM2-135M-Instruct"},
      {"--chat-template", "chatml"},
      {"--max-model-len", "2048"},
      {"--kv-cache-memory", "256MiB"},
      {"--threads", "2"},
      {"--seed", "7"},
      {"--no-prefix-caching", ""}};
  EXPECT_EQ(r->serve_flags, expected);
  EXPECT_EQ(r->threads, 2);
}

TEST(RenderTest, RejectsUnknownAndUnsafeRecipeFields) {
  for (auto [from, to] : std::vector<std::pair<std::string, std::string>>{
           {"\"seed\": 7", "\"sed\": 7"},             // typo: never silently dropped
           {"\"seed\": 7", "\"port\": 9000"},         // the host file owns the port
           {"\"seed\": 7", "\"host\": \"0.0.0.0\""},  // loopback is not negotiable
           {"\"max_model_len\": 2048", "\"max_model_len\": \"2048\""},
           {"\"kv_cache_memory\": \"256MiB\"", "\"kv_cache_memory\": \"1G; rm -rf /\""},
           {"\"sha256\": \"0123", "\"sha256\": \"X123"},
           {"\"file\": \"SmolLM2", "\"file\": \"../SmolLM2"},
           {"\"file\": \"SmolLM2", "\"file\": \"SmolLM2\\u0000"},  // NUL ends the path in C
           {"\"x86_64\"", "\"x86 64\""},
           {"\"served_model_name\": \"SmolLM2-135M-Instruct\",", ""},
       }) {
    EXPECT_FALSE(ParseRecipe(Replace(kRecipe, from, to)).ok()) << to;
  }
}

TEST(RenderTest, RejectsBadHostFiles) {
  EXPECT_TRUE(ParseHost(kHost).ok()) << ParseHost(kHost).status();
  for (auto [from, to] : std::vector<std::pair<std::string, std::string>>{
           {"\"port\": 8931", "\"port\": 0"},
           {"\"smollm-a\",", "\"-smollm\","},
           {"\"smollm-a\",", "\"smollm a\","},
           {"\"/opt/deepinfer/0.1.0\"", "\"opt/deepinfer\""},
           {"\"/opt/deepinfer/0.1.0\"", "\"/opt/../deepinfer\""},
           {"\"kind\": \"cpu\"", "\"kind\": \"nvidia\""},  // needs ids
           {"\"kind\": \"cpu\"", "\"kind\": \"cpu; reboot\""},
           {"\"max_load\": 3.5", "\"max_load\": -1"},
           {"\"warmup\"", "\"warmups\""},
       }) {
    EXPECT_FALSE(ParseHost(Replace(kHost, from, to)).ok()) << to;
  }
  // An unknown but well-formed kind renders; the script's probe refuses it.
  EXPECT_TRUE(ParseHost(Replace(kHost, "\"kind\": \"cpu\"", "\"kind\": \"tpu\"")).ok());
}

TEST(RenderTest, ShellQuoteSurvivesQuotes) {
  EXPECT_EQ(ShellQuote("it's"), "'it'\\''s'");
  EXPECT_EQ(ShellQuote(""), "''");
}

TEST(RenderTest, ScriptQuotesEveryValueAndBindsLoopback) {
  auto script = RenderLaunchScript(*ParseRecipe(kRecipe), *ParseHost(kHost), Launcher::kPlain,
                                   RenderProvenance{"0.1.0", "r.json", "aa", "h.json", "bb"});
  ASSERT_TRUE(script.ok()) << script.status();
  EXPECT_NE(script->find("readonly MODEL_DIR='/srv/models/smollm it'\\''s'"), std::string::npos);
  EXPECT_NE(script->find("--host 127.0.0.1"), std::string::npos);
  EXPECT_NE(script->find("--port 8931"), std::string::npos);
  EXPECT_NE(script->find("--no-prefix-caching"), std::string::npos);
  EXPECT_EQ(script->find("0.0.0.0"), std::string::npos);
  std::string out;
  EXPECT_EQ(RunOnScript("bash -n", *script, &out), 0) << out;
}

TEST(RenderTest, DockerScriptHasNoRestartPolicyAnInitAndReadOnlyMounts) {
  const char* h64 = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
  auto host = ParseHost(Replace(kHost, "\"kind\": \"cpu\", \"max_load\": 3.5",
                                "\"kind\": \"nvidia\", \"ids\": [0, 3]"));
  ASSERT_TRUE(host.ok()) << host.status();
  auto script = RenderLaunchScript(*ParseRecipe(kRecipe), *host, Launcher::kDocker,
                                   RenderProvenance{"0.1.0", "r.json", "aa", "h.json", "bb"});
  ASSERT_TRUE(script.ok()) << script.status();
  for (const char* needle :
       {"--restart no", "--init", "dst=/model,readonly", "--publish \"127.0.0.1:$PORT:$PORT\"",
        "--gpus '\"device=0,3\"'", "--model '/model/SmolLM2-135M-Instruct.Q4_1.gguf'",
        "readonly GPU_IDS=(0 3)"}) {
    EXPECT_NE(script->find(needle), std::string::npos) << needle;
  }
  std::string out;
  EXPECT_EQ(RunOnScript("bash -n", *script, &out), 0) << out;
  // Without an image the docker launcher cannot render.
  auto recipe = ParseRecipe(
      Replace(kRecipe, ",\n  \"docker_image\": \"d@sha256:" + std::string(h64) + "\"", ""));
  ASSERT_TRUE(recipe.ok()) << recipe.status();
  EXPECT_FALSE(RenderLaunchScript(*recipe, *host, Launcher::kDocker, {}).ok());
}

TEST(RenderTest, EveryScriptVariantPassesShellcheck) {
  if (!HasTool("shellcheck")) GTEST_SKIP() << "shellcheck is not installed";
  auto nvidia = ParseHost(
      Replace(kHost, "\"kind\": \"cpu\", \"max_load\": 3.5", "\"kind\": \"nvidia\", \"ids\": [1]"));
  ASSERT_TRUE(nvidia.ok());
  auto no_warmup = ParseHost(Replace(kHost, ",\n  \"warmup\": \"/srv/warmup.json\"", ""));
  ASSERT_TRUE(no_warmup.ok()) << no_warmup.status();
  for (const HostConfig& host : {*ParseHost(kHost), *nvidia, *no_warmup}) {
    for (Launcher launcher : {Launcher::kPlain, Launcher::kDocker}) {
      auto script = RenderLaunchScript(*ParseRecipe(kRecipe), host, launcher, {});
      ASSERT_TRUE(script.ok());
      std::string out;
      EXPECT_EQ(RunOnScript("shellcheck --severity=style", *script, &out), 0) << out;
    }
  }
}

TEST(RenderTest, TheHostsWarmupFileBecomesServesWarmupFlag) {
  auto plain = RenderLaunchScript(*ParseRecipe(kRecipe), *ParseHost(kHost), Launcher::kPlain, {});
  ASSERT_TRUE(plain.ok());
  EXPECT_NE(plain->find("  --warmup-file '/srv/warmup.json'\n"), std::string::npos) << *plain;
  EXPECT_EQ(plain->find("curl"), std::string::npos);  // serve sends the requests itself
  auto docker = RenderLaunchScript(*ParseRecipe(kRecipe), *ParseHost(kHost), Launcher::kDocker, {});
  ASSERT_TRUE(docker.ok());
  EXPECT_NE(docker->find("  --warmup-file '/warmup-requests'\n"), std::string::npos);
  EXPECT_NE(docker->find("readonly DOCKER_WARMUP_MOUNT=(--mount "
                         "'type=bind,src=/srv/warmup.json,dst=/warmup-requests,readonly')"),
            std::string::npos)
      << *docker;
  auto none = RenderLaunchScript(
      *ParseRecipe(kRecipe),
      *ParseHost(Replace(kHost, ",\n  \"warmup\": \"/srv/warmup.json\"", "")), Launcher::kDocker,
      {});
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->find("--warmup-file"), std::string::npos);
  EXPECT_NE(none->find("readonly DOCKER_WARMUP_MOUNT=()"), std::string::npos);
}

TEST(RenderTest, InstanceBindingNamesScriptBinaryAndPort) {
  std::string json = InstanceJson(*ParseRecipe(kRecipe), *ParseHost(kHost), Launcher::kPlain,
                                  "/x/run.sh", std::string(64, 'f'));
  EXPECT_NE(json.find("\"script\":\"/x/run.sh\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"binary\":\"/opt/deepinfer/0.1.0/bin/deepinfer\""), std::string::npos);
  EXPECT_NE(json.find("\"port\":8931"), std::string::npos);
}

}  // namespace
}  // namespace deepinfer::tools
