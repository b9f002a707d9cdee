#include "tokenizer/pre_tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 32
#include <pcre2.h>

#include <array>
#include <string_view>
#include <utility>

#include "fmt/format.h"
#include "tokenizer/scratch.h"
#include "tokenizer/unicode.h"
#include "util/error_codes.h"
#include "util/status.h"

namespace deepinfer::tokenizer {
namespace {

// The GPT-2 pattern; llama.cpp runs it through a hand-written splitter that behaves like this
// regex over its own code point classes.
constexpr const char* kGpt2 =
    R"re('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))re";
constexpr const char* kLlama3 =
    R"re((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD]))re"
    R"re(|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+)re"
    R"re(|\s+(?!\S)|\s+)re";
constexpr const char* kQwen2 =
    R"re((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD]))re"
    R"re(|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+)re"
    R"re(|\s+(?!\S)|\s+)re";
// DeepSeek LLM's letter class, from its tokenizer.json (as llama.cpp carries it).
constexpr const char* kDeepseekLlmLetters =
    R"re(\s?[A-Za-z\x{B5}\x{C0}-\x{D6}\x{D8}-\x{F6}\x{F8}-\x{1BA}\x{1BC}-\x{1BF}\x{1C4})re"
    R"re(-\x{293}\x{295}-\x{2AF}\x{370}-\x{373}\x{376}\x{377}\x{37B}-\x{37D}\x{37F})re"
    R"re(\x{386}\x{388}-\x{38A}\x{38C}\x{38E}-\x{3A1}\x{3A3}-\x{3F5}\x{3F7}-\x{481})re"
    R"re(\x{48A}-\x{52F}\x{531}-\x{556}\x{10A0}-\x{10C5}\x{13A0}-\x{13F5}\x{13F8}-)re"
    R"re(\x{13FD}\x{1C90}-\x{1CBA}\x{1CBD}-\x{1CBF}\x{1D00}-\x{1D2B}\x{1D6B}-\x{1D77})re"
    R"re(\x{1D79}-\x{1D9A}\x{1E00}-\x{1F15}\x{1F18}-\x{1F1D}\x{1F20}-\x{1F45}\x{1F48}-)re"
    R"re(\x{1F4D}\x{1F50}-\x{1F57}\x{1F59}\x{1F5B}\x{1F5D}\x{1F5F}-\x{1F7D}\x{1F80}-)re"
    R"re(\x{1FB4}\x{1FB6}-\x{1FBC}\x{1FBE}\x{1FC2}-\x{1FC4}\x{1FC6}-\x{1FCC}\x{1FD0}-)re"
    R"re(\x{1FD3}\x{1FD6}-\x{1FDB}\x{1FE0}-\x{1FEC}\x{1FF2}-\x{1FF4}\x{1FF6}-\x{1FFC})re"
    R"re(\x{2102}\x{2107}\x{210A}-\x{2113}\x{2115}\x{2119}-\x{211D}\x{2124}\x{2126})re"
    R"re(\x{2128}\x{212A}-\x{212D}\x{212F}-\x{2134}\x{2139}\x{213C}-\x{213F}\x{2145}-)re"
    R"re(\x{2149}\x{214E}\x{2183}\x{2184}\x{2C00}-\x{2C7B}\x{2C7E}-\x{2CE4}\x{2CEB}-)re"
    R"re(\x{2CEE}\x{2CF2}\x{2CF3}\x{A640}-\x{A66D}\x{A680}-\x{A69B}\x{A722}-\x{A76F})re"
    R"re(\x{A771}-\x{A787}\x{A78B}-\x{A78E}\x{AB70}-\x{ABBF}\x{FB00}-\x{FB06}\x{FB13}-)re"
    R"re(\x{FB17}\x{FF21}-\x{FF3A}\x{FF41}-\x{FF5A}\x{10400}-\x{1044F}\x{104B0}-)re"
    R"re(\x{104D3}\x{104D8}-\x{104FB}\x{10C80}-\x{10CB2}\x{10CC0}-\x{10CF2}\x{118A0}-)re"
    R"re(\x{118DF}\x{1E900}-\x{1E943}]+)re";
constexpr const char* kCjkHangul = R"re([\x{4E00}-\x{9FA5}\x{800}-\x{4E00}\x{AC00}-\x{D7FF}]+)re";

struct NamedSpec {
  std::vector<std::string_view> names;
  std::vector<const char*> regexes;
  bool ignore_merges;
};

const std::vector<NamedSpec>& NamedSpecs() {
  static const auto* specs = new std::vector<NamedSpec>{
      {{"smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva-7b"},
       {R"re(\p{N})re", kGpt2},
       false},
      {{"gpt-2", "gpt2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v2-es", "jina-v2-de",
        "a.x-4.0", "mellum", "modern-bert", "mpt", "olmo", "jais", "trillion", "granite-docling",
        "exaone4"},
       {kGpt2},
       false},
      {{"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2"},
       {kLlama3},
       true},
      {{"dbrx", "smaug-bpe"}, {kLlama3}, false},
      {{"qwen2", "deepseek-r1-qwen", "megrez", "stablelm2"}, {kQwen2}, false},
      {{"deepseek-llm"},
       {R"re([\r\n])re", kDeepseekLlmLetters,
        R"re(\s?[!-/:-~\x{FF01}-\x{FF0F}\x{FF1A}-\x{FF5E}\x{2018}-\x{201F}\x{3000}-\x{3002}]+)re",
        R"re(\s+$)re", kCjkHangul, R"re(\p{N}+)re"},
       false},
      {{"deepseek-coder"},
       {R"re([\r\n])re", R"re(\s?\p{L}+)re", R"re(\s?\p{P}+)re", kCjkHangul, R"re(\p{N})re"},
       false},
      {{"deepseek-v3"},
       {R"re(\p{N}{1,3})re", R"re([\x{4E00}-\x{9FA5}\x{3040}-\x{309F}\x{30A0}-\x{30FF}]+)re",
        R"re([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L})re"
        R"re(\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re"},
       false},
      {{"falcon"}, {R"re([\p{P}\$\+<=>\^~\|`]+)re", kGpt2, R"re([0-9][0-9][0-9])re"}, false},
      {{"default", ""},
       {R"re([\p{P}\$\+<=>\^~\|]+)re", kGpt2, R"re(\p{N}+)re", R"re([0-9][0-9][0-9])re"},
       false},
  };
  return *specs;
}

// Stand-ins handed to PCRE2 for non-ASCII code points of each class. PCRE2 classifies these
// the same way in every Unicode version.
constexpr uint32_t kStandInWhitespace = 0x0B;  // what llama.cpp uses too
constexpr std::array<uint32_t, 8> kStandIn = {
    0x0080,  // kUndefined: a control character, in no property class
    0x00B2,  // kNumber: SUPERSCRIPT TWO (No)
    0x00C0,  // kLetter: LATIN CAPITAL LETTER A WITH GRAVE (Lu)
    0x0080,  // kSeparator: all separators are whitespace, so unused
    0x0300,  // kMark: COMBINING GRAVE ACCENT (Mn)
    0x00A1,  // kPunctuation: INVERTED EXCLAMATION MARK (Po)
    0x00A6,  // kSymbol: BROKEN BAR (So)
    0x0080,  // kControl
};

// The property names llama.cpp recognizes; each maps to the class it stands for.
constexpr std::array<std::pair<std::string_view, std::string_view>, 10> kProperties = {{
    {"\\p{N}", "\\p{N}"},
    {"\\p{L}", "\\p{L}"},
    {"\\p{P}", "\\p{P}"},
    {"\\p{M}", "\\p{M}"},
    {"\\p{S}", "\\p{S}"},
    {"\\p{Lu}", "\\p{L}"},
    {"\\p{Ll}", "\\p{L}"},
    {"\\p{Lt}", "\\p{L}"},
    {"\\p{Lm}", "\\p{L}"},
    {"\\p{Lo}", "\\p{L}"},
}};

// Per-thread PCRE2 state, so that Split needs no lock.
struct MatchScratch {
  pcre2_match_data* data = nullptr;
  pcre2_match_context* context = nullptr;
  pcre2_jit_stack* jit_stack = nullptr;
  std::vector<uint32_t> collapsed;
  std::vector<uint32_t> raw;
  std::vector<uint32_t> offsets;
  std::vector<uint32_t> next_offsets;

