// `deepinfer generate`: one prompt (or an interactive chat), no server. Requests go through
// engine::Engine exactly as `serve` submits them (one sequence at a time), so parity checks run
// the real engine; prefill and decode speed come from the request's own engine-side timings.

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "api/image_inputs.h"
#include "arch/causal_lm.h"
#include "cli/chat_input.h"
#include "cli/commands.h"
#include "cli/exit_code.h"
#include "cli/numerics_flag.h"
#include "engine/engine.h"
#include "engine/expert_parallel.h"
#include "fmt/format.h"
#include "image/image.h"
#include "image/deepseek_vision.h"
#include "model/model.h"
#include "nlohmann/json.hpp"
#include "tokenizer/chat_template.h"
#include "tokenizer/detokenizer.h"
#include "tokenizer/servable.h"
#include "tokenizer/tokenizer.h"
#include "util/error_codes.h"
#include "util/mapped_file.h"
#include "util/status.h"
#include "xxhash.h"

namespace deepinfer::cli {
namespace {

struct GenerateFlags {
  std::string model;
  std::string tokenizer;
  std::string prompt;
  std::vector<int32_t> prompt_ids;  // --prompt-ids: token ids instead of text
  std::vector<std::string> images;  // --image: one per image token id in --prompt-ids
  bool print_ids = false;           // --print-ids: token ids on stdout instead of text
  bool chat = false;
  bool raw = false;
  int max_tokens = 256;
  float temperature = 0.0f;
  float top_p = 1.0f;
  int top_k = 0;
  float min_p = 0.0f;
  float repetition_penalty = 1.0f;
  int64_t seed = -1;
  int threads = 0;
  int random_prompt_tokens = 0;
  bool ignore_eos = false;
  bool json = false;
  std::string system;
  std::string chat_template;
  std::optional<arch::Numerics> numerics;  // unset: the model's default
  std::string speculative_method = "auto";  // auto | dspark | mtp | none
  int32_t speculative_tokens = -1;  // unset: the drafter's default; 0: off
  kernels::KvDtype kv_cache_dtype = kernels::KvDtype::kF32;
  bool expert_parallel = false;  // --expert-parallel: one rank of an mpirun job
  double expert_parallel_timeout_s = 10;
};

struct TurnStats {
  int prompt_tokens = 0;
  int computed_prompt_tokens = 0;
  int generated = 0;
  double prefill_s = 0;
  double decode_s = 0;
  std::string finish = "length";
  std::vector<int32_t> token_ids;  // the generated tokens, in order
};

// What every turn's request shares: sampling settings and the stop tokens. `tok` is null for a
// model without a tokenizer (--prompt-ids only); its stop tokens are then the end-of-generation
// ids the model file names, if any.
engine::GenerateRequest RequestTemplate(const GenerateFlags& f, const model::Model& m,
                                        const tokenizer::Tokenizer* tok) {
  engine::GenerateRequest r;
  r.sampling.temperature = f.temperature;
  r.sampling.top_p = f.top_p;
  r.sampling.top_k = f.top_k;
  r.sampling.min_p = f.min_p;
  r.sampling.repetition_penalty = f.repetition_penalty;
  r.sampling.has_seed = f.seed >= 0;
  r.sampling.seed = static_cast<uint64_t>(f.seed);
  // Generation ends at the text tokenizer's end-of-generation tokens (what the user sees as the
  // end of a reply), or, with --ignore-eos, only at max_tokens or the context window.
  r.ignore_eos = true;
  if (!f.ignore_eos && tok != nullptr) {
    for (int32_t id = 0; id < tok->vocab_size(); ++id) {
      if (tok->IsEog(id)) r.stop_token_ids.push_back(id);
    }
  } else if (!f.ignore_eos) {
    r.stop_token_ids = m.tokenizer.eog_ids;
    if (r.stop_token_ids.empty() && m.tokenizer.eos_id >= 0) {
      r.stop_token_ids.push_back(m.tokenizer.eos_id);
    }
  }
  return r;
}

const char* FinishName(engine::FinishReason reason) {
  switch (reason) {
    case engine::FinishReason::kStop:
      return "stop";
    case engine::FinishReason::kCancelled:
      return "interrupted";
    default:
      return "length";
  }
}

// Submits one reply to `prompt` to the engine and streams it. `stop` (may be null) is polled
// while waiting; when it answers true the request is cancelled, the reply ends with what was
// shown so far, and finish is "interrupted". `tok` null: no text (the ids are in TurnStats).
absl::StatusOr<TurnStats> Generate(engine::Engine& engine, const tokenizer::Tokenizer* tok,
                                   const engine::GenerateRequest& base,
                                   const std::vector<int32_t>& prompt, std::string* text_out,
                                   bool echo, bool (*stop)() = nullptr) {
  TurnStats st;
  st.prompt_tokens = static_cast<int>(prompt.size());
  engine::GenerateRequest req = base;
  req.prompt = prompt;
  req.max_tokens =
      std::min(base.max_tokens, engine.max_model_len() - static_cast<int32_t>(prompt.size()));
  DI_ASSIGN_OR_RETURN(std::shared_ptr<engine::RequestStream> stream, engine.Submit(std::move(req)));
  std::optional<tokenizer::IncrementalDetokenizer> detok;
  if (tok != nullptr) detok.emplace(*tok);
  std::string piece;
  engine::StreamUpdate u;
  bool cancelled = false;
  while (true) {
    if (!cancelled && stop != nullptr && stop()) {
      stream->Cancel();
      cancelled = true;  // tokens still on their way were never shown: drop them
    }
    if (!stream->Wait(u, std::chrono::milliseconds(20))) continue;
    for (const engine::TokenEvent& t : u.tokens) {
      if (cancelled) break;
      ++st.generated;
      st.token_ids.push_back(t.token);
      if (!detok) continue;
      piece.clear();
      detok->Push(t.token, &piece);
      if (echo && !piece.empty()) {
        std::fwrite(piece.data(), 1, piece.size(), stdout);
        std::fflush(stdout);
      }
      if (text_out) *text_out += piece;
    }
    if (u.finish != engine::FinishReason::kNone) break;
  }
  if (u.finish == engine::FinishReason::kError) {
    return InternalError(u.error_code, u.error);
  }
  if (detok) {
    piece.clear();
    detok->Finish(&piece);
    if (echo) std::fwrite(piece.data(), 1, piece.size(), stdout);
    if (text_out) *text_out += piece;
  }
  st.computed_prompt_tokens = u.prompt_tokens - u.cached_tokens;
  st.prefill_s = u.timings.prefill_s;
  st.decode_s = u.timings.decode_s;
  st.finish = FinishName(u.finish);
  return st;
}

// Token ids as "1,2,3" (the form --prompt-ids reads).
std::string JoinIds(const std::vector<int32_t>& ids) {
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i > 0) out += ',';
    out += std::to_string(ids[i]);
  }
  return out;
}

