#pragma once
// The real GpuSource: NVML, queried in a watchdog child process (nvml_worker.h)
// so that gpureap never hangs with the driver. The worker is forked at the
// first query and kept for the following ones; a snapshot is one round trip.

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "gpu/gpu_source.h"
#include "gpu/nvml_worker.h"

namespace gpureap::gpu {

// The wire (nvml_wire.h, with all of nlohmann-json) is the .cc's business: the
// CLI units that include this header only construct a source.
struct FrameFailure;

/// The NVML library to load: `flag` (--nvml-library) when given, else
/// $GPUREAP_NVML_LIBRARY when set and non-empty, else "libnvidia-ml.so.1".
std::string resolve_nvml_library(std::string_view flag);

/// Not thread-safe: one thread at a time.
///
/// Deadlines cover the whole call, starting the worker and nvmlInit included.
/// A call that misses its deadline kills the worker and puts the source in
/// state `hung` for good: every later call fails at once with the same message
/// and no new worker is started (it would hang too). A worker that crashes or
/// closes the connection gives `query_failed`; the next call starts a new one.
/// `library_missing` and `init_failed` are remembered until disconnect() or
/// retry_after_failure().
class NvmlSource : public GpuSource {
 public:
  explicit NvmlSource(std::string library_path);
  /// Closes the connection and reaps the worker (bounded: at most ~200 ms).
  ~NvmlSource() override;

  GpuSnapshot snapshot(std::chrono::milliseconds deadline) override;
  Result<std::vector<MemoryReading>> memory(const std::vector<DeviceId>& ids,
                                            std::chrono::milliseconds deadline) override;
  /// Asks the worker to nvmlShutdown and exit, and reaps it (at most ~1.5 s; a
  /// worker that does not answer in time counts as a hang). Forgets a
  /// remembered library_missing/init_failed, so the next call tries again.
  void disconnect() override;

  /// The worker's pid while one exists (also a killed one not yet reaped), so
  /// that the /proc scan can leave out our own child, which opens the GPU
  /// device nodes.
  std::optional<pid_t> worker_pid() const override;

  /// Starts the worker if needed and sends it a snapshot request without
  /// waiting; the next snapshot() collects the answer (if asked within 1 s:
  /// an older one is dropped and the snapshot taken again). Never blocks.
  void prefetch_snapshot() override;
  bool retry_after_failure() override;
  bool snapshot_in_flight() override;

  const std::string& library_path() const { return library_path_; }

 private:
  struct Failure {
    SourceState state = SourceState::query_failed;
    std::string problem;
  };
  using Clock = std::chrono::steady_clock;

  std::expected<nlohmann::json, Failure> round_trip(const nlohmann::json& request,
                                                    std::chrono::milliseconds deadline);
  std::expected<void, Failure> spawn_worker();
  std::expected<void, Failure> await_ready(Clock::time_point end,
                                           std::chrono::milliseconds deadline);
  Failure worker_failed(const FrameFailure& failure, std::chrono::milliseconds deadline,
                        bool starting);
  void bury_worker();
  void forget_worker();
  void reap_stuck();

  std::string library_path_;
  std::optional<NvmlWorker> worker_;
  bool worker_ready_ = false;                    // it has loaded NVML and initialized it
  std::optional<Clock::time_point> prefetched_;  // a snapshot request is in flight
  std::optional<Failure> remembered_;
  std::string driver_version_;
  std::string cuda_version_;
  std::vector<NvmlWorker> stuck_;  // killed, not yet reaped (stuck in the driver)
};

/// The GpuSource for a GPU host (or the simulated driver's library).
std::unique_ptr<GpuSource> make_nvml_source(std::string library_path);

}  // namespace gpureap::gpu
