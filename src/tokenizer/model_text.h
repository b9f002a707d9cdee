#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "model/model.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer::tokenizer {

// The text side of a loaded model: its tokenizer and chat encoder.
struct ModelText {
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<ChatTemplate> chat_template;
};

// Builds the tokenizer and chat encoder for `model` exactly as the server, `generate` and
// `count-tokens` all use them (one code path, so counts agree), by where the model came from
// (model.source, filled by model::LoadModel):
// - a Hugging Face checkpoint whose folder holds a tokenizer.json gets the tokenizer.json
//   tokenizer and its tokenizer_config.json template (DeepSeek encoders chosen by template or
//   model_type);
// - GGUF and llama2.c models, and HF folders without tokenizer.json, use the vocabulary and
//   template stored in the model.
// `chat_template_name`, when not empty, picks an encoder by name instead ("chatml",
// "deepseek-v3.1", ...; see CreateChatTemplateByName).
//
// Errors: those of LoadHfTokenizer, CreateTokenizer, CreateChatTemplate(ByName);
//   InvalidArgument "vocab_mismatch" when the tokenizer has ids the model cannot embed.
absl::StatusOr<ModelText> LoadModelText(const model::Model& model,
                                        const std::string& chat_template_name = "");

}  // namespace deepinfer::tokenizer
