#include "model/model.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <optional>
#include <set>
#include <utility>

#include "fmt/format.h"
#include "model/gguf.h"
#include "model/gguf_model.h"
#include "model/hf_checkpoint.h"
#include "model/llama2c.h"
#include "util/error_codes.h"
#include "util/status.h"

namespace deepinfer::model {

absl::StatusOr<const TensorView*> Model::Get(const std::string& name) const {
  const TensorView* t = Find(name);
  if (t == nullptr)
    return NotFoundError(util::codes::kMissingTensor, fmt::format("no tensor '{}'", name));
  return t;
}

const TensorView* Model::Find(const std::string& name) const {
  auto it = tensors.find(name);
  return it == tensors.end() ? nullptr : &it->second;
}

namespace {

// Token texts that end generation, as llama.cpp's llama_vocab::impl::load detects them.
// Source: llama.cpp src/llama-vocab.cpp (special_eog_ids).
constexpr std::string_view kEogTexts[] = {
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<|flush|>",
    "<|calls|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "</s>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "[EOS]",
    "<|end_of_text|>",
    "<end_of_utterance>",
    "<eos>",
    "<turn|>",
    "<|tool_response>",
};
// Fill-in-the-middle pad / repo / file-separator tokens also end generation in llama.cpp.
constexpr std::string_view kFimPadTexts[] = {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>",
                                             "[PAD]"};
constexpr std::string_view kFimRepTexts[] = {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>",
                                             "<REPO>", "<reponame>"};
constexpr std::string_view kFimSepTexts[] = {"<|file_sep|>"};

// Reads an optional integer key; nullopt when absent.
absl::StatusOr<std::optional<int64_t>> OptionalInt(const GgufFile& f, const std::string& key) {
  if (!f.Has(key)) return std::optional<int64_t>();
  DI_ASSIGN_OR_RETURN(int64_t v, f.GetI64(key));
  return std::optional<int64_t>(v);
}

// Reads a positive int-sized hyperparameter; `fallback` (when > 0) is used if the key is absent.
absl::StatusOr<int> PositiveInt(const GgufFile& f, const std::string& key, int fallback = 0) {
  if (!f.Has(key) && fallback > 0) return fallback;
  DI_ASSIGN_OR_RETURN(int64_t v, f.GetI64(key));
  if (v <= 0 || v > INT_MAX) {
    return InvalidArgumentError(util::codes::kBadMetadata,
                                fmt::format("'{}' = {} is out of range", key, v));
  }
  return static_cast<int>(v);
}

// Returns the id of the first token (lowest id) whose text is in `texts`, or -1.
template <size_t N>
int32_t FindByText(const std::vector<std::string>& tokens, const std::string_view (&texts)[N]) {
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (std::find(std::begin(texts), std::end(texts), tokens[i]) != std::end(texts)) {
      return static_cast<int32_t>(i);
    }
  }
  return -1;
}

// An optional special-token id key; ids outside the vocabulary are treated as absent.
absl::StatusOr<int32_t> SpecialId(const GgufFile& f, const std::string& key, size_t vocab) {
  DI_ASSIGN_OR_RETURN(std::optional<int64_t> v, OptionalInt(f, key));
  if (!v || *v < 0 || static_cast<uint64_t>(*v) >= vocab) return -1;
  return static_cast<int32_t>(*v);
}

// Computes the end-of-generation ids the way llama.cpp does: FIM pad/repo/sep tokens, tokens
// with well-known end texts, plus the eos / eot / eom ids, with llama.cpp's two exceptions.
std::vector<int32_t> ComputeEogIds(const std::vector<std::string>& tokens, int32_t eos, int32_t eot,
                                   int32_t eom, int32_t fim_pad, int32_t fim_rep, int32_t fim_sep) {
  std::set<int32_t> eog;
  if (fim_pad < 0) fim_pad = FindByText(tokens, kFimPadTexts);
  if (fim_rep < 0) fim_rep = FindByText(tokens, kFimRepTexts);
  if (fim_sep < 0) fim_sep = FindByText(tokens, kFimSepTexts);
  for (int32_t id : {fim_pad, fim_rep, fim_sep, eos, eot, eom}) {
    if (id >= 0) eog.insert(id);
  }
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (std::find(std::begin(kEogTexts), std::end(kEogTexts), tokens[i]) != std::end(kEogTexts)) {
      eog.insert(static_cast<int32_t>(i));
    }
  }
  auto eog_with_text = [&](std::string_view text) -> int32_t {
    for (int32_t id : eog) {
      if (tokens[static_cast<size_t>(id)] == text) return id;
    }
    return -1;
  };
  // Harmony-style vocabularies end turns with <|return|>/<|call|>; their <|end|> is not an end.
  const int32_t end_id = eog_with_text("<|end|>");
  if (end_id >= 0 && ((eog_with_text("<|return|>") >= 0 && eog_with_text("<|call|>") >= 0) ||
                      (eog_with_text("<|calls|>") >= 0 && eog_with_text("<|flush|>") >= 0))) {
    eog.erase(end_id);
  }
  const int32_t s_id = eog_with_text("</s>");
  if (s_id >= 0 && eog_with_text("<|tool_response>") >= 0) eog.erase(s_id);
  return std::vector<int32_t>(eog.begin(), eog.end());
}

