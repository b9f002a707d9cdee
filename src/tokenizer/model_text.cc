#include "tokenizer/model_text.h"

#include <sys/stat.h>

#include "tokenizer/hf_tokenizer.h"
#include "util/status.h"
#include "util/error_codes.h"

namespace deepinfer::tokenizer {
namespace {

bool Exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

// The folder of a Hugging Face checkpoint that carries a tokenizer.json, or "". The loader
// recorded the folder (model::ModelSource), so the path is not classified a second time.
std::string HfTokenizerFolder(const model::Model& model) {
  if (model.source.format != model::ModelFormat::kHuggingFace) return "";
  const std::string& dir = model.source.folder;
  return Exists(dir + "/tokenizer.json") ? dir : "";
}

}  // namespace

absl::StatusOr<ModelText> LoadModelText(const model::Model& model,
                                        const std::string& chat_template_name) {
  ModelText text;
  const std::string hf_dir = HfTokenizerFolder(model);
  model::TokenizerData data;
  if (!hf_dir.empty()) {
    DI_ASSIGN_OR_RETURN(HfTokenizerSpec spec, ReadHfTokenizer(hf_dir));
    DI_ASSIGN_OR_RETURN(text.tokenizer, CreateHfTokenizer(spec));
    data = std::move(spec.data);
  } else {
    DI_ASSIGN_OR_RETURN(text.tokenizer, CreateTokenizer(model.tokenizer));
    data = model.tokenizer;
  }
  if (text.tokenizer->vocab_size() > model.config.vocab) {
    return InvalidArgumentError(util::codes::kVocabMismatch, "the tokenizer has " +
                                                      std::to_string(text.tokenizer->vocab_size()) +
                                                      " ids but the model embeds only " +
                                                      std::to_string(model.config.vocab));
  }
  if (!chat_template_name.empty()) {
    DI_ASSIGN_OR_RETURN(text.chat_template, CreateChatTemplateByName(chat_template_name));
  } else {
    DI_ASSIGN_OR_RETURN(text.chat_template, CreateChatTemplate(data, model.config.architecture));
  }
  return text;
}

}  // namespace deepinfer::tokenizer
