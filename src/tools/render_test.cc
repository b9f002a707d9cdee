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

// An expert-parallel host file: this machine (two ranks) and a second host.
std::string EpHostFile(const std::string& second, const std::string& extra = "") {
  return Replace(kHost, "\"warmup\": \"/srv/warmup.json\"",
                 "\"warmup\": \"/srv/warmup.json\",\n  \"expert_parallel\": {\"hosts\": [\n"
                 "    {\"name\": \"a\", \"address\": \"localhost\", \"slots\": 2}" +
                     second + "]" + extra + "}");
}

absl::StatusOr<std::string> Render(const std::string& recipe, const std::string& host,
                                   Launcher launcher = Launcher::kPlain) {
  auto r = ParseRecipe(recipe);
  if (!r.ok()) return r.status();
  auto h = ParseHost(host);
  if (!h.ok()) return h.status();
  return RenderLaunchScript(*r, *h, launcher, {});
}

bool Has(const std::string& text, const std::string& needle) {
  return text.find(needle) != std::string::npos;
}

TEST(RenderTest, IdenticalHostsShareOneMpirunCommand) {
  auto script = Render(kRecipe, EpHostFile(",\n    {\"name\": \"b\", \"address\": \"10.0.0.2\", "
                                           "\"slots\": 1}"));
  ASSERT_TRUE(script.ok()) << script.status();
  for (const char* needle :
       {"readonly EP_RANKS=3\n", "readonly EP_HOST_ADDRESSES=('localhost' '10.0.0.2')\n",
        "  --bind-to none\n", "  --host 'localhost:2,10.0.0.2:1'\n  -np 3\n",
        "  '/opt/deepinfer/0.1.0/bin/deepinfer'\n  serve\n", "  --expert-parallel\n",
        "  --host 127.0.0.1\n  --port 8931\n", "(exec -a \"$PROCESS_NAME\" mpirun",
        "  --threads 2\n", "readonly CPU_THREADS=4\n"}) {
    EXPECT_TRUE(Has(*script, needle)) << needle << "\n" << *script;
  }
  EXPECT_FALSE(Has(*script, "\n  :\n"));  // no MPMD form when every host runs the same command
  EXPECT_TRUE(Has(*script, "readonly SERVE_ARGS=(\n)"));
  std::string out;
  EXPECT_EQ(RunOnScript("bash -n", *script, &out), 0) << out;
}

TEST(RenderTest, HostsThatDifferGetMpmdContextsWithTheirOwnFlags) {
  auto script = Render(
      kRecipe, EpHostFile(",\n    {\"name\": \"b\", \"address\": \"node-b\", \"slots\": 1, "
                          "\"threads\": 16, \"model\": \"/mnt/models/smollm\", "
                          "\"runtime\": \"/opt/di\"}",
                          ", \"transport\": \"tcp\", \"network\": \"10.0.0.0/24\""));
  ASSERT_TRUE(script.ok()) << script.status();
  for (const char* needle :
       {"  -np 2 --host 'localhost:2'\n  '/opt/deepinfer/0.1.0/bin/deepinfer'\n",
        "  --model '/srv/models/smollm it'\\''s/SmolLM2-135M-Instruct.Q4_1.gguf'\n  --threads 2\n"
        "  :\n  -np 1 --host 'node-b:1'\n  '/opt/di/bin/deepinfer'\n",
        "  --model '/mnt/models/smollm/SmolLM2-135M-Instruct.Q4_1.gguf'\n  --threads 16\n)",
        "  --mca btl_tcp_if_include '10.0.0.0/24'\n", "  --mca oob_tcp_if_include '10.0.0.0/24'\n",
        "  --mca pml ob1\n", "readonly EP_HOST_BINARIES=('/opt/deepinfer/0.1.0/bin/deepinfer' "
                          "'/opt/di/bin/deepinfer')\n"}) {
    EXPECT_TRUE(Has(*script, needle)) << needle << "\n" << *script;
  }
  std::string out;
  EXPECT_EQ(RunOnScript("bash -n", *script, &out), 0) << out;
}

