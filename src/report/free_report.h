#pragma once
// Rendering of `free`: the plan before acting, the live progress line, and the
// final report (per GPU before/after/time, every action, classified leftovers).

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "inventory/node.h"
#include "reclaim/reclaimer.h"
#include "report/style.h"
#include "report/table_layout.h"

namespace gpureap::report {

/// The plan as a table: targets (who, GPU, memory, why) and holders left alone.
/// `grace` 0 says SIGKILL at once (--grace 0). `width`: fixed (a pipe) is the
/// layout scripts read, unchanged; a terminal's width gets each target's row cut to
/// fit with its why on the lines beneath, and the other lines broken at words;
/// --wide, whole command lines.
std::string plan_text(const reclaim::Plan& plan, const Style& style,
                      std::chrono::milliseconds grace = reclaim::kDefaultGrace,
                      TableWidth width = {});
nlohmann::ordered_json plan_json(const reclaim::Plan& plan);

/// One progress line: "GPU 0 20.0 GiB -> 3.1 GiB | GPU 1 freed 0.41 s".
std::string progress_line(const std::vector<reclaim::GpuRelease>& gpus);

/// `heading` and the GPUs of `gpus` whose reading failed, with why, escaped:
/// "HEADING GPU 3: WHY" for one; "HEADING GPU 0,1:" and one "\n  GPU i: WHY" line
/// each for several (16 reasons on one line cannot be read). Empty when none failed.
std::string gpu_problems_text(std::string_view heading,
                              const std::vector<reclaim::GpuRelease>& gpus);

/// One classified leftover as in free's JSON (also run's).
nlohmann::ordered_json leftover_json(const reclaim::Leftover& l);

/// {"phases": {"signal_to_exit", "exit_to_unlisted", "unlisted_to_baseline"}}: a GPU's
/// release in seconds (reclaim::release_phases; null where an end was not seen), as
/// free --json and run --json report it.
nlohmann::ordered_json release_phases_json(const reclaim::GpuRelease& g);

/// The final report. With the `plan` it carried out, the same signal to several
/// members of one instance, sent alike with the same outcome, is one Actions line.
/// `width`: a terminal's lines are broken at words (as plan_text's prose).
std::string free_text(const reclaim::ReclaimReport& report, const Style& style,
                      const reclaim::Plan* plan = nullptr, TableWidth width = {});
/// `warnings`: the inventory's (inventory::Inventory::warnings).
nlohmann::ordered_json free_json(const reclaim::Plan& plan, const reclaim::ReclaimReport& report,
                                 bool dry_run, const std::vector<std::string>& warnings = {});

/// The first look's warnings that bear on a free of `gpus`, each a line "gpureap free:
/// warning: ...\n": a selected GPU NVML cannot read (its release cannot be verified), NVML
/// unusable, the look's own warnings. Escaped.
std::vector<std::string> free_warnings(const inventory::Inventory& inv,
                                       const std::vector<gpu::DeviceId>& gpus);

/// The last resort when free_text/free_json fail after processes were signalled:
/// one plain line per action and per GPU, pids and outcomes only (no process
/// text), so the caller still learns what was done. Ends with a newline.
std::string free_record(const reclaim::ReclaimReport& report);

}  // namespace gpureap::report
