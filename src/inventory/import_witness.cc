#include "inventory/import_witness.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "inventory/run_records.h"
#include "inventory/state_file.h"

namespace gpureap::inventory {
namespace {

constexpr std::size_t kMaxImportFile = 1 << 20;

const ListedProcess* find_listed(const std::vector<ListedProcess>& list, pid_t pid) {
  auto it = std::find_if(list.begin(), list.end(),
                         [&](const ListedProcess& p) { return p.id.pid == pid; });
  return it == list.end() ? nullptr : &*it;
}

bool explains(std::uint64_t growth, std::uint64_t exported) {
  return growth + kExporterContextSlack >= exported && growth <= exported + kImportSlack;
}

}  // namespace

std::vector<ImportRecord> witness_imports(const Listing& before, const Listing& after,
                                          const std::function<bool(const proc::ProcessId&)>& alive,
                                          double now) {
  std::vector<ImportRecord> out;
  for (const auto& [uuid, now_list] : after) {
    auto was = before.find(uuid);
    if (was == before.end()) continue;
    // The exporters: listed then, listed no more, and dead.
    std::vector<const ListedProcess*> died;
    for (const ListedProcess& p : was->second)
      if (!find_listed(now_list, p.id.pid) && p.id.start_time != 0 && !alive(p.id))
        died.push_back(&p);
    if (died.empty()) continue;
    for (const ListedProcess& p : now_list) {
      const ListedProcess* then = find_listed(was->second, p.id.pid);
      if (!then || then->id != p.id || p.id.start_time == 0 || p.bytes <= then->bytes + kImportSlack)
        continue;
      const std::uint64_t growth = p.bytes - then->bytes;
      const ListedProcess* exporter = nullptr;
      std::size_t candidates = 0;
      for (const ListedProcess* d : died)
        if (explains(growth, d->bytes)) {
          exporter = d;
          ++candidates;
        }
      if (candidates != 1) continue;
      out.push_back({p.id, exporter->id, exporter->comm, uuid, growth, now});
    }
  }
  return out;
}

Result<void> save_imports(const std::string& dir, const std::vector<ImportRecord>& records) {
  nlohmann::json list = nlohmann::json::array();
  for (const auto& r : records)
    list.push_back({{"importer_pid", r.importer.pid},
                    {"importer_start", r.importer.start_time},
                    {"exporter_pid", r.exporter.pid},
                    {"exporter_start", r.exporter.start_time},
                    {"exporter_comm", r.exporter_comm},
                    {"gpu_uuid", r.gpu_uuid},
                    {"bytes", r.bytes},
                    {"died_at", r.died_at}});
  return write_boot_records(dir + "/" + kImportFile, "imported", list);
}

std::vector<ImportRecord> load_imports(const std::string& dir, const std::string& proc_root) {
  std::vector<ImportRecord> out;
  if (dir.empty()) return out;
  // This boot's only: pids and start ticks repeat after a reboot (read_boot_records).
  for (const auto& j : read_boot_records(dir + "/" + kImportFile, "imported", kMaxImportFile)) {
    try {
      ImportRecord r;
      r.importer = {j.at("importer_pid").get<pid_t>(), j.at("importer_start").get<std::uint64_t>(), 0};
      r.exporter = {j.at("exporter_pid").get<pid_t>(), j.at("exporter_start").get<std::uint64_t>(), 0};
      r.exporter_comm = j.at("exporter_comm").get<std::string>();
      r.gpu_uuid = j.at("gpu_uuid").get<std::string>();
      r.bytes = j.at("bytes").get<std::uint64_t>();
      r.died_at = j.at("died_at").get<double>();
      if (r.importer.start_time != 0 && process_alive(r.importer, proc_root))
        out.push_back(std::move(r));
    } catch (const nlohmann::json::exception&) {
      continue;  // a malformed record is no record
    }
  }
  return out;
}

ImportWitness::ImportWitness(std::string dir, std::string proc_root)
    : dir_(std::move(dir)), proc_root_(std::move(proc_root)), records_(load_imports(dir_, proc_root_)) {}

void ImportWitness::observe(const gpu::GpuSnapshot& snapshot,
                            const std::map<pid_t, proc::Holder>& holders, double now) {
  if (!gpu::lists_gpus(snapshot.state)) return;
  Listing listing;
  for (const auto& g : snapshot.gpus) {
    if (!g.processes_known) continue;
    auto& list = listing[g.uuid];
    const auto last = last_.find(g.uuid);
    for (const auto& p : g.processes) {
      if (!p.used_bytes) continue;
      const auto pid = static_cast<pid_t>(p.pid);
      if (auto it = holders.find(pid); it != holders.end()) {
        list.push_back({it->second.id, it->second.comm, *p.used_bytes});
      } else if (const ListedProcess* known = last == last_.end() ? nullptr : find_listed(last->second, pid)) {
        // A holder whose death the look already dropped, still in NVML's older list: the
        // identity the last look read, so that the next look sees it die.
        list.push_back({known->id, known->comm, *p.used_bytes});
      }
    }
  }
  auto alive = [&](const proc::ProcessId& id) { return process_alive(id, proc_root_); };
  std::vector<ImportRecord> next = records_;
  for (auto& r : witness_imports(last_, listing, alive, now)) {
    std::erase_if(next, [&](const ImportRecord& o) { return o.importer == r.importer && o.gpu_uuid == r.gpu_uuid; });
    next.push_back(std::move(r));
  }
  // A record of an importer gone names nobody.
  std::erase_if(next, [&](const ImportRecord& r) { return !process_alive(r.importer, proc_root_); });
  last_ = std::move(listing);
  if (next == records_) return;
  records_ = std::move(next);
  if (!dir_.empty()) (void)save_imports(dir_, records_);
}

}  // namespace gpureap::inventory
