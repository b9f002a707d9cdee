#pragma once

// Data-parallel ranks in one process: N engines over one copy of the weights, each with its own
// scheduler, KV cache and prefix cache, behind the Engine interface.
//
// Routing (Submit): a request pinned by GenerateRequest::dp_rank (the X-data-parallel-rank
// header, as vLLM) goes to that rank. Otherwise the candidates are the ranks holding at most
// 2 + least/2 more unfinished requests than the least loaded one (least: its count); among them
// the rank that took the longest run of the prompt's full KV blocks wins (a conversation's next
// turn lands where its prefix is cached, SGLang's cache-aware DP routing), then the less
// loaded, then round-robin. A prefix every prompt shares (a system prompt) thus spreads over
// the ranks instead of pulling all traffic to one. The router keeps its own table of block
// hash -> ranks that took it, bounded by max(1024, the ranks' total KV blocks), oldest entries
// forgotten first; it can be wrong about a block a rank has since evicted, which costs a
// recompute there, never a wrong answer.
// Source: vLLM --data-parallel-size and its X-data-parallel-rank header; SGLang's cache-aware
// DP controller (../shared/research/engine-anchors.md 2.5, 2.11).

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "engine/engine.h"
#include "model/model.h"

namespace deepinfer::engine {

// How the ranks share the cores.
enum class DataParallelCores {
  // Each rank gets num_threads / ranks worker threads (at least one) and steps on its own.
  kSplit,
  // Every rank gets all num_threads threads and the ranks step one at a time (a shared lock
  // around each step).
  kTurns,
};

// Creates `ranks` engines from `options`, which apply per rank except:
//   kv_cache_memory_bytes / kv_cache_tokens: the total, split evenly between the ranks;
//   num_threads: the process's threads (0: hardware concurrency), shared as `cores` says.
// ranks == 1 gives a plain engine with pinning to rank 0 accepted.
// Errors: those of Engine::Create; InvalidArgument "bad_option" for ranks < 1 or > 64.
// Threads: as Engine; Submit may be called from any thread.
absl::StatusOr<std::unique_ptr<Engine>> CreateDataParallelEngine(
    const model::Model& model, const EngineOptions& options, int32_t ranks,
    DataParallelCores cores = DataParallelCores::kSplit);

}  // namespace deepinfer::engine
