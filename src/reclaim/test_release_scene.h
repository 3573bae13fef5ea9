#pragma once
// For the one-release-clock tests only (issue 50, item 5): the same readings handed to
// every caller that asks whether memory falls (a one-shot look, free's engine, wait, the
// Slurm epilog, the agent's events), on a TestMachine (fake NVML, fixture /proc, an event
// clock). GPU 0 (80 GiB: the model's step, fall_step, is 102.4 MiB) holds 10 GiB that no
// process NVML lists explains; `drop` after the scene is staged, it reads `step` less, and
// stays there. A 50 MiB step is under the step, 200 MiB over it: each caller must answer
// as the model does for the same two readings (model_says_falling), whatever it is.

#include <chrono>
#include <cstdint>
#include <string>

#include "inventory/release_model.h"
#include "reclaim/test_machine.h"
#include "util/clock.h"
#include "util/units.h"

namespace gpureap::reclaim::testing {

inline constexpr std::uint64_t kSceneHeld = 10 * kGiB;
inline constexpr std::uint64_t kSmallStep = 50 * kMiB;   // under fall_step(80 GiB)
inline constexpr std::uint64_t kLargeStep = 200 * kMiB;  // over it

/// The release model's own answer for the scene's two readings, `drop` apart: is the
/// memory falling right after the second?
inline bool model_says_falling(std::uint64_t step, std::chrono::milliseconds drop) {
  inventory::ReleaseTracker model;
  util::FakeClock clock;
  model.read("GPU-scene", kSceneHeld, kTotal, clock.now());
  clock.advance(drop);
  model.read("GPU-scene", kSceneHeld - step, kTotal, clock.now());
  return model.falling("GPU-scene", clock.now());
}

/// A holder of GPU 0's node with kSceneHeld that NVML gives no process list for (class
/// unknown: nothing past the model calls it released or driver-held), whose memory the
/// driver keeps after it exits; `step` of it comes back `drop` from now.
inline FakeProc stage_unlisted_holder(TestMachine& m, pid_t pid, std::uint64_t step,
                                      std::chrono::milliseconds drop) {
  FakeProc p;
  p.pid = pid;
  p.gpu = 0;
  p.bytes = kSceneHeld;
  p.release_after.reset();  // the driver keeps it
  m.spawn(p);
  m.gpu(0).processes.clear();
  m.gpu(0).processes_known = false;
  m.clock.after(drop, [&m, step] { m.gpu(0).memory->used -= step; });
  return p;
}

/// kSceneHeld on GPU 0 that NVML lists for pid `pid`, which no /proc shows (class
/// outside_namespace: the agent's events decide when to announce it); `step` of it comes
/// back `drop` from now.
inline void stage_unseen_pid(TestMachine& m, pid_t pid, std::uint64_t step,
                             std::chrono::milliseconds drop) {
  m.gpu(0).processes.push_back(
      gpu::GpuProcess{static_cast<std::uint32_t>(pid), kSceneHeld, gpu::ProcessKind::compute});
  m.gpu(0).memory->used += kSceneHeld;
  m.clock.after(drop, [&m, step] { m.gpu(0).memory->used -= step; });
}

}  // namespace gpureap::reclaim::testing
