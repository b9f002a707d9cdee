#include "model/llama2c.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <utility>
#include <vector>

#include "fmt/format.h"
#include "util/error_codes.h"
#include "util/mapped_file.h"
#include "util/status.h"

namespace deepinfer::model {
namespace {

constexpr size_t kHeaderBytes = 7 * sizeof(int32_t);

absl::Status BadHeader(std::string_view message) {
  return DataLossError(util::codes::kBadHeader, fmt::format("llama2.c checkpoint: {}", message));
}

// Overflow-checked running sum of fp32 array sizes, in elements.
class Layout {
 public:
  // Appends an array of a * b * c floats and returns its element offset.
  uint64_t Add(uint64_t a, uint64_t b, uint64_t c = 1) {
    uint64_t n = 0, start = elements_;
    if (__builtin_mul_overflow(a, b, &n) || __builtin_mul_overflow(n, c, &n) ||
        __builtin_add_overflow(elements_, n, &elements_)) {
      overflow_ = true;
    }
    return start;
  }
  uint64_t elements() const { return elements_; }
  bool overflow() const { return overflow_ || elements_ > (UINT64_MAX - kHeaderBytes) / 4; }

 private:
  uint64_t elements_ = 0;
  bool overflow_ = false;
};

bool IsBytePiece(const std::string& piece) {
  if (piece.size() != 6 || piece.compare(0, 3, "<0x") != 0 || piece[5] != '>') return false;
  auto hex = [](char c) { return std::isxdigit(static_cast<unsigned char>(c)) != 0; };
  return hex(piece[3]) && hex(piece[4]);
}

// Finds the tokenizer beside the checkpoint: tok<vocab>.bin, tokenizer.bin, or the only tok*.bin.
absl::StatusOr<std::string> FindTokenizer(const std::string& checkpoint_path, int vocab) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path dir = fs::path(checkpoint_path).parent_path();
  if (dir.empty()) dir = ".";
  for (const std::string& name : {fmt::format("tok{}.bin", vocab), std::string("tokenizer.bin")}) {
    if (fs::is_regular_file(dir / name, ec)) return (dir / name).string();
  }
  std::vector<std::string> found;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.size() > 7 && name.compare(0, 3, "tok") == 0 &&
        name.compare(name.size() - 4, 4, ".bin") == 0) {
      found.push_back(it->path().string());
    }
  }
  if (found.size() == 1) return found[0];
  return NotFoundError(util::codes::kFileNotFound,
                       fmt::format("no llama2.c tokenizer (tok{}.bin) beside {}; pass one "
                                   "explicitly",
                                   vocab, checkpoint_path));
}

}  // namespace

absl::StatusOr<Llama2cHeader> ParseLlama2cHeader(const uint8_t* data, size_t size) {
  if (size < kHeaderBytes) {
    return DataLossError(util::codes::kTruncatedFile,
                         "llama2.c checkpoint shorter than its 28-byte header");
  }
  Llama2cHeader h;
  int32_t f[7];
  std::memcpy(f, data, kHeaderBytes);
  h.dim = f[0];
  h.hidden_dim = f[1];
  h.num_layers = f[2];
  h.num_heads = f[3];
  h.num_kv_heads = f[4];
  h.vocab_size = f[5];
  h.seq_len = f[6];
  if (h.dim <= 0 || h.hidden_dim <= 0 || h.num_layers <= 0 || h.num_heads <= 0 ||
      h.num_kv_heads <= 0 || h.seq_len <= 0 || h.vocab_size == 0 || h.vocab_size == INT32_MIN) {
    return BadHeader(fmt::format(
        "non-positive size in header (dim {}, hidden {}, layers {}, "
        "heads {}, kv heads {}, vocab {}, seq_len {})",
        h.dim, h.hidden_dim, h.num_layers, h.num_heads, h.num_kv_heads, h.vocab_size, h.seq_len));
  }
  if (h.dim % h.num_heads != 0) {
    return BadHeader(fmt::format("dim {} is not divisible by n_heads {}", h.dim, h.num_heads));
  }
  if (h.num_heads % h.num_kv_heads != 0) {
    return BadHeader(
        fmt::format("n_heads {} is not divisible by n_kv_heads {}", h.num_heads, h.num_kv_heads));
  }
  if ((h.dim / h.num_heads) % 2 != 0) {
    return BadHeader(fmt::format("head size {} is odd (RoPE rotates pairs)", h.dim / h.num_heads));
  }
  return h;
}

