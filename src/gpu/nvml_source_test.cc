// NvmlSource: its failure paths, and (when the build has the simulated driver)
// its behaviour against sim/'s libnvidia-ml.so.1 through the real dlopen path.
#include "gpu/nvml_source.h"
#include "gpu/test_devices.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

namespace gpureap::gpu {
namespace {

using ::testing::HasSubstr;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// Sets an environment variable for one test and restores it afterwards.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value != nullptr) {
      setenv(name, value, 1);
    } else {
      unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (old_) {
      setenv(name_, old_->c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

TEST(ResolveNvmlLibrary, FlagThenEnvironmentThenDefault) {
  {
    ScopedEnv env("GPUREAP_NVML_LIBRARY", "/env/libnvidia-ml.so.1");
    EXPECT_EQ(resolve_nvml_library("/flag/lib.so"), "/flag/lib.so");
    EXPECT_EQ(resolve_nvml_library(""), "/env/libnvidia-ml.so.1");
  }
  {
    ScopedEnv env("GPUREAP_NVML_LIBRARY", "");
    EXPECT_EQ(resolve_nvml_library(""), "libnvidia-ml.so.1");
  }
  ScopedEnv env("GPUREAP_NVML_LIBRARY", nullptr);
  EXPECT_EQ(resolve_nvml_library(""), "libnvidia-ml.so.1");
}

TEST(NvmlSource, MissingLibraryIsLibraryMissingAndRemembered) {
  NvmlSource source("/nonexistent/libnvidia-ml.so.1");
  auto start = Clock::now();
  GpuSnapshot s = source.snapshot(2s);
  EXPECT_LT(Clock::now() - start, 1s);
  EXPECT_EQ(s.state, SourceState::library_missing);
  EXPECT_THAT(s.problem, HasSubstr("/nonexistent/libnvidia-ml.so.1"));
  EXPECT_THAT(s.problem, HasSubstr("no NVIDIA driver seems to be installed"));
  EXPECT_TRUE(s.gpus.empty());
  EXPECT_FALSE(source.worker_pid().has_value()) << "the worker exited and was reaped";

  auto m = source.memory(gpu::devs({0}), 2s);
  ASSERT_FALSE(m.has_value());
  EXPECT_EQ(m.error().message, s.problem);
  EXPECT_FALSE(source.worker_pid().has_value()) << "no new worker for a remembered failure";

  source.disconnect();  // forgets it: the next call tries again, and fails alike
  EXPECT_EQ(source.snapshot(2s).state, SourceState::library_missing);
}

TEST(NvmlSource, PrefetchThenSnapshotReportsAMissingLibrary) {
  NvmlSource source("/nonexistent/libnvidia-ml.so.1");
  source.prefetch_snapshot();
  GpuSnapshot s = source.snapshot(2s);
  EXPECT_EQ(s.state, SourceState::library_missing);
  EXPECT_THAT(s.problem, HasSubstr("/nonexistent/libnvidia-ml.so.1"));
  source.prefetch_snapshot();  // remembered: does nothing
  EXPECT_FALSE(source.worker_pid().has_value());
}

TEST(NvmlSource, LibraryWithoutNvmlIsLibraryMissing) {
  auto source = make_nvml_source("libc.so.6");
  GpuSnapshot s = source->snapshot(2s);
  EXPECT_EQ(s.state, SourceState::library_missing);
  EXPECT_THAT(s.problem, HasSubstr("not a usable NVML library"));
}

#ifdef GPUREAP_SIM_NVML

// True while `pid` is a child of ours that has not been reaped.
bool is_unreaped_child(pid_t pid) {
  siginfo_t info{};
  return waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0;
}

// A simulated 8-GPU node in a fresh directory, found by the library through
// GPUREAP_SIM_DIR (inherited by the NVML worker).
class SimNode : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (std::filesystem::temp_directory_path() / "gpureap-gpu-test-XXXXXX");
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
    ASSERT_EQ(sim("node --dir " + dir_ + " --gpus 8 --memory 96GiB"), 0);
    env_.emplace("GPUREAP_SIM_DIR", dir_.c_str());
  }
  void TearDown() override {
    sim("mode --dir " + dir_ + " ok");
    sim("cleanup --dir " + dir_);
    env_.reset();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  int sim(const std::string& args) {
    return std::system((std::string(GPUREAP_SIM_BIN) + " " + args + " >/dev/null 2>&1").c_str());
  }
  // Starts a detached holder tree; returns the holder's pid (0 on failure).
  std::uint32_t hold(unsigned gpu, const std::string& bytes) {
    std::string command = std::string(GPUREAP_SIM_BIN) + " hold --dir " + dir_ + " --gpu " +
                          std::to_string(gpu) + " --bytes " + bytes + " --detach";
    FILE* out = popen(command.c_str(), "r");
    if (out == nullptr) return 0;
    char line[4096] = {};
    bool read = fgets(line, sizeof line, out) != nullptr;
    pclose(out);
    if (!read) return 0;
    auto ready = nlohmann::json::parse(line, nullptr, false);
    if (ready.is_discarded() || !ready.contains("holders")) return 0;
    return ready["holders"][0]["pid"].get<std::uint32_t>();
  }
  void set_mode(const std::string& mode) { ASSERT_EQ(sim("mode --dir " + dir_ + " " + mode), 0); }

  std::string dir_;
  std::optional<ScopedEnv> env_;
};

TEST_F(SimNode, SnapshotOfAnEightGpuNode) {
  NvmlSource source(GPUREAP_SIM_NVML);
  GpuSnapshot s = source.snapshot(5s);
  ASSERT_EQ(s.state, SourceState::ok) << s.problem;
  EXPECT_FALSE(s.driver_version.empty());
  ASSERT_EQ(s.gpus.size(), 8U);
  std::set<std::string> uuids, buses;
  for (unsigned i = 0; i < 8; ++i) {
    const GpuInfo& g = s.gpus[i];
    EXPECT_EQ(g.id, gpu::dev(i));
    EXPECT_TRUE(g.uuid.starts_with("GPU-")) << g.uuid;
    EXPECT_EQ(g.pci_bus_id.size(), 16U) << g.pci_bus_id;
    EXPECT_TRUE(g.minor.has_value());
    ASSERT_TRUE(g.memory.has_value());
    EXPECT_EQ(g.memory->total, 96ULL << 30);
    EXPECT_TRUE(g.processes_known);
    uuids.insert(g.uuid);
    buses.insert(g.pci_bus_id);
  }
  EXPECT_EQ(uuids.size(), 8U);
  EXPECT_EQ(buses.size(), 8U);

  // The worker is our live child, kept for the next query.
  ASSERT_TRUE(source.worker_pid().has_value());
  const auto worker_pid_before = source.worker_pid();
  EXPECT_TRUE(is_unreaped_child(*source.worker_pid()));

  // Once started, a snapshot is a single round trip to the same worker (its speed is
  // bench/'s to measure, not a test's).
  EXPECT_EQ(source.snapshot(5s).state, SourceState::ok);
  EXPECT_EQ(source.worker_pid(), worker_pid_before);
}

TEST_F(SimNode, PrefetchedSnapshotIsCollectedByTheNextSnapshot) {
  NvmlSource source(GPUREAP_SIM_NVML);
  source.prefetch_snapshot();
  ASSERT_TRUE(source.worker_pid().has_value()) << "the worker starts at once";
  const std::uint32_t holder = hold(2, "1GiB");  // after the prefetch: not in its answer
  ASSERT_NE(holder, 0U);
  GpuSnapshot s = source.snapshot(5s);
  ASSERT_EQ(s.state, SourceState::ok) << s.problem;
  ASSERT_EQ(s.gpus.size(), 8U);
  // Whether the prefetched answer predates the holder depends on timing; the
  // next snapshot is a fresh query and must see it.
  s = source.snapshot(5s);
  ASSERT_EQ(s.gpus[2].processes.size(), 1U);
  EXPECT_EQ(s.gpus[2].processes[0].pid, holder);
}

TEST_F(SimNode, MemoryAfterAPrefetchGetsMemoryReadings) {
  NvmlSource source(GPUREAP_SIM_NVML);
  source.prefetch_snapshot();
  source.prefetch_snapshot();  // one request in flight at most
  auto readings = source.memory(gpu::devs({1}), 5s);
  ASSERT_TRUE(readings.has_value()) << readings.error().message;
  ASSERT_EQ(readings->size(), 1U);
  EXPECT_EQ((*readings)[0].id, gpu::dev(1));
  EXPECT_EQ(source.snapshot(5s).gpus.size(), 8U);
  source.prefetch_snapshot();
  source.disconnect();  // with an answer in flight
  EXPECT_FALSE(source.worker_pid().has_value());
  EXPECT_EQ(source.snapshot(5s).state, SourceState::ok);
}

TEST_F(SimNode, MemoryReadingsInTheOrderAsked) {
  NvmlSource source(GPUREAP_SIM_NVML);
  auto readings = source.memory(gpu::devs({7, 0}), 5s);
  ASSERT_TRUE(readings.has_value()) << readings.error().message;
  ASSERT_EQ(readings->size(), 2U);
  EXPECT_EQ((*readings)[0].id, gpu::dev(7));
  EXPECT_EQ((*readings)[1].id, gpu::dev(0));
  EXPECT_TRUE((*readings)[0].used.has_value());
  EXPECT_TRUE((*readings)[0].pids.empty());

  auto bad = source.memory(gpu::devs({8}), 5s);
  ASSERT_FALSE(bad.has_value());
  EXPECT_THAT(bad.error().message, HasSubstr("no GPU with index 8"));
  EXPECT_TRUE(source.memory(gpu::devs({3}), 5s).has_value()) << "a bad index does not break the source";
}

TEST_F(SimNode, HolderIsListedAndItsMemoryIsReleasedWhenItDies) {
  NvmlSource source(GPUREAP_SIM_NVML);
  const std::uint32_t holder = hold(5, "20GiB");
  ASSERT_NE(holder, 0U);

  GpuSnapshot s = source.snapshot(5s);
  ASSERT_EQ(s.state, SourceState::ok) << s.problem;
  const std::uint64_t idle = s.gpus[4].memory->used;
  ASSERT_EQ(s.gpus[5].processes.size(), 1U);
  EXPECT_EQ(s.gpus[5].processes[0].pid, holder);
  EXPECT_EQ(s.gpus[5].processes[0].used_bytes, 20ULL << 30);
  EXPECT_EQ(s.gpus[5].memory->used, idle + (20ULL << 30));
  EXPECT_TRUE(s.gpus[4].processes.empty());

  auto held = source.memory(gpu::devs({5}), 5s);
  ASSERT_TRUE(held.has_value()) << held.error().message;
  EXPECT_EQ((*held)[0].pids, std::vector<std::uint32_t>{holder});

  ASSERT_EQ(sim("cleanup --dir " + dir_), 0);
  // The driver releases memory shortly after the holder dies: poll, bounded.
  std::optional<MemoryReading> last;
  for (auto end = Clock::now() + 5s; Clock::now() < end;) {
    auto r = source.memory(gpu::devs({5}), 5s);
    ASSERT_TRUE(r.has_value()) << r.error().message;
    last = (*r)[0];
    if (last->used == idle && last->pids.empty()) break;
    poll(nullptr, 0, 20);
  }
  EXPECT_EQ(last->used, idle);
  EXPECT_TRUE(last->pids.empty());
}

TEST_F(SimNode, HungGpusAreAnsweredWithinTheDeadlineMarkedAndNamed) {
  NvmlSource source(GPUREAP_SIM_NVML);
  ASSERT_EQ(source.snapshot(5s).state, SourceState::ok);
  const pid_t worker = *source.worker_pid();
  set_mode("hang_query");

  // Every GPU hangs: the worker answers at its own limit (75% of the deadline),
  // each GPU marked hung and still named (identity queries answer).
  auto start = Clock::now();
  GpuSnapshot s = source.snapshot(1000ms);
  auto took = Clock::now() - start;
  EXPECT_EQ(s.state, SourceState::partial);
  EXPECT_GE(took, 700ms);  // before the deadline: the kept worker below shows it answered
  ASSERT_EQ(s.gpus.size(), 8U);
  for (const GpuInfo& gpu : s.gpus) {
    EXPECT_TRUE(gpu.hung);
    EXPECT_FALSE(gpu.memory.has_value());
    EXPECT_FALSE(gpu.uuid.empty()) << "a hung GPU keeps its identity";
    EXPECT_THAT(gpu.problem, HasSubstr("did not answer within"));
  }
  EXPECT_EQ(source.worker_pid(), worker) << "the worker answered: it is kept";

  // A GPU still stuck is not asked again: its reading comes back at once, not at the
  // worker's limit (75 % of 240 s: no load stretches a round trip so far).
  start = Clock::now();
  auto m = source.memory(gpu::devs({0}), 240s);
  EXPECT_LT(Clock::now() - start, 120s);
  ASSERT_TRUE(m.has_value()) << m.error().message;
  ASSERT_EQ(m->size(), 1U);
  EXPECT_TRUE((*m)[0].hung);
  EXPECT_THAT((*m)[0].problem, HasSubstr("has still not returned"));
}

TEST_F(SimNode, OneHungGpuLeavesTheOthersMeasured) {
  NvmlSource source(GPUREAP_SIM_NVML);
  set_mode("hang_query gpu=1");
  GpuSnapshot s = source.snapshot(2000ms);
  EXPECT_EQ(s.state, SourceState::partial);
  ASSERT_EQ(s.gpus.size(), 8U);
  EXPECT_TRUE(s.gpus[1].hung);
  EXPECT_TRUE(s.gpus[1].minor.has_value()) << "so /proc holders of GPU 1 can be placed";
  EXPECT_THAT(s.problem, HasSubstr("GPU 1"));
  for (unsigned i : {0U, 2U, 7U}) {
    EXPECT_TRUE(s.gpus[i].memory.has_value()) << i;
    EXPECT_TRUE(s.gpus[i].problem.empty()) << i;
  }
  auto start = Clock::now();
  auto m = source.memory(gpu::devs({1, 2}), 240s);
  EXPECT_LT(Clock::now() - start, 120s) << "GPU 1 was asked again";
  ASSERT_TRUE(m.has_value()) << m.error().message;
  EXPECT_TRUE((*m)[0].hung);
  EXPECT_TRUE((*m)[1].problem.empty());
  EXPECT_TRUE((*m)[1].used.has_value());
}

TEST_F(SimNode, HangInInitIsAHangToo) {
  set_mode("hang_init");
  NvmlSource source(GPUREAP_SIM_NVML);
  auto start = Clock::now();
  GpuSnapshot s = source.snapshot(500ms);
  EXPECT_LT(Clock::now() - start, 120s) << "the hang in nvmlInit was waited out";
  EXPECT_EQ(s.state, SourceState::hung);
  EXPECT_THAT(s.problem, HasSubstr("NVML did not finish initializing within 500 ms"));
}

TEST_F(SimNode, AHangIsRememberedUntilRetryAfterFailureOnceTheHelperHasExited) {
  set_mode("hang_init");
  NvmlSource source(GPUREAP_SIM_NVML);
  EXPECT_EQ(source.snapshot(500ms).state, SourceState::hung);
  set_mode("ok");
  EXPECT_EQ(source.snapshot(500ms).state, SourceState::hung) << "refused at once, no new helper";
  // The hung helper was SIGKILLed (the simulator's hang is killable): the agent may ask again.
  EXPECT_TRUE(source.retry_after_failure());
  EXPECT_EQ(source.snapshot(5s).state, SourceState::ok);
}

TEST_F(SimNode, AGpuStuckInItsHelperIsAskedAgainByANewOneAfterRetryAfterFailure) {
  NvmlSource source(GPUREAP_SIM_NVML);
  EXPECT_FALSE(source.retry_after_failure()) << "no helper yet: nothing to replace";
  set_mode("hang_query gpu=1");
  GpuSnapshot s = source.snapshot(1000ms);
  ASSERT_EQ(s.gpus.size(), 8U);
  EXPECT_TRUE(s.gpus[1].hung);
  set_mode("ok");
  // The same helper does not ask GPU 1 again while its query is stuck.
  EXPECT_TRUE(source.snapshot(1000ms).gpus.at(1).hung);
  const pid_t stuck_helper = *source.worker_pid();
  EXPECT_TRUE(source.retry_after_failure());
  s = source.snapshot(5s);
  EXPECT_EQ(s.state, SourceState::ok) << s.problem;
  EXPECT_TRUE(s.gpus.at(1).memory.has_value());
  EXPECT_NE(source.worker_pid(), stuck_helper);
}

// W2-22: an agent started before the driver answers must initialize NVML once it does.
TEST_F(SimNode, AFailedInitIsRememberedUntilRetryAfterFailureW2_22) {
  set_mode("init_fail");
  NvmlSource source(GPUREAP_SIM_NVML);
  EXPECT_EQ(source.snapshot(5s).state, SourceState::init_failed);
  set_mode("ok");
  EXPECT_EQ(source.snapshot(5s).state, SourceState::init_failed) << "remembered: no new helper";
  EXPECT_TRUE(source.retry_after_failure());
  GpuSnapshot s = source.snapshot(5s);
  EXPECT_EQ(s.state, SourceState::ok) << s.problem;
  EXPECT_EQ(s.gpus.size(), 8U);
}

// W2-04: the agent probes a hung GPU without waiting in its loop for the answer.
TEST_F(SimNode, APrefetchedSnapshotIsInFlightUntilTheHelperAnswersW2_04) {
  NvmlSource source(GPUREAP_SIM_NVML);
  EXPECT_FALSE(source.snapshot_in_flight()) << "nothing asked";
  set_mode("hang_query");
  source.prefetch_snapshot();
  // The helper answers at its per-GPU limit (1.5 s), every GPU marked hung; until
  // then the question is in flight and asking costs nothing.
  EXPECT_TRUE(source.snapshot_in_flight());
  const auto limit = Clock::now() + 10s;
  while (source.snapshot_in_flight() && Clock::now() < limit) std::this_thread::sleep_for(20ms);
  EXPECT_FALSE(source.snapshot_in_flight()) << "answered by the helper's own limit";
  GpuSnapshot s = source.snapshot(2s);
  ASSERT_EQ(s.gpus.size(), 8U) << s.problem;
  EXPECT_TRUE(s.gpus[0].hung);

  // A fresh helper once the driver answers again: its answer comes, nothing hung.
  set_mode("ok");
  EXPECT_TRUE(source.retry_after_failure());
  source.prefetch_snapshot();
  const auto limit2 = Clock::now() + 10s;
  while (source.snapshot_in_flight() && Clock::now() < limit2) std::this_thread::sleep_for(20ms);
  s = source.snapshot(5s);
  EXPECT_EQ(s.state, SourceState::ok) << s.problem;
}

TEST_F(SimNode, FailingQueriesAreQueryFailedWithNvmlsText) {
  NvmlSource source(GPUREAP_SIM_NVML);
  set_mode("query_fail gpu=3");
  GpuSnapshot s = source.snapshot(5s);
  EXPECT_EQ(s.state, SourceState::partial);
  EXPECT_THAT(s.problem, HasSubstr("(GPU 3): "));
  ASSERT_EQ(s.gpus.size(), 8U) << "the other GPUs are still shown";
  EXPECT_TRUE(s.gpus[0].memory.has_value());
  EXPECT_TRUE(s.gpus[0].problem.empty());
  EXPECT_THAT(s.gpus[3].problem, HasSubstr("(GPU 3): "));
  EXPECT_FALSE(s.gpus[3].hung);
  EXPECT_FALSE(s.gpus[3].uuid.empty()) << "identity queries still answer";

  auto m = source.memory(gpu::devs({3, 2}), 5s);
  ASSERT_TRUE(m.has_value()) << m.error().message;
  EXPECT_THAT((*m)[0].problem, HasSubstr("(GPU 3): "));
  EXPECT_FALSE((*m)[0].used.has_value());
  EXPECT_TRUE((*m)[1].problem.empty());
  EXPECT_TRUE((*m)[1].used.has_value());

  set_mode("ok");
  EXPECT_EQ(source.snapshot(5s).state, SourceState::ok) << "a failed query is not remembered";
}

TEST_F(SimNode, InitFailureIsInitFailed) {
  set_mode("init_fail");
  NvmlSource source(GPUREAP_SIM_NVML);
  GpuSnapshot s = source.snapshot(5s);
  EXPECT_EQ(s.state, SourceState::init_failed);
  EXPECT_THAT(s.problem, HasSubstr("nvmlInit"));
  EXPECT_THAT(s.problem, HasSubstr("Driver Not Loaded"));
  EXPECT_FALSE(source.worker_pid().has_value());

  set_mode("ok");
  EXPECT_EQ(source.snapshot(5s).state, SourceState::init_failed) << "remembered until disconnect";
  source.disconnect();
  EXPECT_EQ(source.snapshot(5s).state, SourceState::ok);
}

TEST_F(SimNode, ACrashedWorkerIsQueryFailedAndReplaced) {
  NvmlSource source(GPUREAP_SIM_NVML);
  ASSERT_EQ(source.snapshot(5s).state, SourceState::ok);
  const pid_t worker = *source.worker_pid();
  ASSERT_EQ(kill(worker, SIGKILL), 0);

  GpuSnapshot s = source.snapshot(5s);
  EXPECT_EQ(s.state, SourceState::query_failed);
  EXPECT_THAT(s.problem, HasSubstr("was killed by signal 9"));
  EXPECT_FALSE(is_unreaped_child(worker));

  s = source.snapshot(5s);
  EXPECT_EQ(s.state, SourceState::ok) << s.problem;
  EXPECT_NE(source.worker_pid(), worker);
}

TEST_F(SimNode, DisconnectEndsTheWorkerAndTheNextCallReconnects) {
  NvmlSource source(GPUREAP_SIM_NVML);
  ASSERT_EQ(source.snapshot(5s).state, SourceState::ok);
  const pid_t worker = *source.worker_pid();
  auto start = Clock::now();
  source.disconnect();
  EXPECT_LT(Clock::now() - start, 1s);
  EXPECT_FALSE(source.worker_pid().has_value());
  EXPECT_FALSE(is_unreaped_child(worker)) << "reaped";
  EXPECT_EQ(source.snapshot(5s).state, SourceState::ok);
  EXPECT_TRUE(source.worker_pid().has_value());
}

TEST_F(SimNode, WorkerKeepsOnlyItsSocketOpen) {
  int inherited[2];
  ASSERT_EQ(pipe(inherited), 0);  // open in gpureap when the worker is forked
  NvmlSource source(GPUREAP_SIM_NVML);
  ASSERT_EQ(source.snapshot(5s).state, SourceState::ok);
  close(inherited[0]);
  close(inherited[1]);
  const std::string fd_dir = "/proc/" + std::to_string(*source.worker_pid()) + "/fd";
  for (const auto& entry : std::filesystem::directory_iterator(fd_dir)) {
    const int fd = std::stoi(entry.path().filename().string());
    auto target = std::filesystem::read_symlink(entry.path()).string();
    if (fd <= 2) {
      EXPECT_EQ(target, "/dev/null") << "fd " << fd;
    } else {
      // The socket, and whatever the library itself opened (the device nodes).
      EXPECT_FALSE(target.starts_with("pipe:")) << "fd " << fd << " -> " << target;
    }
  }
}

#endif  // GPUREAP_SIM_NVML

}  // namespace
}  // namespace gpureap::gpu