// `ids`: also give the generated token ids (the JSON line's "token_ids").
void PrintStats(const TurnStats& st, bool json, const std::string* text = nullptr,
                bool ids = false) {
  double prefill_tps = st.computed_prompt_tokens / std::max(st.prefill_s, 1e-9);
  // The first generated token comes from the prefill logits; decode steps = generated - 1.
  int decode_steps = std::max(0, st.generated - 1);
  double decode_tps = decode_steps / std::max(st.decode_s, 1e-9);
  if (json) {
    nlohmann::json j = {
        {"prompt_tokens", st.prompt_tokens}, {"prefill_tokens", st.computed_prompt_tokens},
        {"generated_tokens", st.generated},  {"prefill_s", st.prefill_s},
        {"decode_s", st.decode_s},           {"prefill_tokens_per_s", prefill_tps},
        {"decode_tokens_per_s", decode_tps}, {"finish_reason", st.finish}};
    if (text != nullptr) j["text"] = *text;
    if (ids) j["token_ids"] = st.token_ids;
    std::cout << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  } else {
    std::fprintf(stderr,
                 "\n[prefill %d tokens in %.3f s: %.1f tokens/s | decode %d tokens in %.3f s: "
                 "%.1f tokens/s | finish: %s]\n",
                 st.computed_prompt_tokens, st.prefill_s, prefill_tps, st.generated, st.decode_s,
                 decode_tps, st.finish.c_str());
  }
}

int Fail(const absl::Status& s) { return ReportFailure("generate", s); }

