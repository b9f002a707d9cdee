#include "tools/bench_dataset.h"

#include <algorithm>
#include <cmath>

#include "fmt/format.h"
#include "util/error_codes.h"
#include "util/status.h"

namespace deepinfer::tools {
namespace {

// Common words: one or two tokens each in most BPE vocabularies, so a prompt's length in words
// is close to its length in tokens and few corrections are needed.
constexpr const char* kWords[] = {
    "time",       "year",       "people",      "way",          "day",          "man",
    "thing",      "woman",      "life",        "child",        "world",        "school",
    "state",      "family",     "student",     "group",        "country",      "problem",
    "hand",       "part",       "place",       "case",         "week",         "company",
    "system",     "program",    "question",    "work",         "government",   "number",
    "night",      "point",      "home",        "water",        "room",         "mother",
    "area",       "money",      "story",       "fact",         "month",        "lot",
    "right",      "study",      "book",        "eye",          "job",          "word",
    "business",   "issue",      "side",        "kind",         "head",         "house",
    "service",    "friend",     "father",      "power",        "hour",         "game",
    "line",       "end",        "member",      "law",          "car",          "city",
    "community",  "name",       "president",   "team",         "minute",       "idea",
    "kid",        "body",       "information", "back",         "parent",       "face",
    "others",     "level",      "office",      "door",         "health",       "person",
    "art",        "war",        "history",     "party",        "result",       "change",
    "morning",    "reason",     "research",    "girl",         "guy",          "moment",
    "air",        "teacher",    "force",       "education",    "foot",         "boy",
    "age",        "policy",     "music",       "market",       "sense",        "nation",
    "plan",       "college",    "interest",    "death",        "experience",   "effect",
    "class",      "control",    "care",        "field",        "development",  "role",
    "effort",     "rate",       "heart",       "drug",         "show",         "leader",
    "light",      "voice",      "wife",        "police",       "mind",         "price",
    "report",     "decision",   "son",         "view",         "relationship", "town",
    "road",       "arm",        "difference",  "value",        "building",     "action",
    "model",      "season",     "society",     "tax",          "director",     "position",
    "player",     "record",     "paper",       "space",        "ground",       "form",
    "event",      "official",   "matter",      "center",       "couple",       "site",
    "project",    "activity",   "star",        "table",        "need",         "court",
    "oil",        "situation",  "cost",        "industry",     "figure",       "street",
    "image",      "phone",      "data",        "picture",      "practice",     "piece",
    "land",       "product",    "doctor",      "wall",         "patient",      "worker",
    "news",       "test",       "movie",       "north",        "love",         "support",
    "technology", "step",       "baby",        "computer",     "type",         "attention",
    "film",       "tree",       "source",      "organization", "hair",         "window",
    "evidence",   "population", "site",        "bank",         "stone",        "river",
    "garden",     "bridge",     "summer",      "winter",       "green",        "blue",
    "small",      "large",      "young",       "old",          "early",        "late",
    "good",       "great",      "little",      "long",         "high",         "different",
    "important",  "public",     "bad",         "same",         "able",         "local",
    "sure",       "free",       "better",      "true",         "whole",        "clear",
    "strong",     "easy",       "hard",        "open",         "short",        "simple",
    "quiet",      "bright",     "happy",       "warm",         "cold",         "make",
    "take",       "see",        "know",        "come",         "think",        "look",
    "want",       "give",       "use",         "find",         "tell",         "ask",
    "seem",       "feel",       "try",         "leave",        "call",         "keep",
    "begin",      "help",       "talk",        "turn",         "start",        "show",
    "hear",       "play",       "run",         "move",         "like",         "live",
    "believe",    "hold",       "bring",       "write",        "stand",        "learn",
    "lead",       "read",       "grow",        "open",         "walk",         "win",
    "offer",      "remember",   "consider",    "appear",       "buy",          "wait",
    "serve",      "send",       "build",       "stay",         "fall",         "reach",
    "remain",     "suggest",    "raise",       "pass",         "sell",         "decide",
    "return",     "explain",    "hope",        "develop",      "carry",        "break",
    "receive",    "agree",      "cover",       "catch",        "draw",         "choose",
    "and",        "with",       "from",        "about",        "over",         "after",
    "before",     "under",      "between",     "through",      "during",       "without",
    "again",      "never",      "always",      "often",        "soon",         "also",
    "very",       "still"};

constexpr const char* kAdjectives[] = {"quiet",   "bright",  "old",   "small",   "golden",
                                       "patient", "distant", "busy",  "gentle",  "narrow",
                                       "wide",    "careful", "tired", "curious", "silver",
                                       "green",   "heavy",   "early", "calm",    "sturdy"};
constexpr const char* kNouns[] = {"river",   "baker",   "farmer",   "train",   "garden",
                                  "lantern", "village", "teacher",  "bridge",  "market",
                                  "sailor",  "library", "mountain", "painter", "kitchen",
                                  "orchard", "clock",   "harbor",   "meadow",  "workshop"};
constexpr const char* kVerbs[] = {
    "carries",   "watches",   "passes",  "follows", "visits", "repairs", "paints", "finds",
    "describes", "remembers", "crosses", "greets",  "builds", "cleans",  "opens",  "counts"};
constexpr const char* kPlaces[] = {
    "near the station",    "behind the old mill",   "along the coast",   "in the morning light",
    "before the rain",     "after the long winter", "beside the road",   "under the tall trees",
    "at the edge of town", "during the festival",   "across the valley", "by the window"};

template <size_t N>
const char* Pick(const char* const (&list)[N], std::mt19937_64& rng) {
  return list[rng() % N];
}

}  // namespace

std::string RandomWords(std::mt19937_64& rng, int num_words) {
  std::string out;
  for (int i = 0; i < num_words; ++i) {
    if (i > 0) out.push_back(' ');
    out += Pick(kWords, rng);
  }
  return out;
}

std::string FillerSentence(std::mt19937_64& rng) {
  return fmt::format("The {} {} {} the {} {} {}.", Pick(kAdjectives, rng), Pick(kNouns, rng),
                     Pick(kVerbs, rng), Pick(kAdjectives, rng), Pick(kNouns, rng),
                     Pick(kPlaces, rng));
}

absl::StatusOr<Prompt> BuildPrompt(TokenizerApi& tokenizer, int64_t num_tokens, int64_t bos_tokens,
                                   std::mt19937_64& rng) {
  if (num_tokens <= bos_tokens) {
    return InvalidArgumentError(
        util::codes::kInputTooShort,
        fmt::format("an input of {} tokens leaves no room for text", num_tokens));
  }
  // Enough words for the target: at least one token each, plus slack for the cut.
  std::string words = RandomWords(rng, static_cast<int>(num_tokens) + 8);
  std::vector<int32_t> ids;
  for (int round = 0; round < 8; ++round) {
    DI_ASSIGN_OR_RETURN(ids, tokenizer.Tokenize(words));
    if (static_cast<int64_t>(ids.size()) >= num_tokens + 4) break;
    words.push_back(' ');
    words += RandomWords(rng, static_cast<int>(num_tokens - static_cast<int64_t>(ids.size())) + 8);
  }
  if (static_cast<int64_t>(ids.size()) < num_tokens + 4) {
    return InternalError(util::codes::kInexactPrompt,
                         "the tokenizer returns too few tokens for the text");
  }
  // Cut the text's own tokens (BOS excluded: the server adds it again when counting).
  int64_t keep = num_tokens - bos_tokens;
  Prompt best;
  int64_t best_error = -1;
  for (int round = 0; round < 8; ++round) {
    keep = std::clamp<int64_t>(keep, 1, static_cast<int64_t>(ids.size()) - bos_tokens);
    std::vector<int32_t> cut(ids.begin() + bos_tokens, ids.begin() + bos_tokens + keep);
    DI_ASSIGN_OR_RETURN(std::string text, tokenizer.Detokenize(cut));
    DI_ASSIGN_OR_RETURN(std::vector<int32_t> check, tokenizer.Tokenize(text));
    int64_t count = static_cast<int64_t>(check.size());
    int64_t error = std::abs(count - num_tokens);
    if (best_error < 0 || error < best_error) {
      best = {text, count};
      best_error = error;
    }
    if (count == num_tokens) return best;
    // Detokenize/tokenize may merge or split pieces at the cut; move the cut by the difference.
    keep += num_tokens - count;
  }
  return InternalError(
      util::codes::kInexactPrompt,
      fmt::format("no text of exactly {} tokens found (closest: {})", num_tokens, best.num_tokens));
}

absl::StatusOr<Prompt> BuildHaystack(TokenizerApi& tokenizer, int64_t num_tokens,
                                     const std::vector<std::string>& needles,
                                     const std::vector<double>& depths, std::mt19937_64& rng) {
  if (needles.size() != depths.size()) {
    return InvalidArgumentError(util::codes::kBadNeedles, "one depth per needle is needed");
  }
  std::vector<std::string> sentences;
  auto render = [&]() {
    // Needle i goes before sentence round(depth_i * n); equal positions keep needle order.
    std::vector<std::pair<size_t, size_t>> at;
    for (size_t i = 0; i < needles.size(); ++i) {
      double d = std::clamp(depths[i], 0.0, 1.0);
      at.emplace_back(static_cast<size_t>(std::llround(d * static_cast<double>(sentences.size()))),
                      i);
    }
    std::stable_sort(at.begin(), at.end());
    std::string text;
    size_t next = 0;
    for (size_t s = 0; s <= sentences.size(); ++s) {
      while (next < at.size() && at[next].first == s) {
        if (!text.empty()) text.push_back(' ');
        text += needles[at[next++].second];
      }
      if (s == sentences.size()) break;
      if (!text.empty()) text.push_back(' ');
      text += sentences[s];
    }
    return text;
  };
  // A first guess of about 14 tokens per sentence, then corrections from measured counts.
  double per_sentence = 14.0;
  int64_t needle_tokens = 0;
  for (const std::string& n : needles) needle_tokens += static_cast<int64_t>(n.size() / 4 + 1);
  Prompt best;
  for (int round = 0; round < 12; ++round) {
    int64_t want =
        std::max<int64_t>(0, static_cast<int64_t>((num_tokens - needle_tokens) / per_sentence));
    while (static_cast<int64_t>(sentences.size()) < want) sentences.push_back(FillerSentence(rng));
    if (static_cast<int64_t>(sentences.size()) > want) sentences.resize(want);
    std::string text = render();
    DI_ASSIGN_OR_RETURN(std::vector<int32_t> ids, tokenizer.Tokenize(text));
    int64_t count = static_cast<int64_t>(ids.size());
    if (count <= num_tokens && count > best.num_tokens) best = {text, count};
    // Within one sentence of the target (or nothing left to remove): done.
    if (count <= num_tokens && num_tokens - count < 2 * per_sentence) break;
    if (sentences.empty()) break;
    per_sentence = std::max(
        1.0, static_cast<double>(count - needle_tokens) / static_cast<double>(sentences.size()));
    if (count > num_tokens) {
      // Overshoot: measure again with fewer sentences, rounding the estimate down.
      per_sentence *= 1.02;
    }
  }
  if (best.text.empty() && !needles.empty()) {
    return InvalidArgumentError(util::codes::kWindowTooSmall,
                                fmt::format("{} tokens cannot hold the needles", num_tokens));
  }
  return best;
}

}  // namespace deepinfer::tools
