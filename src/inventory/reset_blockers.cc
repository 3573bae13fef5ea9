#include "inventory/reset_blockers.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <map>
#include <utility>

#include "gpu/source_words.h"
#include "gpu/vendor.h"
#include "proc/proc_parse.h"

namespace gpureap::inventory {

std::string_view enum_name(BlockerClass c) {
  switch (c) {
    case BlockerClass::compute:
      return "compute";
    case BlockerClass::compute_elsewhere:
      return "compute_elsewhere";
    case BlockerClass::source_client:
      return gpu::source_words::kClient;
    case BlockerClass::driver_client:
      return "driver_client";
    case BlockerClass::gpureap_agent:
      return "gpureap_agent";
    case BlockerClass::persistence_mode:
      return "persistence_mode";
  }
  return {};
}

namespace {

// Programs that keep a GPU open without computing on it, as operators know them. The
// names are those of their executables; the kernel cuts a comm to 15 characters.
constexpr std::array<std::pair<std::string_view, std::string_view>, 11> kKnownPrograms{{
    {"nv-hostengine", "DCGM host engine"},
    {"dcgm-exporter", "DCGM exporter"},
    {"dcgmi", "DCGM command line"},
    {"nvidia-persistenced", "NVIDIA persistence daemon"},
    {"nvidia-smi", "nvidia-smi"},
    {"nvidia-device-plugin", "Kubernetes NVIDIA device plugin"},
    {"gpu-feature-discovery", "Kubernetes GPU feature discovery"},
    {"nv-fabricmanager", "NVIDIA Fabric Manager"},
    {"nvidia-fabricmanager", "NVIDIA Fabric Manager"},
    {"nvidia-mig-parted", "NVIDIA MIG partition editor"},
    {"gpureap", "gpureap"},
}};

std::string_view base_name(std::string_view path) {
  const auto slash = path.rfind('/');
  return slash == std::string_view::npos ? path : path.substr(slash + 1);
}

// What stops a process that is no GPU job of a user: its service or container, else
// the process itself. A process in an LXC guest is addressed inside it, by its pid there.
std::string stop_step(const proc::Holder& h) {
  if (auto stop = proc::container_stop_command(h.container)) return *stop;
  if (h.container.starts_with("lxc:") && h.nspid.size() > 1) {
    const std::string guest = h.container.substr(4);
    return fmt::format("kill {} inside LXC container {} (Proxmox: pct exec {} -- kill {})",
                       h.nspid.back(), guest, guest, h.nspid.back());
  }
  return fmt::format("kill {}", h.id.pid);
}

std::string node_name(const gpu::GpuInfo& info) {
  return info.minor ? gpu::device_node_path(info) : std::string("its device node");
}

// Per physical GPU, the blockers by pid (one entry per process, its strongest class).
struct Collector {
  const Inventory& inv;
  std::optional<AgentSession> agent;
  GpuBlockers out;
  std::map<pid_t, Blocker> by_pid;

  bool is_agent(const proc::Holder& h) const {
    return agent && (h.id.pid == agent->pid || h.ppid == agent->pid);
  }

  // Adds `b` or merges it into the same process's entry: the stronger class (the lower
  // value) wins; two compute entries add up their devices and bytes.
  void add(Blocker b) {
    auto [it, fresh] = by_pid.try_emplace(b.process.id.pid, b);
    if (fresh) return;
    Blocker& have = it->second;
    if (b.cls == BlockerClass::compute && have.cls == BlockerClass::compute) {
      have.devices.insert(have.devices.end(), b.devices.begin(), b.devices.end());
      gpu::normalize(have.devices);
      if (b.bytes) have.bytes = have.bytes.value_or(0) + *b.bytes;
    } else if (b.cls < have.cls) {
      have = std::move(b);
    }
  }

  Blocker process_blocker(BlockerClass cls, const proc::Holder& h) const {
    Blocker b;
    b.cls = cls;
    b.process = h;
    b.known_as = known_program(h);
    return b;
  }

  // The GPUs NVML lists `pid` on (where it computes), across the whole look.
  std::vector<gpu::DeviceId> computes_on(pid_t pid) const {
    std::vector<gpu::DeviceId> ids;
    for (const auto& v : inv.gpus)
      for (const auto& gh : v.holders)
        if (gh.holder.id.pid == pid && computes_here(gh)) ids.push_back(v.info.id);
    gpu::normalize(ids);
    return ids;
  }

