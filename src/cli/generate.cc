// `deepinfer generate`: one prompt (or an interactive chat), no server. Drives the forward pass
// directly over a private KV cache so prefill and decode speed can be measured exactly.

#include <chrono>
#include <cstdio>
#include <iostream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "arch/causal_lm.h"
#include "cli/chat_input.h"
#include "cli/commands.h"
#include "engine/sampler.h"
#include "fmt/format.h"
#include "model/model.h"
#include "nlohmann/json.hpp"
#include "tokenizer/chat_template.h"
#include "tokenizer/detokenizer.h"
#include "tokenizer/model_text.h"
#include "tokenizer/tokenizer.h"
#include "util/status.h"

namespace deepinfer::cli {
namespace {

using Clock = std::chrono::steady_clock;

struct GenerateFlags {
  std::string model;
  std::string tokenizer;
  std::string prompt;
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
  std::string numerics = "fast";
};

// One conversation's state: the tokens already in the KV cache are reused when the next prompt
// starts with them (multi-turn chat only recomputes the new turn).
class Session {
 public:
  Session(const model::Model& m, arch::CausalLm& lm, util::ThreadPool& pool, int capacity)
      : model_(m), lm_(lm), pool_(pool) {
    const int bs = 16;
    int blocks = (capacity + bs - 1) / bs;
    status_ = kv_.Allocate(m.config.num_layers, bs, blocks, lm.kv_floats_per_token());
    for (int i = 0; i < blocks; ++i) table_.push_back(i);
    logits_.resize(m.config.vocab);
  }
  const absl::Status& status() const { return status_; }
  int capacity() const { return static_cast<int>(table_.size()) * kv_.block_size; }

  // Makes the cache hold exactly `tokens` and leaves the logits of the last one in logits().
  // Returns the number of tokens computed. When `stop` answers true between chunks the cache
  // holds only a prefix of `tokens` (which the next call reuses) and logits() is not valid.
  int Prefill(const std::vector<int32_t>& tokens, bool (*stop)() = nullptr) {
    size_t common = 0;
    while (common < cached_.size() && common < tokens.size() && cached_[common] == tokens[common]) {
      ++common;
    }
    if (common == tokens.size()) --common;  // the last token's logits must be recomputed
    cached_.assign(tokens.begin(), tokens.begin() + common);
    std::vector<int32_t> rest(tokens.begin() + common, tokens.end());
    size_t before = cached_.size();
    Run(rest, stop);
    return static_cast<int>(cached_.size() - before);
  }

  void Decode(int32_t token) { Run({token}); }
  float* logits() { return logits_.data(); }
  const std::vector<int32_t>& cached() const { return cached_; }

 private:
  void Run(const std::vector<int32_t>& tokens, bool (*stop)() = nullptr) {
    // Chunks of 512 keep scratch memory bounded for long prompts.
    for (size_t off = 0; off < tokens.size(); off += 512) {
      if (stop != nullptr && stop()) return;
      int n = static_cast<int>(std::min<size_t>(512, tokens.size() - off));
      arch::ForwardBatch b;
      b.tokens = tokens.data() + off;
      b.num_tokens = n;
      bool last = off + n == tokens.size();
      b.seqs.push_back({0, n, static_cast<int32_t>(cached_.size()), last ? 1 : 0, table_.data(),
                        static_cast<int32_t>(table_.size())});
      lm_.Forward(b, kv_, logits_.data(), pool_);
      cached_.insert(cached_.end(), tokens.begin() + off, tokens.begin() + off + n);
    }
  }

