#include "tokenizer/servable.h"

#include <utility>

#include "tokenizer/engram_token_map.h"
#include "tokenizer/model_text.h"
#include "util/status.h"

namespace deepinfer::tokenizer {

absl::StatusOr<Servable> LoadServable(const ServableOptions& options) {
  DI_ASSIGN_OR_RETURN(std::unique_ptr<model::Model> model,
                      model::LoadModel(options.model_path, options.tokenizer_path,
                                                       options.unread_tensors));
  Servable servable;
  absl::StatusOr<ModelText> text = LoadModelText(*model, options.chat_template);
  if (text.ok()) {
    // The classes go into the model before it becomes const: the architecture reads them when
    // the forward pass is built.
    DI_RETURN_IF_ERROR(AttachEngramTokenClasses(*text->tokenizer, model.get()));
    servable.tokenizer = std::move(text->tokenizer);
    servable.chat_template = std::move(text->chat_template);
  } else if (options.text_optional) {
    servable.text_status = text.status();
  } else {
    return text.status();
  }
  servable.model = std::move(model);
  return servable;
}

}  // namespace deepinfer::tokenizer
