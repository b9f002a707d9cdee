// `deepinfer serve`: the flags of the resident HTTP server. The server itself (start-up order,
// signals, stats lines) is api::Serve (api/serve.h).

#include "api/serve.h"

#include <algorithm>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "cli/exit_code.h"
#include "cli/numerics_flag.h"
#include "spdlog/spdlog.h"
#include "util/byte_size.h"
#include "util/log.h"

namespace deepinfer::cli {
namespace {

struct ServeFlags {
  api::ServeOptions options;
  std::string max_request_bytes = "32MiB";
  std::string max_image_bytes = "20MiB";
  double media_fetch_timeout_s = 5;
  std::string kv_cache_memory = "2GiB";
  std::string dp_cores = "split";
  std::string checkpoint_max_bytes = "16GiB";
  std::string pd_role = "combined";
  bool enable_prompt_tokens_details = false;  // accepted for vLLM compatibility; always on
  std::string speculative_method;             // "", "dspark", "mtp", "none"
  bool speculative_tokens_given = false;
  bool no_dspark = false;
};

// --speculative-method, --no-dspark and --speculative-tokens to the engine's drafter
// (EngineOptions::SpeculativeMethod). Unset method: kAuto (DSpark when the checkpoint has its
// stages, its block capped by --speculative-tokens; else MTP when --speculative-tokens > 0);
// --speculative-tokens 0: off. "dspark": DSpark, an error at start without the stages. "mtp":
// MTP with --speculative-tokens drafts, 1 when not given. --no-dspark (the operator documents'
// spelling) alone: MTP where the model has MTP modules, else none. "none": off.
// Returns false, after one error line, for a contradiction.
bool ResolveSpeculative(ServeFlags& f) {
  using Method = engine::EngineOptions::SpeculativeMethod;
  Method& m = f.options.engine.speculative_method;
  int32_t& tokens = f.options.engine.speculative_tokens;
  const std::string& method = f.speculative_method;
  if (f.no_dspark && method == "dspark") {
    spdlog::error("bad_flags: --no-dspark contradicts --speculative-method dspark");
    return false;
  }
  if (method == "none") {
    if (tokens > 0) {
      spdlog::error("bad_flags: --speculative-method none with --speculative-tokens {}", tokens);
      return false;
    }
    m = Method::kNone;
  } else if (method == "mtp" || method == "dspark") {
    if (!f.speculative_tokens_given && method == "mtp") tokens = 1;
    if (f.speculative_tokens_given && tokens < 1) {
      spdlog::error("bad_flags: --speculative-method {} needs --speculative-tokens of 1 or more",
                    method);
      return false;
    }
    m = method == "mtp" ? Method::kMtp : Method::kDspark;
  } else if (f.no_dspark) {
    if (!f.speculative_tokens_given) tokens = 1;
    m = tokens > 0 ? Method::kNoDspark : Method::kNone;
  } else {
    m = f.speculative_tokens_given && tokens == 0 ? Method::kNone : Method::kAuto;
  }
  return true;
}

int Run(ServeFlags f) {
  // Every line from here on, start-up errors included, has the request log's timestamp format.
  util::InitLogging();
  auto max_request_bytes = util::ParseByteSize(f.max_request_bytes);
  auto kv_cache_memory = util::ParseByteSize(f.kv_cache_memory);
  if (!max_request_bytes || *max_request_bytes < 1024) {
    spdlog::error("bad_flags: --max-request-bytes '{}' is not a size of at least 1KiB",
                  f.max_request_bytes);
    return kExitBadInput;
  }
  if (!kv_cache_memory) {
    spdlog::error("bad_flags: --kv-cache-memory '{}' is not a size", f.kv_cache_memory);
    return kExitBadInput;
  }
  auto checkpoint_max_bytes = util::ParseByteSize(f.checkpoint_max_bytes);
  if (!checkpoint_max_bytes || *checkpoint_max_bytes < 1) {
    spdlog::error("bad_flags: --checkpoint-max-bytes '{}' is not a positive size",
                  f.checkpoint_max_bytes);
    return kExitBadInput;
  }
  auto max_image_bytes = util::ParseByteSize(f.max_image_bytes);
  if (!max_image_bytes || *max_image_bytes < 1) {
    spdlog::error("bad_flags: --max-image-bytes '{}' is not a positive size", f.max_image_bytes);
    return kExitBadInput;
  }
  f.options.media.max_image_bytes = *max_image_bytes;
  f.options.media.media_fetch_timeout_ms =
      static_cast<int>(std::min(f.media_fetch_timeout_s, 3600.0) * 1000);
  if (!ResolveSpeculative(f)) return kExitBadInput;
  f.options.checkpoint_max_bytes = *checkpoint_max_bytes;
  f.options.pd.role = api::ParsePdRole(f.pd_role).value_or(api::PdRole::kCombined);
  f.options.max_request_bytes = *max_request_bytes;
  f.options.engine.kv_cache_memory_bytes = *kv_cache_memory;
  f.options.data_parallel_cores = f.dp_cores == "turns" ? engine::DataParallelCores::kTurns
                                                        : engine::DataParallelCores::kSplit;
  return ExitCodeFor(api::Serve(std::move(f.options)));
}

}  // namespace

void RegisterServe(CLI::App& app, int* exit_code) {
  auto flags = std::make_shared<ServeFlags>();
  CLI::App* cmd = app.add_subcommand("serve", "OpenAI-compatible HTTP server over the engine");
  cmd->add_option("--model", flags->options.model,
                  "GGUF file, llama2.c checkpoint (.bin) or Hugging Face checkpoint folder "
                  "(default: models/SmolLM2-135M-Instruct.Q4_1.gguf in $DEEPINFER_CACHE or "
                  "~/.cache/deepinfer, which `make serve` fetches)");
  cmd->add_option("--tokenizer", flags->options.tokenizer,
                  "llama2.c tokenizer (default: tok*.bin beside the model)");
  cmd->add_option("--chat-template", flags->options.chat_template,
                  "chat encoder by name instead of the model's own: chatml, plain, deepseek-v3, "
                  "deepseek-v3.1, deepseek-v3.2, deepseek-v4, deepseek-v4.1");
  AddNumericsOption(cmd, &flags->options.engine.numerics);
  AddKvCacheDtypeOption(cmd, &flags->options.engine.kv_cache_dtype);
  cmd->add_option_function<int32_t>(
         "--speculative-tokens",
         [flags](const int32_t& n) {
           flags->options.engine.speculative_tokens = n;
           flags->speculative_tokens_given = true;
         },
         "draft tokens per step (structured outputs too; 0: off): MTP's chain, default 1; a "
         "cap on DSpark's block, default the whole block")
      ->check(CLI::Range(0, engine::kMaxSpeculativeTokens));
  cmd->add_option("--speculative-method", flags->speculative_method,
                  "speculative decoding: dspark (DeepSeek-V4.1's block drafter), mtp (the "
                  "model's MTP layers) or none; unset: dspark when the checkpoint has its "
                  "stages, else mtp when --speculative-tokens > 0")
      ->check(CLI::IsMember({"dspark", "mtp", "none"}));
  cmd->add_flag("--no-dspark", flags->no_dspark,
                "no DSpark: plain MTP drafts where the model has MTP layers, else none (the "
                "operator profile's spelling)");
  cmd->add_option("--dspark-confidence-threshold",
                  flags->options.engine.dspark_confidence_threshold,
                  "DSpark: cut a block's drafts before the first whose confidence is below this "
                  "(0: never)")
      ->check(CLI::Range(0.0f, 1.0f));
  cmd->add_option("--host", flags->options.host, "address to listen on")->capture_default_str();
  cmd->add_option("--port", flags->options.port, "TCP port (0: any free port)")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  cmd->add_option("--api-key", flags->options.api_keys,
                  "a key clients must send (Authorization: Bearer, or x-api-key); repeat for "
                  "several. Also: --api-key-file and $DEEPINFER_API_KEY. /health stays open")
      ->allow_extra_args(false);
  cmd->add_option("--api-key-file", flags->options.api_key_file,
                  "file with one API key per line (# starts a comment)");
  cmd->add_flag("--allow-unauthenticated", flags->options.allow_unauthenticated,
                "serve without an API key on an address other machines can reach (refused "
                "otherwise)");
  cmd->add_flag("--metrics-without-key", flags->options.metrics_without_key,
                "with API keys, let /metrics be scraped without one");
  cmd->add_option("--served-model-name", flags->options.served_model_name,
                  "model id clients must send (default: the model file's name without extension)");
  cmd->add_option("--max-model-len", flags->options.engine.max_model_len,
                  "context window in tokens (default: the model's)")
      ->check(CLI::Range(0, 1 << 24));
  cmd->add_option("--max-output-tokens", flags->options.max_output_tokens,
                  "most tokens one choice may generate (capped by the window)")
      ->check(CLI::Range(1, 1 << 24))
      ->capture_default_str();
  cmd->add_option("--max-request-bytes", flags->max_request_bytes,
                  "largest request body; larger ones get 413 (suffixes KiB, MiB, GiB)")
      ->capture_default_str();
  cmd->add_option("--limit-images-per-request", flags->options.media.limit_images_per_request,
                  "most images one request may carry (vLLM's --limit-mm-per-prompt image)")
      ->check(CLI::Range(0, api::kMaxImagesPerRequestLimit))
      ->capture_default_str();
  cmd->add_option("--allowed-media-domains", flags->options.media.allowed_media_domains,
                  "hosts whose http:// and https:// image URLs may be fetched (default: none; "
                  "data: URIs always work; https trusts the system's CAs, SSL_CERT_FILE adds a "
                  "private one)");
  cmd->add_option("--allowed-local-media-path", flags->options.media.allowed_local_media_path,
                  "folder file:// image URLs may be read from (default: none)");
  cmd->add_option("--media-fetch-timeout", flags->media_fetch_timeout_s,
                  "seconds one image URL fetch may take")
      ->check(CLI::Range(0.001, 3600.0))
      ->capture_default_str();
  cmd->add_option("--max-image-bytes", flags->max_image_bytes,
                  "largest encoded image (data: URI, fetch or file; suffixes KiB, MiB)")
      ->capture_default_str();
  cmd->add_option("--max-image-pixels", flags->options.media.max_image_pixels,
                  "largest image width x height, checked from its header before decoding")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 31))
      ->capture_default_str();
  cmd->add_option("--max-connections", flags->options.max_connections,
                  "open connections at once; more get 503")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  cmd->add_option("--prefill-budget", flags->options.engine.prefill_budget,
                  "tokens per engine step")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  // Serving shares the engine: a long prompt's prefill must not hold up everyone else
  // (bench/fairness.py measured the default; docs/benchmarks.md "Fairness").
  flags->options.engine.long_prefill_token_threshold = 1024;
  cmd->add_option("--long-prefill-token-threshold",
                  flags->options.engine.long_prefill_token_threshold,
                  "a request with more prompt tokens than this to prefill is a long prefill: "
                  "it runs in chunks of --long-prefill-chunk and steps aside one step for newly "
                  "arrived requests (0: off)")
      ->check(CLI::Range(0, 1 << 20))
      ->capture_default_str();
  cmd->add_option("--long-prefill-chunk", flags->options.engine.long_prefill_chunk,
                  "prompt tokens a long prefill computes per step")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  cmd->add_option("--max-num-seqs", flags->options.engine.max_num_seqs, "sequences running at once")
      ->check(CLI::Range(1, 1 << 16))
      ->capture_default_str();
  cmd->add_option("--block-size", flags->options.engine.block_size, "tokens per KV-cache block")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  cmd->add_option("--kv-cache-tokens", flags->options.engine.kv_cache_tokens,
                  "KV-cache capacity in tokens (default: from --kv-cache-memory)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40));
  cmd->add_option("--kv-cache-memory", flags->kv_cache_memory,
                  "KV-cache memory in bytes (suffixes KiB, MiB, GiB)")
      ->capture_default_str();
  cmd->add_option("--warmup-file", flags->options.warmup_file,
                  "request bodies run after the model loads, before /health answers 200: JSON "
                  "lines (or one JSON object), each a chat body (\"messages\") or a completion "
                  "body (\"prompt\"); a failing one stops the start (exit status 2)");
  cmd->add_option("--prefix-checkpoint-dir", flags->options.prefix_checkpoint_dir,
                  "an existing folder where prompts' prefixes of at least "
                  "--checkpoint-min-tokens are saved after their prefill and restored (verified) "
                  "instead of recomputed, also after a restart (docs/engine.md)");
  cmd->add_option("--checkpoint-min-tokens", flags->options.engine.checkpoint_min_tokens,
                  "least prefix length a checkpoint is saved or restored for")
      ->check(CLI::Range(1, 1 << 24))
      ->capture_default_str();
  cmd->add_option("--checkpoint-max-bytes", flags->checkpoint_max_bytes,
                  "most bytes the checkpoint files may take; the oldest go first (suffixes KiB, "
                  "MiB, GiB)")
      ->capture_default_str();
  cmd->add_option("--pd-role", flags->pd_role,
                  "prefill/decode disaggregation (docs/engine.md): combined (one server does "
                  "both), prefill (computes prompts' KV caches into --pd-checkpoint-dir for its "
                  "decode side), decode (the side clients talk to: asks --pd-prefill-url to "
                  "prefill, restores the checkpoint, computes the suffix and decodes); both sides "
                  "need DEEPINFER_PD_API_KEY in the environment and --model-revision")
      ->check(CLI::IsMember({"combined", "prefill", "decode"}))
      ->capture_default_str();
  cmd->add_option("--pd-checkpoint-dir", flags->options.pd_checkpoint_dir,
                  "an existing folder both sides of a P/D pair share for its checkpoints");
  cmd->add_option("--pd-prefill-url", flags->options.pd.prefill_url,
                  "the decode side's prefill side, http://host:port");
  cmd->add_option("--model-revision", flags->options.engine.model_revision,
                  "the weights' revision, written into every checkpoint and required of every "
                  "restored one (default: the model file's name and size)");
  cmd->add_flag("--expert-parallel", flags->options.expert_parallel,
                "one rank of `mpirun -np N deepinfer serve --expert-parallel ...`: each rank "
                "runs 1/N of every MoE layer's routed experts; rank 0 serves HTTP and schedules, "
                "the others follow its steps (docs/engine.md)");
  cmd->add_option("--expert-parallel-timeout", flags->options.expert_parallel_timeout_s,
                  "seconds a rank may stay silent (no heartbeat) before the job ends with "
                  "ep_rank_lost; /health answers 503 meanwhile")
      ->check(CLI::Range(1.0, 3600.0))
      ->capture_default_str();
  cmd->add_option("--data-parallel-size", flags->options.data_parallel_size,
                  "engine ranks over one copy of the weights, each with its own scheduler, KV "
                  "cache and prefix cache; --kv-cache-memory/--kv-cache-tokens are split between "
                  "them, --max-num-seqs is per rank (docs/engine.md)")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  cmd->add_option("--data-parallel-cores", flags->dp_cores,
                  "how ranks share --threads: split (each rank threads/ranks, stepping "
                  "independently) or turns (every rank all threads, one rank steps at a time)")
      ->check(CLI::IsMember({"split", "turns"}))
      ->capture_default_str();
  cmd->add_option("--threads", flags->options.engine.num_threads,
                  "worker threads (default: all cores)")
      ->check(CLI::Range(0, 1024));
  cmd->add_option("--seed", flags->options.engine.seed, "sampling seed for requests without one");
  cmd->add_flag_callback(
      "--no-prefix-caching", [flags] { flags->options.engine.enable_prefix_caching = false; },
      "disable the prefix cache");
  cmd->add_flag("--enable-force-include-usage", flags->options.force_include_usage,
                "every stream ends with a usage chunk, as if it had sent "
                "stream_options.include_usage (for clients that never ask)");
  cmd->add_flag("--enable-prompt-tokens-details", flags->enable_prompt_tokens_details,
                "accepted for vLLM compatibility; cached_tokens is always reported");
  // Two flags rather than CLI11's "!--no-..." alias, whose help shows the alias default {false}
  // for a switch that is on by default.
  cmd->add_flag("--log-requests", flags->options.log_requests,
                "one stderr line per answered request: route, status, duration, token counts, "
                "TTFT and TPOT, never the text (default: on; probes of /health and /metrics are "
                "left out)");
  cmd->add_flag_callback(
      "--no-log-requests", [flags] { flags->options.log_requests = false; },
      "turn --log-requests off");
  cmd->add_option("--log-stats-interval", flags->options.log_stats_interval_s,
                  "seconds between engine stats lines (throughput, queue, KV cache, prefix-cache "
                  "hits) while busy; 0: off")
      ->check(CLI::Range(0.0, 86400.0))
      ->capture_default_str();
  cmd->callback([flags, exit_code] { *exit_code = Run(*flags); });
}

}  // namespace deepinfer::cli
