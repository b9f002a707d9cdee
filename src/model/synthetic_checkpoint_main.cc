// synthetic_checkpoint CASE_DIR [OUT_DIR]: writes a test checkpoint from the weight recipe in
// CASE_DIR/weights.json (see model/synthetic_checkpoint.h). Without OUT_DIR the safetensors go
// next to the recipe; with it, OUT_DIR gets the case's config, recipe and tokenizer files too.
// Exit status 2 with a one-line error on bad input.

#include <cstdio>
#include <string>

#include "model/synthetic_checkpoint.h"
#include "util/status.h"

int main(int argc, char** argv) {
  if (argc < 2 || argc > 3) {
    std::fprintf(stderr, "usage: %s CASE_DIR [OUT_DIR]\n", argv[0]);
    return 2;
  }
  const std::string out = argc == 3 ? argv[2] : argv[1];
  const absl::Status st = deepinfer::model::WriteSyntheticCheckpoint(argv[1], out);
  if (!st.ok()) {
    std::fprintf(stderr, "%s\n", deepinfer::OneLineError(st).c_str());
    return 2;
  }
  std::printf("%s\n", out.c_str());
  return 0;
}
