# deepinfer: the two set-up commands are `make serve` and `make test` (see README.md).
BUILD ?= build
JOBS ?= $(shell nproc)
PORT ?= 8900
HOST ?= 127.0.0.1
CACHE ?= $(or $(DEEPINFER_CACHE),$(HOME)/.cache/deepinfer)
MODEL ?= $(CACHE)/models/SmolLM2-135M-Instruct.Q4_1.gguf
FUZZ_SECONDS ?= 15

.PHONY: setup build test unit e2e fuzz serve bench reference clean

setup:
	scripts/setup.sh

$(BUILD)/build.ninja:
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release

build: setup $(BUILD)/build.ninja
	cmake --build $(BUILD) -j $(JOBS)

# Every test: C++ unit and integration tests (ctest), the e2e suite (pytest against real
# processes) and a bounded fuzzing run of every parser of outside input.
test: build
	scripts/run_tests.sh $(BUILD) $(FUZZ_SECONDS)

unit: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

e2e: build
	.venv/bin/python -m pytest -q tests/e2e

fuzz:
	scripts/run_fuzz.sh $(FUZZ_SECONDS)

# Builds only the deepinfer binary (the tests and tools' tests are built by `make test`).
serve:
	scripts/setup.sh --serve
	$(MAKE) --no-print-directory $(BUILD)/build.ninja
	cmake --build $(BUILD) -j $(JOBS) --target deepinfer
	$(BUILD)/deepinfer serve --model $(MODEL) --host $(HOST) --port $(PORT)

bench: build
	bench/run_all.sh $(BUILD)

# Regenerates every golden file from the reference implementations (heavy: builds
# llama-cpp-python). Not part of CI.
reference:
	scripts/setup.sh --no-model
	scripts/make_reference.sh

clean:
	rm -rf $(BUILD) build-fuzz build-arm64
