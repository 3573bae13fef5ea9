# gpureap: `make demo` and `make test` each set up a fresh machine from nothing.
BUILD ?= build
JOBS  ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: all deps build demo test unit e2e gpu-test bench clean

all: build

deps:
	@./scripts/install-deps.sh

build: deps
	@cmake -S . -B $(BUILD) $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

# The demo needs only the binary and the simulated driver, not the test suites.
demo: deps
	@cmake -S . -B $(BUILD) $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(BUILD) -j $(JOBS) --target gpureap gpureap-sim sim_nvml
	@./scripts/demo.sh $(BUILD)

test: build
	@cd $(BUILD) && ctest --output-on-failure -j $(JOBS) --timeout 300
	@GPUREAP_BIN=$(BUILD)/gpureap python3 -m unittest discover -s tests/gpu -p 'test_*.py' -v

unit: build
	@cd $(BUILD) && ctest --output-on-failure -L unit

e2e: build
	@cd $(BUILD) && ctest --output-on-failure -L e2e -j $(JOBS)

gpu-test: build
	@GPUREAP_BIN=$(BUILD)/gpureap python3 -m unittest discover -s tests/gpu -p 'test_*.py' -v

bench: build
	@./bench/run-cpu.sh $(BUILD)

clean:
	rm -rf $(BUILD)
