#pragma once
// What the lineage rule said of a process gpureap signals, carried from the plan to the
// audit record: orphaned (and by which evidence), detached, or live. The verdict is
// proc::classify_lineage's, read from the Holder when the plan is made, never derived
// again; the free plan's JSON, the audit trail and `gpureap log` render it, so "did
// gpureap kill a live server?" is answered by a field, not by reading prose.

#include <optional>
#include <string>
#include <string_view>

#include "proc/holder.h"

namespace gpureap::reclaim {

enum class LineageVerdict {
  orphaned,  // a leak by the evidence (proc/lineage.h)
  detached,  // re-parented, but not a leak by the evidence (a nohup'd server)
  live,      // its parent or server is alive
};
/// "orphaned", "detached", "live".
std::string_view enum_name(LineageVerdict verdict);

struct TargetLineage {
  LineageVerdict verdict = LineageVerdict::live;
  proc::OrphanEvidence evidence = proc::OrphanEvidence::none;  // orphaned: which evidence
  /// How the verdict is known: "owned", "witnessed" or "inferred" (docs/orphans.md);
  /// "" when not known (a holder read before provenance was recorded).
  std::string provenance;
  std::string reason;  // the orphan's or detached process's reason; "" when live
  /// A keeper of a dead owner's memory (docs/orphans.md, "Keepers"): its class
  /// ("inheritor", "importer"; "" when it keeps nothing), how the keeping is known
  /// ("witnessed", "inferred"), the dead owner and the reason ("keeps 8.00 GiB of dead pid
  /// 1700 (python3), whose memory it imported (CUDA IPC)").
  std::string keeper{};
  std::string keeper_provenance{};
  pid_t kept_owner = 0;
  std::string keeper_reason{};
  friend bool operator==(const TargetLineage&, const TargetLineage&) = default;
};

/// The verdict in the words every view prints (proc::orphan_verdict): "orphaned
/// (inferred)", "detached", "live".
std::string verdict_words(const TargetLineage& l);

/// `h`'s lineage verdict as the scan classified it.
TargetLineage lineage_of(const proc::Holder& h);

}  // namespace gpureap::reclaim
