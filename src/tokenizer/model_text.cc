#include "tokenizer/model_text.h"

#include <sys/stat.h>

#include "tokenizer/hf_tokenizer.h"
#include "util/status.h"

namespace deepinfer::tokenizer {
namespace {

bool IsDirectory(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool Exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

// The folder of a Hugging Face checkpoint that carries a tokenizer.json, or "".
std::string HfTokenizerFolder(const std::string& model_path) {
  std::string dir = model_path;
  if (!IsDirectory(dir)) {
    size_t slash = dir.find_last_of('/');
    dir = slash == std::string::npos ? "." : dir.substr(0, slash);
    const bool hf_file = model_path.ends_with("config.json") || model_path.ends_with(".safetensors");
    if (!hf_file) return "";
  }
  return Exists(dir + "/tokenizer.json") ? dir : "";
}

}  // namespace

absl::StatusOr<ModelText> LoadModelText(const model::Model& model, const std::string& model_path,
                                        const std::string& chat_template_name) {
  ModelText text;
  const std::string hf_dir = HfTokenizerFolder(model_path);
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
    return InvalidArgumentError(
        "vocab_mismatch", "the tokenizer has " + std::to_string(text.tokenizer->vocab_size()) +
                              " ids but the model embeds only " + std::to_string(model.config.vocab));
  }
  if (!chat_template_name.empty()) {
    DI_ASSIGN_OR_RETURN(text.chat_template, CreateChatTemplateByName(chat_template_name));
  } else {
    DI_ASSIGN_OR_RETURN(text.chat_template, CreateChatTemplate(data, model.config.architecture));
  }
  return text;
}

}  // namespace deepinfer::tokenizer
