// Prometheus text exposition of the inventory (docs/metrics.md lists every series).
// Rules this file keeps, from the exposition format and the naming guide
// (../shared/reference/cluster-and-exporters.md §2):
//  - each metric's HELP and TYPE come once, right before its samples, and all of
//    its samples form one group: a Family is opened, filled, and never reopened;
//  - a label gpureap does not know is left out rather than given "" (Prometheus
//    treats an empty label as an absent one, so "" would only look different);
//  - a figure gpureap does not know is not exported, never exported as 0: a GPU
//    without an NVML memory reading has no byte series at all;
//  - label values that came from processes are made visible (report/terminal_text)
//    and bounded before they are escaped, so the text stays UTF-8 and small.

#include "report/metrics.h"

#include <fmt/format.h>

#include <string_view>
#include <utility>
#include <vector>

#include "gpu/source_words.h"
#include "gpu/mig.h"
#include "gpu/vendor.h"
#include "inventory/events.h"
#include "report/terminal_text.h"
#include "util/enum_names.h"

namespace gpureap::report {
namespace {

// Label values from processes (comm, user) may be anything a local user chose.
constexpr std::size_t kMaxLabelBytes = 128;
// Per-holder series are opt-in and still bounded: the largest holders of a GPU.
constexpr std::size_t kMaxHolderSeriesPerGpu = 64;

// Every class of memory no process explains (all but none), from the enum's one table.
const std::vector<inventory::Unexplained>& unattributed_classes() {
  static const std::vector<inventory::Unexplained> classes = [] {
    auto all = enum_values<inventory::Unexplained>();
    std::erase(all, inventory::Unexplained::none);
    return all;
  }();
  return classes;
}

constexpr std::array<std::string_view, 3> kFreeResults{"freed", "held", "nothing"};

using Labels = std::vector<std::pair<std::string_view, std::string>>;

// Exposition escaping of a label value: backslash, double quote, line feed.
std::string escape_label_value(std::string_view raw) {
  std::string value = terminal_text(raw, kMaxLabelBytes);
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '"')
      out += "\\\"";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
}

std::string number(double v) {
  return fmt::format("{}", v);
}

// Builds the text one metric family at a time.
class Exposition {
 public:
  void family(std::string_view name, std::string_view type, std::string_view help) {
    name_ = name;
    out_ += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
  }

  // A sample of the open family; `suffix` is "_bucket" and the like for histograms.
  void sample(const Labels& labels, std::string_view value, std::string_view suffix = {}) {
    out_ += name_;
    out_ += suffix;
    bool first = true;
    for (const auto& [key, v] : labels) {
      if (v.empty()) continue;  // unknown: left out (see the file comment)
      out_ += first ? "{" : ",";
      first = false;
      out_ += fmt::format("{}=\"{}\"", key, escape_label_value(v));
    }
    if (!first) out_ += "}";
    out_ += ' ';
    out_ += value;
    out_ += '\n';
  }
  void sample(const Labels& labels, std::uint64_t value) { sample(labels, std::to_string(value)); }

  std::string take() { return std::move(out_); }

