#include "reclaim/plan.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <map>

#include "gpu/gpu_select.h"
#include "inventory/node.h"
#include "inventory/run_records.h"
#include "proc/engine_role.h"
#include "proc/lineage.h"
#include "proc/proc_files.h"
#include "proc/proc_parse.h"
#include "proc/run_id.h"
#include "util/units.h"

namespace gpureap::reclaim {
namespace {

// Processes that serve the GPU rather than use it: killing them breaks the node
// for everyone (persistence, NVSwitch fabric, monitoring, the display).
constexpr std::array<std::string_view, 14> kInfrastructure{"nvidia-persistenced",
                                                           "nv-fabricmanager",
                                                           "nvidia-fabricmanager",
                                                           "nv-hostengine",
                                                           "dcgm-exporter",
                                                           "dcgmi",
                                                           "Xorg",
                                                           "X",
                                                           "Xwayland",
                                                           "gnome-shell",
                                                           "kwin_wayland",
                                                           "kwin_x11",
                                                           "nvidia-smi",
                                                           "gpureap"};

// Processes that run other people's jobs, sessions or containers: signalling one takes
// down everything it supervises (every container of a runtime, every job step of a node,
// every ssh session). A respawning parent is often one of them (D10).
constexpr std::array<std::string_view, 22> kSupervisors{"systemd",
                                                        "init",
                                                        "containerd",
                                                        "containerd-shim",
                                                        "containerd-shim-runc-v2",
                                                        "dockerd",
                                                        "dockerd-rootless",
                                                        "runc",
                                                        "crun",
                                                        "conmon",
                                                        "podman",
                                                        "crio",
                                                        "kubelet",
                                                        "slurmd",
                                                        "slurmstepd",
                                                        "slurmctld",
                                                        "sshd",
                                                        "tmux: server",
                                                        "tmux",
                                                        "screen",
                                                        "SCREEN",
                                                        "supervisord"};

// Shells: one with a controlling terminal is a logged-in user's session.
constexpr std::array<std::string_view, 9> kShells{"bash", "sh",   "dash", "zsh",  "fish",
                                                  "ksh",  "tcsh", "csh",  "login"};

// A GPU holder of the inventory, merged across GPUs: what it holds in all (what
// signalling it frees) and what of that is on the selected GPUs.
struct Candidate {
  const proc::Holder* holder = nullptr;
  std::vector<gpu::DeviceId> gpus;      // every GPU it uses
  std::uint64_t bytes = 0;         // over all of them
  bool bytes_known = false;        // NVML reported this holder's memory on at least one GPU
  std::vector<gpu::DeviceId> selected;  // those of the selection
  std::uint64_t selected_bytes = 0;

  std::vector<gpu::DeviceId> unselected() const {
    std::vector<gpu::DeviceId> out;
    for (gpu::DeviceId g : gpus)
      if (std::find(selected.begin(), selected.end(), g) == selected.end()) out.push_back(g);
    return out;
  }
};

using Holders = std::map<proc::ProcessId, Candidate>;

// Why a holder that passed protection and permission is left alone by the filters:
// not_matched, or not_permitted when the answer needs its environment and that cannot
// be read (never a guess either way).
struct Mismatch {
  SkipKind kind = SkipKind::not_matched;
  std::string reason;
};

// The holder's environment, read once however many filters ask for it (a zombie
// leader's from a live thread: proc::read_environ), and its command line for --match.
class EnvironOnce {
 public:
  EnvironOnce(const proc::Holder& h, const std::string& proc_root) : h_(h), proc_root_(proc_root) {}
  const Result<std::string>& get() {
    if (!text_) text_ = proc::read_environ(h_.id, proc_root_);
    return *text_;
  }
  // The scan's, except for a zombie leader: its own reads empty (the scan shows
  // "[comm]"), a live thread's does not (W2-12).
  const std::string& cmdline() {
    if (!cmdline_) {
      auto live = h_.zombie_leader ? proc::read_process_cmdline(h_.id, proc_root_)
                                   : Result<std::string>(h_.cmdline);
      cmdline_ = live && !live->empty() ? *live : h_.cmdline;
    }
    return *cmdline_;
  }

