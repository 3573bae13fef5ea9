#include "proc/lineage.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <csignal>
#include <map>
#include <set>

#include "util/signal_name.h"

namespace gpureap::proc {

namespace {

bool contains(std::string_view text, std::string_view part) {
  return text.find(part) != std::string_view::npos;
}

bool name_in(std::string_view comm, const auto& names) {
  return std::any_of(std::begin(names), std::end(names),
                     [&](std::string_view n) { return comm == n; });
}

std::string ago(double seconds) {
  if (!(seconds >= 0) || std::isinf(seconds)) return "just now";
  if (seconds < 1) return fmt::format("{:.0f} ms ago", seconds * 1000);
  if (seconds < 120) return fmt::format("{:.0f} s ago", seconds);
  if (seconds < 7200) return fmt::format("{:.0f} min ago", seconds / 60);
  return fmt::format("{:.1f} h ago", seconds / 3600);
}

bool holds_gpu(const Holder& h) {
  return !h.gpu_minors.empty() || h.found_by.contains(FoundBy::source);
}

}  // namespace

bool is_subreaper_name(std::string_view comm) {
  static constexpr std::array<std::string_view, 12> kNames{
      "gpureap-reaper", "tini",     "dumb-init", "docker-init",    "catatonit", "systemd",
      "s6-svscan",      "runsvdir", "conmon",    "containerd-shi", "pause",     "supervisord"};
  return name_in(comm, kNames) || comm.starts_with("containerd-shim");
}

bool is_worker_title(std::string_view comm, std::string_view cmdline) {
  // SGLang: sglang::scheduler[_DP..][_TP..], sglang::detokenizer,
  // sglang::data_parallel_controller. vLLM: <prefix>::EngineCore[_DPn],
  // <prefix>::Worker[_..], <prefix>::APIServer_<i> (the prefix is the user's:
  // VLLM_PROCESS_NAME_PREFIX). Ray: ray::<Class>.<method>, ray::IDLE. comm is cut at
  // 15 bytes (`VLLM::EngineCor`), so both are read.
  for (std::string_view text : {cmdline, comm}) {
    if (text.starts_with("sglang::") || text.starts_with("ray::")) return true;
    std::string_view first = text.substr(0, text.find(' '));
    if (auto at = first.find("::"); at != std::string_view::npos && at > 0) {
      std::string_view role = first.substr(at + 2);
      if (role.starts_with("EngineCor") || role.starts_with("Worker") ||
          role.starts_with("APIServer"))
        return true;
    }
  }
  // Python's multiprocessing children: `python -c "from multiprocessing.spawn import
  // spawn_main; spawn_main(...)" --multiprocessing-fork`, and forkserver's.
  return contains(cmdline, "multiprocessing.spawn import spawn_main") ||
         contains(cmdline, "--multiprocessing-fork") ||
         contains(cmdline, "multiprocessing.forkserver import main");
}

bool is_server_command(std::string_view comm, std::string_view cmdline) {
  if (is_worker_title(comm, cmdline)) return true;
  static constexpr std::array<std::string_view, 9> kParts{
      "sglang.launch_server",     "sglang serve",       "vllm serve",
      "vllm.entrypoints",         "torchrun",           "torch.distributed.run",
      "torch.distributed.launch", "deepspeed.launcher", "tritonserver"};
  return std::any_of(kParts.begin(), kParts.end(),
                     [&](std::string_view p) { return contains(cmdline, p); });
}

bool is_session_tool(std::string_view comm) {
  static constexpr std::array<std::string_view, 22> kNames{
      "bash", "sh",   "dash",         "zsh",    "fish",         "ksh",    "mksh",   "tcsh",
      "csh",  "sshd", "sshd-session", "tmux",   "tmux: server", "screen", "SCREEN", "login",
      "su",   "sudo", "nohup",        "setsid", "mosh-server",  "script"};
  return name_in(comm, kNames);
}

std::string reparent_reason(pid_t pid, pid_t ppid, pid_t pgid, pid_t sid, bool pgid_leader_exists,
                            std::optional<pid_t> parent_pgid, std::optional<pid_t> parent_sid,
                            std::string_view parent_comm, bool parent_is_subreaper) {
  // A child of init that leads its own session is what init (systemd) starts
  // as a service: not re-parented. One that was re-parented still sits in the
  // session of the shell or launcher that started it.
  if (ppid == 1) return sid == pid ? "" : "re-parented to init (pid 1)";
  std::string_view parent = parent_comm.empty() ? "?" : parent_comm;
  // A child inherits its parent's session at fork and leaves it only by setsid,
  // which makes it the leader. So a process that does not lead its session, under
  // a parent in another session, was not started by that parent: it was adopted
  // (a child subreaper: gpureap-reaper, systemd --user, a launcher's supervisor).
  // A parent's session 0 lies outside our PID namespace (a container started
  // from a session on the host, as CI's are): not the child's session either.
  if (sid > 0 && sid != pid && parent_sid && *parent_sid != sid)
    return fmt::format("adopted by {} (pid {}), outside its session {}", parent, ppid, sid);
  // pgid 0: the group lies outside our pid namespace, nothing to conclude.
  // Otherwise a live parent is the starter unless it adopts by design (a
  // subreaper in the same session: a container's init): a shell's pipeline whose
  // first command (the group leader) exited has exactly this shape with the
  // shell as parent, and nobody adopted anything (W2-08).
  if (pgid > 0 && pgid != pid && !pgid_leader_exists && parent_pgid && *parent_pgid != pgid &&
      parent_is_subreaper)
    return fmt::format("process group leader {} is gone; adopted by {} (pid {})", pgid, parent,
                       ppid);
  return {};
}

bool is_shell_or_script(std::string_view comm, std::string_view cmdline) {
  if (is_session_tool(comm) || comm.ends_with(".sh")) return true;
  // `bash launch.sh`, `/bin/sh -c ...`: the interpreter is argv[0] (a script run by its
  // #! line keeps the interpreter there and its own file name as comm).
  auto base = [](std::string_view word) {
    if (auto slash = word.rfind('/'); slash != std::string_view::npos) word = word.substr(slash + 1);
    return word;
  };
  std::string_view argv0 = base(cmdline.substr(0, cmdline.find(' ')));
  if (argv0 == "env" && cmdline.find(' ') != std::string_view::npos) {  // #!/usr/bin/env bash
    std::string_view rest = cmdline.substr(cmdline.find(' ') + 1);
    argv0 = base(rest.substr(0, rest.find(' ')));
  }
  return is_session_tool(argv0);
}

std::string_view enum_name(ExitManner manner) {
  switch (manner) {
    case ExitManner::unknown: return "unknown";
    case ExitManner::exited: return "exited";
    case ExitManner::signaled: return "signaled";
  }
  return {};
}

bool crashed(const DeadParent& dp) {
  return dp.manner == ExitManner::signaled ||
         (dp.manner == ExitManner::exited && dp.exit_value != 0);
}

std::string ending_text(const DeadParent& dp) {
  switch (dp.manner) {
    case ExitManner::signaled:
      return fmt::format("was killed by {}", signal_name(dp.exit_value));
    case ExitManner::exited:
      return dp.exit_value == 0 ? "exited normally (code 0)"
                                : fmt::format("exited with code {}", dp.exit_value);
    case ExitManner::unknown:
      break;
  }
  return "ended (how, the kernel did not say)";
}

bool is_server_identity(const DeadParent& dp) {
  if (is_shell_or_script(dp.comm, dp.cmdline)) return false;
  return dp.held_gpu || dp.run_supervisor || is_server_command(dp.comm, dp.cmdline);
}

namespace {

// Who holds a GPU, by parent and by process group, and what the agent saw die: what
// one holder's verdict is read against.
struct LineageContext {
  const std::map<pid_t, DeadParent>& dead_parents;
  const std::vector<Holder>& witnessed;
  double now;
  std::map<pid_t, std::vector<pid_t>> gpu_children;      // ppid -> GPU-holding children
  std::map<pid_t, std::vector<pid_t>> reparented_group;  // pgid -> re-parented GPU holders

