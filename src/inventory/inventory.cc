#include "inventory/inventory.h"

#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <set>

#include "gpu/mig.h"
#include "gpu/vendor.h"
#include "util/units.h"

namespace gpureap::inventory {
namespace {

// CI-level sharing (gpu/mig.h, shares_memory): the compute instances of one GPU instance
// report its memory, so what a sibling compute instance's holders use is explained on
// each of them; without this, 0/gi1/ci0 would show 0/gi1/ci1's memory as held by no one
// ("driver-held", fit only for a reset) while ci1's holder runs.
void explain_shared_memory(Inventory& inv) {
  for (auto& view : inv.gpus) {
    if (view.unattributed_bytes == 0 || !view.info.memory) continue;
    std::uint64_t siblings = 0;
    for (const auto& other : inv.gpus)
      if (gpu::shares_memory(view.info, other.info)) siblings += other.attributed_bytes;
    if (siblings == 0) continue;
    view.unattributed_bytes = view.unattributed_bytes > siblings ? view.unattributed_bytes - siblings : 0;
    if (view.unattributed_bytes <= freed_tolerance(view.info.memory->total)) {
      view.unexplained = Unexplained::none;
      view.unexplained_detail.clear();
    }
  }
}

}  // namespace

namespace {

constexpr ino_t kProcPidInitIno = 0xEFFFFFFCU;  // include/linux/proc_ns.h

std::string pid_list(const std::vector<gpu::GpuProcess>& procs) {
  std::string out;
  for (std::size_t i = 0; i < procs.size() && i < 8; ++i)
    out += fmt::format("{}{}", i ? ", " : "", procs[i].pid);
  if (procs.size() > 8) out += fmt::format(" and {} more", procs.size() - 8);
  return out;
}

// Without NVML we still know the device nodes: one view per GPU minor that some
// process holds, so the /proc-only view keeps the "who holds which GPU" answer.
std::vector<gpu::GpuInfo> gpus_from_nodes(const std::vector<proc::Holder>& holders) {
  std::set<unsigned> minors;
  for (const auto& h : holders) minors.insert(h.gpu_minors.begin(), h.gpu_minors.end());
  std::vector<gpu::GpuInfo> gpus;
  for (unsigned m : minors) {
    gpu::GpuInfo info;
    info.id = gpu::DeviceId{m};  // without NVML the minor stands in for the index
    info.minor = m;
    gpus.push_back(std::move(info));
  }
  return gpus;
}

void classify_unexplained(GpuView& view, bool host_ns) {
  const auto amount = format_bytes(view.unattributed_bytes);
  // The vendor's words: NVML, or amdgpu's sysfs (KFD's process list) on AMD.
  const std::string_view driver = gpu::driver_interface(gpu::vendor_of(view.info.uuid));
  if (!host_ns) {
    view.unexplained = Unexplained::outside_namespace;
    view.unexplained_detail = fmt::format(
        "{} is held by processes this PID namespace cannot see (gpureap runs inside a container; "
        "{} hides other namespaces' processes). Run gpureap on the host.",
        amount, driver);
  } else if (!view.source_unseen.empty()) {
    view.unexplained = Unexplained::outside_namespace;
    view.unexplained_detail = fmt::format(
        "{} lists pid {} on this GPU, but no such process is visible in /proc: it lives in "
        "another "
        "PID namespace (container, LXC guest) or exited a moment ago. Look on the host, or re-run "
        "in a second.",
        driver, pid_list(view.source_unseen));
  } else if (!view.info.processes_known) {
    view.unexplained = Unexplained::unknown;
    view.unexplained_detail =
        fmt::format("{} not attributed: {} gave no process list for this GPU.", amount, driver);
  } else {
    // No process the driver lists holds it anywhere. A process with the node open that the
    // driver does not list (nvidia-persistenced, DCGM's nv-hostengine, nvidia-smi, a
    // monitor) is a client: the driver lists every process with a context, and memory is a
    // context's (W4-04). Whether the driver is still releasing it (falling, or within the
    // budget) or holds it for good takes time to tell: the release model (release_model.h)
    // alone decides, from this look's readings and its looker's earlier ones.
    view.unexplained = Unexplained::no_holder;
    view.unexplained_detail = fmt::format(
        "{} above the idle baseline with no process holding it: it may still be releasing "
        "(`gpureap wait --gpu {}` tells).",
        amount, view.info.id);
  }
}

// Users first (by bytes, descending), then openers.
void order_holders(GpuView& view) {
  std::stable_sort(view.holders.begin(), view.holders.end(),
                   [](const GpuHolder& a, const GpuHolder& b) {
                     if (a.uses_gpu != b.uses_gpu) return a.uses_gpu;
                     return a.gpu_bytes.value_or(0) > b.gpu_bytes.value_or(0);
                   });
}

// A process NVML lists on this GPU that is dead: a pure zombie (no live thread), which
// holds nothing itself.
bool dead_owner(const GpuHolder& gh) {
  const proc::Holder& h = gh.holder;
  return h.found_by.contains(proc::FoundBy::source) && h.state == 'Z' && !h.zombie_leader;
}

// Forked from dead `owner` (started at `owner_start` when known): its process group or
// session is the owner's (a pid stays unused while a group or session of that number lives,
// so the number is the owner's), or the agent saw the owner die as its parent.
bool forked_from(const proc::Holder& h, pid_t owner, std::optional<std::uint64_t> owner_start) {
  if (owner_start && h.id.start_time < *owner_start) return false;
  return h.pgid == owner || h.sid == owner || h.dead_parent == owner;
}

// Keepers (docs/orphans.md): memory NVML names a dead owner for (a zombie, or a pid this
// /proc does not show, in the host PID namespace) is kept by the live processes that
// inherited the owner's device files: openers NVML lists nowhere, forked from the owner.
// They become its holders, the first credited with its bytes (the others with none, so
// that nothing is counted twice), and the dead owner is no longer shown holding it.
void attribute_inheritors(GpuView& view, bool host_ns) {
  struct Owner {
    pid_t pid;
    std::optional<std::uint64_t> start;
    std::optional<std::uint64_t> bytes;
    std::string what;  // "dead pid 1667 (python3, a zombie)"
  };
  std::vector<Owner> owners;
  for (const GpuHolder& gh : view.holders)
    if (dead_owner(gh))
      owners.push_back({gh.holder.id.pid, gh.holder.id.start_time, gh.gpu_bytes,
                        fmt::format("dead pid {} ({}, a zombie)", gh.holder.id.pid,
                                    gh.holder.comm)});
  if (host_ns)
    for (const gpu::GpuProcess& p : view.source_unseen)
      owners.push_back({static_cast<pid_t>(p.pid), std::nullopt, p.used_bytes,
                        fmt::format("dead pid {}", p.pid)});
  for (const Owner& owner : owners) {
    std::vector<GpuHolder*> keepers;
    for (GpuHolder& gh : view.holders) {
      const proc::Holder& h = gh.holder;
      const bool live = h.state != 'Z' || h.zombie_leader;
      if (gh.uses_gpu && live && !h.found_by.contains(proc::FoundBy::source) &&
          h.keeper == proc::KeeperClass::none && forked_from(h, owner.pid, owner.start))
        keepers.push_back(&gh);
    }
    if (keepers.empty()) continue;
    const std::string amount = owner.bytes ? format_bytes(*owner.bytes) : "the memory";
    const std::string others =
        keepers.size() > 1 ? fmt::format(" with {} other processes", keepers.size() - 1) : "";
    for (std::size_t i = 0; i < keepers.size(); ++i) {
      proc::Holder& h = keepers[i]->holder;
      h.keeper = proc::KeeperClass::inheritor;
      // Known by what the agent saw (the owner died as its parent), else by one look.
      h.keeper_provenance = h.dead_parent == owner.pid ? proc::Provenance::witnessed
                                                       : proc::Provenance::inferred;
      h.kept_owner = owner.pid;
      h.keeper_reason = fmt::format("keeps {} of {}{}, whose device files it inherited", amount,
                                    owner.what, others);
      // One figure per memory: the first keeper's; the others keep the same bytes.
      keepers[i]->gpu_bytes = i == 0 ? owner.bytes : std::optional<std::uint64_t>(0);
    }
    std::erase_if(view.holders, [&](const GpuHolder& gh) {
      return dead_owner(gh) && gh.holder.id.pid == owner.pid;
    });
    std::erase_if(view.source_unseen,
                  [&](const gpu::GpuProcess& p) { return static_cast<pid_t>(p.pid) == owner.pid; });
  }
}

// Importers (docs/orphans.md): NVML lists a process with the bytes it imported from an
// exporter that died, and nothing one look reads says so; a witness record of the agent's
// (import_witness.h) does: the same process, on this GPU, whose figure still holds the
// bytes it grew by when the exporter died.
void attribute_importers(GpuView& view, const gpu::GpuInfo& info,
                         const std::vector<ImportRecord>& imports) {
  for (GpuHolder& gh : view.holders) {
    proc::Holder& h = gh.holder;
    if (h.keeper != proc::KeeperClass::none || !h.found_by.contains(proc::FoundBy::source)) continue;
    auto it = std::find_if(imports.begin(), imports.end(), [&](const ImportRecord& r) {
      return r.importer == h.id && r.gpu_uuid == info.uuid;
    });
    if (it == imports.end() || gh.gpu_bytes.value_or(0) + kImportSlack < it->bytes) continue;
    h.keeper = proc::KeeperClass::importer;
    // The exporter's death is witnessed; that these bytes are its memory is not: it rests
    // on a growth of about its size at the same look (NVML says nothing more, nor does the
    // kernel), and a live process allocating that much then would look the same. So an
    // inference: named, and offered to a person (free --orphans), never acted on unattended.
    h.keeper_provenance = proc::Provenance::inferred;
    h.kept_owner = it->exporter.pid;
    h.keeper_reason = fmt::format("keeps {} of dead pid {} ({}), whose memory it imported (CUDA IPC)",
                                  format_bytes(it->bytes), it->exporter.pid, it->exporter_comm);
  }
}

// The one place a keeper is decided: inheritors of a dead owner's device files, then
// importers of a dead exporter's memory.
void attribute_keepers(GpuView& view, const gpu::GpuInfo& info, bool host_ns,
                       const std::vector<ImportRecord>& imports) {
  attribute_inheritors(view, host_ns);
  attribute_importers(view, info, imports);
}

// Clients (a monitor: nvitop, DCGM, persistenced): openers NVML lists on no GPU that keep
// nothing, on a GPU whose process list NVML gave and that has no dead owner left whose
// keeper may be one of them. The driver lists every process with a context and memory is
// a context's, so a client holds none of the GPU's memory, explained or not (W4-04: the
// release model judges memory no listed process holds, whoever keeps the node open).
// Not users: no whole-GPU free or reaper signals them; --pid names one.
void mark_clients(GpuView& view, bool source_ok) {
  if (!source_ok || !view.info.processes_known || !view.source_unseen.empty() ||
      std::any_of(view.holders.begin(), view.holders.end(), dead_owner))
    return;
  for (GpuHolder& gh : view.holders)
    if (gh.uses_gpu && !gh.gpu_bytes && gh.holder.keeper == proc::KeeperClass::none &&
        !gh.holder.found_by.contains(proc::FoundBy::source) &&
        gh.holder.age_seconds >= kClientMinAgeSeconds) {
      gh.uses_gpu = false;
      gh.client = true;
    }
}

}  // namespace

std::string_view enum_name(Unexplained u) {
  switch (u) {
    case Unexplained::none:
      return "none";
    case Unexplained::outside_namespace:
      return "outside_namespace";
    case Unexplained::releasing:
      return "releasing";
    case Unexplained::driver_held:
      return "driver_held";
    case Unexplained::unknown:
      return "unknown";
    case Unexplained::no_holder:
      return "no_holder";
  }
  return {};
}

std::string_view enum_name(Busy b) {
  switch (b) {
    case Busy::none:
      return "none";
    case Busy::ghost:
      return "ghost";
    case Busy::outside_namespace:
      return enum_name(Unexplained::outside_namespace);
    case Busy::orphan_computing:
      return "orphan_computing";
  }
  return {};
}

namespace {

bool busy_reading(unsigned percent) { return percent >= kBusyThreshold; }

std::string sample_list(const std::vector<unsigned>& samples) {
  std::string out;
  for (std::size_t i = 0; i < samples.size(); ++i) out += fmt::format("{}{}%", i ? ", " : "", samples[i]);
  return out;
}

}  // namespace

bool computes_here(const GpuHolder& h) {
  // Compute needs a context, and NVML lists every process with one: an opener it
  // does not list (a monitoring agent, an inherited descriptor) computes nothing.
  return h.uses_gpu && h.holder.found_by.contains(proc::FoundBy::source);
}

std::string client_list(const GpuView& view) {
  std::string clients;
  for (const GpuHolder& h : view.holders)
    if (!computes_here(h))
      clients += fmt::format("{}pid {} ({})", clients.empty() ? "" : ", ", h.holder.id.pid,
                             h.holder.comm);
  return clients;
}

bool busy_without_live_user(const GpuView& view) {
  if (!view.info.utilization_gpu || !busy_reading(*view.info.utilization_gpu)) return false;
  if (!view.info.processes_known) return false;  // no process list: nothing to reason with
  return std::all_of(view.holders.begin(), view.holders.end(),
                     [](const GpuHolder& h) { return !computes_here(h) || h.holder.orphaned; });
}

void classify_busy(Inventory& inv, const std::map<gpu::DeviceId, std::vector<unsigned>>& samples,
                   unsigned required) {
  for (GpuView& view : inv.gpus) {
    view.busy = {};
    if (!busy_without_live_user(view)) continue;
    auto it = samples.find(view.info.id);
    std::vector<unsigned> window =
        it != samples.end() ? it->second : std::vector<unsigned>{*view.info.utilization_gpu};
    if (window.size() > required) window.erase(window.begin(), window.end() - required);
    const bool sustained =
        window.size() >= required && std::all_of(window.begin(), window.end(), busy_reading);
    const bool any_user = std::any_of(view.holders.begin(), view.holders.end(), computes_here);
    const std::string memory =
        view.info.memory ? format_bytes(view.info.memory->used) : std::string("unknown");
    if (any_user) {
      // Orphans using the GPU: busy is expected, whatever the window says.
      view.busy.kind = Busy::orphan_computing;
      view.busy.samples = std::move(window);
      view.busy.detail = fmt::format(
          "SM utilization {} while the only processes using this GPU are orphans: they are still "
          "computing. `gpureap free --orphans` ends them.",
          sample_list(view.busy.samples));
      continue;
    }
    if (!sustained) continue;  // a brief spike, or a process that just exited
    view.busy.samples = std::move(window);
    if (!inv.host_pid_namespace || !view.source_unseen.empty()) {
      view.busy.kind = Busy::outside_namespace;
      view.busy.detail = fmt::format(
          "SM utilization {} with no process this PID namespace can see: the GPU is used from "
          "another PID namespace (a container, or the host). Look on the host.",
          sample_list(view.busy.samples));
      continue;
    }
    view.busy.kind = Busy::ghost;
    // Openers NVML does not list compute nothing, but a reset needs them gone.
    std::string clients = client_list(view);
    if (!clients.empty())
      clients = fmt::format(" Clients with the device open (monitoring agents, most likely), "
                            "which must close it before a reset: {}.",
                            clients);
    const char* persistence = !view.info.persistence_mode ? "unknown"
                              : *view.info.persistence_mode ? "on"
                                                            : "off";
    view.busy.detail = fmt::format(
        "SM utilization {} over the window with {} used and no process using the GPU anywhere "
        "(persistence mode {}): a ghost GPU, still running work of a killed process. New jobs "
        "here run slowly. Next: a GPU reset (`gpureap free --reset --gpu {}`: needs root, no "
        "process with the device open and persistence mode off), or a reboot.{}",
        sample_list(view.busy.samples), memory, persistence, view.info.id, clients);
  }
}

std::uint64_t GpuView::orphaned_bytes() const {
  std::uint64_t bytes = 0;
  for (const auto& h : holders)
    if (h.uses_gpu && h.holder.orphaned) bytes += h.gpu_bytes.value_or(0);
  return bytes;
}

bool GpuView::at_baseline() const {
  if (!info.memory) return false;
  return info.memory->used <= baseline.bytes + freed_tolerance(info.memory->total);
}

// A state that is an Unexplained class or a Busy kind has that value's word: one
// spelling per value.
std::string_view enum_name(GpuState s) {
  switch (s) {
    case GpuState::not_measured:
      return "not_measured";
    case GpuState::ghost:
      return enum_name(Busy::ghost);
    case GpuState::free:
      return "free";
    case GpuState::held:
      return "held";
    case GpuState::releasing:
      return enum_name(Unexplained::releasing);
    case GpuState::driver_held:
      return enum_name(Unexplained::driver_held);
    case GpuState::outside_namespace:
      return enum_name(Unexplained::outside_namespace);
    case GpuState::unknown:
      return enum_name(Unexplained::unknown);
    case GpuState::no_holder:
      return enum_name(Unexplained::no_holder);
  }
  return {};
}

GpuState gpu_state(const GpuView& view) {
  if (!view.info.memory) return GpuState::not_measured;
  if (view.busy.kind == Busy::ghost) return GpuState::ghost;
  switch (view.unexplained) {
    case Unexplained::none:
      // Free counts users, not openers: a monitoring client with the node open holds
      // nothing, a process NVML lists here (or one that may hold it unlisted) does.
      return view.at_baseline() && std::none_of(view.holders.begin(), view.holders.end(),
                                                [](const GpuHolder& h) { return h.uses_gpu; })
                 ? GpuState::free
                 : GpuState::held;
    case Unexplained::releasing:
      return GpuState::releasing;
    case Unexplained::driver_held:
      return GpuState::driver_held;
    case Unexplained::outside_namespace:
      return GpuState::outside_namespace;
    case Unexplained::unknown:
      return GpuState::unknown;
    case Unexplained::no_holder:
      return GpuState::no_holder;
  }
  return GpuState::unknown;
}

bool in_host_pid_namespace(const std::string& proc_root) {
  struct stat st {};
  if (::stat((proc_root + "/self/ns/pid").c_str(), &st) != 0) return true;  // no ns support: host
  return st.st_ino == kProcPidInitIno;
}

Inventory build_inventory(gpu::GpuSnapshot snapshot, proc::ScanResult scan,
                          BaselineStore& baselines, bool host_pid_namespace,
                          const std::vector<gpu::MemoryReading>& later_used,
                          const std::vector<ImportRecord>& imports) {
  Inventory inv;
  inv.source_state = snapshot.state;
  inv.source_problem = std::move(snapshot.problem);
  inv.driver_version = std::move(snapshot.driver_version);
  inv.cuda_version = std::move(snapshot.cuda_version);
  inv.host_pid_namespace = host_pid_namespace;
  inv.as_root = ::geteuid() == 0;
  inv.problems = std::move(scan.problems);
  inv.processes_scanned = scan.processes_scanned;

  // A GPU that failed or hung is still listed (marked, without memory), so the
  // other GPUs keep NVML's view: one lost GPU does not blind the rest.
  const bool source_ok = gpu::lists_gpus(snapshot.state);
  auto gpus = source_ok ? std::move(snapshot.gpus) : gpus_from_nodes(scan.holders);

  std::map<pid_t, std::size_t> by_pid;
  for (std::size_t i = 0; i < scan.holders.size(); ++i) by_pid[scan.holders[i].id.pid] = i;
  std::set<std::uint32_t> source_listed;
  for (const auto& g : gpus)
    for (const auto& p : g.processes) source_listed.insert(p.pid);
  std::vector<bool> placed(scan.holders.size(), false);

  for (auto& info : gpus) {
    GpuView view;
    std::set<pid_t> on_this_gpu;
    // 1. Processes NVML lists here, confirmed by /proc (NVML's pids are hints only).
    for (const auto& p : info.processes) {
      auto it = by_pid.find(static_cast<pid_t>(p.pid));
      if (it == by_pid.end()) {
        view.source_unseen.push_back(p);
        continue;
      }
      GpuHolder gh{scan.holders[it->second], p.used_bytes, true};
      gh.sm_percent = p.sm_percent;
      gh.holder.found_by.insert(proc::FoundBy::source);
      view.holders.push_back(std::move(gh));
      on_this_gpu.insert(it->first);
      placed[it->second] = true;
    }
    // 2. Processes with this GPU's node open. CUDA opens every visible GPU's node,
    //    so one NVML lists elsewhere only "has it open"; one NVML lists nowhere
    //    (an inherited descriptor, a child) may be the real holder.
    //    A MIG device shares its GPU's node: only a process holding a capability of
    //    this MIG device uses it (gpu/mig.h); one with the GPU's node alone stays an
    //    "other holder", named as a holder of the physical GPU's node only.
    if (info.minor) {
      for (std::size_t i = 0; i < scan.holders.size(); ++i) {
        const auto& h = scan.holders[i];
        if (!h.gpu_minors.contains(*info.minor) || on_this_gpu.contains(h.id.pid)) continue;
        if (info.id.mig() && !gpu::uses_mig_device(h.mig_access, *info.minor, info.id)) continue;
        bool uses = !source_ok || !source_listed.contains(static_cast<std::uint32_t>(h.id.pid));
        view.holders.push_back(GpuHolder{h, std::nullopt, uses});
        placed[i] = true;
      }
    }
    if (source_ok) attribute_keepers(view, info, inv.host_pid_namespace, imports);
    order_holders(view);
    for (const auto& gh : view.holders)
      if (gh.uses_gpu) view.attributed_bytes += gh.gpu_bytes.value_or(0);

    view.info = std::move(info);
    if (view.info.memory) {
      const auto& mem = *view.info.memory;
      view.baseline = baselines.get(view.info.uuid, mem.total, mem.used, view.attributed_bytes);
      std::uint64_t explained = view.baseline.bytes + view.attributed_bytes;
      view.unattributed_bytes = mem.used > explained ? mem.used - explained : 0;
      mark_clients(view, source_ok);
      order_holders(view);
      bool idle = view.info.processes_known && view.info.processes.empty() &&
                  std::none_of(view.holders.begin(), view.holders.end(),
                               [](const GpuHolder& h) { return h.uses_gpu; });
      if (idle) baselines.observe_idle(view.info.uuid, mem.total, mem.used);
      if (view.unattributed_bytes > freed_tolerance(mem.total)) {
        for (const auto& r : later_used)
          if (r.id == view.info.id) view.reread_used = r.used;
        classify_unexplained(view, inv.host_pid_namespace);
      }
    }
    inv.gpus.push_back(std::move(view));
  }

  for (std::size_t i = 0; i < scan.holders.size(); ++i)
    if (!placed[i]) inv.other_holders.push_back(std::move(scan.holders[i]));
  explain_shared_memory(inv);
  return inv;
}

}  // namespace gpureap::inventory