TEST(RenderTest, UcxTransportPassesItsDevices) {
  auto script = Render(kRecipe, EpHostFile("", ", \"transport\": \"ucx\", \"ucx_devices\": "
                                               "\"mlx5_0:1\", \"network\": \"ib0\""));
  ASSERT_TRUE(script.ok()) << script.status();
  EXPECT_TRUE(Has(*script, "  --mca pml ucx\n  -x 'UCX_NET_DEVICES=mlx5_0:1'\n")) << *script;
  EXPECT_TRUE(Has(*script, "  --mca oob_tcp_if_include 'ib0'\n"));
}

TEST(RenderTest, RejectsBadExpertParallelSections) {
  const std::string b = ",\n    {\"name\": \"b\", \"address\": \"node-b\", \"slots\": 1}";
  EXPECT_TRUE(ParseHost(EpHostFile(b)).ok()) << ParseHost(EpHostFile(b)).status();
  for (const std::string& host : {
           EpHostFile(Replace(b, "\"b\"", "\"a\"")),                 // a name twice
           EpHostFile(Replace(b, "node-b", "localhost")),            // an address twice
           EpHostFile(Replace(b, "node-b", "-oProxyCommand=x")),     // an ssh option
           EpHostFile(Replace(b, "node-b", "fe80::1")),              // mpirun's ':' separator
           EpHostFile(Replace(b, "node-b", "b,c")),                  // mpirun's ',' separator
           EpHostFile(Replace(b, "\"slots\": 1", "\"slots\": 0")),
           EpHostFile(Replace(b, "\"slots\": 1", "\"slots\": 1, \"model\": \"rel\"")),
           Replace(EpHostFile(b), "\"slots\": 2}", "\"slots\": 2, \"model\": \"/m\"}"),
           Replace(EpHostFile(""), "\"slots\": 2", "\"slots\": 1"),  // one rank is no group
           EpHostFile(b, ", \"transport\": \"shm\""),
           EpHostFile(b, ", \"ucx_devices\": \"mlx5_0:1\""),         // needs transport ucx
           EpHostFile(b, ", \"network\": \"eth0; reboot\""),
           EpHostFile(b, ", \"hots\": []"),
       }) {
    EXPECT_FALSE(ParseHost(host).ok()) << host;
  }
}

TEST(RenderTest, ExpertParallelRefusesDockerAndTakesDpPdAndCheckpoints) {
  const std::string ep = EpHostFile("");
  auto with_serve = [](const std::string& field) {
    return Replace(kRecipe, "\"seed\": 7", "\"seed\": 7, " + field);
  };
  struct Case {
    std::string recipe, host;
    Launcher launcher;
    const char* words;
  };
  std::vector<Case> cases = {
      {kRecipe, ep, Launcher::kDocker, "plain launcher"},
      {with_serve("\"expert_parallel_timeout\": 5"), kHost, Launcher::kPlain,
       "expert_parallel section"},
  };
  for (const Case& c : cases) {
    auto script = Render(c.recipe, c.host, c.launcher);
    ASSERT_FALSE(script.ok()) << c.words;
    EXPECT_TRUE(Has(std::string(script.status().message()), c.words)) << script.status();
  }
  // P/D roles and prefix checkpoints combine with it (rank 0 mirrors restored KV).
  const std::string cached = Replace(kRecipe, "\"prefix_caching\": false, ", "");
  auto pd = Render(cached, Replace(ep, "\"expert_parallel\"",
                                    "\"pd\": {\"role\": \"prefill\", \"checkpoint_dir\": \"/pd\", "
                                    "\"api_key_file\": \"/k\"}, \"expert_parallel\""));
  ASSERT_TRUE(pd.ok()) << pd.status();
  EXPECT_TRUE(Has(*pd, "--expert-parallel") && Has(*pd, "--pd-role")) << *pd;
  auto saved = Render(cached, Replace(ep, "\"artifacts\": \"/var/lib/deepinfer/smollm-a\"",
                                       "\"artifacts\": \"/var/lib/deepinfer/smollm-a\", "
                                       "\"prefix_checkpoints\": \"/c\""));
  ASSERT_TRUE(saved.ok()) << saved.status();
  EXPECT_TRUE(Has(*saved, "--expert-parallel") && Has(*saved, "--prefix-checkpoint-dir")) << *saved;
  auto dp = Render(with_serve("\"data_parallel_size\": 2"), ep);
  ASSERT_TRUE(dp.ok()) << dp.status();
  EXPECT_TRUE(Has(*dp, "--expert-parallel") && Has(*dp, "--data-parallel-size")) << *dp;
  auto timeout = Render(with_serve("\"expert_parallel_timeout\": 2.5"), ep);
  ASSERT_TRUE(timeout.ok()) << timeout.status();
  EXPECT_TRUE(Has(*timeout, "  --expert-parallel-timeout '2.5'\n")) << *timeout;
}