  const model::Model& model_;
  arch::CausalLm& lm_;
  util::ThreadPool& pool_;
  arch::KvCache kv_;
  std::vector<int32_t> table_;
  std::vector<int32_t> cached_;
  std::vector<float> logits_;
  absl::Status status_;
};

struct TurnStats {
  int prompt_tokens = 0;
  int computed_prompt_tokens = 0;
  int generated = 0;
  double prefill_s = 0;
  double decode_s = 0;
  std::string finish = "length";
};

// Generates one reply to `prompt`. `stop` (may be null) is polled between prefill chunks and
// between tokens; when it answers true the reply ends there with finish "interrupted".
TurnStats Generate(const GenerateFlags& f, const model::Model& m, const tokenizer::Tokenizer& tok,
                   Session& session, const std::vector<int32_t>& prompt, std::string* text_out,
                   bool echo, bool (*stop)() = nullptr) {
  TurnStats st;
  st.prompt_tokens = static_cast<int>(prompt.size());
  engine::SamplingParams sp;
  sp.temperature = f.temperature;
  sp.top_p = f.top_p;
  sp.top_k = f.top_k;
  sp.min_p = f.min_p;
  sp.repetition_penalty = f.repetition_penalty;
  sp.has_seed = f.seed >= 0;
  sp.seed = static_cast<uint64_t>(f.seed);
  engine::Sampler sampler(sp, prompt, std::random_device{}());
  tokenizer::IncrementalDetokenizer detok(tok);

  auto t0 = Clock::now();
  st.computed_prompt_tokens = session.Prefill(prompt, stop);
  auto t1 = Clock::now();
  st.prefill_s = std::chrono::duration<double>(t1 - t0).count();

  int max_new = std::min(f.max_tokens, session.capacity() - static_cast<int>(prompt.size()));
  std::string piece;
  for (int i = 0; i < max_new; ++i) {
    if (stop != nullptr && stop()) {
      st.finish = "interrupted";
      break;
    }
    int32_t next = sampler.Sample(session.logits(), m.config.vocab).token;
    if (!f.ignore_eos && tok.IsEog(next)) {
      st.finish = "stop";
      break;
    }
    ++st.generated;
    piece.clear();
    detok.Push(next, &piece);
    if (echo && !piece.empty()) {
      std::fwrite(piece.data(), 1, piece.size(), stdout);
      std::fflush(stdout);
    }
    if (text_out) *text_out += piece;
    if (i + 1 < max_new) session.Decode(next);
  }
  piece.clear();
  detok.Finish(&piece);
  if (echo) std::fwrite(piece.data(), 1, piece.size(), stdout);
  if (text_out) *text_out += piece;
  st.decode_s = std::chrono::duration<double>(Clock::now() - t1).count();
  return st;
}

void PrintStats(const TurnStats& st, bool json, const std::string* text = nullptr) {
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
    std::cout << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  } else {
    std::fprintf(stderr,
                 "\n[prefill %d tokens in %.3f s: %.1f tokens/s | decode %d tokens in %.3f s: "
                 "%.1f tokens/s | finish: %s]\n",
                 st.computed_prompt_tokens, st.prefill_s, prefill_tps, st.generated, st.decode_s,
                 decode_tps, st.finish.c_str());
  }
}

int Run(const GenerateFlags& f) {
  auto fail = [](const absl::Status& s) {
    std::fprintf(stderr, "deepinfer generate: %s\n", OneLineError(s).c_str());
    return 2;
  };
  auto model = model::LoadModel(f.model, f.tokenizer);
  if (!model.ok()) return fail(model.status());
  const model::Model& m = **model;
  auto text = tokenizer::LoadModelText(m, f.chat_template);
  if (!text.ok()) return fail(text.status());
  std::unique_ptr<tokenizer::Tokenizer>* tok = &text->tokenizer;
  auto lm = arch::CreateCausalLm(m);
  if (!lm.ok()) return fail(lm.status());
  if (f.numerics == "ggml" && !(*lm)->SetNumerics(arch::Numerics::kGgml)) {
    return fail(UnimplementedError("unsupported_numerics",
                                   "--numerics ggml is implemented for Llama-architecture "
                                   "models only."));
  }
  int threads = f.threads > 0 ? f.threads : static_cast<int>(std::thread::hardware_concurrency());
  util::ThreadPool pool(threads);
  int capacity = m.config.max_context > 0 ? m.config.max_context : 4096;
  Session session(m, **lm, pool, capacity);
  if (!session.status().ok()) return fail(session.status());

  if (f.random_prompt_tokens > 0) {
    // Benchmark mode: a reproducible random prompt of ordinary (non-special) tokens.
    std::mt19937 rng(f.seed >= 0 ? static_cast<uint32_t>(f.seed) : 0);
    std::vector<int32_t> prompt;
    while (static_cast<int>(prompt.size()) < f.random_prompt_tokens) {
      int32_t t = static_cast<int32_t>(rng() % m.config.vocab);
      if (!(*tok)->IsSpecial(t)) prompt.push_back(t);
    }
    TurnStats st = Generate(f, m, **tok, session, prompt, nullptr, false);
    PrintStats(st, f.json);
    return 0;
  }

  if (!f.chat) {
    std::vector<int32_t> prompt;
    if (f.raw) {
      prompt = (*tok)->Encode(f.prompt, /*parse_special=*/true);
    } else {
      prompt = (*tok)->Encode(f.prompt, /*parse_special=*/false);
    }
    if (prompt.empty()) return fail(InvalidArgumentError("empty_prompt", "the prompt is empty"));
    if (static_cast<int>(prompt.size()) >= capacity) {
      return fail(InvalidArgumentError("context_length_exceeded", "the prompt fills the context"));
    }
    if (!f.json) std::fwrite(f.prompt.data(), 1, f.prompt.size(), stdout);
    std::string text;
    TurnStats st = Generate(f, m, **tok, session, prompt, &text, !f.json);
    PrintStats(st, f.json, &text);
    std::printf("\n");
    return 0;
  }

  std::unique_ptr<tokenizer::ChatTemplate>* tmpl = &text->chat_template;
  std::vector<tokenizer::ChatMessage> messages;
  if (!f.system.empty()) messages.push_back({"system", f.system});
  std::unique_ptr<ChatInput> input = ChatInput::Create("> ");
  std::fprintf(stderr, "deepinfer chat with %s (%s template). %s\n", m.config.name.c_str(),
               std::string((*tmpl)->name()).c_str(),
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
    std::string rendered = (*tmpl)->Render(messages, /*add_generation_prompt=*/true);
    std::vector<int32_t> prompt = (*tok)->Encode(rendered, /*parse_special=*/true);
    if (static_cast<int>(prompt.size()) + 1 >= capacity) {
      std::fprintf(stderr, "deepinfer generate: context_length_exceeded: conversation too long\n");
      return 2;
    }
    std::string reply;
    TurnStats st = Generate(f, m, **tok, session, prompt, &reply, true, &StopRequested);
    ClearStopRequest();
    PrintStats(st, false);
    if (st.finish == "interrupted" && st.generated == 0) {
      // Stopped before the first token: the question goes too, so it can be asked again.
      messages.pop_back();
      continue;
    }
    // A stopped reply stays in the conversation as far as the user saw it.
    messages.push_back({"assistant", reply});
  }
  return 0;
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
  prompt->excludes(chat);
  chat->excludes(random);
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
  cmd->add_option("--numerics", flags->numerics,
                  "fast (default), or ggml: float arithmetic bit-identical to llama.cpp's CPU "
                  "backend, so greedy output is token-identical to it (Llama models; slower; "
                  "see docs/parity.md)")
      ->check(CLI::IsMember({"fast", "ggml"}))
      ->capture_default_str();
  cmd->add_flag("--ignore-eos", flags->ignore_eos, "keep generating past end-of-generation tokens");
  cmd->add_flag("--json", flags->json, "print timings as one JSON line on stdout");
  cmd->callback([flags, exit_code, cmd] {
    if (flags->prompt.empty() && !flags->chat && flags->random_prompt_tokens == 0) {
      std::fprintf(
          stderr,
          "deepinfer generate: bad_flags: give --prompt, --chat or --random-prompt-tokens\n");
      *exit_code = 2;
      return;
    }
    *exit_code = Run(*flags);
  });
}

}  // namespace deepinfer::cli