  // What the agent saw die, for this very process (pid and start time: an entry
  // recorded for a pid since reused names nobody), while the process is still where the
  // death left it: with the adopter the kernel gave it to (a record never re-parents a
  // process whose present parent is another, W4-05); with no adopter recorded, only
  // under init or an adopter one look recognises.
  const DeadParent* witnessed_for(const Holder& h) const {
    auto it = dead_parents.find(h.id.pid);
    if (it == dead_parents.end()) return nullptr;
    const DeadParent& dp = it->second;
    if (dp.holder_start != 0 && dp.holder_start != h.id.start_time) return nullptr;
    if (dp.was_parent && (dp.adopter != 0 ? h.ppid != dp.adopter : h.ppid != 1 && !h.reparented))
      return nullptr;
    return &dp;
  }
  // A parent the agent saw die makes its child re-parented, whoever adopted it.
  bool is_reparented(const Holder& h) const {
    if (h.reparented) return true;
    const DeadParent* dp = witnessed_for(h);
    return dp && dp->was_parent && h.ppid != dp->pid;
  }
};

LineageContext lineage_context(const std::vector<Holder>& holders,
                               const std::map<pid_t, DeadParent>& dead_parents, double now,
                               const std::vector<Holder>& witnessed) {
  LineageContext ctx{dead_parents, witnessed, now, {}, {}};
  for (const auto& h : holders) {
    if (!holds_gpu(h)) continue;
    ctx.gpu_children[h.ppid].push_back(h.id.pid);
  }
  for (const auto& h : holders)
    if (holds_gpu(h) && ctx.is_reparented(h) && h.pgid > 0 && !h.run_alive &&
        !ctx.gpu_children.contains(h.id.pid))
      ctx.reparented_group[h.pgid].push_back(h.id.pid);
  return ctx;
}

void clear_verdict(Holder& h) {
  h.orphaned = false;
  h.orphan_evidence = OrphanEvidence::none;
  h.provenance = Provenance::none;
  h.dead_parent = 0;
  h.orphan_reason.clear();
  h.orphaned_since.reset();
  h.detached = false;
  h.detached_reason.clear();
}

void orphan(Holder& h, OrphanEvidence evidence, Provenance provenance, std::string why) {
  h.orphaned = true;
  h.orphan_evidence = evidence;
  h.provenance = provenance;
  h.orphan_reason = std::move(why);
}

void detach(Holder& h, std::string why) {
  h.detached = true;
  h.detached_reason = std::move(why);
}

// Its gpureap run is gone, by the run's cgroup (owned): true when that decided.
bool run_owned_verdict(Holder& h) {
  // Owned: in a `gpureap run`'s own cgroup with no live run above it. The run is
  // over; nobody will tear it down.
  if (h.run_gone && h.run_in_cgroup) {
    orphan(h, OrphanEvidence::run_gone, Provenance::owned,
           fmt::format("its gpureap run {} is gone (the process is still in the run's cgroup)",
                       h.run_id));
    return true;
  }
  return false;
}

// A run named only by its environment whose command init adopted: the whole run was
// left behind when its gpureap died (subreaper mode), its workers under their live
// server included. A label, not proof: inferred, and below the agent's witness of a
// crash (W3-10). True when that decided.
bool run_hint_verdict(Holder& h) {
  if (h.run_gone && !h.run_in_cgroup && h.run_left_to_init > 0) {
    orphan(h, OrphanEvidence::run_gone, Provenance::inferred,
           fmt::format("its gpureap run {} is gone: the run's command (pid {}) was left to init",
                       h.run_id, h.run_left_to_init));
    return true;
  }
  return false;
}

// The agent saw this very process orphaned (earlier in this command), and it is
// still where that left it: true when so.
bool seen_orphaned_before(Holder& h, const std::vector<Holder>& witnessed) {
  auto w = std::find_if(witnessed.begin(), witnessed.end(), [&](const Holder& e) {
    return e.id == h.id && e.ppid == h.ppid && e.orphaned && e.provenance == Provenance::witnessed;
  });
  if (w == witnessed.end()) return false;
  orphan(h, OrphanEvidence::witnessed, Provenance::witnessed, w->orphan_reason);
  h.orphaned_since = w->orphaned_since;
  return true;
}

// Adopted, but cleaned up or leading live workers: true when that decided (detached).
bool still_looked_after(Holder& h, const std::string& adopted, const LineageContext& ctx) {
  // A live run's reaper adopted it: the run tears it down (W2-10).
  if (h.run_alive) {
    detach(h, fmt::format("{}; a member of a live gpureap run, which cleans it up", adopted));
    return true;
  }
  // A server with live workers (`nohup server &`, its shell gone): not a leak.
  auto it = ctx.gpu_children.find(h.id.pid);
  if (it == ctx.gpu_children.end() || it->second.empty()) return false;
  std::string pids;
  for (std::size_t i = 0; i < it->second.size() && i < 3; ++i)
    pids += fmt::format("{}{}", i ? ", " : "", it->second[i]);
  if (it->second.size() > 3) pids += fmt::format(" and {} more", it->second.size() - 3);
  detach(h, fmt::format("{}, but it leads {} live GPU worker{} (pid {}): a detached server",
                        adopted, it->second.size(), it->second.size() == 1 ? "" : "s", pids));
  return true;
}

// What the agent saw die, and how it ended (the kernel's word: DeadParent::manner).
// Witnessed only for a crash: the workers' *server* (an engine launcher, a process that
// held the GPU itself, a run's supervisor) killed by a signal or exited non-zero while
// this process, which stayed in its session and did not ignore SIGHUP, held a GPU; or
// a launcher script killed by a signal while this job ran in its process group (it
// `wait`ed on it). An exit with code 0 is a launcher finishing (W4-01), an unknown
// manner is no witness, and a shell's or script's jobs outlive its normal end by
// design (W3-02, W3-07). True when that decided; otherwise `adopted` gains the death,
// for the one-look verdicts.
bool dead_parent_verdict(Holder& h, const DeadParent& dp, std::string& adopted, double now,
                         bool meant_to_outlive) {
  const std::string when = ago(now - dp.died_at);
  const std::string ended = ending_text(dp);
  if (is_shell_or_script(dp.comm, dp.cmdline)) {
    if (!meant_to_outlive && dp.manner == ExitManner::signaled && dp.exit_value != SIGHUP &&
        dp.pgid > 0 && h.pgid == dp.pgid) {
      orphan(h, OrphanEvidence::witnessed, Provenance::witnessed,
             fmt::format("its parent {} (pid {}), a launcher script, {} {} while this job ran in "
                         "its process group; {}",
                         dp.comm, dp.pid, ended, when, adopted));
      h.orphaned_since = dp.died_at;
      return true;
    }
    detach(h, fmt::format("{}; its parent {} (pid {}), a shell or script, {} {}: a launcher "
                          "whose jobs were started to outlive it",
                          adopted, dp.comm, dp.pid, ended, when));
    return true;
  }
  if (is_server_identity(dp) && !meant_to_outlive && crashed(dp)) {
    std::string what = dp.held_gpu         ? "which held a GPU"
                       : dp.run_supervisor ? "a gpureap run's supervisor"
                                           : "a server";
    orphan(h, OrphanEvidence::witnessed, Provenance::witnessed,
           fmt::format("its parent {} (pid {}), {}, was seen to die {} ({}); {}", dp.comm, dp.pid,
                       what, when,
                       dp.manner == ExitManner::signaled
                           ? fmt::format("killed by {}", signal_name(dp.exit_value))
                           : fmt::format("exit code {}", dp.exit_value),
                       adopted));
    h.orphaned_since = dp.died_at;
    return true;
  }
  // Seen to die, but no witness of a crash: what follows is one look's reading, and the
  // line says why the death is not the evidence.
  // (Meant to outlive it: the caller's detached line says why.)
  std::string but = meant_to_outlive ? "but this process was started to outlive it"
                    : !is_server_identity(dp)
                        ? "but it was not known as a server (no engine command, GPU or gpureap run)"
                    : dp.manner == ExitManner::exited ? "a launcher that finished, not a crash"
                                                      : "so no crash is witnessed";
  adopted = fmt::format("{}; its parent {} (pid {}) was seen to die {}: it {}, {}", adopted, dp.comm,
                        dp.pid, when, ended, but);
  return false;
}

// One-look evidence, inferred: reported and offered to a person, never acted on
// unattended. Otherwise detached, started to outlive its shell.
void one_look_verdict(Holder& h, const std::string& adopted, bool titled,
                      const LineageContext& ctx) {
  if (!h.run_id.empty()) {
    orphan(h, OrphanEvidence::run_gone, Provenance::inferred,
           fmt::format("{}; its environment names gpureap run {}, and no live run is above it",
                       adopted, h.run_id));
    return;
  }
  if (titled) {
    orphan(h, OrphanEvidence::title, Provenance::inferred,
           fmt::format("{}; its title names a worker of a server that is gone", adopted));
    return;
  }
  // Two or more of one process group re-parented at once, none leading live
  // workers: the workers of a server that died (it led the group, or ran in a
  // launcher script's, which may still live).
  if (auto it = ctx.reparented_group.find(h.pgid);
      it != ctx.reparented_group.end() && it->second.size() >= 2) {
    orphan(h, OrphanEvidence::siblings, Provenance::inferred,
           fmt::format("{}; {} more of its process group {} hold{} GPUs, re-parented too: the "
                       "workers of a server that is gone, by one look",
                       adopted, it->second.size() - 1, h.pgid, it->second.size() == 2 ? "s" : ""));
    return;
  }
  // Its group's leader died: a server that led the group (and maybe its session)
  // killed, or a shell, launcher or daemon's intermediate that exited; one look
  // cannot tell which. Said so, and left to a person.
  if (h.group_leader_gone) {
    orphan(h, OrphanEvidence::group, Provenance::inferred,
           fmt::format("{}; its process group leader {} is gone; launcher unknown: one look "
                       "cannot tell a killed server from a shell that exited",
                       adopted, h.pgid));
    return;
  }
  // It leads its own group (`nohup srv &` from a terminal, the shell gone since).
  detach(h, fmt::format("{}; it leads its own process group and no dead server, worker "
                        "title or orphaned sibling says it is a leak: started to outlive its "
                        "shell; free it by name: gpureap free --pid {}",
                        adopted, h.id.pid));
}

// One holder's verdict, the strongest evidence first.
void classify_one(Holder& h, const LineageContext& ctx) {
  clear_verdict(h);
  const bool titled = is_worker_title(h.comm, h.cmdline);
  // Detached on purpose: `nohup` leaves SIGHUP ignored, `setsid` (Popen's
  // start_new_session) makes it lead a session of its own (W4-01); a worker's title says
  // it is a server's worker all the same (a nohup'd server's workers inherit it).
  const bool meant_to_outlive = (h.ignores_sighup || (h.sid > 0 && h.sid == h.id.pid)) && !titled;
  if (run_owned_verdict(h)) return;
  const DeadParent* dp = ctx.witnessed_for(h);
  if (!ctx.is_reparented(h)) {  // its parent lives: live, unless its run's command was left
    run_hint_verdict(h);
    return;
  }
  if (dp && dp->was_parent) h.dead_parent = dp->pid;
  if (seen_orphaned_before(h, ctx.witnessed)) return;
  std::string adopted = h.reparented ? h.reparent_reason : fmt::format("adopted by pid {}", h.ppid);
  if (still_looked_after(h, adopted, ctx)) return;
  if (dp && dp->was_parent && dead_parent_verdict(h, *dp, adopted, ctx.now, meant_to_outlive))
    return;
  if (run_hint_verdict(h)) return;
  if (meant_to_outlive) {
    detach(h, fmt::format("{}; {}: started to outlive its launcher", adopted,
                          h.ignores_sighup ? "it ignores SIGHUP (nohup)"
                                           : "it leads its own session (setsid)"));
    return;
  }
  one_look_verdict(h, adopted, titled, ctx);
}

}  // namespace

void classify_lineage(std::vector<Holder>& holders, const std::map<pid_t, DeadParent>& dead_parents,
                      double now, const std::vector<Holder>& witnessed) {
  const LineageContext ctx = lineage_context(holders, dead_parents, now, witnessed);
  for (auto& h : holders) classify_one(h, ctx);
}

}  // namespace gpureap::proc