 private:
  std::string out_;
  std::string name_;
};

Labels gpu_labels(const inventory::Inventory& inv, const inventory::GpuView& g) {
  // Without NVML the views come from device nodes: their index is the minor, not
  // NVML's index, so `gpu` would join with the wrong dcgm-exporter series.
  // A MIG device joins dcgm-exporter's series as they are labelled there: `gpu` the
  // physical GPU's index, GPU_I_ID its GPU instance, GPU_I_PROFILE its profile; its
  // own uuid is the MIG UUID. A whole GPU has no GPU_I_* label (empty: left out).
  bool index_known = gpu::lists_gpus(inv.source_state);
  const gpu::DeviceId& id = g.info.id;
  return {{"gpu", index_known ? std::to_string(id.index) : std::string()},
          {"uuid", g.info.uuid},
          {"pci_bus_id", g.info.pci_bus_id},
          {"minor", g.info.minor ? std::to_string(*g.info.minor) : std::string()},
          // The vendor (issue 39), from the UUID's form: left out with the UUID (a GPU
          // known by its device node alone while the driver does not answer).
          {"vendor", g.info.uuid.empty()
                         ? std::string()
                         : std::string(gpu::enum_name(gpu::vendor_of(g.info.uuid)))},
          {"GPU_I_ID", id.gi ? std::to_string(*id.gi) : std::string()},
          {"GPU_I_PROFILE", gpu::mig_profile(g.info)}};
}

Labels with(Labels labels, std::string_view key, std::string value) {
  labels.emplace_back(key, std::move(value));
  return labels;
}

bool gpu_up(const inventory::GpuView& g) {
  return g.info.problem.empty() && !g.info.hung && g.info.memory.has_value();
}

// Mutually exclusive, so that sum() over `kind` is the number of holders.
// The lineage verdict first, so that `orphaned` here is what --check and the events
// call a leak: a zombie leader that is orphaned counts as orphaned, one whose parent
// lives (or that is detached) as zombie_leader, a mark and not a leak (docs/orphans.md).
std::string_view holder_kind(const proc::Holder& h) {
  if (h.orphaned) return "orphaned";
  if (h.keeper != proc::KeeperClass::none) return "keeper";  // of a dead owner's memory
  if (h.zombie_leader) return "zombie_leader";
  return "live";
}

// What each GPU is, and whether it answered.
void render_gpu_identity(Exposition& x, const inventory::Inventory& inv) {
  const auto& gpus = inv.gpus;
  x.family("gpureap_gpu_info", "gauge",
           "Always 1: the GPU's model name and the NVIDIA driver version, as labels.");
  for (const auto& g : gpus) {
    auto labels = gpu_labels(inv, g);
    labels.emplace_back("name", g.info.name);
    labels.emplace_back("driver_version", inv.driver_version);
    x.sample(labels, 1);
  }

  x.family("gpureap_gpu_up", "gauge",
           "1 when every NVML query of this GPU answered; 0 when one failed or hung (its byte "
           "series are then absent).");
  for (const auto& g : gpus) x.sample(gpu_labels(inv, g), gpu_up(g) ? 1 : 0);
}

// The GPUs' memory: total, used, baseline, and whose it is.
void render_gpu_memory(Exposition& x, const inventory::Inventory& inv) {
  auto each_with_memory = [&](auto&& fn) {
    for (const auto& g : inv.gpus)
      if (g.info.memory) fn(g, *g.info.memory);
  };

  x.family("gpureap_gpu_memory_total_bytes", "gauge",
           "Memory of the GPU in bytes (NVML). Absent while NVML gives no memory reading.");
  each_with_memory([&](const auto& g, const auto& m) { x.sample(gpu_labels(inv, g), m.total); });

  x.family("gpureap_gpu_memory_used_bytes", "gauge",
           "Used memory of the GPU in bytes (NVML). Absent while NVML gives no memory reading.");
  each_with_memory([&](const auto& g, const auto& m) { x.sample(gpu_labels(inv, g), m.used); });

  x.family("gpureap_gpu_memory_baseline_bytes", "gauge",
           "Used memory of the idle GPU in bytes (the driver's own share): recorded when gpureap "
           "saw the GPU idle, else estimated. Absent while NVML gives no memory reading.");
  each_with_memory(
      [&](const auto& g, const auto&) { x.sample(gpu_labels(inv, g), g.baseline.bytes); });

  x.family("gpureap_gpu_baseline_recorded", "gauge",
           "1 when the baseline was recorded on this GPU while idle, 0 when it is an estimate.");
  each_with_memory(
      [&](const auto& g, const auto&) { x.sample(gpu_labels(inv, g), g.baseline.recorded); });

  x.family("gpureap_gpu_memory_attributed_bytes", "gauge",
           "Bytes NVML attributes to the processes gpureap found holding the GPU.");
  each_with_memory(
      [&](const auto& g, const auto&) { x.sample(gpu_labels(inv, g), g.attributed_bytes); });

  x.family("gpureap_gpu_memory_orphaned_bytes", "gauge",
           "Bytes held by orphaned holders (their parent or launcher died) on this GPU, as "
           "NVML reports them.");
  each_with_memory(
      [&](const auto& g, const auto&) { x.sample(gpu_labels(inv, g), g.orphaned_bytes()); });

  x.family("gpureap_gpu_memory_orphaned_by_provenance_bytes", "gauge",
           "Bytes held by orphaned holders on this GPU, by how the verdict is known, label "
           "provenance: owned (a gpureap run's own cgroup), witnessed (the agent saw the server "
           "die), inferred (one look; never acted on unattended). Explicit zeros.");
  each_with_memory([&](const auto& g, const auto&) {
    std::map<std::string_view, std::uint64_t> bytes{{"owned", 0}, {"witnessed", 0}, {"inferred", 0}};
    for (const auto& h : g.holders)
      if (h.uses_gpu && h.holder.orphaned && h.gpu_bytes)
        bytes[proc::enum_name(h.holder.provenance)] += *h.gpu_bytes;
    for (const auto& [p, b] : bytes)
      x.sample(with(gpu_labels(inv, g), "provenance", std::string(p)), b);
  });

  x.family("gpureap_gpu_memory_kept_bytes", "gauge",
           "Bytes of dead owners' memory that live keepers hold on this GPU (docs/orphans.md, "
           "Keepers), as NVML reports them, by label class: inheritor (it inherited the dead "
           "owner's device files), importer (it imported the dead exporter's memory over CUDA "
           "IPC; NVML's figure, its own context included). Explicit zeros.");
  each_with_memory([&](const auto& g, const auto&) {
    std::map<std::string_view, std::uint64_t> bytes;
    for (auto c : enum_values<proc::KeeperClass>())
      if (c != proc::KeeperClass::none) bytes[proc::enum_name(c)] = 0;
    for (const auto& h : g.holders)
      if (h.uses_gpu && h.holder.keeper != proc::KeeperClass::none && h.gpu_bytes)
        bytes[proc::enum_name(h.holder.keeper)] += *h.gpu_bytes;
    for (const auto& [c, b] : bytes) x.sample(with(gpu_labels(inv, g), "class", std::string(c)), b);
  });

  x.family("gpureap_gpu_memory_unattributed_bytes", "gauge",
           "Used bytes above the baseline that no visible process explains, by class "
           "(outside_namespace, releasing, driver_held, unknown); every class always present, "
           "0 when not the GPU's.");
  each_with_memory([&](const auto& g, const auto&) {
    for (auto c : unattributed_classes())
      x.sample(with(gpu_labels(inv, g), "class", std::string(enum_name(c))),
               g.unexplained == c ? g.unattributed_bytes : 0);
  });
}

// What the GPUs are doing: utilization, ghost, state, holders by kind.
void render_gpu_activity(Exposition& x, const inventory::Inventory& inv) {
  const auto& gpus = inv.gpus;
  x.family("gpureap_gpu_utilization_ratio", "gauge",
           "SM utilization of the GPU, 0-1 (NVML utilization rates, the driver's last sample "
           "period). Absent while NVML cannot say.");
  for (const auto& g : gpus)
    if (g.info.utilization_gpu)
      x.sample(gpu_labels(inv, g), number(*g.info.utilization_gpu / 100.0));

  x.family("gpureap_gpu_busy_without_process", "gauge",
           "1 when the GPU is a ghost: busy (SM utilization >= 50% for 3 consecutive ticks) "
           "with no process using it anywhere; only a reset or a reboot ends it. 0 otherwise.");
  for (const auto& g : gpus)
    x.sample(gpu_labels(inv, g), inventory::gpu_state(g) == inventory::GpuState::ghost ? 1 : 0);

  x.family("gpureap_gpu_state", "gauge",
           "1 under the GPU's one state (label state: free, held, releasing, driver_held, ghost, "
           "outside_namespace, unknown, not_measured; as status and top say it), 0 under the "
           "others; every state always present.");
  for (const auto& g : gpus) {
    const auto state = inventory::gpu_state(g);
    for (auto s : enum_values<inventory::GpuState>())
      x.sample(with(gpu_labels(inv, g), "state", std::string(inventory::enum_name(s))),
               s == state ? 1 : 0);
  }

  x.family("gpureap_gpu_holders", "gauge",
           "Processes holding the GPU, by kind: live, orphaned (parent or launcher died), "
           "keeper (it keeps a dead owner's memory: inheritor or importer), zombie_leader "
           "(leader exited, threads still hold it); each holder counted once.");
  for (const auto& g : gpus) {
    std::map<std::string_view, std::uint64_t> counts{
        {"live", 0}, {"orphaned", 0}, {"keeper", 0}, {"zombie_leader", 0}};
    for (const auto& h : g.holders)
      if (h.uses_gpu) ++counts[holder_kind(h.holder)];
    for (const auto& [kind, n] : counts)
      x.sample(with(gpu_labels(inv, g), "kind", std::string(kind)), n);
  }
}

// One series per holder and GPU (opt-in: --per-holder-metrics).
void render_holder_memory(Exposition& x, const inventory::Inventory& inv) {
  const auto& gpus = inv.gpus;
  x.family("gpureap_holder_memory_bytes", "gauge",
           "Bytes NVML attributes to one holder on one GPU (opt-in: --per-holder-metrics; the "
           "largest 64 holders of each GPU, holders without an NVML figure left out).");
  for (const auto& g : gpus) {
    std::size_t shown = 0;
    for (const auto& h : g.holders) {
      if (!h.uses_gpu || !h.gpu_bytes) continue;
      if (shown++ == kMaxHolderSeriesPerGpu) break;
      Labels labels = gpu_labels(inv, g);
      labels.emplace_back("pid", std::to_string(h.holder.id.pid));
      labels.emplace_back("comm", h.holder.comm);
      labels.emplace_back("user", h.holder.user);
      labels.emplace_back("kind", std::string(holder_kind(h.holder)));
      if (!h.holder.container.empty()) labels.emplace_back("container", h.holder.container);
      // Its server instance and what its command line says it is (issue 24), when known.
      if (!h.holder.instance.empty()) labels.emplace_back("instance", h.holder.instance);
      if (h.holder.engine.engine != proc::Engine::none)
        labels.emplace_back("engine", std::string(proc::enum_name(h.holder.engine.engine)));
      if (h.holder.engine.role != proc::EngineRole::none)
        labels.emplace_back("role", std::string(proc::enum_name(h.holder.engine.role)));
      if (auto rank = proc::rank_label(h.holder.engine.ranks); !rank.empty())
        labels.emplace_back("rank", rank);
      x.sample(labels, *h.gpu_bytes);
    }
  }
}

void render_gpus(Exposition& x, const inventory::Inventory& inv, bool per_holder) {
  render_gpu_identity(x, inv);
  render_gpu_memory(x, inv);
  render_gpu_activity(x, inv);
  if (per_holder) render_holder_memory(x, inv);
}

void render_agent(Exposition& x, const AgentCounters& c) {
  x.family("gpureap_free_duration_seconds", "histogram",
           "Seconds each free the agent performed took, from the first signal to memory back "
           "at baseline (or given up).");
  for (std::size_t i = 0; i < Histogram::kBounds.size(); ++i)
    x.sample({{"le", number(Histogram::kBounds[i])}}, std::to_string(c.free_duration.buckets[i]),
             "_bucket");
  x.sample({{"le", "+Inf"}}, std::to_string(c.free_duration.count), "_bucket");
  x.sample({}, number(c.free_duration.sum), "_sum");
  x.sample({}, std::to_string(c.free_duration.count), "_count");

  x.family("gpureap_release_seconds", "histogram",
           "Seconds each release the agent observed took, by phase: exit_to_unlisted (a "
           "holder's exit until NVML lists it no more), unlisted_to_baseline (then until the "
           "memory is back at the baseline: pinned host memory is unpinned here). Both phases "
           "always present.");
  for (const char* phase : {"exit_to_unlisted", "unlisted_to_baseline"}) {
    auto it = c.release_seconds.find(phase);
    const Histogram h = it == c.release_seconds.end() ? Histogram{} : it->second;
    for (std::size_t i = 0; i < Histogram::kBounds.size(); ++i)
      x.sample({{"phase", phase}, {"le", number(Histogram::kBounds[i])}},
               std::to_string(h.buckets[i]), "_bucket");
    x.sample({{"phase", phase}, {"le", "+Inf"}}, std::to_string(h.count), "_bucket");
    x.sample({{"phase", phase}}, number(h.sum), "_sum");
    x.sample({{"phase", phase}}, std::to_string(h.count), "_count");
  }

  if (!c.gate_seconds.empty()) {
    x.family("gpureap_gate_seconds", "histogram",
             "Seconds from the look's verdict to the node closed or opened again by --gate "
             "(a Slurm drain or resume done), by mode.");
    for (const auto& [mode, h] : c.gate_seconds) {
      for (std::size_t i = 0; i < Histogram::kBounds.size(); ++i)
        x.sample({{"mode", mode}, {"le", number(Histogram::kBounds[i])}},
                 std::to_string(h.buckets[i]), "_bucket");
      x.sample({{"mode", mode}, {"le", "+Inf"}}, std::to_string(h.count), "_bucket");
      x.sample({{"mode", mode}}, number(h.sum), "_sum");
      x.sample({{"mode", mode}}, std::to_string(h.count), "_count");
    }
  }

  if (!c.gate_errors.empty()) {
    x.family("gpureap_gate_errors_total", "counter",
             "Actions of --gate that failed (scontrol or the Kubernetes API did not do it; "
             "tried again 5 s later), by mode.");
    for (const auto& [mode, n] : c.gate_errors) x.sample({{"mode", mode}}, std::to_string(n));
  }

  x.family("gpureap_frees_total", "counter",
           "Frees the agent performed, by result: freed (memory back at baseline), held "
           "(memory stayed held), nothing (nothing to free).");
  std::map<std::string, std::uint64_t> frees;
  for (auto r : kFreeResults) frees[std::string(r)] = 0;
  for (const auto& [result, n] : c.frees) frees[result] = n;
  for (const auto& [result, n] : frees) x.sample({{"result", result}}, n);

  if (c.last_free_timestamp) {
    x.family("gpureap_last_free_timestamp_seconds", "gauge",
             "When the agent's last free ended, in seconds since the epoch (absent before the "
             "first).");
    x.sample({}, number(*c.last_free_timestamp));
  }

  x.family("gpureap_events_total", "counter",
           "Events the agent announced, by kind (every kind always present).");
  std::map<std::string, std::uint64_t> events;
  // Every event kind has its series from the start, in the order of its word.
  for (auto kind : enum_values<inventory::EventKind>()) {
    const auto n = c.events.find(kind);
    events[std::string(enum_name(kind))] = n == c.events.end() ? 0 : n->second;
  }
  for (const auto& [kind, n] : events) x.sample({{"kind", kind}}, n);

  x.family("gpureap_events_dropped_total", "counter",
           "Events announced but not written: stdout (journald, a pipe) was not taking them "
           "and the agent's queue of lines for it was full.");
  x.sample({}, c.events_dropped);

  x.family("gpureap_scans_total", "counter",
           "Scans of /proc the agent ran: full (every process), incremental (new and known "
           "pids only: a tick, a question, a scrape) or death (an incremental scan a death "
           "caused).");
  x.sample({{"kind", "full"}}, c.full_scans);
  x.sample({{"kind", "incremental"}}, c.incremental_scans);
  x.sample({{"kind", "death"}}, c.death_scans);

  x.family("gpureap_agent_degraded", "gauge",
           "1 when the agent cannot see all it should, by reason: out_of_descriptors (its last "
           "look at /proc ran out of file descriptors; holders it could not read are kept as "
           "the look before saw them). /healthz answers 503 meanwhile.");
  x.sample({{"reason", "out_of_descriptors"}}, c.look_failed ? 1 : 0);

  x.family("gpureap_agent_watched_processes", "gauge",
           "Holders, their parents and group leaders the agent watches, by how: pidfd (a death "
           "is seen at once) or tick (past its pidfd budget, which its file descriptor limit "
           "sets: a death is seen at the next tick).");
  x.sample({{"how", "pidfd"}}, static_cast<std::uint64_t>(c.watched_by_pidfd));
  x.sample({{"how", "tick"}}, static_cast<std::uint64_t>(c.watched_by_tick));

  x.family("gpureap_reap_in_progress", "gauge",
           "1 while the agent reaps orphans: its answers meanwhile are from its last look.");
  x.sample({}, c.reaping ? 1 : 0);

  if (c.process) {
    const ProcessFigures& p = *c.process;
    x.family("process_cpu_seconds_total", "counter", "Total user and system CPU time spent in seconds.");
    x.sample({}, number(p.cpu_seconds));
    x.family("process_resident_memory_bytes", "gauge", "Resident memory size in bytes.");
    x.sample({}, number(p.resident_bytes));
    x.family("process_virtual_memory_bytes", "gauge", "Virtual memory size in bytes.");
    x.sample({}, number(p.virtual_bytes));
    x.family("process_start_time_seconds", "gauge",
             "Start time of the process since unix epoch in seconds.");
    x.sample({}, number(p.start_time_seconds));
    x.family("process_open_fds", "gauge", "Number of open file descriptors.");
    x.sample({}, number(p.open_fds));
    x.family("process_max_fds", "gauge", "Maximum number of open file descriptors.");
    x.sample({}, number(p.max_fds));
  }
}

}  // namespace

