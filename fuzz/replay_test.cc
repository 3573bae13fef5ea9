// Replays the stored fuzz inputs (fuzz/corpus/<target>/) through each target without
// libFuzzer, in the first unit-test program, so every `make test` runs every input found so
// far: FuzzCorpus.<target> (label unit-fuzz). A crash or a failed fuzz::check aborts, which
// fails the test; a target with no input fails too (a replay of nothing proves nothing).
// `make fuzz` builds the same sources with libFuzzer (fuzz/CMakeLists.txt).

#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

// Each target's entry point under a name of its own (they all define LLVMFuzzerTestOneInput).
#define LLVMFuzzerTestOneInput gpureap_fuzz_one_proc
#include "fuzz/proc_fuzz.cc"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput gpureap_fuzz_one_cgroup
#include "fuzz/cgroup_fuzz.cc"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput gpureap_fuzz_one_run_id
#include "fuzz/run_id_fuzz.cc"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput gpureap_fuzz_one_units
#include "fuzz/units_fuzz.cc"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput gpureap_fuzz_one_gpu_select
#include "fuzz/gpu_select_fuzz.cc"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput gpureap_fuzz_one_hf_config
#include "fuzz/hf_config_fuzz.cc"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput gpureap_fuzz_one_sglang_log
#include "fuzz/sglang_log_fuzz.cc"
#undef LLVMFuzzerTestOneInput

namespace fuzz_replay_test {

using Target = int (*)(const std::uint8_t*, std::size_t);

// Feeds every file under fuzz/corpus/<name>/ to `target`, in name order; returns how many.
std::size_t replay_corpus(const char* name, Target target) {
  namespace fs = std::filesystem;
  std::vector<fs::path> inputs;
  for (const auto& e : fs::recursive_directory_iterator(fs::path(GPUREAP_FUZZ_CORPUS) / name))
    if (e.is_regular_file()) inputs.push_back(e.path());
  std::sort(inputs.begin(), inputs.end());
  for (const auto& path : inputs) {
    std::ifstream in(path, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    target(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
  }
  return inputs.size();
}

}  // namespace fuzz_replay_test

// One test per target, named as fuzz/CMakeLists.txt's gpureap_fuzz_target lines (which
// checks that each has its test here).
#define GPUREAP_FUZZ_REPLAY(name) \
  TEST(FuzzCorpus, name) { EXPECT_GT(fuzz_replay_test::replay_corpus(#name, gpureap_fuzz_one_##name), 0u); }
GPUREAP_FUZZ_REPLAY(proc)
GPUREAP_FUZZ_REPLAY(cgroup)
GPUREAP_FUZZ_REPLAY(run_id)
GPUREAP_FUZZ_REPLAY(units)
GPUREAP_FUZZ_REPLAY(gpu_select)
GPUREAP_FUZZ_REPLAY(hf_config)
GPUREAP_FUZZ_REPLAY(sglang_log)