absl::StatusOr<TokenizerData> ReadGgufTokenizer(const GgufFile& f) {
  TokenizerData tok;
  DI_ASSIGN_OR_RETURN(std::string kind, f.GetString("tokenizer.ggml.model"));
  if (kind != "gpt2") {
    return UnimplementedError(util::codes::kUnsupportedTokenizer,
                              fmt::format("tokenizer.ggml.model '{}' (only 'gpt2')", kind));
  }
  tok.kind = TokenizerData::Kind::kByteLevelBpe;
  DI_ASSIGN_OR_RETURN(tok.tokens, f.GetStringArray("tokenizer.ggml.tokens"));
  if (tok.tokens.empty())
    return InvalidArgumentError(util::codes::kBadMetadata, "empty token list");
  DI_ASSIGN_OR_RETURN(tok.merges, f.GetStringArray("tokenizer.ggml.merges"));
  if (f.Has("tokenizer.ggml.token_type")) {
    DI_ASSIGN_OR_RETURN(std::vector<int32_t> types, f.GetI32Array("tokenizer.ggml.token_type"));
    if (types.size() != tok.tokens.size()) {
      return InvalidArgumentError(
          util::codes::kBadMetadata,
          fmt::format("{} token types for {} tokens", types.size(), tok.tokens.size()));
    }
    tok.token_types.reserve(types.size());
    for (int32_t t : types) {
      tok.token_types.push_back(t >= 0 && t <= 6 ? static_cast<TokenType>(t)
                                                 : TokenType::kUndefined);
    }
  }
  if (f.Has("tokenizer.ggml.pre")) {
    DI_ASSIGN_OR_RETURN(tok.pre, f.GetString("tokenizer.ggml.pre"));
  } else {
    tok.pre = "default";
  }
  const size_t n = tok.tokens.size();
  DI_ASSIGN_OR_RETURN(tok.bos_id, SpecialId(f, "tokenizer.ggml.bos_token_id", n));
  DI_ASSIGN_OR_RETURN(tok.eos_id, SpecialId(f, "tokenizer.ggml.eos_token_id", n));
  DI_ASSIGN_OR_RETURN(tok.unk_id, SpecialId(f, "tokenizer.ggml.unknown_token_id", n));
  DI_ASSIGN_OR_RETURN(tok.pad_id, SpecialId(f, "tokenizer.ggml.padding_token_id", n));
  DI_ASSIGN_OR_RETURN(int32_t eot, SpecialId(f, "tokenizer.ggml.eot_token_id", n));
  DI_ASSIGN_OR_RETURN(int32_t eom, SpecialId(f, "tokenizer.ggml.eom_token_id", n));
  DI_ASSIGN_OR_RETURN(int32_t fim_pad, SpecialId(f, "tokenizer.ggml.fim_pad_token_id", n));
  DI_ASSIGN_OR_RETURN(int32_t fim_rep, SpecialId(f, "tokenizer.ggml.fim_rep_token_id", n));
  DI_ASSIGN_OR_RETURN(int32_t fim_sep, SpecialId(f, "tokenizer.ggml.fim_sep_token_id", n));
  if (f.Has("tokenizer.ggml.add_bos_token")) {
    DI_ASSIGN_OR_RETURN(tok.add_bos, f.GetBool("tokenizer.ggml.add_bos_token"));
  }
  if (f.Has("tokenizer.chat_template")) {
    DI_ASSIGN_OR_RETURN(tok.chat_template, f.GetString("tokenizer.chat_template"));
  }
  tok.eog_ids = ComputeEogIds(tok.tokens, tok.eos_id, eot, eom, fim_pad, fim_rep, fim_sep);
  return tok;
}