// One sequence at a time, over a KV cache as long as the model's context. Prefill chunks of 512
// tokens keep scratch memory bounded and, with --numerics ggml, are llama.cpp's batches.
absl::StatusOr<std::unique_ptr<engine::Engine>> StartEngine(
    const GenerateFlags& f, const model::Model& m,
    std::shared_ptr<engine::ExpertParallelGroup> experts) {
  const int capacity = m.config.max_context > 0 ? m.config.max_context : 4096;
  engine::EngineOptions o;
  o.max_num_seqs = 1;
  o.prefill_budget = 512;
  o.max_model_len = capacity;
  o.kv_cache_tokens = (int64_t{capacity} + o.block_size - 1) / o.block_size * o.block_size;
  o.num_threads = f.threads;
  o.seed = std::random_device{}();  // for unseeded sampling; --seed is the request's own
  o.numerics = f.numerics;
  o.kv_cache_dtype = f.kv_cache_dtype;
  using Method = engine::EngineOptions::SpeculativeMethod;
  // As serve: --speculative-tokens 0 turns drafting off.
  o.speculative_method = f.speculative_tokens == 0             ? Method::kNone
                         : f.speculative_method == "dspark" ? Method::kDspark
                         : f.speculative_method == "mtp"    ? Method::kMtp
                         : f.speculative_method == "none"   ? Method::kNone
                                                            : Method::kAuto;
  o.speculative_tokens = std::max(0, f.speculative_tokens);
  o.expert_parallel = std::move(experts);
  return engine::Engine::Create(m, o);
}

int RunRandomPrompt(const GenerateFlags& f, engine::Engine& engine, const tokenizer::Tokenizer* tok,
                    const engine::GenerateRequest& base) {
  // Benchmark mode: a reproducible random prompt of ordinary (non-special) tokens.
  std::mt19937 rng(f.seed >= 0 ? static_cast<uint32_t>(f.seed) : 0);
  std::vector<int32_t> prompt;
  while (static_cast<int>(prompt.size()) < f.random_prompt_tokens) {
    int32_t t = static_cast<int32_t>(rng() % engine.model().config.vocab);
    if (tok == nullptr || !tok->IsSpecial(t)) prompt.push_back(t);
  }
  if (static_cast<int>(prompt.size()) >= engine.max_model_len()) {
    return Fail(
        util::CodedError(util::codes::kContextLengthExceeded, "the prompt fills the context"));
  }
  auto st = Generate(engine, tok, base, prompt, nullptr, false);
  if (!st.ok()) return Fail(st.status());
  PrintStats(*st, f.json, nullptr, f.print_ids);
  if (f.print_ids && !f.json) std::printf("%s\n", JoinIds(st->token_ids).c_str());
  return 0;
}

// --image with --prompt-ids: each image token id in `prompt` marks where the next image goes
// and becomes its span (n_h (n_w + 1) + 2 image token ids); the images, decoded and
// preprocessed as DeepSeek's reference does (image/deepseek_vision.h), go into `request`.
// Errors: kUnsupportedContent (a text-only model), kBadFlags (counts disagree), the file's and
//   the image library's.
absl::Status ExpandImages(const GenerateFlags& f, const model::Model& m,
                          std::vector<int32_t>& prompt, engine::GenerateRequest& request) {
  if (f.images.empty()) return absl::OkStatus();
  if (!m.config.deepseek_v4 || !m.config.deepseek_v4->vision) {
    return util::CodedError(util::codes::kUnsupportedContent,
                            "--image: this model takes text only (no vision_config)");
  }
  const model::DeepseekV41VisionConfig& v = *m.config.deepseek_v4->vision;
  const image::VisionKnobs knobs = api::VisionKnobsOf(v);
  const size_t marks = static_cast<size_t>(
      std::count(prompt.begin(), prompt.end(), static_cast<int32_t>(v.image_token_id)));
  if (marks != f.images.size()) {
    return util::CodedError(
        util::codes::kBadFlags,
        fmt::format("--prompt-ids has {} image token ids ({}) for {} --image files", marks,
                    v.image_token_id, f.images.size()));
  }
  std::vector<int32_t> out;
  size_t next = 0;
  for (int32_t id : prompt) {
    if (id != v.image_token_id) {
      out.push_back(id);
      continue;
    }
    DI_ASSIGN_OR_RETURN(std::string bytes, util::ReadFile(f.images[next]));
    const std::span<const uint8_t> data(reinterpret_cast<const uint8_t*>(bytes.data()),
                                        bytes.size());
    DI_ASSIGN_OR_RETURN(image::RgbImage rgb, image::DecodeImage(data));
    DI_ASSIGN_OR_RETURN(image::PreprocessedImage pre, image::PreprocessImage(rgb, knobs));
    auto in = std::make_shared<engine::ImageInput>();
    in->position = static_cast<int32_t>(out.size());
    in->n_vit_h = pre.plan.n_vit_h;
    in->n_vit_w = pre.plan.n_vit_w;
    in->pixel_values = std::move(pre.pixel_values);
    in->content_hash = XXH3_64bits(bytes.data(), bytes.size());
    out.insert(out.end(), pre.plan.num_image_tokens(), v.image_token_id);
    request.images.push_back(std::move(in));
    ++next;
  }
  prompt = std::move(out);
  return absl::OkStatus();
}