  MatchScratch() {
    data = pcre2_match_data_create(1, nullptr);
    context = pcre2_match_context_create(nullptr);
    // Long whitespace runs backtrack one step per code point: give the JIT room.
    jit_stack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, nullptr);
    if (context != nullptr && jit_stack != nullptr) {
      pcre2_jit_stack_assign(context, nullptr, jit_stack);
    }
  }
  ~MatchScratch() {
    pcre2_jit_stack_free(jit_stack);
    pcre2_match_context_free(context);
    pcre2_match_data_free(data);
  }
};

MatchScratch& Scratch() {
  thread_local MatchScratch scratch;
  return scratch;
}

std::string PcreErrorText(int code) {
  PCRE2_UCHAR buf[256];
  const int n = pcre2_get_error_message(code, buf, 256);
  std::string out;
  for (int i = 0; i < n; ++i) AppendUtf8(buf[i], &out);
  return out;
}

}  // namespace

absl::StatusOr<PreTokenizerSpec> PreTokenizerSpecForName(const std::string& pre) {
  for (const NamedSpec& spec : NamedSpecs()) {
    for (std::string_view name : spec.names) {
      if (name == pre) {
        PreTokenizerSpec out;
        for (const char* r : spec.regexes) out.regexes.emplace_back(r);
        out.ignore_merges = spec.ignore_merges;
        return out;
      }
    }
  }
  return UnimplementedError(util::codes::kUnsupportedTokenizer,
                            fmt::format("pre-tokenizer \"{}\" is not supported", pre));
}