void Histogram::observe(double seconds) {
  for (std::size_t i = 0; i < kBounds.size(); ++i)
    if (seconds <= kBounds[i]) ++buckets[i];
  ++count;
  sum += seconds;
}

std::string render_metrics(const MetricsInput& input) {
  const auto& inv = *input.inventory;
  Exposition x;
  x.family("gpureap_build_info", "gauge", "Always 1: the gpureap version, as a label.");
  x.sample({{"version", input.version}}, 1);

  x.family(gpu::source_words::kUpMetric, "gauge",
           "1 when NVML answers for at least one GPU (a GPU failing alone shows in "
           "gpureap_gpu_up); 0 when NVML is missing, failed or hung as a whole, or no GPU can "
           "be read (byte series are then absent, the /proc view remains); on a mixed "
           "NVIDIA+AMD node, 0 when either vendor's side can read none of its GPUs.");
  x.sample({}, inventory::source_down(inv) ? 0 : 1);

  x.family("gpureap_scrape_duration_seconds", "gauge",
           "Seconds gpureap took to refresh the figures shown (NVML and /proc).");
  x.sample({}, number(input.last_scrape_seconds));

  render_gpus(x, inv, input.per_holder);
  if (input.counters) render_agent(x, *input.counters);
  return x.take();
}

}  // namespace gpureap::report
