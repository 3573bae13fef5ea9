#include "inventory/node.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>

#include "gpu/gpu_select.h"
#include "inventory/agent_client.h"
#include "inventory/collect.h"
#include "inventory/import_witness.h"
#include "inventory/inventory_wire.h"
#include "inventory/run_records.h"
#include "inventory/state_file.h"
#include "inventory/witness_store.h"

namespace gpureap::inventory {

Node::Node(NodeConfig config, std::unique_ptr<gpu::GpuSource> gpus, util::Clock& clock)
    : config_(std::move(config)),
      gpus_(std::move(gpus)),
      clock_(&clock),
      releases_(ReleaseBudget{config_.release_budget}) {}

void Node::load() {
  if (loaded_) return;
  loaded_ = true;
  auto devices = proc::discover_devices(config_.dev_dir, config_.proc_root);
  if (devices)
    devices_ = std::move(*devices);
  else
    device_error_ = devices.error();
  // Another vendor's nodes (AMD's /dev/kfd and DRM nodes), registered by its source.
  if (proc::DeviceSet more = gpus_->device_nodes(config_.dev_dir);
      !more.empty() || !more.warnings().empty()) {
    std::vector<proc::DeviceSet::Entry> entries = devices_.entries();
    entries.insert(entries.end(), more.entries().begin(), more.entries().end());
    std::vector<std::string> warnings = devices_.warnings();
    warnings.insert(warnings.end(), more.warnings().begin(), more.warnings().end());
    devices_ = proc::DeviceSet(std::move(entries), std::move(warnings));
  }
  // discover_devices leaves a missing directory to its caller: one named on purpose
  // (--dev-dir, $GPUREAP_DEV_DIR, $GPUREAP_SIM_DIR) that is not there is a mistake,
  // and a look without it would call every GPU idle.
  if (struct stat st{}; devices && ::stat(config_.dev_dir.c_str(), &st) != 0 && errno == ENOENT)
    device_error_ = Error::from_errno("cannot read device directory " + config_.dev_dir, ENOENT);
  baselines_ =
      config_.state_dir ? BaselineStore::load(*config_.state_dir) : BaselineStore::load_default();
  // First sightings of memory no process holds, beside the baselines (issue 50).
  releases_.keep_sightings(SightingStore::load(baselines_.dir(), boot_id(config_.proc_root)));
}

Inventory Node::look(CollectOptions options) {
  load();
  // A running agent answers the first look (instant status). Later looks are
  // the engine's re-scans while it acts: those must be this process's own.
  if (config_.agent_socket && !agent_asked_) {
    agent_asked_ = true;
    // The agent's answer describes the agent's node: used only when that is this one.
    auto answer = ask_agent(*config_.agent_socket, options.source_deadline);
    if (answer && answer->node == identity()) {
      Inventory inv = without_pids(*answer, options.exclude);
      // What this process's own scan would have warned about (a refused state
      // directory, its device directory), besides the agent's warnings.
      std::vector<std::string> own = devices_.warnings();
      own.insert(own.end(), baselines_.warnings().begin(), baselines_.warnings().end());
      for (auto& w : own)
        if (std::find(inv.warnings.begin(), inv.warnings.end(), w) == inv.warnings.end())
          inv.warnings.push_back(std::move(w));
      remember_witnessed(inv);
      inv.instances = find_instances(inv, config_.proc_root);
      // The agent judged its releases over its own ticks; its holders are remembered,
      // so an exit this node's later looks see counts from here.
      releases_.observe(inv, clock_->now(), /*judge=*/false);
      return inv;
    }
  }
  options.proc_root = config_.proc_root;
  options.clock = clock_;
  if (options.witnessed.empty()) options.witnessed = witnessed_;
  if (!options.releases) options.releases = &releases_;
  // What a running (or earlier) agent saw die, kept in the state directory: a direct
  // look reaches the agent's verdict on those processes, not a one-look guess (W3-07).
  if (options.dead_parents.empty()) options.dead_parents = load_witnesses(baselines_.dir(), config_.proc_root);
  if (options.imports.empty()) options.imports = load_imports(baselines_.dir(), config_.proc_root);
  if (options.run_supervisors.empty())
    options.run_supervisors = run_supervisors(baselines_.dir(), config_.proc_root, true);
  Inventory inv = collect_inventory(*gpus_, devices_, baselines_, options);
  inv.node = identity();
  return inv;
}

void Node::remember_witnessed(const Inventory& inv) {
  witnessed_.clear();
  for (const auto& view : inv.gpus)
    for (const auto& gh : view.holders)
      if (gh.holder.provenance == proc::Provenance::witnessed)
        witnessed_.push_back(gh.holder);
}

NodeIdentity Node::identity() const {
  auto absolute = [](const std::string& path) {
    if (path.empty()) return path;
    std::error_code ec;
    auto p = std::filesystem::weakly_canonical(std::filesystem::absolute(path, ec), ec);
    return ec ? path : p.string();
  };
  // A bare soname ("libnvidia-ml.so.1") is the loader's to find: the same name is the
  // same library; a path is compared as the file it names.
  std::string library = config_.nvml_library.find('/') == std::string::npos
                            ? config_.nvml_library
                            : absolute(config_.nvml_library);
  return {absolute(config_.dev_dir), absolute(config_.proc_root), library,
          absolute(config_.sim_dir)};
}

std::vector<gpu::DeviceId> gpus_used_by(const Inventory& inv,
                                        const std::function<bool(const proc::Holder&)>& chosen) {
  std::vector<gpu::DeviceId> out;
  for (const auto& v : inv.gpus)
    for (const auto& gh : v.holders)
      if ((gh.uses_gpu || gh.client) && chosen(gh.holder)) {
        out.push_back(v.info.id);
        break;
      }
  gpu::normalize(out);
  return out;
}

std::vector<gpu::DeviceId> gpus_used_by(const Inventory& inv,
                                        const std::vector<proc::ProcessId>& ids) {
  return gpus_used_by(inv, [&](const proc::Holder& h) {
    return std::find(ids.begin(), ids.end(), h.id) != ids.end();
  });
}

Result<std::vector<gpu::DeviceId>> select_gpus(const gpu::GpuSelector& selector,
                                               const Inventory& inv) {
  std::vector<gpu::GpuInfo> infos;
  infos.reserve(inv.gpus.size());
  for (const auto& v : inv.gpus) infos.push_back(v.info);
  // /dev/nvidia-caps/nvidia-cap<N> (Slurm's MIG GRES files) is named by the driver's table,
  // read only for such an item.
  if (selector.names_capabilities())
    return selector.resolve(infos, proc::read_mig_minors(inv.node.dev_dir, inv.node.proc_root));
  return selector.resolve(infos);
}

bool is_selected(const std::vector<gpu::DeviceId>& chosen, gpu::DeviceId id) {
  return gpu::contains(chosen, id);
}

void keep_gpus(Inventory& inv, const std::vector<gpu::DeviceId>& chosen) {
  std::erase_if(inv.gpus, [&](const GpuView& v) { return !is_selected(chosen, v.info.id); });
  // `status --gpu 3` lists GPU 3's servers, each with every GPU it uses; not another
  // GPU's (issue 53 #9).
  std::erase_if(inv.instances, [&](const Instance& in) {
    return std::none_of(in.gpus.begin(), in.gpus.end(),
                        [&](gpu::DeviceId g) { return is_selected(chosen, g); });
  });
}

}  // namespace gpureap::inventory
