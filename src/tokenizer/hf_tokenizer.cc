#include "tokenizer/hf_tokenizer.h"

#include <algorithm>
#include <cctype>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "fmt/format.h"
#include "nlohmann/json.hpp"
#include "util/mapped_file.h"
#include "util/status.h"
#include "util/error_codes.h"

namespace deepinfer::tokenizer {
namespace {

using Json = nlohmann::json;
using model::TokenType;
using Step = HfPreTokenizerStep;

// DeepSeek-V3's pre-tokenizer regexes exactly as its tokenizer.json spells them; the same three
// regexes are llama.cpp's "deepseek-v3" pre-tokenizer.
constexpr std::string_view kDeepseekV3Regexes[] = {
    R"re(\p{N}{1,3})re",
    "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+",
    "[!\"#$%&'()*+,\\-./"
    ":;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+"
    "| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+",
};

absl::Status Bad(std::string_view message) {
  return InvalidArgumentError(util::codes::kBadTokenizer, message);
}

absl::Status Unsupported(std::string_view message) {
  return UnimplementedError(util::codes::kUnsupportedTokenizer, message);
}

const Json* Find(const Json& object, const char* key) {
  if (!object.is_object()) return nullptr;
  auto it = object.find(key);
  return it == object.end() ? nullptr : &*it;
}

// A missing or null key reads as `fallback`.
absl::StatusOr<bool> GetBool(const Json& object, const char* key, bool fallback) {
  const Json* v = Find(object, key);
  if (v == nullptr || v->is_null()) return fallback;
  if (!v->is_boolean()) return Bad(fmt::format("\"{}\" is not a boolean", key));
  return v->get<bool>();
}

absl::StatusOr<std::string> GetString(const Json& object, const char* key) {
  const Json* v = Find(object, key);
  if (v == nullptr || !v->is_string()) return Bad(fmt::format("\"{}\" is not a string", key));
  return v->get<std::string>();
}

// True for a key that is absent, null, false or "" (an option left off).
bool IsOff(const Json& object, const char* key) {
  const Json* v = Find(object, key);
  return v == nullptr || v->is_null() || (v->is_boolean() && !v->get<bool>()) ||
         (v->is_string() && v->get<std::string>().empty());
}

// Escapes every ASCII punctuation character, so a literal "String" pattern is a regex.
std::string EscapeRegex(std::string_view text) {
  std::string out;
  for (char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x80 && !std::isalnum(u) && c != ' ') out.push_back('\\');
    out.push_back(c);
  }
  return out;
}

// Rejects what RegexSplitter would read differently from Oniguruma: \p{Lu} and the other
// subcategories (read as \p{L}, as llama.cpp does) and the Unicode-aware \d \w \b (ASCII in
// RegexSplitter's raw mode).
absl::Status CheckRegex(const std::string& regex) {
  for (std::string_view sub : {"\\p{Lu}", "\\p{Ll}", "\\p{Lt}", "\\p{Lm}", "\\p{Lo}"}) {
    if (regex.find(sub) != std::string::npos) {
      return Unsupported(fmt::format("pre-tokenizer regex uses {}: {}", sub, regex));
    }
  }
  for (size_t i = 0; i + 1 < regex.size(); ++i) {
    if (regex[i] != '\\') continue;
    if (std::string_view("dDwWbB").find(regex[i + 1]) != std::string_view::npos) {
      return Unsupported(fmt::format("pre-tokenizer regex uses \\{}: {}", regex[i + 1], regex));
    }
    ++i;  // skip the escaped character
  }
  return absl::OkStatus();
}

absl::Status ParseSplit(const Json& j, std::vector<Step>* steps) {
  Step step;
  const Json* pattern = Find(j, "pattern");
  if (pattern == nullptr || !pattern->is_object()) return Bad("Split without a pattern");
  if (const Json* r = Find(*pattern, "Regex"); r != nullptr && r->is_string()) {
    step.regex = r->get<std::string>();
  } else if (const Json* s = Find(*pattern, "String"); s != nullptr && s->is_string()) {
    step.regex = EscapeRegex(s->get<std::string>());
  } else {
    return Bad("Split pattern is neither Regex nor String");
  }
  if (step.regex.empty()) return Bad("Split with an empty pattern");
  DI_RETURN_IF_ERROR(CheckRegex(step.regex));
  DI_ASSIGN_OR_RETURN(const std::string behavior, GetString(j, "behavior"));
  static const std::pair<std::string_view, Step::Behavior> kBehaviors[] = {
      {"Removed", Step::Behavior::kRemoved},
      {"Isolated", Step::Behavior::kIsolated},
      {"MergedWithPrevious", Step::Behavior::kMergedWithPrevious},
      {"MergedWithNext", Step::Behavior::kMergedWithNext},
      {"Contiguous", Step::Behavior::kContiguous},
  };
  bool known = false;
  for (const auto& [name, value] : kBehaviors) {
    if (behavior == name) {
      step.behavior = value;
      known = true;
    }
  }
  if (!known) return Unsupported("Split behavior " + behavior);
  DI_ASSIGN_OR_RETURN(step.invert, GetBool(j, "invert", false));
  steps->push_back(std::move(step));
  return absl::OkStatus();
}

absl::Status ParsePreTokenizer(const Json& j, std::vector<Step>* steps) {
  if (j.is_null()) return absl::OkStatus();
  DI_ASSIGN_OR_RETURN(const std::string type, GetString(j, "type"));
  if (!steps->empty() && steps->back().kind == Step::Kind::kByteLevel) {
    // Later steps would see byte-level characters; no DeepSeek-style file does this.
    return Unsupported("a pre-tokenizer after ByteLevel");
  }
  if (type == "Sequence") {
    const Json* list = Find(j, "pretokenizers");
    if (list == nullptr || !list->is_array()) return Bad("Sequence without pretokenizers");
    for (const Json& item : *list) DI_RETURN_IF_ERROR(ParsePreTokenizer(item, steps));
    return absl::OkStatus();
  }
  if (type == "Split") return ParseSplit(j, steps);
  if (type == "ByteLevel") {
    Step step;
    step.kind = Step::Kind::kByteLevel;
    DI_ASSIGN_OR_RETURN(step.add_prefix_space, GetBool(j, "add_prefix_space", true));
    DI_ASSIGN_OR_RETURN(step.use_regex, GetBool(j, "use_regex", true));
    steps->push_back(std::move(step));
    return absl::OkStatus();
  }
  if (type == "Digits") {
    // tokenizers splits at ASCII digits: each on its own, or runs of them.
    DI_ASSIGN_OR_RETURN(const bool individual, GetBool(j, "individual_digits", false));
    Step step;
    step.regex = individual ? "[0-9]" : "[0-9]+";
    steps->push_back(std::move(step));
    return absl::OkStatus();
  }
  return Unsupported("pre-tokenizer " + type);
}

absl::Status CheckNormalizer(const Json& j) {
  if (j.is_null()) return absl::OkStatus();
  const Json* type = Find(j, "type");
  const Json* list = Find(j, "normalizers");
  if (type != nullptr && *type == "Sequence" && list != nullptr && list->is_array()) {
    for (const Json& item : *list) DI_RETURN_IF_ERROR(CheckNormalizer(item));
    return absl::OkStatus();
  }
  return Unsupported("normalizer " + (type != nullptr ? type->dump() : std::string("?")));
}

absl::Status CheckDecoder(const Json& j) {
  const Json* type = Find(j, "type");
  if (type != nullptr && *type == "ByteLevel") return absl::OkStatus();
  const Json* list = Find(j, "decoders");
  if (type != nullptr && *type == "Sequence" && list != nullptr && list->is_array() &&
      list->size() == 1) {
    return CheckDecoder((*list)[0]);
  }
  return Unsupported("decoder " + (type != nullptr ? type->dump() : std::string("null")));
}

// The special token a TemplateProcessing post-processor puts before "$A", or -1.
int32_t TemplateBos(const Json& j) {
  const Json* type = Find(j, "type");
  if (type == nullptr) return -1;
  if (*type == "Sequence") {
    const Json* list = Find(j, "processors");
    if (list == nullptr || !list->is_array()) return -1;
    for (const Json& item : *list) {
      const int32_t id = TemplateBos(item);
      if (id >= 0) return id;
    }
    return -1;
  }
  if (*type != "TemplateProcessing") return -1;
  const Json* single = Find(j, "single");
  if (single == nullptr || !single->is_array() || single->size() < 2) return -1;
  const Json* first = Find((*single)[0], "SpecialToken");
  const Json* second = Find((*single)[1], "Sequence");
  if (first == nullptr || second == nullptr) return -1;
  const Json* name = Find(*first, "id");
  const Json* specials = Find(j, "special_tokens");
  if (name == nullptr || !name->is_string() || specials == nullptr) return -1;
  const Json* entry = Find(*specials, name->get<std::string>().c_str());
  const Json* ids = entry != nullptr ? Find(*entry, "ids") : nullptr;
  if (ids == nullptr || !ids->is_array() || ids->size() != 1 || !(*ids)[0].is_number_integer()) {
    return -1;
  }
  return (*ids)[0].get<int32_t>();
}

// bos_token / eos_token: a string, {"content": ...}, or null.
std::string TokenContent(const Json& config, const char* key) {
  const Json* v = Find(config, key);
  if (v == nullptr) return "";
  if (v->is_string()) return v->get<std::string>();
  const Json* content = Find(*v, "content");
  return content != nullptr && content->is_string() ? content->get<std::string>() : "";
}

absl::Status ParseModel(const Json& m, HfTokenizerSpec* spec,
                        absl::flat_hash_map<std::string, int32_t>* vocab) {
  const Json* type = Find(m, "type");
  if (type != nullptr && *type != "BPE") return Unsupported("model " + type->dump());
  if (!IsOff(m, "dropout")) return Unsupported("BPE dropout");
  if (!IsOff(m, "byte_fallback")) return Unsupported("BPE byte_fallback");
  if (!IsOff(m, "continuing_subword_prefix") || !IsOff(m, "end_of_word_suffix")) {
    return Unsupported("BPE subword prefixes or suffixes");
  }
  if (!IsOff(m, "unk_token")) return Unsupported("BPE unk_token");
  DI_ASSIGN_OR_RETURN(spec->ignore_merges, GetBool(m, "ignore_merges", false));
  const Json* v = Find(m, "vocab");
  if (v == nullptr || !v->is_object()) return Bad("model.vocab is not an object");
  vocab->reserve(v->size());
  for (auto it = v->begin(); it != v->end(); ++it) {
    if (!it.value().is_number_integer()) return Bad("a vocabulary id is not an integer");
    const int64_t id = it.value().get<int64_t>();
    if (id < 0 || id >= INT32_MAX) return Bad(fmt::format("vocabulary id {} out of range", id));
    (*vocab)[it.key()] = static_cast<int32_t>(id);
  }
  const Json* merges = Find(m, "merges");
  if (merges == nullptr || !merges->is_array()) return Bad("model.merges is not a list");
  auto& out = spec->data.merges;
  out.reserve(merges->size());
  for (const Json& merge : *merges) {
    if (merge.is_string()) {
      // The older form "a b"; byte-level parts never hold a space.
      const std::string& s = merge.get_ref<const std::string&>();
      if (s.find(' ', 1) == std::string::npos) return Bad("merge \"" + s + "\" has no space");
      out.push_back(s);
    } else if (merge.is_array() && merge.size() == 2 && merge[0].is_string() &&
               merge[1].is_string()) {
      out.push_back(merge[0].get<std::string>() + " " + merge[1].get<std::string>());
    } else {
      return Bad("a merge is neither \"a b\" nor [a, b]");
    }
  }
  return absl::OkStatus();
}

absl::Status ParseAddedTokens(const Json& root, HfTokenizerSpec* spec) {
  const Json* added = Find(root, "added_tokens");
  if (added == nullptr || added->is_null()) return absl::OkStatus();
  if (!added->is_array()) return Bad("added_tokens is not a list");
  for (const Json& a : *added) {
    HfAddedToken t;
    const Json* id = Find(a, "id");
    if (id == nullptr || !id->is_number_integer() || id->get<int64_t>() < 0 ||
        id->get<int64_t>() >= INT32_MAX) {
      return Bad("an added token has no valid id");
    }
    t.id = id->get<int32_t>();
    DI_ASSIGN_OR_RETURN(t.content, GetString(a, "content"));
    if (t.content.empty()) continue;  // tokenizers ignores empty added tokens
    DI_ASSIGN_OR_RETURN(t.special, GetBool(a, "special", false));
    DI_ASSIGN_OR_RETURN(t.single_word, GetBool(a, "single_word", false));
    DI_ASSIGN_OR_RETURN(t.lstrip, GetBool(a, "lstrip", false));
    DI_ASSIGN_OR_RETURN(t.rstrip, GetBool(a, "rstrip", false));
    DI_ASSIGN_OR_RETURN(t.normalized, GetBool(a, "normalized", !t.special));
    spec->added_tokens.push_back(std::move(t));
  }
  return absl::OkStatus();
}

void SetPreName(HfTokenizerSpec* spec) {
  const auto& steps = spec->pre_tokenizer;
  bool deepseek_v3 = steps.size() == 4 && steps[3].kind == Step::Kind::kByteLevel &&
                     !steps[3].add_prefix_space && !steps[3].use_regex;
  for (size_t i = 0; deepseek_v3 && i < 3; ++i) {
    deepseek_v3 = steps[i].kind == Step::Kind::kSplit &&
                  steps[i].behavior == Step::Behavior::kIsolated && !steps[i].invert &&
                  steps[i].regex == kDeepseekV3Regexes[i];
  }
  spec->data.pre = deepseek_v3 ? "deepseek-v3" : "hf-tokenizer-json";
}

}  // namespace