// --prompt-ids: the prompt is token ids (so a reference's ids can be checked without a
// tokenizer). With --print-ids, or when the model has no tokenizer, stdout gets the generated
// ids ("1,2,3") instead of text.
int RunPromptIds(const GenerateFlags& f, engine::Engine& engine, const tokenizer::Tokenizer* tok,
                 const engine::GenerateRequest& base) {
  const int32_t vocab = engine.model().config.vocab;
  for (int32_t id : f.prompt_ids) {
    if (id < 0 || id >= vocab) {
      return Fail(util::CodedError(
          util::codes::kInvalidToken,
          fmt::format("prompt id {} is not in the vocabulary [0, {})", id, vocab)));
    }
  }
  if (static_cast<int>(f.prompt_ids.size()) >= engine.max_model_len()) {
    return Fail(
        util::CodedError(util::codes::kContextLengthExceeded, "the prompt fills the context"));
  }
  std::vector<int32_t> prompt = f.prompt_ids;
  engine::GenerateRequest request = base;
  if (auto st = ExpandImages(f, engine.model(), prompt, request); !st.ok()) return Fail(st);
  const bool ids = f.print_ids || tok == nullptr;
  std::string text;
  auto st = Generate(engine, ids ? nullptr : tok, request, prompt, &text, !ids && !f.json);
  if (!st.ok()) return Fail(st.status());
  PrintStats(*st, f.json, ids ? nullptr : &text, ids);
  if (!f.json) std::printf("%s\n", ids ? JoinIds(st->token_ids).c_str() : "");
  return 0;
}

int RunPrompt(const GenerateFlags& f, engine::Engine& engine, const tokenizer::Tokenizer& tok,
              const engine::GenerateRequest& base) {
  std::vector<int32_t> prompt = tok.Encode(f.prompt, /*parse_special=*/f.raw);
  if (prompt.empty())
    return Fail(util::CodedError(util::codes::kEmptyPrompt, "the prompt is empty"));
  if (static_cast<int>(prompt.size()) >= engine.max_model_len()) {
    return Fail(
        util::CodedError(util::codes::kContextLengthExceeded, "the prompt fills the context"));
  }
  const bool echo = !f.json && !f.print_ids;
  if (echo) std::fwrite(f.prompt.data(), 1, f.prompt.size(), stdout);
  std::string text;
  auto st = Generate(engine, &tok, base, prompt, &text, echo);
  if (!st.ok()) return Fail(st.status());
  PrintStats(*st, f.json, &text, f.print_ids);
  if (!f.json) std::printf("%s\n", f.print_ids ? JoinIds(st->token_ids).c_str() : "");
  return 0;
}

