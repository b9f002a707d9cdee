#pragma once

// Expert parallelism (EP) across processes over MPI (`mpirun -np N deepinfer serve
// --expert-parallel`): every MoE layer's routed experts are split over the N ranks
// (arch/moe.h's ExpertExchange); attention, shared experts, embeddings and head are replicated.
// Rank 0 (the leader) runs the engine: it schedules, samples and serves HTTP. Every forward call
// it makes (main model, MTP modules, DSpark proposals) is first broadcast to the other ranks (the
// followers), which replay it on their own model and KV caches: all ranks run the same step on
// the same tokens, so their caches stay identical and the experts' collectives line up. Greedy
// output is bit-identical to one process (MoeDispatch sums each token's experts in the same
// order).
//
// The group and the followers' loop are declared in engine/engine.h (what the server sees); this
// header has the leader's side and the model fingerprint.
//
// Not supported yet (refused at start with bad_flags / bad_option): data-parallel ranks, prefix
// checkpoints and P/D roles (they write KV blocks outside forward calls, which followers would not see).
//
// Threads: the collectives run on the thread that drives the leader's model (the engine thread;
//   MPI is initialised MPI_THREAD_SERIALIZED) and the follower's main thread.
// Faults: a rank that exits makes mpirun end the others (non-zero exit).

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "arch/causal_lm.h"
#include "arch/moe.h"
#include "engine/engine.h"
#include "model/model.h"

namespace deepinfer::engine {

// Hash of the model's architecture, config and tensor table (names, dtypes, shapes): equal on
// two ranks when they mapped the same checkpoint layout.
uint64_t ModelFingerprint(const model::Model& model);

// The leader's model: forwards every call to `lm` after broadcasting it to the followers
// (RunExpertParallelFollower). Not thread-safe, like any CausalLm. Its destructor tells the
// followers to stop.
std::unique_ptr<arch::CausalLm> MakeExpertParallelLeader(
    std::unique_ptr<arch::CausalLm> lm, std::shared_ptr<ExpertParallelGroup> group);

// Copies `bytes` bytes of `kv`'s layer `layer` at byte `offset` from rank 0 to the same place on
// every other rank: KV written outside a forward call (a prefix-checkpoint restore, which P/D's
// decode side uses too). REQUIRES: `leader` came from MakeExpertParallelLeader. Engine thread.
void MirrorKvBytes(arch::CausalLm& leader, arch::KvCache& kv, int layer, size_t offset,
                   size_t bytes);

}  // namespace deepinfer::engine