  void holder_of_view(const GpuView& view, const GpuHolder& gh) {
    const proc::Holder& h = gh.holder;
    if (is_agent(h)) return;  // the agent's own entry says it
    const std::string where =
        view.info.id.mig() ? fmt::format("MIG device {}", view.info.id)
                           : fmt::format("GPU {}", view.info.id);
    // A client (GpuHolder::client) computes nowhere: it is a client of this GPU below.
    if (!gh.uses_gpu && !gh.client) {
      Blocker b = process_blocker(BlockerClass::compute_elsewhere, h);
      b.devices = computes_on(h.id.pid);
      b.what = fmt::format("computes on GPU {} and has {}'s node open (CUDA opens the node of "
                           "every GPU it may use)",
                           gpu::device_list(b.devices), where);
      b.next_step = b.known_as.empty()
                        ? fmt::format("gpureap free --pid {} (or start it with "
                                      "CUDA_VISIBLE_DEVICES without this GPU)",
                                      h.id.pid)
                        : stop_step(h);
      add(std::move(b));
      return;
    }
    const bool context = computes_here(gh) || gh.gpu_bytes.value_or(0) > 0;
    // Without NVML's process list nothing says it has no context: a compute holder,
    // unless it is a known monitoring program.
    const bool unknown_list = !view.info.processes_known && known_program(h).empty();
    if (context || unknown_list) {
      Blocker b = process_blocker(BlockerClass::compute, h);
      b.devices = {view.info.id};
      b.bytes = gh.gpu_bytes;
      b.what = context ? fmt::format("holds memory or a context on {}", where)
                       : fmt::format("has {} open (NVML gave no process list: it may compute)",
                                     where);
      // free never signals GPU infrastructure it knows by name (reclaim/plan.cc).
      b.next_step = b.known_as.empty() ? fmt::format("gpureap free --gpu {}", view.info.id)
                                       : stop_step(h);
      add(std::move(b));
      return;
    }
    Blocker b = process_blocker(BlockerClass::source_client, h);
    b.what = view.info.id.mig()
                 ? fmt::format("has a capability of {} open, no memory on it", where)
                 : fmt::format("has {} open, no memory or context on it", node_name(view.info));
    b.next_step = stop_step(h);
    add(std::move(b));
  }

  void unseen_of_view(const GpuView& view, const gpu::GpuProcess& p) {
    Blocker b;
    b.cls = BlockerClass::compute;
    b.process.id.pid = static_cast<pid_t>(p.pid);
    b.devices = {view.info.id};
    b.bytes = p.used_bytes;
    b.what = fmt::format("NVML lists it on GPU {}, but this /proc does not show it",
                         view.info.id);
    b.next_step =
        "run gpureap on the host: it lives in another PID namespace (a container), or it "
        "exited a moment ago";
    add(std::move(b));
  }