// Each turn submits the whole conversation; the engine's prefix cache finds the earlier turns'
// full KV blocks, so a turn computes little more than its own text.
int RunChat(const GenerateFlags& f, engine::Engine& engine, const tokenizer::Tokenizer& tok,
            const tokenizer::ChatTemplate& tmpl, const engine::GenerateRequest& base) {
  std::vector<tokenizer::ChatMessage> messages;
  if (!f.system.empty()) messages.push_back({"system", f.system});
  std::unique_ptr<ChatInput> input = ChatInput::Create("> ");
  std::fprintf(stderr, "deepinfer chat with %s (%s template). %s\n",
               engine.model().config.name.c_str(), std::string(tmpl.name()).c_str(),
               input->interactive()
                   ? "Ctrl-C stops a reply; Ctrl-C on an empty line or Ctrl-D exits."
                   : "Empty line or end of input ends.");
  std::string line;
  while (true) {
    ChatInput::Result got = input->Read(&line);
    if (got == ChatInput::Result::kEof) break;
    if (got == ChatInput::Result::kInterrupted) {
      // As in a shell: Ctrl-C drops what was typed; on an empty line (so also a second Ctrl-C
      // right after one that stopped a reply) it ends the chat, with a shell's status for it.
      if (line.empty()) return 130;
      continue;
    }
    if (line.empty()) {
      // On a terminal a stray Enter is not a wish to leave; piped input keeps its old meaning.
      if (input->interactive()) continue;
      break;
    }
    input->AddHistory(line);
    messages.push_back({"user", line});
    std::string rendered = tmpl.Render(messages, /*add_generation_prompt=*/true);
    std::vector<int32_t> prompt = tok.Encode(rendered, /*parse_special=*/true);
    if (static_cast<int>(prompt.size()) + 1 >= engine.max_model_len()) {
      return Fail(util::CodedError(util::codes::kContextLengthExceeded, "conversation too long"));
    }
    std::string reply;
    auto st = Generate(engine, &tok, base, prompt, &reply, true, &StopRequested);
    ClearStopRequest();
    if (!st.ok()) return Fail(st.status());
    // Piped or redirected, each reply is a line of its own (on a terminal the stats line on
    // stderr starts with the newline).
    if (!isatty(STDOUT_FILENO)) std::fputc('\n', stdout);
    std::fflush(stdout);
    PrintStats(*st, false);
    if (st->finish == "interrupted" && st->generated == 0) {
      // Stopped before the first token: the question goes too, so it can be asked again.
      messages.pop_back();
      continue;
    }
    // A stopped reply stays in the conversation as far as the user saw it.
    messages.push_back({"assistant", reply});
  }
  return 0;
}

int Run(const GenerateFlags& f) {
  // Token ids in and out need no tokenizer: a checkpoint without one (the synthetic parity
  // checkpoints) still runs.
  const bool ids_only = !f.prompt_ids.empty() || (f.random_prompt_tokens > 0 && f.print_ids);
  // Expert parallelism: declared before the engine, so the engine (whose last call tells the
  // other ranks to stop) goes first.
  std::shared_ptr<engine::ExpertParallelGroup> experts;
  if (f.expert_parallel) {
    auto group = engine::ExpertParallelGroup::Init(f.expert_parallel_timeout_s);
    if (!group.ok()) return Fail(group.status());
    experts = *std::move(group);
  }
  auto servable = tokenizer::LoadServable({.model_path = f.model,
                                           .tokenizer_path = f.tokenizer,
                                           .chat_template = f.chat_template,
                                           .text_optional = ids_only,
                                           .unread_tensors =
                                               engine::ExpertParallelUnread(experts.get())});
  if (!servable.ok()) return Fail(servable.status());
  const model::Model& m = *servable->model;
  const tokenizer::Tokenizer* tok = servable->tokenizer.get();
  if (tok == nullptr) {
    std::fprintf(stderr, "deepinfer generate: no tokenizer (%s): token ids only\n",
                 std::string(servable->text_status.message()).c_str());
  }
  if (experts != nullptr && experts->rank() != 0) {
    const absl::Status followed = engine::RunExpertParallelFollower(m, *experts, f.threads);
    return followed.ok() ? 0 : Fail(followed);
  }
  auto engine = StartEngine(f, m, experts);
  if (!engine.ok()) return Fail(engine.status());
  engine::GenerateRequest base = RequestTemplate(f, m, tok);
  base.max_tokens = f.max_tokens;
  if (!f.prompt_ids.empty()) return RunPromptIds(f, **engine, tok, base);
  if (f.random_prompt_tokens > 0) return RunRandomPrompt(f, **engine, tok, base);
  if (!f.chat) return RunPrompt(f, **engine, *tok, base);
  return RunChat(f, **engine, *tok, *servable->chat_template, base);
}

}  // namespace