absl::StatusOr<ModelConfig> ReadLlamaConfig(const GgufFile& f, const std::string& path) {
  ModelConfig c;
  c.architecture = "llama";
  if (f.Has("general.name")) {
    DI_ASSIGN_OR_RETURN(c.name, f.GetString("general.name"));
  } else {
    c.name = std::filesystem::path(path).stem().string();
  }
  DI_ASSIGN_OR_RETURN(c.num_layers, PositiveInt(f, "llama.block_count"));
  DI_ASSIGN_OR_RETURN(c.hidden, PositiveInt(f, "llama.embedding_length"));
  DI_ASSIGN_OR_RETURN(c.num_heads, PositiveInt(f, "llama.attention.head_count"));
  DI_ASSIGN_OR_RETURN(c.num_kv_heads, PositiveInt(f, "llama.attention.head_count_kv", c.num_heads));
  DI_ASSIGN_OR_RETURN(c.ffn_hidden, PositiveInt(f, "llama.feed_forward_length"));
  DI_ASSIGN_OR_RETURN(c.max_context, PositiveInt(f, "llama.context_length"));
  if (c.num_heads % c.num_kv_heads != 0) {
    return InvalidArgumentError(util::codes::kBadMetadata,
                                fmt::format("head_count {} is not a multiple of head_count_kv {}",
                                            c.num_heads, c.num_kv_heads));
  }
  if (f.Has("llama.attention.key_length")) {
    DI_ASSIGN_OR_RETURN(c.head_dim, PositiveInt(f, "llama.attention.key_length"));
  } else {
    if (c.hidden % c.num_heads != 0) {
      return InvalidArgumentError(util::codes::kBadMetadata,
                                  fmt::format("embedding_length {} is not a multiple of "
                                              "head_count {}",
                                              c.hidden, c.num_heads));
    }
    c.head_dim = c.hidden / c.num_heads;
  }
  DI_ASSIGN_OR_RETURN(c.rope_dim, PositiveInt(f, "llama.rope.dimension_count", c.head_dim));
  if (c.rope_dim > c.head_dim || c.rope_dim % 2 != 0) {
    return InvalidArgumentError(
        util::codes::kBadMetadata,
        fmt::format("rope.dimension_count {} with head size {}", c.rope_dim, c.head_dim));
  }
  if (f.Has("llama.attention.layer_norm_rms_epsilon")) {
    DI_ASSIGN_OR_RETURN(c.rms_norm_eps, f.GetF32("llama.attention.layer_norm_rms_epsilon"));
  }
  if (f.Has("llama.rope.freq_base")) {
    DI_ASSIGN_OR_RETURN(c.rope_theta, f.GetF32("llama.rope.freq_base"));
  }
  if (!(c.rms_norm_eps >= 0.0f) || !(c.rope_theta > 0.0f) || std::isinf(c.rope_theta)) {
    return InvalidArgumentError(util::codes::kBadMetadata,
                                "bad rms epsilon or rope frequency base");
  }
  // llama.cpp rotates adjacent pairs for the llama architecture (LLAMA_ROPE_TYPE_NORM); the HF
  // converter permutes the Q/K rows so that this matches HF's rotate_half.
  c.rope_style = RopeStyle::kAdjacentPairs;
  return c;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Model>> ModelFromGguf(const GgufFile& gguf,
                                                     const std::string& path) {
  DI_ASSIGN_OR_RETURN(std::string arch, gguf.GetString("general.architecture"));
  if (arch != "llama") {
    return UnimplementedError(util::codes::kUnsupportedArchitecture,
                              fmt::format("general.architecture '{}' (supported: llama)", arch));
  }
  auto model = std::make_unique<Model>();
  DI_ASSIGN_OR_RETURN(model->config, ReadLlamaConfig(gguf, path));
  DI_ASSIGN_OR_RETURN(model->tokenizer, ReadGgufTokenizer(gguf));
  ModelConfig& c = model->config;
  if (model->tokenizer.tokens.size() > static_cast<size_t>(INT_MAX)) {
    return InvalidArgumentError(util::codes::kBadMetadata, "too many tokens");
  }
  c.vocab = static_cast<int>(model->tokenizer.tokens.size());
  if (gguf.Has("llama.vocab_size")) {
    DI_ASSIGN_OR_RETURN(c.vocab, PositiveInt(gguf, "llama.vocab_size"));
  }
  model->tensors.reserve(gguf.tensors().size());
  for (const TensorView& t : gguf.tensors()) model->tensors.emplace(t.name, t);
  c.tied_embeddings = model->Find("output.weight") == nullptr;
  return model;
}

namespace {

absl::StatusOr<std::unique_ptr<Model>> LoadGguf(std::unique_ptr<util::MappedFile> file) {
  DI_ASSIGN_OR_RETURN(auto gguf, GgufFile::OpenFromMemory(file->data(), file->size()));
  DI_ASSIGN_OR_RETURN(auto model, ModelFromGguf(*gguf, file->path()));
  model->files.push_back(std::move(file));  // the views point into this mapping
  return model;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Model>> LoadModel(const std::string& path,
                                                 const std::string& tokenizer_path,
                                                 const UnreadTensors& unread) {
  if (IsHfCheckpointPath(path)) return LoadHfModel(path, unread);  // sets source, with the folder
  DI_ASSIGN_OR_RETURN(auto file, util::MappedFile::Open(path));
  if (file->size() >= 4 && std::memcmp(file->data(), "GGUF", 4) == 0) {
    auto model = LoadGguf(std::move(file));
    if (!model.ok()) return WithContext(model.status(), path);
    (*model)->source = {ModelFormat::kGguf, path, ""};
    return model;
  }
  if (std::filesystem::path(path).extension() == ".bin") {
    file.reset();
    auto model = LoadLlama2c(path, tokenizer_path);
    if (model.ok()) (*model)->source = {ModelFormat::kLlama2c, path, ""};
    return model;
  }
  return InvalidArgumentError(util::codes::kBadMagic,
                              fmt::format("{}: neither a GGUF file nor a llama2.c checkpoint "
                                          "(.bin)",
                                          path));
}

}  // namespace deepinfer::model