struct RegexSplitter::Regex {
  pcre2_code* code = nullptr;
  bool collapsed = false;
  ~Regex() { pcre2_code_free(code); }
};

RegexSplitter::~RegexSplitter() = default;

absl::StatusOr<std::unique_ptr<RegexSplitter>> RegexSplitter::Create(
    const std::vector<std::string>& regexes) {
  return Create(regexes, &ClassOf);
}

absl::StatusOr<std::unique_ptr<RegexSplitter>> RegexSplitter::Create(
    const std::vector<std::string>& regexes, CpClassifier classify) {
  std::unique_ptr<RegexSplitter> splitter(new RegexSplitter());
  splitter->classify_ = classify != nullptr ? classify : &ClassOf;
  for (const std::string& source : regexes) {
    auto regex = std::make_unique<Regex>();
    std::string pattern = source;
    for (const auto& [name, _] : kProperties) {
      if (source.find(name) != std::string::npos) regex->collapsed = true;
    }
    if (regex->collapsed) {
      for (char c : source) {
        if (static_cast<unsigned char>(c) >= 0x80) {
          return InvalidArgumentError(util::codes::kBadRegex,
                                      "a pre-tokenizer regex mixes Unicode properties with "
                                      "non-ASCII characters: " +
                                          source);
        }
      }
      for (const auto& [name, replacement] : kProperties) {
        for (size_t pos = pattern.find(name); pos != std::string::npos;
             pos = pattern.find(name, pos + replacement.size())) {
          pattern.replace(pos, name.size(), replacement);
        }
      }
    } else if (source.find("\\p") != std::string::npos || source.find("\\P") != std::string::npos) {
      return UnimplementedError(util::codes::kUnsupportedTokenizer,
                                "unsupported Unicode property in pre-tokenizer regex: " + source);
    }
    std::vector<uint32_t> cps;
    DecodeUtf8Lenient(pattern, &cps);
    // The collapsed text is valid UTF-32, so PCRE2 may use Unicode properties on it. The raw
    // text may hold surrogates, so it runs in plain 32-bit code unit mode with ASCII \s.
    const uint32_t options = PCRE2_DOLLAR_ENDONLY |
                             (regex->collapsed ? (PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK) : 0);
    int error = 0;
    PCRE2_SIZE error_offset = 0;
    regex->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(cps.data()), cps.size(), options,
                                &error, &error_offset, nullptr);
    if (regex->code == nullptr) {
      return InvalidArgumentError(util::codes::kBadRegex,
                                  fmt::format("pre-tokenizer regex rejected at {}: {}: {}",
                                              error_offset, PcreErrorText(error), source));
    }
    // Without JIT (unsupported CPU) pcre2_match falls back to the interpreter.
    pcre2_jit_compile(regex->code, PCRE2_JIT_COMPLETE);
    if (regex->collapsed) {
      splitter->need_collapsed_ = true;
    } else {
      splitter->need_raw_ = true;
    }
    splitter->regexes_.push_back(std::move(regex));
  }
  return splitter;
}