absl::StatusOr<TokenizerData> ParseLlama2cTokenizer(const uint8_t* data, size_t size,
                                                    int vocab_size) {
  if (size < 4)
    return DataLossError(util::codes::kTruncatedFile, "llama2.c tokenizer shorter than 4 bytes");
  TokenizerData tok;
  tok.kind = TokenizerData::Kind::kScoreBpe;
  tok.bos_id = 1;
  tok.eos_id = 2;
  tok.unk_id = 0;
  tok.add_bos = true;
  size_t pos = 4;  // max_token_length is not needed: pieces carry their own lengths
  // Each record takes at least 8 bytes, so the reservation is capped by the file size.
  const size_t reserve = std::min<size_t>(static_cast<size_t>(std::max(vocab_size, 0)), size / 8);
  tok.tokens.reserve(reserve);
  tok.scores.reserve(reserve);
  for (int i = 0; i < vocab_size; ++i) {
    if (pos == size) {
      return InvalidArgumentError(util::codes::kVocabMismatch,
                                  fmt::format("llama2.c tokenizer has {} tokens, the checkpoint "
                                              "{}",
                                              i, vocab_size));
    }
    float score;
    int32_t len;
    if (size - pos < 8)
      return DataLossError(util::codes::kTruncatedFile, "llama2.c tokenizer record cut short");
    std::memcpy(&score, data + pos, 4);
    std::memcpy(&len, data + pos + 4, 4);
    pos += 8;
    if (len < 0)
      return InvalidArgumentError(util::codes::kBadMetadata,
                                  fmt::format("token {} has length {}", i, len));
    if (static_cast<size_t>(len) > size - pos) {
      return DataLossError(util::codes::kTruncatedFile, "llama2.c tokenizer record cut short");
    }
    tok.tokens.emplace_back(reinterpret_cast<const char*>(data + pos), static_cast<size_t>(len));
    tok.scores.push_back(score);
    pos += static_cast<size_t>(len);
  }
  if (pos != size) {
    return InvalidArgumentError(util::codes::kVocabMismatch,
                                fmt::format("llama2.c tokenizer has more than the checkpoint's {} "
                                            "tokens ({} bytes left over)",
                                            vocab_size, size - pos));
  }
  tok.token_types.resize(tok.tokens.size(), TokenType::kNormal);
  for (size_t i = 0; i < tok.tokens.size(); ++i) {
    if (i == 0) {
      tok.token_types[i] = TokenType::kUnknown;
    } else if (i == 1 || i == 2) {
      tok.token_types[i] = TokenType::kControl;
    } else if (IsBytePiece(tok.tokens[i])) {
      tok.token_types[i] = TokenType::kByte;
    }
  }
  // run.c stops on BOS (id 1); EOS (id 2) ends a sequence too.
  for (int32_t id : {1, 2}) {
    if (id < vocab_size) tok.eog_ids.push_back(id);
  }
  return tok;
}

