# gpureap: `make demo` and `make test` each set up a fresh machine from nothing.
#
# Two build flavours (README, "For contributors"):
#   build/          Debug (-O0): fast to compile; tests, `make unit`, `make test-MODULE`, demo.
#   build-release/  RelWithDebInfo (-O2): the shipped binary and every benchmark.
#   build-fuzz/     clang 16 with libFuzzer, ASan and UBSan: `make fuzz` only.
BUILD         ?= build
RELEASE_BUILD ?= build-release
FUZZ_BUILD    ?= build-fuzz
PORTABLE_BUILD ?= build-portable
PREFIX        ?= /usr/local
FUZZ_SECONDS  ?= 60
FUZZ_CXX      ?= clang++-16
JOBS          ?= $(shell nproc)
# `make unit` runs twice as many unit tests as cores at once: most of their time is
# waiting (a hung driver's deadline, a child's exit), not CPU (docs/benchmarks.md, "Build").
UNIT_JOBS     ?= $(shell echo $$(( $(JOBS) * 2 )))
# `make test` and `make e2e` run four tests a core at once: an end-to-end test spends
# most of its time waiting (a release delay, a settle window, an agent's tick), so at -j2
# two cores stood idle most of the run; at three a core a sixth still did, at seven a core
# an agent answered `status` later than its 2 s bound (docs/benchmarks.md, "Build").
TEST_JOBS     ?= $(shell echo $$(( $(JOBS) * 4 )))
CMAKE_FLAGS   ?=
# Ninja when installed (scripts/install-deps.sh installs it); a directory keeps the
# generator it was first configured with.
GENERATOR = $(if $(shell command -v ninja),-G Ninja,)
configure = @test -f $(1)/CMakeCache.txt || cmake -S . -B $(1) $(GENERATOR) $(2) $(CMAKE_FLAGS) >/dev/null
# The modules with unit tests of their own (`make test-proc`, ...), and the unit-test
# program each module's tests are in (one per group of floors: CMakeLists.txt).
MODULES = util gpu proc capacity inventory reclaim cluster report supervise agent audit top cli sim fuzz
unit_program = $(if $(filter $(1),util proc gpu capacity sim fuzz),gpureap_unit_1to3,$(if \
  $(filter $(1),inventory reclaim supervise cluster),gpureap_unit_4to6,gpureap_unit_7to9))

.PHONY: all packages deps build release demo test unit e2e stress gpu-test bench fuzz clean \
        install deb portable image package-deps package-test $(addprefix test-,$(MODULES))

all: build

# The Debian packages (scripts/install-deps.sh; it installs only what is missing).
packages:
	@./scripts/install-deps.sh

# The Debian packages, then the npm tree of the dashboard's schema check, pinned by its
# lock file, into the build directory (docs/grafana.md; skipped without node and npm).
deps: packages
	@./scripts/install-grafana-validator.sh $(BUILD)

# The debug build with everything its tests need, the dashboard check's npm tree too.
# Installed before the compiler starts, not beside it: beside it, a fresh `make build` was
# no faster (the compiler already keeps both cores busy; docs/benchmarks.md, "Fourth pass").
# The targets that run no contrib test (unit, demo, test-MODULE, release) need `packages` only.
build: deps
	$(call configure,$(BUILD),-DCMAKE_BUILD_TYPE=Debug)
	@cmake --build $(BUILD) -j $(JOBS)

# The release binary (-O2), the simulated driver and the benchmark programs; no tests.
release: packages
	$(call configure,$(RELEASE_BUILD),-DCMAKE_BUILD_TYPE=RelWithDebInfo -DGPUREAP_BUILD_TESTS=OFF)
	@cmake --build $(RELEASE_BUILD) -j $(JOBS)

# The demo needs only the binary and the simulated driver, from the faster-to-compile build.
demo: packages
	$(call configure,$(BUILD),-DCMAKE_BUILD_TYPE=Debug)
	@cmake --build $(BUILD) -j $(JOBS) --target gpureap gpureap-sim sim_nvml
	@./scripts/demo.sh $(BUILD)

# Every test on the debug build but the many-trial stress test (`make stress`, which CI
# runs too), then the GPU tests (they skip where there is no GPU). The end-to-end, contrib
# and bench tests start as soon as the programs they run are linked, beside the compiling
# of the unit-test programs; the unit tests run once those are built
# (scripts/test-beside-build.sh). CI (.ci/run) also builds the release binary once, so a
# release-only error cannot land.
test: deps
	$(call configure,$(BUILD),-DCMAKE_BUILD_TYPE=Debug)
	@./scripts/test-beside-build.sh $(BUILD) $(JOBS) $(TEST_JOBS)
	@GPUREAP_BIN=$(BUILD)/gpureap python3 -m unittest discover -s tests/gpu -p 'test_*.py' -v

# Unit tests only: builds only the unit-test binaries (not the binary's main or e2e).
unit: packages
	$(call configure,$(BUILD),-DCMAKE_BUILD_TYPE=Debug)
	@cmake --build $(BUILD) -j $(JOBS) --target unit_tests
	@cd $(BUILD) && ctest --output-on-failure -j $(UNIT_JOBS) -L unit

