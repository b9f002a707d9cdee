#pragma once

// For the engine tests only: run one request to the end and collect its tokens.

#include <chrono>
#include <vector>

#include "engine/engine.h"
#include "gtest/gtest.h"

namespace deepinfer::engine::testing {

// The tokens `r` generates on `engine` (its final update in *final_out, if given); fails the test
// when the stream does not finish within 60 s.
inline std::vector<int32_t> Generate(Engine& engine, GenerateRequest r,
                                     StreamUpdate* final_out = nullptr) {
  auto stream = engine.Submit(std::move(r));
  EXPECT_TRUE(stream.ok()) << stream.status();
  if (!stream.ok()) return {};
  std::vector<int32_t> out;
  StreamUpdate u;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline) {
    if (!(*stream)->Wait(u, std::chrono::milliseconds(100))) continue;
    for (const auto& t : u.tokens) out.push_back(t.token);
    if (u.finish != FinishReason::kNone) {
      if (final_out) *final_out = u;
      return out;
    }
  }
  ADD_FAILURE() << "stream did not finish";
  return out;
}

}  // namespace deepinfer::engine::testing
