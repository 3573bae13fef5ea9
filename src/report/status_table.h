#pragma once
// The `status` table: GPU lines with memory, holders beneath each GPU, orphans
// and unexplained memory flagged, and a closing line that says what to do next.

#include <set>
#include <string>

#include "inventory/inventory.h"
#include "reclaim/plan.h"
#include "report/style.h"
#include "report/table_layout.h"

namespace gpureap::report {

/// Renders the table (ends with a newline). Pure: no I/O. `free_orphans` is what
/// `gpureap free --orphans` would plan (reclaim::orphans_plan): the closing "Free
/// them" line counts only the orphans it would signal, and says sudo when some
/// of them only root may signal; protected ones (nv-hostengine) are not counted.
/// `width`: fixed (a pipe) is the layout scripts read, unchanged; a terminal's
/// width gets rows cut to fit (report/table_layout.h) and the other lines broken
/// at words; --wide, whole command lines.
/// A server instance that spans GPUs is said once (issue 37): the GPUs whose every
/// holder is a member of such an instance, and the idle GPUs beside them, are one row
/// per holder of a GPU table (GPU, memory, state, instance, pid, parent, role), and why
/// the members are orphaned or detached is said under the instance. `verbose` (-v):
/// every GPU's block with each holder's row, as before (the JSON always has all of it).
/// Once the table is shown every GPU is a row of it, in index order. `compact`
/// (--compact): the table in every scene, a row per GPU (or per holder) and no block.
std::string status_table(const inventory::Inventory& inv, const Style& style,
                         const reclaim::Plan& free_orphans, TableWidth width = {},
                         bool verbose = false, bool compact = false);

/// The driver in a header's words: "driver 580.65.06, CUDA 13.0" (what nvidia-smi's and
/// nvitop's headers show); "" when NVML told neither. status's first line, top's title.
std::string driver_words(const inventory::Inventory& inv);

/// The card's health in one line, from what the driver says (status -v): "power 75 W of a
/// 700 W cap; clocks held down by power brake; 3 uncorrected ECC errors since the driver
/// loaded"; each part only where the driver can say, "" where it says none (issue 53).
std::string card_health_text(const gpu::GpuInfo& info);

/// The holder rows under one GPU, laid out for `width` as status_table says. The
/// orphaned/detached evidence of a holder whose instance is in `said_once` is left to
/// that instance's lines (said once per instance, not once per GPU). With `verbose`:
/// clients (a monitor with the node open and no memory: GpuHolder::client), and each
/// holder's SM share in NVML's latest per-process sample where NVML gives one (a hint).
std::string holder_rows(const inventory::GpuView& view, const Style& style, std::string_view indent,
                        TableWidth width = {}, const std::set<std::string>& said_once = {},
                        bool verbose = false);

/// "nvml,fd,map".
std::string found_by_text(const proc::Holder& h);

/// Shortened command line for a table cell, escaped (report/terminal_text.h).
std::string short_command(const proc::Holder& h, std::size_t width);

}  // namespace gpureap::report
