#pragma once
// The orphan rule: is a holder whose starter is gone a leak (orphaned), or a
// process that was meant to outlive its starter (detached)? One rule, used by
// the one-shot scan and by the agent, which adds what it saw die.
//
// Vocabulary (docs/orphans.md):
//  - re-parented: the process that started it is gone. The kernel gave it to
//    init (ppid 1, and it does not lead its own session: a service does) or to a
//    child subreaper (a container's or PID namespace's init, gpureap-reaper, tini,
//    systemd --user), with its process-group leader gone. A process whose live
//    parent is not a subreaper was not re-parented, whatever its group: a shell
//    pipeline whose first command exited (`cat x | python infer.py`) is attached.
//  - orphaned: re-parented AND there is evidence it was part of the dead parent's
//    GPU work. A leak: `free --orphans`, the status summary, the agent's events
//    and the reaper act on these only.
//  - detached: re-parented without that evidence, or with evidence against it (a
//    nohup'd server with live workers; a shell started it; a live gpureap run
//    adopted it). Shown, never selected by --orphans or acted on unattended.

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "proc/holder.h"

namespace gpureap::proc {

/// How a process ended, as the kernel reported it to the agent (the proc connector's
/// exit event, the pidfd's exit information, a zombie's stat line: ProcessHandle::
/// exit_manner); unknown when none of them said. Unknown is no witness of a crash.
enum class ExitManner { unknown, exited, signaled };
/// "unknown", "exited", "signaled" (util/enum_names.h).
std::string_view enum_name(ExitManner manner);

/// A process whose death the agent saw (its pidfd fired): a holder's parent or
/// process-group leader, as last seen alive.
struct DeadParent {
  pid_t pid = 0;
  std::string comm;
  std::string cmdline;
  double died_at = 0;            // wall clock, seconds since the epoch (when its pidfd fired)
  bool was_parent = false;       // the holder's parent (not only its group leader)
  bool held_gpu = false;         // it was a GPU holder itself
  std::size_t gpu_children = 0;  // holders whose parent it was, when it died
  bool run_supervisor = false;   // it was a `gpureap run`'s gpureap or gpureap-reaper
  /// The start time of the holder this entry is about (the map's key is its pid); 0
  /// when unknown. An entry never applies to a later process that reused the pid.
  std::uint64_t holder_start = 0;
  ExitManner manner = ExitManner::unknown;
  int exit_value = 0;  // exited: its exit code; signaled: the signal's number
  pid_t pgid = 0;      // its process group and session when last seen alive (0: unknown)
  pid_t sid = 0;
  /// The holder's parent just after the death: who the kernel gave it to (0: unknown).
  /// The entry applies while the holder is still there: a record never re-parents a
  /// process whose present parent is another (W4-05).
  pid_t adopter = 0;
  friend bool operator==(const DeadParent&, const DeadParent&) = default;
};

/// True when `dp` crashed: killed by a signal, or exited non-zero. An exit with code 0
/// is a launcher (or server) finishing; an unknown manner is neither.
bool crashed(const DeadParent& dp);

/// "was killed by SIGKILL", "exited with code 1", "exited normally (code 0)", "ended
/// (how, the kernel did not say)".
std::string ending_text(const DeadParent& dp);

/// Why `pid` counts as re-parented, or "" when it does not (pure; holder_scan
/// reads the inputs): ppid 1 without leading its own session; or a parent in
/// another session although it does not lead its own (sessions are inherited at
/// fork: that parent adopted it); or its group leader is gone and its live
/// parent, in another group, is a subreaper (`parent_is_subreaper`: a
/// namespace's init, or a known subreaper by name). A live parent in the same
/// session that adopts nothing is its starter: a shell pipeline is attached.
std::string reparent_reason(pid_t pid, pid_t ppid, pid_t pgid, pid_t sid, bool pgid_leader_exists,
                            std::optional<pid_t> parent_pgid, std::optional<pid_t> parent_sid,
                            std::string_view parent_comm, bool parent_is_subreaper);

/// True for a process name that adopts orphans by design (tini, dumb-init,
/// gpureap-reaper, systemd, containerd-shim, conmon, ...).
bool is_subreaper_name(std::string_view comm);

/// True for an engine worker's process title (SGLang's `sglang::scheduler_TP3`,
/// vLLM's `<prefix>::EngineCore` / `::Worker_TP0`, Ray's `ray::…`, Python
/// multiprocessing's spawn/forkserver children). The title is in the cmdline
/// (setproctitle); comm holds its first 15 bytes. Such a process is a worker of a
/// server: re-parented, its server is gone.
bool is_worker_title(std::string_view comm, std::string_view cmdline);

/// True for a server or launcher command (sglang.launch_server, `vllm serve`,
/// torchrun, a Ray worker, an engine title).
bool is_server_command(std::string_view comm, std::string_view cmdline);

/// True for a shell, a session tool, or a script run by one (`bash launch.sh`, a
/// `launch.sh` started by its #! line, `sh -c ...`): what it starts outlives it by design.
bool is_shell_or_script(std::string_view comm, std::string_view cmdline);

/// True when a dead parent was its workers' server: it held a GPU itself, was a
/// `gpureap run`'s supervisor, or its title or command line names an engine launcher;
/// never a shell or script. Only such a death, seen by the agent, is witnessed evidence.
bool is_server_identity(const DeadParent& dp);

/// True for a shell or session tool (bash, zsh, sshd, tmux, screen, login, sudo,
/// nohup, setsid, ...): a process it started outlives it by design.
bool is_session_tool(std::string_view comm);

/// Decides orphaned/detached for every holder from the raw facts the scan read
/// (Holder::reparented, group_leader_gone, run_alive, run_gone) and from the
/// agent's `dead_parents` (holder pid -> what it saw die), `now` the wall clock.
/// Sets orphaned, orphan_evidence, orphan_reason, detached, detached_reason;
/// idempotent (derived fields are recomputed from the raw ones). The whole set is
/// needed: siblings and live workers are other holders.
/// `witnessed`: holders an earlier look of this command (the agent's answer) called
/// orphaned by what the agent saw die; a later direct look cannot see that, so the
/// verdict is kept for the same process (same identity) while it is still adopted by
/// the same parent.
void classify_lineage(std::vector<Holder>& holders, const std::map<pid_t, DeadParent>& dead_parents,
                      double now, const std::vector<Holder>& witnessed = {});

/// True when the verdict is known by what gpureap holds or what the agent saw (owned,
/// witnessed), never by one look's inference.
inline bool attested(Provenance p) { return p == Provenance::owned || p == Provenance::witnessed; }

/// True for a holder of memory that no live owner wants: an orphan, or a keeper of a dead
/// owner's memory (docs/orphans.md, "Keepers"). What `free --orphans`, the agent's
/// orphaned_memory event and the reaper's clock take.
inline bool stray(const Holder& h) { return h.orphaned || h.keeper != KeeperClass::none; }

/// True when an unattended path (the reaper, the Slurm hooks, `run --free-first`
/// without a question) may act on `h`: orphaned, or the keeper of a dead owner's memory,
/// and known by what gpureap holds or what the agent saw (owned, witnessed), never by one
/// look's inference.
inline bool unattended_may_act(const Holder& h) {
  return (h.orphaned && attested(h.provenance)) ||
         (h.keeper != KeeperClass::none && attested(h.keeper_provenance));
}

}  // namespace gpureap::proc