  void other_holder(const proc::Holder& h, std::optional<unsigned> minor) {
    if (is_agent(h)) return;
    const bool opens_gpu =
        minor && (h.gpu_minors.contains(*minor) ||
                  std::any_of(h.mig_access.begin(), h.mig_access.end(),
                              [&](const proc::MigAccess& a) { return a.gpu_minor == *minor; }));
    if (opens_gpu) {
      Blocker b = process_blocker(BlockerClass::source_client, h);
      b.what = out.mig_mode
                   ? fmt::format("has GPU {}'s own node open and no MIG device of it", out.gpu)
                   : fmt::format("has /dev/nvidia{} open, no memory or context on it", *minor);
      b.next_step = stop_step(h);
      add(std::move(b));
    } else if (h.gpu_minors.empty() && h.mig_access.empty()) {
      Blocker b = process_blocker(BlockerClass::driver_client, h);
      b.what = "has nvidiactl/nvidia-uvm open and no GPU node: the driver may count it as a "
               "client of any GPU";
      b.next_step = stop_step(h);
      add(std::move(b));
    }
  }
};

void note_unknowns(const Inventory& inv, const std::vector<const GpuView*>& views,
                   GpuBlockers& g) {
  if (!gpu::lists_gpus(inv.source_state)) {
    g.unknowns.push_back(fmt::format("NVML is unusable ({}): contexts and persistence mode "
                                     "are unknown",
                                     gpu::enum_name(inv.source_state)));
  } else {
    for (const GpuView* v : views) {
      if (!v->info.problem.empty())
        g.unknowns.push_back(fmt::format("GPU {}: {}", v->info.id, v->info.problem));
      else if (!v->info.processes_known)
        g.unknowns.push_back(fmt::format("NVML gave no process list for GPU {}", v->info.id));
    }
    if (std::none_of(views.begin(), views.end(),
                     [](const GpuView* v) { return v->info.persistence_mode.has_value(); }))
      g.unknowns.push_back("persistence mode is unknown (NVML did not say)");
  }
  if (!inv.host_pid_namespace)
    g.unknowns.push_back(
        "gpureap runs inside a PID namespace: clients in other namespaces are not seen");
}

GpuBlockers blockers_of(const Inventory& inv, gpu::DeviceId parent,
                        const std::optional<AgentSession>& agent) {
  std::vector<const GpuView*> views;
  for (const auto& v : inv.gpus)
    if (v.info.id.parent() == parent) views.push_back(&v);
  Collector c{inv, agent, {}, {}};
  GpuBlockers& g = c.out;
  g.gpu = parent;
  std::optional<unsigned> minor;
  std::optional<bool> persistence;
  for (const GpuView* v : views) {
    if (v->info.id.mig()) {
      g.mig_mode = true;
      g.mig_devices.push_back(v->info.id);
    }
    g.mig_mode = g.mig_mode || v->info.mig_mode;
    if (g.uuid.empty()) g.uuid = v->info.id.mig() ? v->info.parent_uuid : v->info.uuid;
    if (g.pci_bus_id.empty()) g.pci_bus_id = v->info.pci_bus_id;
    if (!minor) minor = v->info.minor;
    if (v->info.persistence_mode) persistence = persistence.value_or(false) || *v->info.persistence_mode;
  }

  for (const GpuView* v : views) {
    for (const auto& gh : v->holders) c.holder_of_view(*v, gh);
    for (const auto& p : v->source_unseen) c.unseen_of_view(*v, p);
  }
  for (const auto& h : inv.other_holders) c.other_holder(h, minor);

  for (auto& [pid, b] : c.by_pid) g.blockers.push_back(std::move(b));
  if (agent) {
    Blocker b;
    b.cls = BlockerClass::gpureap_agent;
    b.process.id.pid = agent->pid;
    b.process.comm = "gpureap";
    b.known_as = "the agent, gpureap watch";
    b.what = "keeps an NVML session open, a client of every GPU";
    // docs/watch.md, "Letting go of NVML for a GPU reset".
    b.next_step = fmt::format(
        "none for gpureap free --reset (it asks the agent to let go); else kill -USR1 {} (lets "
        "go of NVML for 2 minutes; under systemd: systemctl kill -s USR1 --kill-whom=main "
        "gpureap-watch)",
        agent->pid);
    g.blockers.push_back(std::move(b));
  }
  if (persistence.value_or(false)) {
    Blocker b;
    b.cls = BlockerClass::persistence_mode;
    b.what = "persistence mode is on and counts as a client";
    b.next_step = fmt::format("nvidia-smi -pm 0 -i {}", g.pci_bus_id.empty()
                                                             ? gpu::device_text(parent)
                                                             : g.pci_bus_id);
    g.blockers.push_back(std::move(b));
  }
  std::stable_sort(g.blockers.begin(), g.blockers.end(), [](const Blocker& a, const Blocker& b) {
    if (a.cls != b.cls) return a.cls < b.cls;
    return a.process.id.pid < b.process.id.pid;
  });
  note_unknowns(inv, views, g);
  return std::move(c.out);
}

}  // namespace

std::string known_program(const proc::Holder& h) {
  const std::string_view started_as = h.argv.empty() ? std::string_view{} : base_name(h.argv[0]);
  for (const auto& [name, what] : kKnownPrograms)
    if (h.comm == name || h.comm == name.substr(0, 15) || started_as == name)
      return std::string(what);
  return {};
}

std::vector<GpuBlockers> find_reset_blockers(const Inventory& inv,
                                             std::optional<AgentSession> agent) {
  std::vector<GpuBlockers> out;
  std::vector<gpu::DeviceId> seen;
  for (const auto& v : inv.gpus) {
    const gpu::DeviceId parent = v.info.id.parent();
    if (gpu::contains(seen, parent)) continue;
    seen.push_back(parent);
    out.push_back(blockers_of(inv, parent, agent));
  }
  return out;
}

std::optional<GpuBlockers> reset_blockers_of(const Inventory& inv, gpu::DeviceId gpu,
                                             std::optional<AgentSession> agent) {
  const gpu::DeviceId parent = gpu.parent();
  if (std::none_of(inv.gpus.begin(), inv.gpus.end(),
                   [&](const GpuView& v) { return v.info.id.parent() == parent; }))
    return std::nullopt;
  return blockers_of(inv, parent, agent);
}

}  // namespace gpureap::inventory