absl::StatusOr<std::unique_ptr<Model>> ModelFromLlama2c(const uint8_t* data, size_t size,
                                                        const std::string& label) {
  DI_ASSIGN_OR_RETURN(Llama2cHeader h, ParseLlama2cHeader(data, size));

  const bool shared_weights = h.vocab_size > 0;
  const uint64_t vocab = static_cast<uint64_t>(shared_weights ? h.vocab_size : -h.vocab_size);
  const uint64_t dim = static_cast<uint64_t>(h.dim);
  const uint64_t hidden = static_cast<uint64_t>(h.hidden_dim);
  const uint64_t layers = static_cast<uint64_t>(h.num_layers);
  const uint64_t head_size = dim / static_cast<uint64_t>(h.num_heads);
  const uint64_t kv_dim =
      dim * static_cast<uint64_t>(h.num_kv_heads) / static_cast<uint64_t>(h.num_heads);

  Layout layout;
  const uint64_t tok_embd = layout.Add(vocab, dim);
  const uint64_t rms_att = layout.Add(layers, dim);
  const uint64_t wq = layout.Add(layers, dim, dim);
  const uint64_t wk = layout.Add(layers, kv_dim, dim);
  const uint64_t wv = layout.Add(layers, kv_dim, dim);
  const uint64_t wo = layout.Add(layers, dim, dim);
  const uint64_t rms_ffn = layout.Add(layers, dim);
  const uint64_t w1 = layout.Add(layers, hidden, dim);
  const uint64_t w2 = layout.Add(layers, dim, hidden);
  const uint64_t w3 = layout.Add(layers, hidden, dim);
  const uint64_t rms_final = layout.Add(dim, 1);
  layout.Add(static_cast<uint64_t>(h.seq_len), head_size);  // freq_cis_real + imag (unused)
  const uint64_t wcls = shared_weights ? tok_embd : layout.Add(vocab, dim);
  if (layout.overflow() || kHeaderBytes + layout.elements() * 4 > size) {
    return DataLossError(
        util::codes::kTruncatedFile,
        fmt::format("llama2.c checkpoint {} has {} bytes; its header implies {}", label, size,
                    layout.overflow() ? std::string("more than 2^64")
                                      : std::to_string(kHeaderBytes + layout.elements() * 4)));
  }

  auto model = std::make_unique<Model>();
  ModelConfig& c = model->config;
  c.architecture = "llama";
  c.name = std::filesystem::path(label).stem().string();
  c.num_layers = h.num_layers;
  c.hidden = h.dim;
  c.num_heads = h.num_heads;
  c.num_kv_heads = h.num_kv_heads;
  c.head_dim = static_cast<int>(head_size);
  c.ffn_hidden = h.hidden_dim;
  c.vocab = static_cast<int>(vocab);
  c.max_context = h.seq_len;
  c.rms_norm_eps = 1e-5f;
  c.rope_theta = 10000.0f;
  c.rope_dim = static_cast<int>(head_size);
  c.rope_style = RopeStyle::kAdjacentPairs;
  c.tied_embeddings = shared_weights;

  const uint8_t* base = data + kHeaderBytes;
  auto add = [&](std::string name, uint64_t offset, std::vector<int64_t> shape) {
    TensorView v;
    v.name = std::move(name);
    v.dtype = DType::kF32;
    v.shape = std::move(shape);
    v.data = base + offset * 4;
    v.size_bytes = static_cast<size_t>(v.num_elements()) * 4;
    model->tensors.emplace(v.name, std::move(v));
  };
  const int64_t d = h.dim, f = h.hidden_dim, kv = static_cast<int64_t>(kv_dim);
  add("token_embd.weight", tok_embd, {static_cast<int64_t>(vocab), d});
  for (uint64_t l = 0; l < layers; ++l) {
    const std::string p = fmt::format("blk.{}.", l);
    add(p + "attn_norm.weight", rms_att + l * dim, {d});
    add(p + "attn_q.weight", wq + l * dim * dim, {d, d});
    add(p + "attn_k.weight", wk + l * kv_dim * dim, {kv, d});
    add(p + "attn_v.weight", wv + l * kv_dim * dim, {kv, d});
    add(p + "attn_output.weight", wo + l * dim * dim, {d, d});
    add(p + "ffn_norm.weight", rms_ffn + l * dim, {d});
    add(p + "ffn_gate.weight", w1 + l * hidden * dim, {f, d});
    add(p + "ffn_down.weight", w2 + l * dim * hidden, {d, f});
    add(p + "ffn_up.weight", w3 + l * hidden * dim, {f, d});
  }
  add("output_norm.weight", rms_final, {d});
  if (!shared_weights) add("output.weight", wcls, {static_cast<int64_t>(vocab), d});
  return model;
}

absl::StatusOr<std::unique_ptr<Model>> LoadLlama2c(const std::string& checkpoint_path,
                                                   const std::string& tokenizer_path) {
  DI_ASSIGN_OR_RETURN(auto file, util::MappedFile::Open(checkpoint_path));
  DI_ASSIGN_OR_RETURN(auto model, ModelFromLlama2c(file->data(), file->size(), checkpoint_path));
  const int vocab = model->config.vocab;

  std::string tok_path = tokenizer_path;
  if (tok_path.empty()) {
    DI_ASSIGN_OR_RETURN(tok_path, FindTokenizer(checkpoint_path, vocab));
  }
  DI_ASSIGN_OR_RETURN(auto tok_file, util::MappedFile::Open(tok_path));
  auto tokenizer = ParseLlama2cTokenizer(tok_file->data(), tok_file->size(), vocab);
  if (!tokenizer.ok()) return WithContext(tokenizer.status(), tok_path);
  model->tokenizer = *std::move(tokenizer);
  model->files.push_back(std::move(file));
  return model;
}

}  // namespace deepinfer::model