std::string PdHost(const std::string& role, const std::string& url) {
  return Replace(kHost, "\"warmup\"",
                 "\"pd\": {\"role\": \"" + role +
                     "\", \"checkpoint_dir\": \"/srv/pd shared\", \"api_key_file\": "
                     "\"/etc/deepinfer/pd.key\"" +
                     (url.empty() ? "" : ", \"prefill_url\": \"" + url + "\"") +
                     "},\n  \"warmup\"");
}

TEST(RenderTest, RendersPdRolesAndPrefixCheckpoints) {
  const std::string recipe = Replace(Replace(kRecipe, "\"prefix_caching\": false, ", ""),
                                     "\"seed\": 7", "\"seed\": 7, \"checkpoint_min_tokens\": 64");
  auto prefill = Render(recipe, PdHost("prefill", ""));
  ASSERT_TRUE(prefill.ok()) << prefill.status();
  for (const char* needle :
       {"  --pd-role 'prefill'\n  --pd-checkpoint-dir '/srv/pd shared'\n"
        "  --model-revision 'abc123'\n",
        "  --checkpoint-min-tokens '64'\n", "readonly PD_API_KEY_FILE='/etc/deepinfer/pd.key'\n",
        "readonly PD_ROLE='prefill'\n"}) {
    EXPECT_TRUE(Has(*prefill, needle)) << needle << "\n" << *prefill;
  }
  EXPECT_FALSE(Has(*prefill, "--pd-prefill-url"));
  auto decode = Render(recipe, PdHost("decode", "http://10.0.0.5:8950"));
  ASSERT_TRUE(decode.ok()) << decode.status();
  EXPECT_TRUE(Has(*decode, "  --pd-prefill-url 'http://10.0.0.5:8950'\n")) << *decode;
  auto docker = Render(recipe, PdHost("decode", "http://10.0.0.5:8950"), Launcher::kDocker);
  ASSERT_TRUE(docker.ok()) << docker.status();
  EXPECT_TRUE(Has(*docker, "  --pd-checkpoint-dir '/pd-checkpoints'\n")) << *docker;
  EXPECT_TRUE(Has(*docker, "readonly DOCKER_STATE_ARGS=(--mount "
                           "'type=bind,src=/srv/pd shared,dst=/pd-checkpoints' "
                           "--env DEEPINFER_PD_API_KEY)\n"))
      << *docker;

  const std::string prefix_host =
      Replace(kHost, "\"artifacts\": \"/var/lib/deepinfer/smollm-a\"",
              "\"artifacts\": \"/var/lib/deepinfer/smollm-a\", \"prefix_checkpoints\": "
              "\"/var/cache/di-prefix\"");
  auto prefix = Render(recipe, prefix_host);
  ASSERT_TRUE(prefix.ok()) << prefix.status();
  EXPECT_TRUE(Has(*prefix, "  --prefix-checkpoint-dir '/var/cache/di-prefix'\n"
                           "  --model-revision 'abc123'\n"))
      << *prefix;
  EXPECT_FALSE(Has(*prefix, "--pd-role"));
}

