#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "model/model.h"

namespace deepinfer::model {

// The 28-byte header of a llama2.c checkpoint (7 x int32, little endian).
struct Llama2cHeader {
  int32_t dim = 0;
  int32_t hidden_dim = 0;
  int32_t num_layers = 0;
  int32_t num_heads = 0;
  int32_t num_kv_heads = 0;
  int32_t vocab_size = 0;  // negative: an untied classifier (wcls) follows the weights
  int32_t seq_len = 0;
};

// Reads and validates the header of a checkpoint held in `size` bytes at `data`.
//
// Errors: DataLoss "truncated_file" (under 28 bytes); InvalidArgument "bad_header"
//   (non-positive sizes, dim not divisible by num_heads, num_heads not divisible by
//   num_kv_heads, odd head size).
absl::StatusOr<Llama2cHeader> ParseLlama2cHeader(const uint8_t* data, size_t size);

// Reads a llama2.c tokenizer (tok*.bin) with exactly `vocab_size` records.
//
// The result has kind kScoreBpe, the raw bytes of each piece, scores, bos 1, eos 2, unk 0,
// add_bos true, token types (0 unknown, 1 and 2 control, "<0xXX>" pieces byte, others normal)
// and eog_ids {1, 2}: the reference run.c stops when it samples BOS (id 1), and EOS (id 2) is
// kept as well so that both end a sequence.
// Errors: DataLoss "truncated_file" (a record cut short); InvalidArgument "vocab_mismatch"
//   (the file holds fewer or more than `vocab_size` whole records); DataLoss "bad_metadata"
//   (negative piece length).
absl::StatusOr<TokenizerData> ParseLlama2cTokenizer(const uint8_t* data, size_t size,
                                                    int vocab_size);

// Builds the Model of a llama2.c checkpoint held in `size` bytes at `data`: the header, the
// weight layout it implies and a TensorView per layer slice, named as LoadLlama2c names them.
// The tokenizer is left empty and `files` holds nothing: the views point into `data`, which the
// caller keeps alive as long as the model. `label` names the bytes in errors; its stem becomes
// config.name.
// Errors: the header errors above; DataLoss "truncated_file" (fewer bytes than the header
//   implies, or a layout past 2^64 bytes).
// Threads: pure.
absl::StatusOr<std::unique_ptr<Model>> ModelFromLlama2c(const uint8_t* data, size_t size,
                                                        const std::string& label);

// Loads a llama2.c checkpoint and its tokenizer. Weights stay in the mapping: every layer's
// slice of the stacked wq/wk/... arrays is contiguous, so each becomes a TensorView with the
// GGUF name ("blk.N.attn_q.weight" [dim, dim], "blk.N.ffn_gate.weight" (w1) [hidden, dim], ...).
// `output.weight` exists only for an untied checkpoint (negative vocab_size); otherwise
// config.tied_embeddings is set. When `tokenizer_path` is empty, the tokenizer is looked up
// beside the checkpoint: tok<vocab>.bin, then tokenizer.bin, then the only tok*.bin there.
//
// Errors: "file_not_found" (checkpoint or tokenizer), the header errors above,
//   "truncated_file" (fewer bytes than the header implies), tokenizer errors, "vocab_mismatch".
// Source: karpathy/llama2.c run.c (memory_map_weights, build_tokenizer).
absl::StatusOr<std::unique_ptr<Model>> LoadLlama2c(const std::string& checkpoint_path,
                                                   const std::string& tokenizer_path = "");

}  // namespace deepinfer::model