 private:
  const proc::Holder& h_;
  const std::string& proc_root_;
  std::optional<Result<std::string>> text_;
  std::optional<std::string> cmdline_;
};

// True when some component of a cgroup path is exactly `name`.
bool has_component(std::string_view path, std::string_view name) {
  while (!path.empty()) {
    auto slash = path.find('/');
    if (path.substr(0, slash) == name) return true;
    if (slash == std::string_view::npos) break;
    path.remove_prefix(slash + 1);
  }
  return false;
}

std::optional<Mismatch> env_mismatch(const Filters& f, EnvironOnce& environ) {
  if (f.env.empty() && f.env_none.empty()) return std::nullopt;
  const auto& text = environ.get();
  if (!text) {
    if (text.error().sys_errno == ESRCH) return Mismatch{SkipKind::not_matched, "it has exited"};
    std::string wanted = !f.env.empty() ? f.env.front().text() : f.env_none.front().text();
    return Mismatch{SkipKind::not_permitted,
                    fmt::format("{}; cannot tell whether it holds {} (root can read it)",
                                text.error().message, wanted)};
  }
  for (const auto& e : f.env)
    if (!proc::environ_has(*text, e))
      return Mismatch{SkipKind::not_matched, fmt::format("its environment lacks {}", e.text())};
  for (const auto& e : f.env_none)
    if (proc::environ_has(*text, e))
      return Mismatch{SkipKind::not_matched, fmt::format("its environment holds {}", e.text())};
  return std::nullopt;
}

std::optional<Mismatch> filter_mismatch(const proc::Holder& h, const std::vector<gpu::DeviceId>& gpus,
                                        const Filters& f, EnvironOnce& environ) {
  auto no = [](std::string reason) { return Mismatch{SkipKind::not_matched, std::move(reason)}; };
  if (!f.ids.empty() && std::find(f.ids.begin(), f.ids.end(), h.id) == f.ids.end())
    return no(f.ids_left_out);
  if (!f.pids.empty() && !f.names(h.id.pid)) return no("not named by --pid");
  if (!f.instance.empty() && h.instance != f.instance)
    return no(h.instance.empty() ? std::string("of no instance; --instance given")
                                 : fmt::format("of instance {}, not {}", h.instance, f.instance));
  if (f.user && h.uid != *f.user)
    return no(fmt::format("owned by {}, not the --user given", h.user));
  if (!f.cgroup.empty() && h.cgroup.find(f.cgroup) == std::string::npos &&
      h.container.find(f.cgroup) == std::string::npos)
    return no("cgroup does not match --cgroup");
  if (!f.cgroup_component.empty() && !has_component(h.cgroup, f.cgroup_component))
    return no(fmt::format("its cgroup is not under {}", f.cgroup_component));
  for (const auto& c : f.cgroup_none)
    if (has_component(h.cgroup, c)) return no(fmt::format("its cgroup is under {}", c));
  if (f.match && !f.match->search(environ.cmdline()))
    return no("command line does not match --match");
  // A keeper of a dead owner's memory is that memory's holder: --orphans takes it as
  // it takes an orphan (docs/orphans.md, "Keepers").
  if (f.orphans_only && !proc::stray(h))
    return no(h.detached
                  ? fmt::format("detached, not orphaned ({}); --orphans given", h.detached_reason)
                  : std::string("not orphaned (its parent is alive); --orphans given"));
  if (f.orphans_only && f.unattended && !proc::unattended_may_act(h))
    return no(h.orphaned
                  ? fmt::format("{}: {}; only a person's free acts on that",
                                proc::orphan_verdict(h.provenance), h.orphan_reason)
                  : fmt::format("it {}, and no owned or witnessed evidence says it is "
                                "orphaned; only a person's free acts on that",
                                h.keeper_reason));
  if (!f.on_gpus.empty() && std::none_of(gpus.begin(), gpus.end(), [&](gpu::DeviceId g) {
        return std::find(f.on_gpus.begin(), f.on_gpus.end(), g) != f.on_gpus.end();
      }))
    return no(fmt::format("it uses none of GPU {}", gpu::device_list(f.on_gpus)));
  // Last: the environment costs a read, the other filters none.
  return env_mismatch(f, environ);
}

// The whole selection: its own filters, then at least one of any_of. When no
// alternative matches, the reason lists each one's; when one could not be told
// (an unreadable environment), so is the answer.
std::optional<Mismatch> selection_mismatch(const proc::Holder& h, const std::vector<gpu::DeviceId>& gpus,
                                           const Selection& sel, const std::string& proc_root) {
  EnvironOnce environ(h, proc_root);
  if (auto m = filter_mismatch(h, gpus, sel, environ)) return m;
  if (sel.any_of.empty()) return std::nullopt;
  Mismatch all;
  for (const auto& alternative : sel.any_of) {
    auto m = filter_mismatch(h, gpus, alternative, environ);
    if (!m) return std::nullopt;
    if (m->kind != SkipKind::not_matched) all.kind = m->kind;
    all.reason += (all.reason.empty() ? "" : "; ") + m->reason;
  }
  return all;
}

// A respawning parent against one set of filters, those that describe a process rather
// than a GPU holder: orphans_only and on_gpus do not apply (a supervisor is by nature not
// an orphan, and holds no GPU). `applied` says whether any filter did apply.
bool respawner_passes(const proc::Holder& parent, const Filters& f, EnvironOnce& environ,
                      bool& applied) {
  applied = !f.pids.empty() || f.user || f.match || !f.cgroup.empty() ||
            !f.cgroup_component.empty() || !f.cgroup_none.empty() || !f.env.empty() ||
            !f.env_none.empty() || !f.ids.empty();
  Filters own = f;
  own.orphans_only = false;
  own.on_gpus.clear();
  own.instance.clear();
  return !filter_mismatch(parent, {}, own, environ);
}

// A process of the table described as the filters see a holder (no GPU, no orphan rule).
proc::Holder describe(const proc::ProcessEntry& entry, const std::string& cmdline,
                      const std::string& proc_root) {
  proc::Holder h;
  h.id = entry.id;
  h.uid = entry.uid;
  h.comm = entry.comm;
  h.cmdline = cmdline;
  h.cgroup = proc::pick_cgroup_path(proc::parse_cgroup(
      proc::read_small_file(fmt::format("{}/{}/cgroup", proc_root, entry.id.pid))));
  h.container = proc::container_hint(h.cgroup);
  return h;
}

bool respawner_matches(const proc::ProcessEntry& entry, const std::string& cmdline,
                       const Selection& sel, const std::string& proc_root) {
  proc::Holder parent = describe(entry, cmdline, proc_root);
  EnvironOnce environ(parent, proc_root);
  bool applied = false;
  if (!respawner_passes(parent, sel, environ, applied)) return false;
  if (sel.any_of.empty()) return true;
  return std::any_of(sel.any_of.begin(), sel.any_of.end(), [&](const Filters& f) {
    return respawner_passes(parent, f, environ, applied) && applied;
  });
}

std::string read_environ(pid_t pid, const std::string& proc_root) {
  return proc::read_small_file(fmt::format("{}/{}/environ", proc_root, pid));
}

}  // namespace

bool Plan::contains(const proc::ProcessId& id) const {
  return std::any_of(targets.begin(), targets.end(), [&](const Target& t) { return t.id == id; });
}

const Skipped* Plan::left_alone(const proc::ProcessId& id) const {
  auto it =
      std::find_if(skipped.begin(), skipped.end(), [&](const Skipped& s) { return s.id == id; });
  return it == skipped.end() ? nullptr : &*it;
}

CallerContext CallerContext::current(const std::string& proc_root) {
  auto table = proc::read_process_table(proc_root);
  return from_table(proc_root, table ? std::move(*table) : std::vector<proc::ProcessEntry>{});
}

CallerContext CallerContext::from_table(const std::string& proc_root,
                                        std::vector<proc::ProcessEntry> table) {
  CallerContext ctx;
  ctx.proc_root = proc_root;
  ctx.self = ::getpid();
  for (pid_t p : proc::ancestors(ctx.self, proc_root)) ctx.ancestors.insert(p);
  ctx.euid = ::geteuid();
  ctx.table = std::move(table);
  for (const auto& d : proc::descendants(ctx.table, ctx.self)) ctx.helpers.insert(d.pid);
  ctx.state_dir = inventory::state_dir().value_or("");
  return ctx;
}

CallerContext CallerContext::of(const inventory::Inventory& look, const std::string& proc_root) {
  if (look.process_table) return from_table(proc_root, *look.process_table);
  return current(proc_root);
}

std::optional<std::string> protection_reason(pid_t pid, const std::string& comm, bool kernel_thread,
                                             const CallerContext& ctx, bool named_by_pid) {
  if (pid == 1) return "pid 1 (init) is never signalled";
  if (pid == ctx.self) return "gpureap itself";
  if (ctx.ancestors.contains(pid)) return "an ancestor of this gpureap (its shell or supervisor)";
  if (ctx.helpers.contains(pid)) return "a helper process of this gpureap (its NVML worker)";
  if (kernel_thread) return "a kernel thread";
  // comm is truncated to 15 characters by the kernel (TASK_COMM_LEN).
  auto is_infrastructure = [&](std::string_view name) {
    return comm == name || comm == name.substr(0, 15);
  };
  if (named_by_pid) return std::nullopt;
  if (std::any_of(kInfrastructure.begin(), kInfrastructure.end(), is_infrastructure))
    return fmt::format("GPU infrastructure ({}); name it with --pid to include it", comm);
  if (std::any_of(kSupervisors.begin(), kSupervisors.end(), is_infrastructure))
    return fmt::format("a supervisor of other jobs ({}); name it with --pid to include it", comm);
  if (std::find(kShells.begin(), kShells.end(), comm) != kShells.end()) {
    auto e = proc::find_process(ctx.table, pid);
    if (e && e->tty_nr != 0)
      return fmt::format(
          "a logged-in user's shell ({} on a terminal); name it with --pid to "
          "include it",
          comm);
  }
  return std::nullopt;
}

namespace {

// "holds 20.0 GiB on GPU 0", or "uses GPU 0 (memory unknown)" without NVML's figure
// (an fd-only holder, NVML down): "holds 0 B" would be a guess.
std::string holds_text(std::uint64_t bytes, bool known, const std::vector<gpu::DeviceId>& gpus) {
  return known ? fmt::format("holds {} on GPU {}", format_bytes(bytes), gpu::device_list(gpus))
               : fmt::format("uses GPU {} (memory unknown)", gpu::device_list(gpus));
}

// Steps 3 and 4 of make_plan add processes related to a target (its descendants, the
// rest of its ended run). One that holds a GPU of the selection was decided by steps 1
// and 2; one that holds only GPUs outside it is never signalled for its relation (the
// plan would reach past the selection): it is left alone, saying how to include it.
void leave_unselected_holder(Plan& plan, const Candidate& c, const Selection& sel,
                             const CallerContext& ctx, const std::string& relation) {
  const proc::Holder& h = *c.holder;
  Skipped s{h.id,
            h.comm,
            c.gpus,
            c.bytes,
            SkipKind::not_matched,
            fmt::format("{}, not selected; {}, not signalled with it",
                        holds_text(c.bytes, c.bytes_known, c.gpus), relation)};
  if (auto why = protection_reason(h.id.pid, h.comm, false, ctx, sel.names(h.id.pid))) {
    s.kind = SkipKind::protected_process;
    s.reason += "; " + *why;
  } else if (ctx.euid != 0 && h.uid != ctx.euid) {
    s.kind = SkipKind::not_permitted;
    s.reason += fmt::format("; owned by {}: only root may signal it", h.user);
  } else if (auto mismatch = selection_mismatch(h, c.gpus, sel, ctx.proc_root)) {
    s.kind = mismatch->kind;
    s.reason += fmt::format("; {}: free it by itself with gpureap free --pid {}", mismatch->reason,
                            h.id.pid);
  } else {
    s.reason += fmt::format(": add --gpu {} to include it", gpu::device_list(c.unselected()));
  }
  plan.skipped.push_back(std::move(s));
}

// Why a GPU-less descendant is infrastructure of a live job, not a helper that dies
// with its parent (issue 24 part 5): an MPI daemon (orted), a raylet or Ray's GCS,
// named by its command line; or the parent, however deep, of a GPU holder the plan
// leaves alone (signalling it would take that holder's job down with it).
std::optional<std::string> live_job_infrastructure(
    const proc::ProcessEntry& e, const std::map<pid_t, const proc::ProcessEntry*>& keeps_holder,
    const CallerContext& ctx) {
  if (auto it = keeps_holder.find(e.id.pid); it != keeps_holder.end())
    return fmt::format("the parent of GPU holder {} ({}), which is left alone",
                       it->second->id.pid, it->second->comm);
  const auto who = proc::recognise_engine_cmdline(
      proc::read_cmdline(e.id.pid, ctx.proc_root), e.comm);
  switch (who.role) {
    case proc::EngineRole::mpi_daemon:
      return fmt::format("an MPI daemon ({}) of a live job", e.comm);
    case proc::EngineRole::ray_raylet:
    case proc::EngineRole::ray_gcs:
      return fmt::format("Ray's {} of a live cluster", e.comm);
    default:
      return std::nullopt;
  }
}

// The ancestors of every GPU holder that is not a target, each mapped to that holder:
// none of them is swept as a descendant of a target.
std::map<pid_t, const proc::ProcessEntry*> holders_kept_by(const Plan& plan, const Holders& held,
                                                           const CallerContext& ctx) {
  std::map<pid_t, const proc::ProcessEntry*> by_pid;
  for (const auto& e : ctx.table) by_pid.emplace(e.id.pid, &e);
  std::map<pid_t, const proc::ProcessEntry*> out;
  for (const auto& [id, c] : held) {
    if (plan.contains(id)) continue;
    auto self = by_pid.find(id.pid);
    if (self == by_pid.end()) continue;
    std::set<pid_t> walked;  // a snapshot across pid reuse could hold a cycle
    for (pid_t p = self->second->ppid; p > 1 && walked.insert(p).second;) {
      auto it = by_pid.find(p);
      if (it == by_pid.end()) break;
      out.emplace(p, self->second);
      p = it->second->ppid;
    }
  }
  return out;
}

// A run of an orphan target whose gpureap is gone: the session it ran in, and whether
// its own cgroup names it (proof) or only GPUREAP_RUN_ID (a label).
struct EndedRun {
  pid_t sid = 0;
  bool in_cgroup = false;
};

// Step 3 of make_plan: descendants of the targets that hold no GPU (a worker's helpers
// die with it). A descendant that holds a GPU is a target only when the selection chose
// it by itself; one left alone keeps its own descendants too, and so does the
// infrastructure of a live job (live_job_infrastructure), with everything beneath it.
void add_descendants(Plan& plan, const Holders& held, const Selection& sel,
                     const CallerContext& ctx) {
  std::multimap<pid_t, const proc::ProcessEntry*> children;
  for (const auto& e : ctx.table) children.emplace(e.ppid, &e);
  const auto keeps_holder = holders_kept_by(plan, held, ctx);
  std::set<pid_t> seen;  // a snapshot taken across pid reuse could contain a cycle
  for (const auto& t : plan.targets) seen.insert(t.id.pid);
  std::vector<Target> extra;
  for (const auto& t : plan.targets) {
    const std::string relation = fmt::format("a descendant of {} ({})", t.id.pid, t.comm);
    std::vector<pid_t> frontier{t.id.pid};
    for (std::size_t i = 0; i < frontier.size(); ++i) {
      auto [first, last] = children.equal_range(frontier[i]);
      for (auto it = first; it != last; ++it) {
        const proc::ProcessEntry& e = *it->second;
        if (!seen.insert(e.id.pid).second) continue;  // a target, or reached already
        auto s = std::find_if(plan.skipped.begin(), plan.skipped.end(),
                              [&](const Skipped& x) { return x.id == e.id; });
        if (s != plan.skipped.end()) {
          s->reason += fmt::format("; {}, not signalled with it", relation);
          if (s->kind == SkipKind::not_matched)
            s->reason += fmt::format(": free it by itself with gpureap free --pid {}", e.id.pid);
          continue;
        }
        if (auto c = held.find(e.id); c != held.end()) {
          leave_unselected_holder(plan, c->second, sel, ctx, relation);
          continue;
        }
        if (auto infra = live_job_infrastructure(e, keeps_holder, ctx)) {
          plan.skipped.push_back(
              Skipped{e.id, e.comm, {}, 0, SkipKind::not_matched,
                      fmt::format("{}; {}, not signalled with it: free it by itself with "
                                  "gpureap free --pid {}",
                                  *infra, relation, e.id.pid)});
          continue;  // nor anything beneath it: that is the live job
        }
        frontier.push_back(e.id.pid);
        if (protection_reason(e.id.pid, e.comm, e.kernel_thread, ctx, false)) continue;
        if (ctx.euid != 0 && e.uid != ctx.euid) continue;
        extra.push_back(Target{e.id,
                               e.comm,
                               proc::read_cmdline(e.id.pid, ctx.proc_root),
                               proc::user_name(e.uid),
                               {},
                               0,
                               fmt::format("descendant of {} ({})", t.id.pid, t.comm)});
      }
    }
  }
  plan.targets.insert(plan.targets.end(), extra.begin(), extra.end());
}

// Step 4 of make_plan: the rest of a run whose gpureap is gone, by proof only: the
// processes still in the run's own cgroup (`gpureap-run-<id>`, which only the run or
// root creates). A process that merely shares the run's GPUREAP_RUN_ID (inherited by
// everything a job starts, and anyone may set it) and the session is named, as live,
// and never signalled for it (W4-02): it may be another server's live launcher.
void add_ended_runs(Plan& plan, const std::map<std::string, EndedRun>& ended_runs,
                    const Holders& held, const Selection& sel, const CallerContext& ctx) {
  const auto records = ended_runs.empty() ? std::vector<inventory::RunRecord>{}
                                          : inventory::load_run_records(ctx.state_dir);
  for (const auto& [run_id, run] : ended_runs) {
    // The command the run recorded (pid and start time), its gpureap gone: it and its
    // descendants are the run's, by the run's own word.
    std::set<pid_t> recorded;
    for (const auto& r : records)
      if (r.run_id == run_id && !inventory::process_alive(r.gpureap, ctx.proc_root) &&
          inventory::process_alive(r.command, ctx.proc_root)) {
        recorded.insert(r.command.pid);
        for (const auto& d : proc::descendants(ctx.table, r.command.pid)) recorded.insert(d.pid);
      }
    for (const auto& e : ctx.table) {
      if (plan.contains(e.id) || plan.left_alone(e.id) || e.kernel_thread) continue;
      const bool in_cgroup =
          run.in_cgroup &&
          proc::container_hint(proc::pick_cgroup_path(proc::parse_cgroup(proc::read_small_file(
              fmt::format("{}/{}/cgroup", ctx.proc_root, e.id.pid))))) == "gpureap-run:" + run_id;
      if (!in_cgroup && !recorded.contains(e.id.pid)) {
        if (e.sid != run.sid || held.contains(e.id) ||
            proc::run_id_from_environ(read_environ(e.id.pid, ctx.proc_root)).value_or("") != run_id)
          continue;
        plan.skipped.push_back(Skipped{
            e.id, e.comm, {}, 0, SkipKind::not_matched,
            fmt::format("live: it shares GPUREAP_RUN_ID={} and the session with an orphan, which "
                        "proves nothing (anyone's job may carry it); not signalled: free it by "
                        "itself with gpureap free --pid {}",
                        run_id, e.id.pid)});
        continue;
      }
      if (protection_reason(e.id.pid, e.comm, false, ctx, false)) continue;
      if (ctx.euid != 0 && e.uid != ctx.euid) continue;
      const std::string why =
          in_cgroup ? fmt::format("in the cgroup of gpureap run {}, whose gpureap is gone", run_id)
                    : fmt::format("the command of gpureap run {} (as the run recorded it) or its "
                                  "descendant; its gpureap is gone",
                                  run_id);
      if (auto c = held.find(e.id); c != held.end()) {
        leave_unselected_holder(plan, c->second, sel, ctx, why);
        continue;
      }
      plan.targets.push_back(Target{e.id,
                                    e.comm,
                                    proc::read_cmdline(e.id.pid, ctx.proc_root),
                                    proc::user_name(e.uid),
                                    {},
                                    0,
                                    why});
    }
  }
}

// Step 1 of make_plan: every GPU holder, merged across GPUs, with the selected GPUs it uses.
Holders holders_of(const inventory::Inventory& inv, const Selection& sel) {
  Holders held;
  for (const auto& view : inv.gpus) {
    const bool selected =
        std::find(sel.gpus.begin(), sel.gpus.end(), view.info.id) != sel.gpus.end();
    for (const auto& gh : view.holders) {
      // A client (a monitor: the node open, no memory) is a holder only when --pid names it.
      if (!gh.uses_gpu && !(gh.client && sel.names(gh.holder.id.pid))) continue;
      auto& c = held[gh.holder.id];
      c.holder = &gh.holder;
      c.gpus.push_back(view.info.id);
      c.bytes += gh.gpu_bytes.value_or(0);
      c.bytes_known = c.bytes_known || gh.gpu_bytes.has_value();
      if (!selected) continue;
      c.selected.push_back(view.info.id);
      c.selected_bytes += gh.gpu_bytes.value_or(0);
    }
  }
  return held;
}

// Step 2's verdict on a candidate: why it is left alone (protected, another user's, the
// filters), or nullopt for a target.
std::optional<Mismatch> left_alone_by(const Candidate& c, const Selection& sel,
                                      const CallerContext& ctx) {
  const auto& h = *c.holder;
  if (auto why = protection_reason(h.id.pid, h.comm, false, ctx, sel.names(h.id.pid)))
    return Mismatch{SkipKind::protected_process, *why};
  if (ctx.euid != 0 && h.uid != ctx.euid)
    return Mismatch{SkipKind::not_permitted,
                    fmt::format("owned by {}: only root may signal it (sudo gpureap free ...)",
                                h.user)};
  return selection_mismatch(h, c.selected, sel, ctx.proc_root);
}

}  // namespace

NothingToDo nothing_to_do(const inventory::Inventory& inv, const Selection& sel,
                          const Plan& plan) {
  if (!plan.targets.empty()) return NothingToDo::no;
  bool all_free = true, unexplained = false;
  for (const auto& v : inv.gpus) {
    if (!inventory::is_selected(sel.gpus, v.info.id)) continue;
    const auto state = inventory::gpu_state(v);
    all_free = all_free && state == inventory::GpuState::free;
    unexplained = unexplained || (state != inventory::GpuState::free &&
                                  state != inventory::GpuState::held);
  }
  if (all_free) return NothingToDo::idle;
  if (unexplained) return NothingToDo::no;
  const bool only_unmatched =
      std::all_of(plan.skipped.begin(), plan.skipped.end(),
                  [](const Skipped& s) { return s.kind == SkipKind::not_matched; });
  return only_unmatched ? NothingToDo::only_unmatched : NothingToDo::no;
}

namespace {

// A live server's worker, said as such in the plan (a whole-GPU free signals it too):
// "live: its server pid N is alive" when its instance's launcher (else its parent)
// lives; "" for an orphaned or detached holder, or one whose parent is init.
std::string live_server_text(const inventory::Inventory& inv, const proc::Holder& h) {
  if (h.orphaned || h.detached) return "";
  if (const auto* in = inventory::find_instance(inv.instances, h.instance);
      in && in->launcher_alive && in->launcher_pid != 0 && in->launcher_pid != h.id.pid)
    return fmt::format("live: its server pid {} is alive", in->launcher_pid);
  if (h.ppid > 1) return fmt::format("live: its parent pid {} is alive", h.ppid);
  return "";
}

}  // namespace

Plan make_plan(const inventory::Inventory& inv, const Selection& sel, const CallerContext& ctx) {
  // 1. Every GPU holder, merged across GPUs; the candidates are those that use a
  //    selected GPU.
  const Holders held = holders_of(inv, sel);

  // 2. Protection, permission, filters.
  Plan plan;
  std::map<std::string, EndedRun> ended_runs;
  for (const auto& [id, c] : held) {
    if (c.selected.empty()) continue;
    const auto& h = *c.holder;
    if (auto left = left_alone_by(c, sel, ctx)) {
      plan.skipped.push_back(Skipped{h.id, h.comm, c.gpus, c.bytes, left->kind, std::move(left->reason)});
    } else {
      // Signalling it frees all it holds: what it holds outside the selection is said.
      std::string why = holds_text(c.selected_bytes, c.bytes_known, c.selected);
      if (auto others = c.unselected(); !others.empty())
        why += fmt::format("; it also {}, not selected: signalling it frees that too",
                           holds_text(c.bytes - c.selected_bytes, c.bytes_known, others));
      if (h.keeper != proc::KeeperClass::none)
        why += fmt::format("; {}: it {}", proc::enum_name(h.keeper), h.keeper_reason);
      if (h.orphaned)
        why += fmt::format("; {}: {}", proc::orphan_verdict(h.provenance), h.orphan_reason);
      if (auto live = live_server_text(inv, h); !live.empty()) why += "; " + live;
      if (h.zombie_leader) why += "; zombie leader with live threads";
      plan.targets.push_back(Target{h.id, h.comm, h.cmdline, h.user, c.gpus, c.bytes, why});
      plan.targets.back().instance = h.instance;
      plan.targets.back().pinned_host_bytes = h.pinned_host_bytes;
      plan.targets.back().lineage = lineage_of(h);
      if (h.run_gone) {
        EndedRun& run = ended_runs.try_emplace(h.run_id, EndedRun{h.sid, false}).first->second;
        run.in_cgroup = run.in_cgroup || h.run_in_cgroup;
      }
    }
  }

  // An exact set of processes (Filters::ids, the reaper's) is the whole plan: nothing
  // joins it for its relation to a target.
  if (!sel.ids.empty()) return plan;
  add_descendants(plan, held, sel, ctx);
  add_ended_runs(plan, ended_runs, held, sel, ctx);
  for (const auto& in : inv.instances)
    if (std::any_of(in.members.begin(), in.members.end(),
                    [&](const inventory::InstanceMember& m) { return plan.contains(m.id); }))
      plan.instances.push_back(in);
  return plan;
}

std::size_t add_processes_matching(Plan& plan, const std::vector<Filters>& any_of,
                                   const CallerContext& ctx, const std::string& why) {
  std::size_t added = 0;
  for (const auto& e : ctx.table) {
    // One verdict per process: a holder the plan left alone stays left alone.
    if (e.kernel_thread || e.state == 'Z' || plan.contains(e.id) || plan.left_alone(e.id)) continue;
    if (protection_reason(e.id.pid, e.comm, false, ctx, false)) continue;
    if (ctx.euid != 0 && e.uid != ctx.euid) continue;
    std::string cmdline = proc::read_cmdline(e.id.pid, ctx.proc_root);
    proc::Holder p = describe(e, cmdline, ctx.proc_root);
    EnvironOnce environ(p, ctx.proc_root);
    bool matched = std::any_of(any_of.begin(), any_of.end(), [&](const Filters& f) {
      bool applied = false;
      return respawner_passes(p, f, environ, applied) && applied;
    });
    if (!matched) continue;
    plan.targets.push_back(Target{e.id,
                                  e.comm,
                                  cmdline.empty() ? "[" + e.comm + "]" : cmdline,
                                  proc::user_name(e.uid),
                                  {},
                                  0,
                                  why});
    ++added;
  }
  return added;
}

Plan orphans_plan(const inventory::Inventory& inv, const std::string& proc_root) {
  Selection sel;
  sel.orphans_only = true;
  bool any = false;
  for (const auto& view : inv.gpus) {
    sel.gpus.push_back(view.info.id);
    for (const auto& gh : view.holders)
      any = any || (gh.uses_gpu && proc::stray(gh.holder));
  }
  if (!any) return {};
  return make_plan(inv, sel, CallerContext::current(proc_root));
}

bool include_respawner(Plan& plan, const proc::ProcessEntry& parent, const Selection& sel,
                       const CallerContext& ctx, int respawns) {
  if (plan.contains(parent.id)) return false;
  bool named = sel.names(parent.id.pid);
  if (protection_reason(parent.id.pid, parent.comm, parent.kernel_thread, ctx, named)) return false;
  if (ctx.euid != 0 && parent.uid != ctx.euid) return false;
  std::string cmdline = proc::read_cmdline(parent.id.pid, ctx.proc_root);
  // With a narrowed selection the parent must match it too (its own filters; a
  // supervisor is by nature not an orphan, so --orphans alone does not exclude it).
  if (!named && !sel.pids.empty()) return false;
  if (sel.user && parent.uid != *sel.user) return false;
  if (sel.match && !sel.match->search(cmdline)) return false;
  if (!respawner_matches(parent, cmdline, sel, ctx.proc_root)) return false;
  Target t{parent.id,
           parent.comm,
           cmdline,
           proc::user_name(parent.uid),
           {},
           0,
           fmt::format("keeps respawning GPU holders ({} so far)", respawns)};
  // A parent that holds a GPU itself, left alone as a holder (not orphaned under
  // --orphans): its verdict changes, it is not in both lists.
  auto s = std::find_if(plan.skipped.begin(), plan.skipped.end(),
                        [&](const Skipped& x) { return x.id == parent.id; });
  if (s != plan.skipped.end()) {
    t.gpus = s->gpus;
    t.gpu_bytes = s->gpu_bytes;
    plan.skipped.erase(s);
  }
  // First in the round: a supervisor signalled after its worker can fork the next worker
  // in between (a bash retry loop reaps the child and forks again before its own SIGTERM
  // arrives), and that worker outlives the round (Safety.RetryLoopIsStoppedOnly...).
  plan.targets.insert(plan.targets.begin(), std::move(t));
  return true;
}

}  // namespace gpureap::reclaim

namespace gpureap::reclaim {

std::vector<gpu::DeviceId> target_gpus(const inventory::Inventory& inv, const Selection& sel,
                                       const CallerContext& ctx) {
  std::vector<gpu::DeviceId> out;
  for (const auto& [id, c] : holders_of(inv, sel)) {
    if (c.selected.empty() || left_alone_by(c, sel, ctx)) continue;
    for (gpu::DeviceId g : c.gpus)
      if (std::find(out.begin(), out.end(), g) == out.end()) out.push_back(g);
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace gpureap::reclaim
