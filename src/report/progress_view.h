#pragma once
// The live view of a release while `free` and `run --replace` wait for it (issue 53):
// on a terminal, one line per GPU redrawn in place (never wider than the terminal, so a
// redraw never wraps and never adds rows); through a pipe, one line per change of a
// GPU's phase (the memory's fall is not an event). Rendering only: the caller writes
// what update() returns to stderr.

#include <cstddef>
#include <string>
#include <vector>

#include "reclaim/release_wait.h"

namespace gpureap::report {

/// Where a GPU's release stands, from what the wait has seen: `held` (no signal yet),
/// `stopping` (signalled, its holders not all gone), `releasing` (its holders gone,
/// the memory not yet back), `freed` (back at the baseline), `unreadable` (NVML cannot
/// read it).
enum class ReleasePhase { held, stopping, releasing, freed, unreadable };
ReleasePhase release_phase(const reclaim::GpuRelease& g);
std::string_view phase_word(ReleasePhase p);

/// "GPU 3  releasing  62.0 GiB -> 41.5 GiB  1.20 s" (at most `columns` - 1 wide).
std::string progress_row(const reclaim::GpuRelease& g, std::size_t columns);

class ProgressView {
 public:
  /// `terminal`: redraw in place; else one line per phase change. `columns`: the
  /// terminal's width (a pipe's lines are not cut).
  ProgressView(bool terminal, std::size_t columns);

  /// What to write for this reading ("" when nothing a reader would see changed).
  std::string update(const std::vector<reclaim::GpuRelease>& gpus);
  /// What to write when the wait ends, before the report: on a terminal the rows are
  /// cleared (the report that follows says how each GPU ended); through a pipe, nothing.
  std::string finish();

 private:
  bool terminal_;
  std::size_t columns_;
  std::vector<std::string> shown_;         // the rows on screen (terminal)
  std::vector<ReleasePhase> phases_;       // the phase last said (pipe)
};

}  // namespace gpureap::report
