#pragma once
// A GpuSource for other modules' unit tests: a settable snapshot, a scripted
// sequence of memory readings (to drive a release-wait loop step by step) and
// a settable failure (NVML missing, failing or hung). Never blocks or sleeps:
// a "hung" fake answers at once with the hang message.

#include <algorithm>
#include <chrono>
#include <deque>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "gpu/gpu_source.h"

namespace gpureap::gpu {

class FakeGpuSource : public GpuSource {
 public:
  FakeGpuSource() = default;
  explicit FakeGpuSource(GpuSnapshot snapshot) : snapshot_(std::move(snapshot)) {}

  /// What snapshot() returns while no failure is set.
  void set_snapshot(GpuSnapshot snapshot) { snapshot_ = std::move(snapshot); }
  GpuSnapshot& mutable_snapshot() { return snapshot_; }

  /// Appends one step to the memory script: the readings of every GPU of
  /// interest (memory() returns those asked for, in the order asked).
  void add_memory_step(std::vector<MemoryReading> readings) {
    script_.push_back(std::move(readings));
  }
  /// Appends a step at which memory() fails with `message`.
  void add_memory_failure(std::string message) {
    script_.push_back(std::unexpected(Error{std::move(message)}));
  }
  /// Steps not yet consumed.
  std::size_t memory_steps_left() const { return script_.size(); }

  /// Every later call fails: snapshot() reports `state` and `problem` with no
  /// GPUs, memory() fails with `problem`. `state` must not be ok.
  void set_failure(SourceState state, std::string problem) {
    failure_state_ = state;
    failure_problem_ = std::move(problem);
  }
  /// As a watchdog timeout would: state hung, with NvmlSource's wording.
  void set_hung(std::chrono::milliseconds deadline = std::chrono::milliseconds(2000)) {
    set_failure(SourceState::hung,
                "NVML did not answer within " + std::to_string(deadline.count()) +
                    " ms (the driver may be stuck; see dmesg): showing the /proc view only");
  }
  void clear_failure() { failure_state_ = SourceState::ok; }

  /// One GPU fails (or hangs, as NvmlSource reports it) while the others answer:
  /// the snapshot keeps its identity with `problem` and no memory or process
  /// list, in state partial, and memory readings of it carry the problem.
  void set_gpu_failure(DeviceId id, std::string problem, bool hung = false) {
    for (GpuInfo& gpu : snapshot_.gpus) {
      if (gpu.id != id) continue;
      gpu.problem = problem;
      gpu.hung = hung;
      gpu.memory.reset();
      gpu.processes.clear();
      gpu.processes_known = false;
    }
    snapshot_.state = SourceState::partial;
    if (!snapshot_.problem.empty()) snapshot_.problem += "; ";
    snapshot_.problem += problem;
  }

  GpuSnapshot snapshot(std::chrono::milliseconds deadline) override {
    ++snapshot_calls;
    last_deadline = deadline;
    if (failure_state_ != SourceState::ok) {
      return GpuSnapshot{failure_state_, failure_problem_, snapshot_.driver_version,
                         snapshot_.cuda_version, {}};
    }
    GpuSnapshot answer = snapshot_;
    if (auto then = std::exchange(after_next_snapshot, nullptr)) then();
    return answer;
  }

  /// Runs once, after the next snapshot() has taken its answer: the machine changes
  /// while the caller's look still holds the older answer (a death during a look).
  std::function<void()> after_next_snapshot;

  /// Consumes one script step; the last step repeats once reached. With no
  /// script, readings come from the snapshot (used memory and process pids).
  /// An index that the step (or snapshot) lacks fails, as NVML would.
  Result<std::vector<MemoryReading>> memory(const std::vector<DeviceId>& ids,
                                            std::chrono::milliseconds deadline) override {
    ++memory_calls;
    last_deadline = deadline;
    memory_requests.push_back(ids);
    if (failure_state_ != SourceState::ok) return std::unexpected(Error{failure_problem_});
    Result<std::vector<MemoryReading>> step = script_.empty() ? from_snapshot() : script_.front();
    if (script_.size() > 1) script_.pop_front();
    if (!step) return step;
    std::vector<MemoryReading> readings;
    for (DeviceId id : ids) {
      auto it = std::find_if(step->begin(), step->end(),
                             [id](const MemoryReading& r) { return r.id == id; });
      if (it == step->end()) {
        return std::unexpected(Error{"no GPU " + device_text(id)});
      }
      readings.push_back(*it);
    }
    return readings;
  }

  void disconnect() override { ++disconnect_calls; }

  std::optional<pid_t> worker_pid() const override { return fake_worker_pid; }

  void prefetch_snapshot() override { ++prefetch_calls; }

  /// What worker_pid() returns (a process the /proc scan must leave out).
  std::optional<pid_t> fake_worker_pid;

  // What the code under test did.
  int snapshot_calls = 0;
  int memory_calls = 0;
  int disconnect_calls = 0;
  int prefetch_calls = 0;
  std::vector<std::vector<DeviceId>> memory_requests;
  std::chrono::milliseconds last_deadline{0};

 private:
  std::vector<MemoryReading> from_snapshot() const {
    std::vector<MemoryReading> readings;
    for (const GpuInfo& gpu : snapshot_.gpus) {
      MemoryReading r;
      r.id = gpu.id;
      r.problem = gpu.problem;
      r.hung = gpu.hung;
      if (gpu.memory) r.used = gpu.memory->used;
      for (const GpuProcess& p : gpu.processes) r.pids.push_back(p.pid);
      r.utilization_gpu = gpu.utilization_gpu;
      readings.push_back(std::move(r));
    }
    return readings;
  }

  GpuSnapshot snapshot_;
  std::deque<Result<std::vector<MemoryReading>>> script_;
  SourceState failure_state_ = SourceState::ok;
  std::string failure_problem_;
};

}  // namespace gpureap::gpu
