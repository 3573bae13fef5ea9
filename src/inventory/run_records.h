#pragma once
// What a `gpureap run` records of itself in the state directory (`runs/<id>.json`): the
// identities (pid and start time, this boot) of its gpureap, its child subreaper and
// its command. Only the state directory's owner writes there, so these, unlike a
// process name or GPUREAP_RUN_ID (which anyone sets), tell a live run from a process
// calling itself one (W4-06, W3-10), and name the rest of an ended run (W4-02).

#include <string>
#include <vector>

#include "proc/holder.h"
#include "util/result.h"

namespace gpureap::inventory {

struct RunRecord {
  std::string run_id;
  std::string boot_id;      // inventory::boot_id() when written
  proc::ProcessId gpureap;  // the run's gpureap
  proc::ProcessId reaper;   // its child subreaper (gpureap-reaper)
  proc::ProcessId command;  // CMD
};

/// Writes `<dir>/runs/<run_id>.json` (the directory made 0700 when missing), atomically.
Result<void> save_run_record(const std::string& dir, const RunRecord& record);

/// Removes the run's record (its end); silent when there is none.
void remove_run_record(const std::string& dir, const std::string& run_id);

/// The records of this boot in `<dir>/runs`, each one a file this user wrote (others are
/// no records: inventory/state_file.h); empty when `dir` is "".
std::vector<RunRecord> load_run_records(const std::string& dir);

/// True when the process `id` (pid and start time) runs under `proc_root` (not a zombie).
bool process_alive(const proc::ProcessId& id, const std::string& proc_root);

/// The identities of the runs' supervisors (each run's gpureap and reaper), of every
/// recorded run or (`live_only`) of the runs whose gpureap still runs.
std::vector<proc::ProcessId> run_supervisors(const std::string& dir, const std::string& proc_root,
                                             bool live_only);

}  // namespace gpureap::inventory