void RegexSplitter::PrepareSubjects(const uint32_t* cps, size_t n, bool collapsed, bool raw) const {
  MatchScratch& s = Scratch();
  if (collapsed) {
    s.collapsed.resize(n);
    for (size_t i = 0; i < n; ++i) {
      const uint32_t cp = cps[i];
      if (cp < 0x80) {
        s.collapsed[i] = cp;
      } else if (IsWhitespace(cp)) {
        s.collapsed[i] = kStandInWhitespace;
      } else {
        s.collapsed[i] = kStandIn[static_cast<size_t>(classify_(cp))];
      }
    }
  }
  if (raw) {
    s.raw.resize(n);
    for (size_t i = 0; i < n; ++i) {
      const uint32_t cp = cps[i];
      s.raw[i] = (cp >= 0x80 && IsWhitespace(cp)) ? kStandInWhitespace : cp;
    }
  }
}

void RegexSplitter::FindMatches(size_t index, const uint32_t* cps, size_t n,
                                std::vector<std::pair<uint32_t, uint32_t>>* matches) const {
  if (n == 0) return;
  const Regex& regex = *regexes_[index];
  PrepareSubjects(cps, n, regex.collapsed, !regex.collapsed);
  MatchScratch& s = Scratch();
  const auto* subject =
      reinterpret_cast<PCRE2_SPTR>(regex.collapsed ? s.collapsed.data() : s.raw.data());
  const uint32_t match_options = regex.collapsed ? PCRE2_NO_UTF_CHECK : 0;
  size_t pos = 0;
  while (pos < n) {
    int rc = pcre2_match(regex.code, subject, n, pos, match_options, s.data, s.context);
    if (rc < 0 && rc != PCRE2_ERROR_NOMATCH) {
      rc =
          pcre2_match(regex.code, subject, n, pos, match_options | PCRE2_NO_JIT, s.data, s.context);
    }
    if (rc < 0) break;
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(s.data);
    if (ov[1] <= ov[0]) {  // an empty match splits nothing
      pos = ov[0] + 1;
      continue;
    }
    matches->emplace_back(static_cast<uint32_t>(ov[0]), static_cast<uint32_t>(ov[1]));
    pos = ov[1];
  }
  TrimScratch(s.collapsed);
  TrimScratch(s.raw);
}

void RegexSplitter::Split(const uint32_t* cps, size_t n, std::vector<uint32_t>* lengths) const {
  if (n == 0) return;
  MatchScratch& s = Scratch();
  PrepareSubjects(cps, n, need_collapsed_, need_raw_);
  s.offsets.assign(1, static_cast<uint32_t>(n));
  for (const auto& regex : regexes_) {
    const uint32_t* subject = regex->collapsed ? s.collapsed.data() : s.raw.data();
    const uint32_t match_options = regex->collapsed ? PCRE2_NO_UTF_CHECK : 0;
    s.next_offsets.clear();
    size_t start = 0;
    for (uint32_t len : s.offsets) {
      const auto* piece = reinterpret_cast<PCRE2_SPTR>(subject + start);
      size_t pos = 0;
      size_t last = 0;
      while (pos < len) {
        int rc = pcre2_match(regex->code, piece, len, pos, match_options, s.data, s.context);
        if (rc < 0 && rc != PCRE2_ERROR_NOMATCH) {
          // JIT stack exhausted or similar: the interpreter keeps its frames on the heap.
          rc = pcre2_match(regex->code, piece, len, pos, match_options | PCRE2_NO_JIT, s.data,
                           s.context);
        }
        if (rc < 0) break;  // no match (or a limit hit): the rest stays one piece
        const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(s.data);
        const size_t m_start = ov[0];
        const size_t m_end = ov[1];
        if (m_end <= m_start) {  // an empty match splits nothing
          pos = m_start + 1;
          continue;
        }
        if (m_start > last) s.next_offsets.push_back(static_cast<uint32_t>(m_start - last));
        s.next_offsets.push_back(static_cast<uint32_t>(m_end - m_start));
        last = m_end;
        pos = m_end;
      }
      if (last < len) s.next_offsets.push_back(static_cast<uint32_t>(len - last));
      start += len;
    }
    std::swap(s.offsets, s.next_offsets);
  }
  lengths->insert(lengths->end(), s.offsets.begin(), s.offsets.end());
  TrimScratch(s.collapsed);
  TrimScratch(s.raw);
  TrimScratch(s.offsets);
  TrimScratch(s.next_offsets);
}

}  // namespace deepinfer::tokenizer
