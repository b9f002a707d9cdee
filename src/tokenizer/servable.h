#pragma once

// The one way to load a model for serving, `generate` and the tools that count tokens: the
// checkpoint mapped (model::LoadModel), its tokenizer and chat encoder built (LoadModelText, so
// every caller counts tokens the same way), and, for DeepSeek-V4.1 with Engram layers, the
// tokenizer's token classes attached to the model before anything reads it
// (AttachEngramTokenClasses). What it returns is not changed afterwards: the engine, the routes
// and the tools share it by const reference.

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "model/model.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer::tokenizer {

// A loaded model with its text side.
// Lifetime: owns everything; keep it alive while an engine or route borrows from it.
// Threads: immutable, so any thread may read it.
struct Servable {
  std::unique_ptr<const model::Model> model;
  // Null only when ServableOptions::text_optional let a failed tokenizer through; text_status
  // then says why.
  std::unique_ptr<const Tokenizer> tokenizer;
  std::unique_ptr<const ChatTemplate> chat_template;
  absl::Status text_status;
};

struct ServableOptions {
  std::string model_path{};      // a GGUF or llama2.c file, or a Hugging Face checkpoint folder
  std::string tokenizer_path{};  // "": the model's own (llama2.c: tok*.bin beside it)
  std::string chat_template{};   // "": the model's own; else an encoder's name
  // Token ids in and out need no tokenizer (generate on a synthetic parity checkpoint): with
  // this set, a tokenizer or chat encoder that cannot be built leaves them null with the reason
  // in text_status instead of failing the load. Engram's classes still need the tokenizer.
  bool text_optional = false;
  // Tensors this process never reads (model::LoadModel's `unread`); null: none.
  model::UnreadTensors unread_tensors{};
};

// Errors: those of model::LoadModel, LoadModelText (unless text_optional) and
//   AttachEngramTokenClasses.
absl::StatusOr<Servable> LoadServable(const ServableOptions& options);

}  // namespace deepinfer::tokenizer
