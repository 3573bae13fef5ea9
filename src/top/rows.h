#pragma once
// The list under the GPU bars: the holders of one look grouped by server instance
// (inventory/instances.h), filtered, sorted, collapsed and tagged as the person at the
// keyboard chose (ViewState). Pure: an inventory and a view state in, rows out.

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "inventory/inventory.h"
#include "proc/holder.h"

namespace gpureap::top {

/// How instances (and the holders within each) are ordered.
enum class SortKey { gpu, memory, age, pid };
/// "gpu", "memory", "age", "pid" (util/enum_names.h).
std::string_view enum_name(SortKey key);

/// What the person chose; kept across refreshes (rows are found again by their id).
struct ViewState {
  SortKey sort = SortKey::gpu;
  bool reverse = false;                     // the sort's order turned around (r)
  bool orphans_only = false;                // only orphaned holders (and zombie leaders)
  std::optional<gpu::DeviceId> gpu;         // only holders using this GPU
  std::string text;                         // only holders whose user, command, instance
                                            // key or container contains this
  std::set<std::string> collapsed;          // instance keys shown as their heading only
  std::set<proc::ProcessId> tagged;         // what the free key frees
  std::string cursor;                       // the id of the row under the cursor
  std::size_t scroll = 0;                   // the first row shown
  std::size_t hscroll = 0;                  // columns the list is scrolled right (left/right
                                            // arrows; layout_screen keeps it within the text)
  bool readonly = false;                    // --readonly: no tagging, no freeing
};

struct Row {
  enum class Kind { instance, holder };
  Kind kind = Kind::holder;
  std::string id;        // "i:KEY" for an instance heading, "p:PID:START" for a holder
  std::string instance;  // its instance's key ("" for a holder of none)
  // kind == instance:
  const inventory::Instance* in = nullptr;
  std::vector<proc::ProcessId> members;  // its members that pass the filters (listed
                                         // under it unless collapsed)
  bool collapsed = false;
  // kind == holder:
  const proc::Holder* holder = nullptr;
  std::vector<gpu::DeviceId> gpus;  // the GPUs it uses
  std::uint64_t bytes = 0;          // NVML's figures over them
  bool bytes_known = true;
  /// NVML's latest per-process sample of its SM share (a hint no rule reads), the
  /// highest over its GPUs; nullopt when NVML gives none (not supported, no sample).
  std::optional<unsigned> sm_percent;
  bool nested = false;  // listed under an instance heading
  /// Its place in the tree of its instance's listed members: a member is listed under
  /// its parent when the parent is a listed member too (nvitop's tree view). One entry
  /// per level below the instance's top: whether the ancestor at that level (the row
  /// itself, last) is the last of its siblings. Empty: a top member (no parent listed).
  std::vector<bool> tree_last;
  bool tagged = false;  // kind holder: it is tagged; kind instance: every shown member is
};

/// The rows of `inv` under `state`: each instance worth a heading
/// (report::worth_showing) as a heading followed by its members (none when collapsed),
/// a lone process as a holder row of its own. Within an instance, members are in the
/// sort order with each one's listed children (by ppid) right under it, depth first. Only holders that use a GPU are listed
/// (a process that merely has a node open holds no memory). Pointers point into `inv`.
std::vector<Row> build_rows(const inventory::Inventory& inv, const ViewState& state);

/// The id a holder's row has.
std::string row_id(const proc::ProcessId& id);

/// The processes a row stands for: the holder, or every listed member of an instance.
std::vector<proc::ProcessId> row_processes(const std::vector<Row>& rows, std::size_t at);

}  // namespace gpureap::top
