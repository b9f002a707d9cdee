#include "tools/bench_needle.h"

#include <algorithm>
#include <set>

#include "fmt/format.h"
#include "tools/bench_dataset.h"
#include "util/error_codes.h"
#include "util/status.h"

namespace deepinfer::tools {
namespace {

constexpr const char* kNames[] = {"A", "B", "C", "D"};
// Room kept for the chat template and separators around the haystack and questions.
constexpr int64_t kTemplateMargin = 64;

std::string NeedleText(const std::string& name, const std::string& code) {
  return fmt::format("The secret code of needle {} is {}.", name, code);
}

std::string AskAll() {
  // No answer template: small models copy a template's placeholders instead of the codes.
  return "Four secret codes are hidden in the text above, one for each of the needles A, B, C "
         "and D. What are the secret codes of needles A, B, C and D?";
}

std::string Cut(const std::string& s) { return s.size() <= 300 ? s : s.substr(0, 300) + "..."; }

// A haystack with fresh codes, and the request pieces around it.
struct Setup {
  std::vector<std::string> codes;
  Prompt haystack;
};

absl::StatusOr<Setup> MakeSetup(TokenizerApi& tokenizer, const NeedleOptions& options,
                                int64_t haystack_tokens, std::mt19937_64& rng) {
  Setup s;
  std::set<std::string> used;
  std::vector<std::string> needles;
  for (size_t i = 0; i < options.depths.size() && i < 4; ++i) {
    std::string code;
    do {
      code = std::to_string(10000 + rng() % 90000);
    } while (!used.insert(code).second);
    s.codes.push_back(code);
    needles.push_back(NeedleText(kNames[i], code));
  }
  std::vector<double> depths(options.depths.begin(),
                             options.depths.begin() + static_cast<long>(needles.size()));
  DI_ASSIGN_OR_RETURN(s.haystack, BuildHaystack(tokenizer, haystack_tokens, needles, depths, rng));
  return s;
}

// The request for a conversation: chat messages, or one completions text with Q/A framing.
RequestSpec Conversation(const ClientConfig& config, const std::string& haystack,
                         const std::vector<std::string>& questions,
                         const std::vector<std::string>& answers, int max_tokens, bool stream) {
  RequestSpec spec;
  spec.max_tokens = max_tokens;
  spec.stream = stream;
  spec.keep_text = true;
  if (config.endpoint == Endpoint::kChat) {
    for (size_t i = 0; i < questions.size(); ++i) {
      spec.messages.push_back({"user", i == 0 ? haystack + "\n\n" + questions[i] : questions[i]});
      if (i < answers.size()) spec.messages.push_back({"assistant", answers[i]});
    }
  } else {
    spec.prompt = haystack + "\n\n";
    for (size_t i = 0; i < questions.size(); ++i) {
      spec.prompt += "Question: " + questions[i] + "\nAnswer:";
      if (i < answers.size()) spec.prompt += " " + answers[i] + "\n";
    }
  }
  return spec;
}

void Record(const RequestRecord& r, NeedleCase* c) {
  c->answers.push_back(Cut(r.text));
  c->ttft_ms.push_back(r.ttft_s * 1000.0);
  c->cached_tokens.push_back(r.cached_tokens);
  c->prompt_tokens = std::max(c->prompt_tokens, r.prompt_tokens);
}

// Checks needles `which` in `answer`; returns whether all were found.
bool Check(const Setup& s, const std::vector<size_t>& which, const std::string& answer,
           NeedleCase* c) {
  bool all = true;
  for (size_t i : which) {
    NeedleCheck check{kNames[i], s.codes[i], ContainsCode(answer, s.codes[i])};
    all = all && check.found;
    c->checks.push_back(check);
  }
  return all;
}

std::string Missing(const NeedleCase& c) {
  std::set<std::string> missing;
  for (const NeedleCheck& k : c.checks) {
    if (!k.found) missing.insert(k.needle);
  }
  std::string names;
  for (const std::string& n : missing) names += (names.empty() ? "" : ", ") + n;
  return names.empty() ? "" : "not retrieved: " + names;
}

}  // namespace

bool ContainsCode(const std::string& answer, const std::string& code) {
  auto digit = [](char ch) { return ch >= '0' && ch <= '9'; };
  for (size_t at = answer.find(code); at != std::string::npos; at = answer.find(code, at + 1)) {
    bool left = at == 0 || !digit(answer[at - 1]);
    size_t end = at + code.size();
    bool right = end == answer.size() || !digit(answer[end]);
    if (left && right) return true;
  }
  return false;
}

absl::StatusOr<std::vector<NeedleCase>> RunNeedleCases(const ClientConfig& config,
                                                       TokenizerApi& tokenizer,
                                                       const NeedleOptions& options) {
  if (options.depths.empty() || options.depths.size() > 4) {
    return InvalidArgumentError(util::codes::kBadNeedles, "give 1 to 4 needle depths");
  }
  std::mt19937_64 rng(options.seed);
  const std::vector<std::string> turn_questions = {"What is the secret code of needle A?",
                                                   "What is the secret code of needle B?",
                                                   "What are the secret codes of needles C and D?"};
  DI_ASSIGN_OR_RETURN(std::vector<int32_t> ask_ids, tokenizer.Tokenize(AskAll()));
  int64_t turn_tokens = 0;
  for (const std::string& q : turn_questions) {
    DI_ASSIGN_OR_RETURN(std::vector<int32_t> ids, tokenizer.Tokenize(q));
    turn_tokens += static_cast<int64_t>(ids.size());
  }
  // The single-question cases leave room for one answer; the 3-turn case for three answers and
  // three questions.
  int64_t single_room =
      options.window - options.output_len - static_cast<int64_t>(ask_ids.size()) - kTemplateMargin;
  int64_t multi_room = options.window - 3 * options.output_len - turn_tokens - 2 * kTemplateMargin;
  int64_t single_tokens = static_cast<int64_t>(options.fill * static_cast<double>(single_room));
  int64_t multi_tokens = static_cast<int64_t>(options.fill * static_cast<double>(multi_room));
  if (multi_tokens < 64) {
    return InvalidArgumentError(
        util::codes::kWindowTooSmall,
        fmt::format("a window of {} tokens leaves no room for a haystack with {} output tokens per "
                    "answer (lower --needle-output-len)",
                    options.window, options.output_len));
  }
  std::vector<size_t> all_needles;
  for (size_t i = 0; i < options.depths.size(); ++i) all_needles.push_back(i);
  const auto start = BenchClock::now();
  std::vector<NeedleCase> cases;

  // 1 and 2: all needles asked at once, as a whole answer and as a stream.
  for (bool stream : {false, true}) {
    NeedleCase c;
    c.name = stream ? "streaming" : "four-needles";
    DI_ASSIGN_OR_RETURN(Setup s, MakeSetup(tokenizer, options, single_tokens, rng));
    RequestSpec spec =
        Conversation(config, s.haystack.text, {AskAll()}, {}, options.output_len, stream);
    RequestRecord r = SendRequest(config, spec, start);
    Record(r, &c);
    if (!r.ok) {
      c.detail = r.error;
    } else {
      c.pass = Check(s, all_needles, r.text, &c);
      c.detail = Missing(c);
    }
    cases.push_back(std::move(c));
  }

  // 3: three turns over one haystack: A, then B, then C and D.
  {
    NeedleCase c;
    c.name = "multi-turn";
    DI_ASSIGN_OR_RETURN(Setup s, MakeSetup(tokenizer, options, multi_tokens, rng));
    std::vector<std::vector<size_t>> asked = {{0}, {1}, {2, 3}};
    std::vector<std::string> questions, answers;
    bool all = true;
    for (size_t turn = 0; turn < 3; ++turn) {
      questions.push_back(turn_questions[turn]);
      RequestSpec spec = Conversation(config, s.haystack.text, questions, answers,
                                      options.output_len, /*stream=*/true);
      RequestRecord r = SendRequest(config, spec, start);
      Record(r, &c);
      if (!r.ok) {
        c.detail = fmt::format("turn {}: {}", turn + 1, r.error);
        all = false;
        break;
      }
      std::vector<size_t> which;
      for (size_t i : asked[turn]) {
        if (i < s.codes.size()) which.push_back(i);
      }
      all = Check(s, which, r.text, &c) && all;
      answers.push_back(r.text);
    }
    c.pass = all;
    if (c.detail.empty()) c.detail = Missing(c);
    cases.push_back(std::move(c));
  }

  // 4: one prompt twice; the second must find the answer again and should hit the prefix cache.
  {
    NeedleCase c;
    c.name = "prefix-repeat";
    DI_ASSIGN_OR_RETURN(Setup s, MakeSetup(tokenizer, options, single_tokens, rng));
    RequestSpec spec =
        Conversation(config, s.haystack.text, {AskAll()}, {}, options.output_len, true);
    bool all = true;
    for (int round = 0; round < 2; ++round) {
      RequestRecord r = SendRequest(config, spec, start);
      Record(r, &c);
      if (!r.ok) {
        c.detail = fmt::format("request {}: {}", round + 1, r.error);
        all = false;
        break;
      }
      all = Check(s, all_needles, r.text, &c) && all;
    }
    c.pass = all;
    if (c.detail.empty()) c.detail = Missing(c);
    if (c.cached_tokens.size() == 2 && c.cached_tokens[1] == 0) {
      c.pass = false;
      c.detail += std::string(c.detail.empty() ? "" : "; ") +
                  "the repeated prompt reported cached_tokens = 0";
    }
    cases.push_back(std::move(c));
  }
  return cases;
}

}  // namespace deepinfer::tools