absl::StatusOr<HfTokenizerSpec> ParseHfTokenizer(std::string_view tokenizer_json,
                                                 std::string_view tokenizer_config_json) {
  const Json root = Json::parse(tokenizer_json.begin(), tokenizer_json.end(), nullptr,
                                /*allow_exceptions=*/false);
  if (root.is_discarded() || !root.is_object()) return Bad("tokenizer.json is not a JSON object");
  Json config = Json::object();
  if (!tokenizer_config_json.empty()) {
    config = Json::parse(tokenizer_config_json.begin(), tokenizer_config_json.end(), nullptr,
                         /*allow_exceptions=*/false);
    if (config.is_discarded() || !config.is_object()) {
      return Bad("tokenizer_config.json is not a JSON object");
    }
  }

  HfTokenizerSpec spec;
  spec.data.kind = model::TokenizerData::Kind::kByteLevelBpe;
  const Json* m = Find(root, "model");
  if (m == nullptr) return Bad("tokenizer.json has no model");
  absl::flat_hash_map<std::string, int32_t> vocab;
  DI_RETURN_IF_ERROR(ParseModel(*m, &spec, &vocab));
  DI_RETURN_IF_ERROR(ParseAddedTokens(root, &spec));
  if (const Json* n = Find(root, "normalizer"); n != nullptr)
    DI_RETURN_IF_ERROR(CheckNormalizer(*n));
  if (const Json* p = Find(root, "pre_tokenizer"); p != nullptr) {
    DI_RETURN_IF_ERROR(ParsePreTokenizer(*p, &spec.pre_tokenizer));
  }
  const Json* decoder = Find(root, "decoder");
  if (decoder == nullptr) return Unsupported("no decoder");
  DI_RETURN_IF_ERROR(CheckDecoder(*decoder));
  SetPreName(&spec);

  // Tokens by id: the vocabulary, then the added tokens (which may reuse vocabulary ids).
  int32_t num_tokens = 0;
  for (const auto& [text, id] : vocab) num_tokens = std::max(num_tokens, id + 1);
  for (const HfAddedToken& t : spec.added_tokens) num_tokens = std::max(num_tokens, t.id + 1);
  if (num_tokens == 0) return Bad("tokenizer.json has no tokens");
  // Real vocabularies are dense (a few holes at most); a sparse id space would make the
  // tables below as large as the largest id, so a file with one id of 2^31 could exhaust
  // memory. Allow holes up to the number of entries plus a margin.
  const size_t entries = vocab.size() + spec.added_tokens.size();
  if (static_cast<size_t>(num_tokens) > 2 * entries + 1024) {
    return Bad(fmt::format("token ids are sparse: the largest is {} but there are only {} tokens",
                           num_tokens - 1, entries));
  }
  auto& data = spec.data;
  data.tokens.assign(num_tokens, std::string());
  data.token_types.assign(num_tokens, TokenType::kUnused);
  spec.model_vocab.assign(num_tokens, std::string());
  for (const auto& [text, id] : vocab) {
    if (data.token_types[id] != TokenType::kUnused) {
      return Bad(fmt::format("vocabulary id {} is used twice", id));
    }
    data.tokens[id] = text;
    data.token_types[id] = TokenType::kNormal;
    spec.model_vocab[id] = text;
  }
  for (const HfAddedToken& t : spec.added_tokens) {
    data.tokens[t.id] = t.content;
    data.token_types[t.id] = t.special ? TokenType::kControl : TokenType::kUserDefined;
  }

  auto find_id = [&](const std::string& content) -> int32_t {
    for (const HfAddedToken& t : spec.added_tokens) {
      if (t.content == content) return t.id;
    }
    auto it = vocab.find(content);
    return it == vocab.end() ? -1 : it->second;
  };
  const std::string bos = TokenContent(config, "bos_token");
  const std::string eos = TokenContent(config, "eos_token");
  data.bos_id = bos.empty() ? -1 : find_id(bos);
  data.eos_id = eos.empty() ? -1 : find_id(eos);
  if (data.eos_id >= 0) data.eog_ids.push_back(data.eos_id);
  const Json* add_bos = Find(config, "add_bos_token");
  if (add_bos != nullptr && add_bos->is_boolean()) {
    data.add_bos = add_bos->get<bool>() && data.bos_id >= 0;
  } else if (const Json* post = Find(root, "post_processor"); post != nullptr) {
    const int32_t id = TemplateBos(*post);
    if (id >= 0 && id < num_tokens) {
      data.add_bos = true;
      if (data.bos_id < 0) data.bos_id = id;
    }
  }
  if (const Json* t = Find(config, "chat_template"); t != nullptr) {
    if (t->is_string()) {
      data.chat_template = t->get<std::string>();
    } else if (t->is_array()) {
      for (const Json& entry : *t) {
        const Json* name = Find(entry, "name");
        const Json* text = Find(entry, "template");
        if (name != nullptr && *name == "default" && text != nullptr && text->is_string()) {
          data.chat_template = text->get<std::string>();
        }
      }
    }
  }
  return spec;
}

absl::StatusOr<HfTokenizerSpec> ReadHfTokenizer(const std::string& path) {
  std::string json_path = path;
  std::string dir;
  const bool is_json = path.size() >= 5 && path.compare(path.size() - 5, 5, ".json") == 0;
  if (is_json) {
    const size_t slash = path.rfind('/');
    dir = slash == std::string::npos ? "." : path.substr(0, slash);
  } else {
    dir = path;
    json_path = path + "/tokenizer.json";
  }
  DI_ASSIGN_OR_RETURN(const std::string tokenizer_json, util::ReadFile(json_path));
  std::string config_json;
  auto config = util::ReadFile(dir + "/tokenizer_config.json");
  if (config.ok()) {
    config_json = std::move(*config);
  } else if (!absl::IsNotFound(config.status())) {
    return config.status();
  }
  return ParseHfTokenizer(tokenizer_json, config_json);
}

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadHfTokenizer(const std::string& path) {
  DI_ASSIGN_OR_RETURN(const HfTokenizerSpec spec, ReadHfTokenizer(path));
  return CreateHfTokenizer(spec);
}

}  // namespace deepinfer::tokenizer
