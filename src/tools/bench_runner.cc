#include "tools/bench_runner.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <random>
#include <system_error>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "fmt/format.h"
#include "http/sse_parser.h"
#include "util/json.h"
#include "util/status.h"

namespace deepinfer::tools {
namespace {

double SecondsSince(BenchClock::time_point t0) {
  return std::chrono::duration<double>(BenchClock::now() - t0).count();
}

const char* PathOf(Endpoint endpoint) {
  return endpoint == Endpoint::kChat ? "/v1/chat/completions" : "/v1/completions";
}

// The message of an OpenAI-shaped error body, else the start of the body.
std::string ErrorMessage(int status, const std::string& body) {
  util::Json j = util::ParseJsonOrDiscarded(body);
  std::string message;
  if (const util::Json* e = util::Member(j, "error")) {
    message =
        e->is_string() ? e->get<std::string>() : util::StringMember(*e, "message").value_or("");
  }
  if (message.empty()) message = body.substr(0, 200);
  for (char& c : message) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  return status > 0 ? fmt::format("HTTP {}: {}", status, message) : message;
}

// Output text of a choice: completions carry "text", chat streams "delta", chat answers
// "message"; reasoning text counts as output as vLLM's bench does.
std::string ChoiceText(const util::Json& choice, Endpoint endpoint) {
  if (endpoint == Endpoint::kCompletions) return util::StringMember(choice, "text").value_or("");
  const util::Json* part = util::Member(choice, "delta");
  if (part == nullptr) part = util::Member(choice, "message");
  if (part == nullptr) return "";
  std::string text = util::StringMember(*part, "reasoning_content").value_or("");
  text += util::StringMember(*part, "reasoning").value_or("");
  text += util::StringMember(*part, "content").value_or("");
  return text;
}

// Reads usage into `record`; returns whether it was there.
bool ReadUsage(const util::Json& j, RequestRecord* record) {
  const util::Json* usage = util::Member(j, "usage");
  if (usage == nullptr || !usage->is_object()) return false;
  auto completion = util::IntMember(*usage, "completion_tokens");
  if (!completion) return false;
  record->output_tokens = *completion;
  record->prompt_tokens = util::IntMember(*usage, "prompt_tokens").value_or(record->prompt_tokens);
  if (const util::Json* details = util::Member(*usage, "prompt_tokens_details")) {
    record->cached_tokens = util::IntMember(*details, "cached_tokens").value_or(-1);
  }
  record->usage_reported = true;
  return true;
}

}  // namespace

std::string RequestBody(const ClientConfig& config, const RequestSpec& spec) {
  util::Json b = util::Json::object();
  b["model"] = config.model;
  if (config.endpoint == Endpoint::kCompletions) {
    b["prompt"] = spec.prompt;
  } else {
    util::Json messages = util::Json::array();
    for (const ChatTurn& t : spec.messages) {
      messages.push_back(util::Json{{"role", t.role}, {"content", t.content}});
    }
    b["messages"] = std::move(messages);
  }
  b["max_tokens"] = spec.max_tokens;
  b["temperature"] = config.temperature;
  if (spec.stream) {
    b["stream"] = true;
    b["stream_options"] = util::Json{{"include_usage", true}};
  }
  if (spec.ignore_eos) {
    b["ignore_eos"] = true;
    b["min_tokens"] = spec.max_tokens;
  }
  return util::DumpJson(b);
}

void ReduceStream(const std::vector<StreamEvent>& events, bool saw_done, Endpoint endpoint,
                  RequestRecord* record) {
  int64_t content_chunks = 0;
  double last_s = 0;
  for (const StreamEvent& e : events) {
    util::Json j = util::ParseJsonOrDiscarded(e.data);
    if (j.is_discarded()) {
      record->error = "a stream chunk is not JSON: " + e.data.substr(0, 100);
      return;
    }
    if (util::Member(j, "error") != nullptr) {
      record->error = "error in stream: " + ErrorMessage(0, e.data);
      return;
    }
    if (const util::Json* choice = util::FirstOf(j, "choices")) {
      std::string text = ChoiceText(*choice, endpoint);
      if (!text.empty()) {
        if (content_chunks == 0) {
          record->ttft_s = e.time_s;
        } else {
          record->itl_s.push_back(e.time_s - last_s);
        }
        last_s = e.time_s;
        ++content_chunks;
        record->text += text;
      }
      if (auto finish = util::StringMember(*choice, "finish_reason"))
        record->finish_reason = *finish;
    }
    ReadUsage(j, record);
  }
  if (!saw_done) {
    record->error = "the stream ended without data: [DONE]";
    return;
  }
  if (!record->usage_reported) record->output_tokens = content_chunks;
  if (content_chunks == 0) record->ttft_s = record->e2el_s;
  record->ok = true;
}

RequestRecord SendRequest(const ClientConfig& config, const RequestSpec& spec,
                          BenchClock::time_point run_start) {
  RequestRecord rec;
  std::string body = RequestBody(config, spec);
  BenchClock::time_point t0 = BenchClock::now();
  rec.start_s = std::chrono::duration<double>(t0 - run_start).count();
  if (!spec.stream) {
    auto r = HttpFetch(config.base, "POST", PathOf(config.endpoint), body, config.http);
    rec.e2el_s = SecondsSince(t0);
    rec.ttft_s = rec.e2el_s;
    if (!r.ok()) {
      rec.error = OneLineError(r.status());
    } else if (r->status != 200) {
      rec.error = ErrorMessage(r->status, r->body);
    } else {
      util::Json j = util::ParseJsonOrDiscarded(r->body);
      const util::Json* choice = util::FirstOf(j, "choices");
      if (choice == nullptr) {
        rec.error = "the answer has no choices: " + r->body.substr(0, 200);
      } else {
        rec.text = ChoiceText(*choice, config.endpoint);
        rec.finish_reason = util::StringMember(*choice, "finish_reason").value_or("");
        if (!ReadUsage(j, &rec)) rec.output_tokens = rec.text.empty() ? 0 : 1;
        rec.ok = true;
      }
    }
  } else {
    http::SseParser parser;
    std::vector<StreamEvent> events;
    bool done = false;
    auto r = HttpPostStreaming(config.base, PathOf(config.endpoint), body, config.http,
                               [&](std::string_view piece) {
                                 double t = SecondsSince(t0);
                                 for (http::SseEvent& e : parser.Feed(piece)) {
                                   if (e.data == "[DONE]") {
                                     done = true;
                                   } else {
                                     events.push_back({std::move(e.data), t});
                                   }
                                 }
                                 // An endless event ends the request (without [DONE]).
                                 return !parser.overflowed();
                               });
    rec.e2el_s = SecondsSince(t0);
    if (!r.ok()) {
      rec.error = OneLineError(r.status());
    } else if (r->status != 200) {
      rec.error = ErrorMessage(r->status, r->body);
    } else {
      ReduceStream(events, done, config.endpoint, &rec);
    }
  }
  if (!rec.usage_reported || rec.prompt_tokens == 0) {
    rec.prompt_tokens = std::max(rec.prompt_tokens, spec.planned_prompt_tokens);
  }
  if (!spec.keep_text) {
    rec.text.clear();
    rec.text.shrink_to_fit();
  }
  return rec;
}

ProgressBar::ProgressBar(std::string label, int64_t total, bool enabled)
    : label_(std::move(label)), total_(total), enabled_(enabled), start_(BenchClock::now()) {
  if (enabled_) Draw();
}

void ProgressBar::Tick(bool ok) {
  (ok ? ok_ : failed_)++;
  if (enabled_) Draw();
}

void ProgressBar::Finish() {
  if (!enabled_) return;
  Draw();
  std::fputc('\n', stderr);
  std::fflush(stderr);
}

void ProgressBar::Draw() {
  constexpr int kWidth = 30;
  int64_t done = ok_ + failed_;
  int filled = total_ > 0 ? static_cast<int>(kWidth * done / total_) : kWidth;
  std::string bar(filled, '#');
  bar.resize(kWidth, '-');
  std::fprintf(stderr, "\r%s [%s] %lld/%lld ok %lld fail %lld %.1f s ", label_.c_str(), bar.c_str(),
               static_cast<long long>(done), static_cast<long long>(total_),
               static_cast<long long>(ok_), static_cast<long long>(failed_), SecondsSince(start_));
  std::fflush(stderr);
}

std::vector<RequestRecord> RunLoad(const ClientConfig& config,
                                   const std::vector<std::vector<RequestSpec>>& jobs,
                                   const LoadOptions& options, double* duration_s) {
  std::vector<size_t> offset(jobs.size() + 1, 0);
  for (size_t i = 0; i < jobs.size(); ++i) offset[i + 1] = offset[i] + jobs[i].size();
  std::vector<RequestRecord> records(offset.back());

  // Arrival times: gaps drawn from an exponential distribution (a Poisson process), as vLLM.
  std::vector<double> arrival_s(jobs.size(), 0.0);
  if (std::isfinite(options.request_rate) && options.request_rate > 0) {
    std::mt19937_64 rng(options.seed);
    std::exponential_distribution<double> gap(options.request_rate);
    double t = 0;
    for (size_t i = 0; i < jobs.size(); ++i) {
      arrival_s[i] = t;
      t += gap(rng);
    }
  }

  ProgressBar progress(options.label, static_cast<int64_t>(records.size()), options.progress);
  absl::Mutex progress_mu;  // serializes the progress bar's Tick across the workers
  std::atomic<size_t> next{0};
  const BenchClock::time_point run_start = BenchClock::now();
  auto worker = [&]() {
    for (size_t i = next++; i < jobs.size(); i = next++) {
      std::this_thread::sleep_until(run_start + std::chrono::duration_cast<BenchClock::duration>(
                                                    std::chrono::duration<double>(arrival_s[i])));
      for (size_t k = 0; k < jobs[i].size(); ++k) {
        RequestRecord rec = SendRequest(config, jobs[i][k], run_start);
        {
          absl::MutexLock lock(&progress_mu);
          progress.Tick(rec.ok);
        }
        records[offset[i] + k] = std::move(rec);
      }
    }
  };
  int num_workers = std::max(1, std::min<int>(options.concurrency, static_cast<int>(jobs.size())));
  std::vector<std::thread> threads;
  for (int w = 0; w < num_workers; ++w) {
    try {
      threads.emplace_back(worker);
    } catch (const std::system_error&) {
      break;  // out of threads: run with the workers that started
    }
  }
  if (threads.empty()) worker();
  for (std::thread& t : threads) t.join();
  *duration_s = SecondsSince(run_start);
  progress.Finish();
  return records;
}

}  // namespace deepinfer::tools