void RegisterGenerate(CLI::App& app, int* exit_code) {
  auto flags = std::make_shared<GenerateFlags>();
  CLI::App* cmd =
      app.add_subcommand("generate", "Generate text from one prompt, or chat, without a server");
  cmd->add_option("--model", flags->model,
                  "GGUF file, llama2.c checkpoint (.bin) or Hugging Face checkpoint folder")
      ->required();
  cmd->add_option("--tokenizer", flags->tokenizer,
                  "llama2.c tokenizer (default: tok*.bin beside the model)");
  auto* prompt = cmd->add_option("--prompt", flags->prompt, "prompt text (plain continuation)");
  auto* chat = cmd->add_flag("--chat", flags->chat,
                             "interactive chat using the model's chat template; on a terminal: "
                             "line editing, Up/Down recall this session's prompts, Ctrl-C stops "
                             "a reply, Ctrl-C on an empty line (exit status 130) or Ctrl-D "
                             "(status 0) exits");
  auto* random = cmd->add_option("--random-prompt-tokens", flags->random_prompt_tokens,
                                 "benchmark: a random prompt of N tokens");
  auto* prompt_ids =
      cmd->add_option("--prompt-ids", flags->prompt_ids,
                      "the prompt as token ids, e.g. 1,2,3 (no tokenizer needed; the reply is "
                      "printed as ids when the model has none)")
          ->delimiter(',');
  prompt->excludes(chat);
  chat->excludes(random);
  prompt_ids->excludes(prompt)->excludes(chat)->excludes(random);
  cmd->add_option("--image", flags->images,
                  "an image file (PNG, JPEG, WebP, GIF) for the next image token id of "
                  "--prompt-ids, which expands to the image's span; repeatable")
      ->needs(prompt_ids)
      ->check(CLI::ExistingFile);
  cmd->add_flag("--print-ids", flags->print_ids,
                "print the generated token ids (1,2,3) instead of text; with --json as "
                "\"token_ids\"");
  cmd->add_flag("--raw", flags->raw, "parse special-token syntax in --prompt");
  cmd->add_option("--system", flags->system, "system prompt for --chat");
  cmd->add_option("--chat-template", flags->chat_template,
                  "chat encoder by name (see serve --help)");
  cmd->add_option("--max-tokens", flags->max_tokens, "tokens to generate")
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--temperature", flags->temperature, "0 = greedy")->check(CLI::Range(0.0, 100.0));
  cmd->add_option("--top-p", flags->top_p)->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--top-k", flags->top_k)->check(CLI::Range(0, 1 << 20));
  cmd->add_option("--min-p", flags->min_p)->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--repetition-penalty", flags->repetition_penalty)
      ->check(CLI::Range(0.01, 100.0));
  cmd->add_option("--seed", flags->seed, "sampling seed (same seed, same tokens)");
  cmd->add_option("--threads", flags->threads, "worker threads (default: all cores)")
      ->check(CLI::Range(0, 1024));
  AddNumericsOption(cmd, &flags->numerics);
  cmd->add_option("--speculative-method", flags->speculative_method,
                  "drafter: auto (DSpark when the checkpoint has its stages, else MTP with "
                  "--speculative-tokens > 0), dspark, mtp or none; greedy output is the same")
      ->check(CLI::IsMember({"auto", "dspark", "mtp", "none"}))
      ->capture_default_str();
  cmd->add_option("--speculative-tokens", flags->speculative_tokens,
                  "draft tokens per step: MTP's chain (default 1 with mtp), a cap on DSpark's "
                  "block (default the whole block); 0: off")
      ->check(CLI::Range(0, engine::kMaxSpeculativeTokens));
  AddKvCacheDtypeOption(cmd, &flags->kv_cache_dtype);
  cmd->add_flag("--ignore-eos", flags->ignore_eos, "keep generating past end-of-generation tokens");
  cmd->add_flag("--json", flags->json, "print timings as one JSON line on stdout");
  cmd->add_flag("--expert-parallel", flags->expert_parallel,
                "one rank of `mpirun -np N deepinfer generate --expert-parallel ...`: each rank "
                "runs 1/N of every MoE layer's routed experts; rank 0 prints");
  cmd->add_option("--expert-parallel-timeout", flags->expert_parallel_timeout_s,
                  "seconds a rank may stay silent before the job ends (ep_rank_lost)")
      ->check(CLI::Range(1.0, 3600.0))
      ->capture_default_str();
  cmd->callback([flags, exit_code, cmd] {
    if (flags->prompt.empty() && flags->prompt_ids.empty() && !flags->chat &&
        flags->random_prompt_tokens == 0) {
      std::fprintf(stderr,
                   "deepinfer generate: bad_flags: give --prompt, --prompt-ids, --chat or "
                   "--random-prompt-tokens\n");
      *exit_code = 2;
      return;
    }
    *exit_code = Run(*flags);
  });
}

}  // namespace deepinfer::cli