# One module's tests: builds only the unit-test program they are in (and what it links).
$(addprefix test-,$(MODULES)): test-%: packages
	$(call configure,$(BUILD),-DCMAKE_BUILD_TYPE=Debug)
	@cmake --build $(BUILD) -j $(JOBS) --target $(call unit_program,$*)
	@cd $(BUILD) && ctest --output-on-failure -j $(JOBS) -L '^unit-$*$$'

e2e: build
	@cd $(BUILD) && ctest --output-on-failure -L e2e -j $(TEST_JOBS)

# Stress tests (many trials each; not part of `make test`).
stress: build
	@cd $(BUILD) && ctest --output-on-failure -L stress

gpu-test: release
	@GPUREAP_BIN=$(RELEASE_BUILD)/gpureap python3 -m unittest discover -s tests/gpu -p 'test_*.py' -v

# CPU benchmarks, always on the release build (docs/benchmarks.md).
bench: release
	@$(RELEASE_BUILD)/bench/gpureap_scan_bench
	@./bench/run_overhead.sh $(RELEASE_BUILD)/gpureap

# Each libFuzzer target for FUZZ_SECONDS (default 60), seeded from fuzz/corpus/ and
# tests/fixtures (docs/benchmarks.md, "Fuzzing"). Not part of `make test`, which replays
# the stored corpus through the same targets built with gcc (label unit-fuzz).
fuzz:
	@./scripts/install-deps.sh
	@./scripts/install-fuzz-deps.sh
	@test -f $(FUZZ_BUILD)/CMakeCache.txt || cmake -S . -B $(FUZZ_BUILD) $(GENERATOR) \
	  -DCMAKE_CXX_COMPILER=$(FUZZ_CXX) -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DGPUREAP_FUZZ=ON -DGPUREAP_BUILD_TESTS=OFF $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(FUZZ_BUILD) -j $(JOBS) --target fuzz_targets
	@./scripts/fuzz.sh $(FUZZ_BUILD) $(FUZZ_SECONDS) $(FUZZ_TARGETS)

# Packaging (docs/packaging.md). `make install PREFIX=/opt/gpureap DESTDIR=/tmp/root`:
# the release binary, man pages, bash and zsh completion and the docs under PREFIX.
install: release
	@DESTDIR=$(DESTDIR) cmake --install $(RELEASE_BUILD) --prefix $(PREFIX)

package-deps:
	@./scripts/install-package-deps.sh

# The Debian package: $(RELEASE_BUILD)/gpureap_<version>_amd64.deb (CPack; Depends
# computed by dpkg-shlibdeps).
deb: release package-deps
	@cd $(RELEASE_BUILD) && cpack -G DEB >/dev/null && ls -1 $(CURDIR)/$(RELEASE_BUILD)/gpureap_*_amd64.deb

# One binary that needs only glibc (libstdc++ and libgcc linked in; NVML dlopen'ed), at
# $(PORTABLE_BUILD)/gpureap, with the simulated driver beside it as in a build directory
# (scripts/demo.sh $(PORTABLE_BUILD) replays the demo with it).
portable: packages
	$(call configure,$(RELEASE_BUILD),-DCMAKE_BUILD_TYPE=RelWithDebInfo -DGPUREAP_BUILD_TESTS=OFF)
	@cmake --build $(RELEASE_BUILD) -j $(JOBS) --target gpureap-portable gpureap-sim sim_nvml
	@mkdir -p $(PORTABLE_BUILD)/sim
	@objcopy --strip-debug $(RELEASE_BUILD)/gpureap-portable $(PORTABLE_BUILD)/gpureap
	@cp -L $(RELEASE_BUILD)/sim/gpureap-sim $(RELEASE_BUILD)/sim/libnvidia-ml.so.1 $(PORTABLE_BUILD)/sim/
	@echo $(CURDIR)/$(PORTABLE_BUILD)/gpureap

# The agent's container image, localhost/gpureap:<version>, from the portable binary:
# buildah from scratch, nothing pulled; run as root (docs/kubernetes.md, "The image").
image: portable
	@./packaging/image/build.sh $(PORTABLE_BUILD)/gpureap

# The packaging checks (tests/package): man pages (groff warnings fail), completion in a
# real bash, the .deb (contents, lintian, installed into a scratch root and run), `make
# install` with DESTDIR, the portable binary (ldd, glibc, the demo). CI runs it after
# `make release` (.ci/run).
package-test: deb portable
	@GPUREAP_RELEASE_BUILD=$(RELEASE_BUILD) GPUREAP_PORTABLE_BUILD=$(PORTABLE_BUILD) \
	  python3 -m unittest discover -s tests/package -p 'test_*.py' -v

clean:
	rm -rf $(BUILD) $(RELEASE_BUILD) $(FUZZ_BUILD) $(PORTABLE_BUILD)
