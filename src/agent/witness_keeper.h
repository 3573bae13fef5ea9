#pragma once
// The witness keeper: what the agent saw die, kept in the state directory whenever it
// changes (inventory/witness_store.h), so that a direct look and a restarted agent reach
// the same verdicts (W3-07). A failure is said once: the agent's own answers do not
// depend on it. The loop thread only.

#include <sys/types.h>

#include <map>
#include <string>

#include "agent/options.h"
#include "proc/lineage.h"

namespace gpureap::agent {

class WitnessKeeper {
 public:
  using Witnesses = std::map<pid_t, proc::DeadParent>;
  /// `state_dir` "": nothing is kept. `problems` says a failed write (nullptr: not said).
  WitnessKeeper(std::string state_dir, ProblemSink problems)
      : state_dir_(std::move(state_dir)), problems_(std::move(problems)) {}

  /// What an earlier agent saw die, for the processes still the same.
  Witnesses load(const std::string& proc_root) const;
  /// Writes `dead` when it differs from what was last written.
  void keep(const Witnesses& dead);

 private:
  std::string state_dir_;
  ProblemSink problems_;
  Witnesses saved_;     // as last written
  bool failed_ = false;  // the last write failed (said once)
};

}  // namespace gpureap::agent
