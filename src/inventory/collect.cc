#include "inventory/collect.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <future>
#include <set>
#include <thread>

#include "gpu/drm_client_memory.h"
#include "gpu/nvml_worker.h"
#include "proc/holder_scan.h"

namespace gpureap::inventory {

namespace {

/// A gpureap NVML helper: named so (gpu::kWorkerComm), running our own executable
/// file (forked without exec), and so is its parent: a name alone proves nothing.
bool is_gpureap_helper(const proc::Holder& h, const std::string& proc_root) {
  if (h.comm != gpu::kWorkerComm) return false;
  struct stat self {
  }, exe{}, parent{};
  if (::stat("/proc/self/exe", &self) != 0) return false;
  const std::string dir = proc_root + "/";
  return ::stat((dir + std::to_string(h.id.pid) + "/exe").c_str(), &exe) == 0 &&
         ::stat((dir + std::to_string(h.ppid) + "/exe").c_str(), &parent) == 0 &&
         exe.st_dev == self.st_dev && exe.st_ino == self.st_ino && parent.st_dev == self.st_dev &&
         parent.st_ino == self.st_ino;
}

Inventory collect(gpu::GpuSource& gpus, const proc::DeviceSet& devices, BaselineStore& baselines,
                  const CollectOptions& options) {
  proc::ScanOptions scan_options;
  scan_options.proc_root = options.proc_root;
  scan_options.devices = &devices;
  scan_options.exclude = options.exclude;
  scan_options.exclude.insert(::getpid());
  scan_options.with_table = options.process_table;
  scan_options.run_supervisors = options.run_supervisors;

  // The scan reads /proc while NVML answers in its helper process. The helper is
  // forked (without exec) by prefetch, before the scan thread exists: forking a
  // multi-threaded process could copy a lock held by the other thread.
  gpus.prefetch_snapshot();
  auto scan_future =
      std::async(std::launch::async, [&] { return proc::scan_holders(scan_options); });
  gpu::GpuSnapshot snapshot = gpus.snapshot(options.source_deadline);
  proc::ScanResult scan = scan_future.get();
  return join_look(gpus, std::move(snapshot), std::move(scan), devices, baselines, options);
}

Inventory join_and_reread(gpu::GpuSource& gpus, gpu::GpuSnapshot snapshot, proc::ScanResult scan,
                          const proc::DeviceSet& devices, BaselineStore& baselines,
                          const CollectOptions& options);

// Ghost GPUs. One-shot: a GPU busy with no user is read again until the window is
// full, stopping at the first idle reading (a spike). Agent: this tick's reading
// joins the history of its earlier ticks.
void sample_busy_gpus(gpu::GpuSource& gpus, Inventory& inv, const CollectOptions& options) {
  std::map<gpu::DeviceId, std::vector<unsigned>> samples;
  std::vector<gpu::DeviceId> candidates;
  for (const GpuView& view : inv.gpus) {
    if (!view.info.utilization_gpu) continue;
    if (!options.sample_busy) {
      auto& history = samples[view.info.id];
      if (auto it = options.busy_history.find(view.info.id); it != options.busy_history.end())
        history = it->second;
      history.push_back(*view.info.utilization_gpu);
      continue;
    }
    if (!busy_without_live_user(view)) continue;
    if (options.no_busy_window_at_baseline.contains(view.info.id) &&
        view.info.processes_known && view.info.processes.empty() && view.at_baseline())
      continue;
    samples[view.info.id] = {*view.info.utilization_gpu};
    // Orphans using it: no window needed (it is theirs, not a ghost's).
    if (std::none_of(view.holders.begin(), view.holders.end(), computes_here))
      candidates.push_back(view.info.id);
  }
  if (options.sample_busy) {
    const auto gap = kBusyWindow / (kBusySamples - 1);
    for (unsigned k = 1; k < kBusySamples && !candidates.empty(); ++k) {
      (options.clock ? *options.clock : util::system_clock()).sleep_for(gap);
      auto readings = gpus.memory(candidates, options.source_deadline);
      if (!readings) break;
      std::vector<gpu::DeviceId> still;
      for (const auto& r : *readings) {
        if (!r.utilization_gpu) continue;
        samples[r.id].push_back(*r.utilization_gpu);
        if (*r.utilization_gpu >= kBusyThreshold) still.push_back(r.id);
      }
      candidates = std::move(still);
    }
  }
  classify_busy(inv, samples, options.sample_busy ? kBusySamples : kBusyTicks);
}

}  // namespace

// g++ 12 at -O2 warns that the moved-from optional<vector> `table` "may be used
// uninitialized" in its inlined destructor (a false positive of its flow analysis, only in
// the release build): silenced for this function alone.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
Inventory join_look(gpu::GpuSource& gpus, gpu::GpuSnapshot snapshot, proc::ScanResult scan,
                    const proc::DeviceSet& devices, BaselineStore& baselines,
                    const CollectOptions& options) {
  const bool listed = gpu::lists_gpus(snapshot.state);
  auto table = std::move(scan.table);
  Inventory inv =
      join_and_reread(gpus, std::move(snapshot), std::move(scan), devices, baselines, options);
  inv.process_table = std::move(table);
  if (listed) sample_busy_gpus(gpus, inv, options);
  // Releasing, driver-held or not known yet: the release model, over the looker's earlier
  // looks when it keeps them.
  ReleaseTracker this_look_only;
  (options.releases ? *options.releases : this_look_only)
      .observe(inv, (options.clock ? *options.clock : util::system_clock()).now(),
               options.judge_releases);
  // The agent's memory of launchers it saw die, for the groups this look still shows.
  std::set<pid_t> groups;  // the groups and the dead parents this look shows
  for (const auto& view : inv.gpus)
    for (const auto& gh : view.holders) {
      if (gh.holder.pgid > 0) groups.insert(gh.holder.pgid);
      if (gh.holder.dead_parent > 0) groups.insert(gh.holder.dead_parent);
    }
  std::set<pid_t> named;
  for (const auto& [holder, dead] : options.dead_parents)  // keyed by the orphan's pid
    if (groups.contains(dead.pid) && named.insert(dead.pid).second)
      inv.dead_launchers.push_back(dead);
  inv.instances = find_instances(inv, options.proc_root);
  return inv;
}
#pragma GCC diagnostic pop

namespace {

Inventory join_and_reread(gpu::GpuSource& gpus, gpu::GpuSnapshot snapshot, proc::ScanResult scan,
                          const proc::DeviceSet& devices, BaselineStore& baselines,
                          const CollectOptions& options) {
  // DRM fdinfo (a vendor's DRM nodes): per-process memory the source does not list.
  gpu::add_drm_client_memory(snapshot, scan.holders);
  std::set<pid_t> exclude = options.exclude;
  exclude.insert(::getpid());
  // Our NVML helper opens the device nodes itself; it is not a holder to report.
  if (auto worker = gpus.worker_pid()) {
    std::erase_if(scan.holders, [&](const proc::Holder& h) { return h.id.pid == *worker; });
  }
  // Nor is another gpureap's (a running agent's: it keeps one for good): a process of
  // our own executable that NVML lists nowhere holds no GPU memory, and counting it as
  // an opener without a figure would call driver-held memory "unknown".
  std::set<pid_t> listed;
  for (const auto& g : snapshot.gpus)
    for (const auto& p : g.processes) listed.insert(static_cast<pid_t>(p.pid));
  std::erase_if(scan.holders, [&](const proc::Holder& h) {
    return !listed.contains(h.id.pid) && is_gpureap_helper(h, options.proc_root);
  });

  // NVML names processes whose fds we may not read (another user's, when not
  // root): describe them from what /proc does show, instead of calling them
  // invisible. Those NVML names that /proc lacks stay "unseen".
  std::vector<pid_t> unread;
  for (const auto& g : snapshot.gpus)
    for (const auto& p : g.processes) {
      auto pid = static_cast<pid_t>(p.pid);
      bool known = std::any_of(scan.holders.begin(), scan.holders.end(),
                               [&](const proc::Holder& h) { return h.id.pid == pid; });
      if (!known && !exclude.contains(pid) && pid != gpus.worker_pid().value_or(-1) &&
          std::find(unread.begin(), unread.end(), pid) == unread.end())
        unread.push_back(pid);
    }
  for (auto& h : proc::describe_processes(unread, options.proc_root)) {
    h.found_by.insert(proc::FoundBy::source);  // NVML lists it: a GPU holder (lineage's siblings)
    scan.holders.push_back(std::move(h));
  }
  // Orphaned or detached is decided over the whole set (siblings and workers are
  // other holders), with what the agent saw die.
  proc::classify_lineage(
      scan.holders, options.dead_parents,
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count(),
      options.witnessed);

  const bool host_ns = in_host_pid_namespace(options.proc_root);
  Inventory inv = build_inventory(snapshot, scan, baselines, host_ns, {}, options.imports);
  inv.warnings = devices.warnings();
  inv.warnings.insert(inv.warnings.end(), baselines.warnings().begin(), baselines.warnings().end());
  if (!options.reread_unexplained) return inv;
  std::vector<gpu::DeviceId> puzzling;
  for (const auto& view : inv.gpus)
    if (view.unexplained != Unexplained::none) puzzling.push_back(view.info.id);
  if (puzzling.empty() || !gpu::lists_gpus(snapshot.state)) return inv;

  // Memory nobody explains: a few more readings (at most ~100 ms) for the release model,
  // which tells a release in progress from memory the driver keeps; stop at the first
  // reading it calls a fall (its one step, fell()).
  std::vector<gpu::MemoryReading> later;
  for (int attempt = 0; attempt < 4; ++attempt) {
    (options.clock ? *options.clock : util::system_clock())
        .sleep_for(std::chrono::milliseconds(25));
    auto reading = gpus.memory(puzzling, options.source_deadline);
    if (!reading) break;
    later = std::move(*reading);
    bool dropped = std::any_of(later.begin(), later.end(), [&](const gpu::MemoryReading& r) {
      for (const auto& view : inv.gpus)
        if (view.info.id == r.id && r.used && view.info.memory &&
            fell(view.used(), *r.used, view.info.memory->total))
          return true;
      return false;
    });
    if (dropped) break;
  }
  if (later.empty()) return inv;
  std::vector<std::string> warnings = std::move(inv.warnings);
  inv = build_inventory(std::move(snapshot), std::move(scan), baselines, host_ns, later,
                        options.imports);
  inv.warnings = std::move(warnings);
  return inv;
}

}  // namespace

Inventory collect_inventory(gpu::GpuSource& gpus, const proc::DeviceSet& devices,
                            BaselineStore& baselines, const CollectOptions& options) {
  return collect(gpus, devices, baselines, options);
}

}  // namespace gpureap::inventory
