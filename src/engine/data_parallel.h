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

// DataParallelCores and CreateDataParallelEngine are declared in engine/engine.h, the engine's
// one public header; this header documents how they route.
#include "engine/engine.h"
