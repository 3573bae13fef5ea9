#include "inventory/run_records.h"

#include <dirent.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "inventory/state_file.h"
#include "proc/proc_files.h"
#include "proc/proc_parse.h"

namespace gpureap::inventory {

namespace {

constexpr std::size_t kMaxRecord = 64 << 10;

nlohmann::json identity(const proc::ProcessId& id) {
  return {{"pid", id.pid}, {"start", id.start_time}};
}

proc::ProcessId identity_of(const nlohmann::json& j) {
  return {j.at("pid").get<pid_t>(), j.at("start").get<std::uint64_t>(), 0};
}

std::string runs_dir(const std::string& dir) { return dir + "/runs"; }

}  // namespace

Result<void> save_run_record(const std::string& dir, const RunRecord& record) {
  const std::string runs = runs_dir(dir);
  if (::mkdir(runs.c_str(), 0700) != 0 && errno != EEXIST)
    return std::unexpected(Error::from_errno("cannot create " + runs));
  // Records of ended runs (their gpureap gone) are dropped as a run starts.
  for (const auto& old : load_run_records(dir))
    if (!process_alive(old.gpureap, "/proc")) remove_run_record(dir, old.run_id);
  const nlohmann::json doc{{"run_id", record.run_id},        {"boot_id", record.boot_id},
                           {"gpureap", identity(record.gpureap)}, {"reaper", identity(record.reaper)},
                           {"command", identity(record.command)}};
  return write_state_file(fmt::format("{}/{}.json", runs, record.run_id), doc.dump() + "\n");
}

void remove_run_record(const std::string& dir, const std::string& run_id) {
  if (dir.empty() || run_id.empty() || run_id.find('/') != std::string::npos) return;
  ::unlink(fmt::format("{}/{}.json", runs_dir(dir), run_id).c_str());
}

std::vector<RunRecord> load_run_records(const std::string& dir) {
  std::vector<RunRecord> out;
  if (dir.empty()) return out;
  DIR* d = ::opendir(runs_dir(dir).c_str());
  if (!d) return out;
  const std::string boot = boot_id();
  while (const dirent* e = ::readdir(d)) {
    std::string_view name = e->d_name;
    if (!name.ends_with(".json")) continue;
    auto text = read_state_file(fmt::format("{}/{}", runs_dir(dir), name), kMaxRecord);
    if (!text) continue;
    auto doc = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
    if (!doc.is_object()) continue;
    try {
      RunRecord r{doc.at("run_id").get<std::string>(), doc.at("boot_id").get<std::string>(),
                  identity_of(doc.at("gpureap")), identity_of(doc.at("reaper")),
                  identity_of(doc.at("command"))};
      if (!boot.empty() && r.boot_id == boot) out.push_back(std::move(r));
    } catch (const nlohmann::json::exception&) {
      continue;  // a malformed record is no record
    }
  }
  ::closedir(d);
  return out;
}

bool process_alive(const proc::ProcessId& id, const std::string& proc_root) {
  if (id.pid <= 0) return false;
  auto stat = proc::parse_stat(proc::read_small_file(fmt::format("{}/{}/stat", proc_root, id.pid)));
  return stat && stat->start_time == id.start_time && stat->state != 'Z';
}

std::vector<proc::ProcessId> run_supervisors(const std::string& dir, const std::string& proc_root,
                                             bool live_only) {
  std::vector<proc::ProcessId> out;
  for (const auto& r : load_run_records(dir)) {
    if (live_only && !process_alive(r.gpureap, proc_root)) continue;
    out.push_back(r.gpureap);
    out.push_back(r.reaper);
  }
  return out;
}

}  // namespace gpureap::inventory
