#pragma once
// Talking to Slurm's controller through `scontrol`, the one interface every Slurm
// version keeps: read a node's state and drain reason, drain it, resume it. The
// prolog, epilog and health check have no PATH, so the program is named by an
// absolute path (`--scontrol`, $GPUREAP_SCONTROL, /usr/bin/scontrol). Every call runs
// under a deadline (proc::spawn_captured): a controller that does not answer costs
// that long, never the epilog's whole PrologEpilogTimeout. scontrol reads SLURM_CONF
// from the environment it inherits (the health check must be given it where
// /etc/slurm/slurm.conf is not the configuration).

#include <chrono>
#include <string>
#include <string_view>
#include <vector>

#include "util/result.h"

namespace gpureap::cluster {

/// Where scontrol is when nothing says otherwise (Debian's slurm-client).
inline constexpr std::string_view kDefaultScontrol = "/usr/bin/scontrol";
/// Every drain reason gpureap sets starts with this, and the health check resumes
/// only nodes whose reason does (LBNL NHC's "NHC:" convention): a node an
/// administrator drained stays drained.
inline constexpr std::string_view kReasonPrefix = "gpureap:";

struct NodeState {
  std::string state;   // "IDLE", "MIXED+DRAIN", "IDLE+DRAIN+NOT_RESPONDING", ...
  std::string reason;  // the drain reason without Slurm's " [user@time]"; "" when none
  /// True when the node is drained or draining (DRAIN among the state's flags, or the
  /// base state DRAINED/DRAINING).
  bool drained() const;
  /// True when the reason is one gpureap set.
  bool drained_by_gpureap() const { return drained() && reason.starts_with(kReasonPrefix); }
};

/// $GPUREAP_SCONTROL, else kDefaultScontrol (a --scontrol option comes first).
std::string scontrol_from_environment();
/// $SLURMD_NODENAME (set for the prolog, epilog and health check), else the host name up
/// to its first dot (Slurm's default NodeName) (a --node option comes first).
std::string node_name_from_environment();

/// Parses `scontrol -o show node NAME` (one line, "Key=Value" fields; the reason,
/// which may hold spaces, comes last as "Reason=text [user@time]").
Result<NodeState> parse_node_state(std::string_view text);

/// The argument vectors, for tests and for the report of what was run.
std::vector<std::string> drain_argv(const std::string& scontrol, const std::string& node,
                                    const std::string& reason);
std::vector<std::string> resume_argv(const std::string& scontrol, const std::string& node);

class Scontrol {
 public:
  Scontrol(std::string path, std::chrono::milliseconds timeout)
      : path_(std::move(path)), timeout_(timeout) {}

  /// Each call ends by min(now + timeout, `deadline`). Fails with scontrol's own
  /// words (its output), or with "did not answer within …", or "cannot run …".
  Result<NodeState> show_node(const std::string& node,
                              std::chrono::steady_clock::time_point deadline) const;
  Result<void> drain(const std::string& node, const std::string& reason,
                     std::chrono::steady_clock::time_point deadline) const;
  Result<void> resume(const std::string& node,
                      std::chrono::steady_clock::time_point deadline) const;

  const std::string& path() const { return path_; }

 private:
  Result<std::string> run(const std::vector<std::string>& argv,
                          std::chrono::steady_clock::time_point deadline) const;
  std::string path_;
  std::chrono::milliseconds timeout_;
};

}  // namespace gpureap::cluster