TEST(RenderTest, RefusesPdAndCheckpointSettingsServeWouldRefuse) {
  const std::string ok_recipe = Replace(kRecipe, "\"prefix_caching\": false, ", "");
  EXPECT_FALSE(ParseHost(PdHost("decode", "")).ok());                          // needs a URL
  EXPECT_FALSE(ParseHost(PdHost("prefill", "http://10.0.0.5:8950")).ok());     // decode only
  EXPECT_FALSE(ParseHost(PdHost("decode", "https://x:1")).ok());
  EXPECT_FALSE(ParseHost(PdHost("decode", "http://x:1/'$(reboot)'")).ok());
  EXPECT_FALSE(ParseHost(PdHost("combined", "")).ok());
  EXPECT_FALSE(ParseHost(Replace(PdHost("prefill", ""), "\"/srv/pd shared\"", "\"pd\"")).ok());
  // The recipe turns the prefix cache off, which a P/D role needs.
  auto no_cache = Render(kRecipe, PdHost("prefill", ""));
  ASSERT_FALSE(no_cache.ok());
  EXPECT_TRUE(Has(std::string(no_cache.status().message()), "prefix cache"));
  // Both kinds of checkpoints at once.
  auto both = Render(ok_recipe,
                     Replace(PdHost("prefill", ""), "\"artifacts\": \"/var/lib/deepinfer/smollm-a\"",
                             "\"artifacts\": \"/var/lib/deepinfer/smollm-a\", "
                             "\"prefix_checkpoints\": \"/c\""));
  EXPECT_FALSE(both.ok());
  // Checkpoint tuning with no checkpoints to tune.
  auto stray = Render(Replace(ok_recipe, "\"seed\": 7", "\"seed\": 7, \"checkpoint_max_bytes\": "
                                                        "\"2GiB\""),
                      kHost);
  ASSERT_FALSE(stray.ok());
  EXPECT_TRUE(Has(std::string(stray.status().message()), "--checkpoint-max-bytes"));
}

TEST(RenderTest, PreflightNamesTheNewChecks) {
  auto ep = ParseHost(EpHostFile(""));
  ASSERT_TRUE(ep.ok());
  auto names = PreflightCheckNames(*ep, Launcher::kPlain);
  EXPECT_EQ(names.back(), "ep_host");
  auto pd = ParseHost(PdHost("prefill", ""));
  ASSERT_TRUE(pd.ok());
  names = PreflightCheckNames(*pd, Launcher::kPlain);
  EXPECT_EQ(names.back(), "checkpoints");
  EXPECT_EQ(PreflightCheckNames(*ParseHost(kHost), Launcher::kPlain).back(), "binary");
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
  // Expert parallelism (one command, MPMD), P/D roles and prefix checkpoints.
  const std::string cache_recipe = Replace(kRecipe, "\"prefix_caching\": false, ", "");
  for (auto [host, launcher] : std::vector<std::pair<std::string, Launcher>>{
           {EpHostFile(""), Launcher::kPlain},
           {EpHostFile(",\n    {\"name\": \"b\", \"address\": \"b\", \"slots\": 1, "
                       "\"threads\": 3}",
                       ", \"transport\": \"tcp\", \"network\": \"eth1\""),
            Launcher::kPlain},
           {PdHost("decode", "http://127.0.0.1:9"), Launcher::kPlain},
           {PdHost("prefill", ""), Launcher::kDocker},
           {Replace(kHost, "\"artifacts\": \"/var/lib/deepinfer/smollm-a\"",
                    "\"artifacts\": \"/a\", \"prefix_checkpoints\": \"/c\""),
            Launcher::kDocker},
       }) {
    auto script = Render(cache_recipe, host, launcher);
    ASSERT_TRUE(script.ok()) << script.status();
    std::string out;
    EXPECT_EQ(RunOnScript("shellcheck --severity=style", *script, &out), 0) << out;
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
