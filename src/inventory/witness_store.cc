#include "inventory/witness_store.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "inventory/run_records.h"
#include "inventory/state_file.h"
#include "util/enum_names.h"

namespace gpureap::inventory {

namespace {
constexpr off_t kMaxWitnessFile = 4 << 20;
}

Result<void> save_witnesses(const std::string& dir, const std::map<pid_t, proc::DeadParent>& dead) {
  nlohmann::json records = nlohmann::json::array();
  for (const auto& [holder, d] : dead) {
    if (d.holder_start == 0) continue;
    records.push_back({{"holder_pid", holder},
                       {"holder_start", d.holder_start},
                       {"pid", d.pid},
                       {"comm", d.comm},
                       {"cmdline", d.cmdline},
                       {"died_at", d.died_at},
                       {"was_parent", d.was_parent},
                       {"held_gpu", d.held_gpu},
                       {"gpu_children", d.gpu_children},
                       {"run_supervisor", d.run_supervisor},
                       {"manner", enum_name(d.manner)},
                       {"exit_value", d.exit_value},
                       {"pgid", d.pgid},
                       {"sid", d.sid},
                       {"adopter", d.adopter}});
  }
  return write_boot_records(dir + "/" + kWitnessFile, "witnessed", records);
}

std::map<pid_t, proc::DeadParent> load_witnesses(const std::string& dir,
                                                 const std::string& proc_root) {
  std::map<pid_t, proc::DeadParent> out;
  if (dir.empty()) return out;
  // This boot's only (W4-05): read_boot_records.
  for (const auto& r : read_boot_records(dir + "/" + kWitnessFile, "witnessed", kMaxWitnessFile)) {
    try {
      proc::DeadParent d;
      const auto holder = r.at("holder_pid").get<pid_t>();
      d.holder_start = r.at("holder_start").get<std::uint64_t>();
      d.pid = r.at("pid").get<pid_t>();
      d.comm = r.at("comm").get<std::string>();
      d.cmdline = r.at("cmdline").get<std::string>();
      d.died_at = r.at("died_at").get<double>();
      d.was_parent = r.at("was_parent").get<bool>();
      d.held_gpu = r.at("held_gpu").get<bool>();
      d.gpu_children = r.at("gpu_children").get<std::size_t>();
      d.run_supervisor = r.at("run_supervisor").get<bool>();
      d.manner = enum_from_name<proc::ExitManner>(r.at("manner").get<std::string>())
                     .value_or(proc::ExitManner::unknown);
      d.exit_value = r.at("exit_value").get<int>();
      d.pgid = r.at("pgid").get<pid_t>();
      d.sid = r.at("sid").get<pid_t>();
      d.adopter = r.at("adopter").get<pid_t>();
      // A record whose process is gone names nobody: pruned here, as at every full look.
      if (holder > 0 && d.holder_start != 0 &&
          process_alive({holder, d.holder_start, 0}, proc_root))
        out[holder] = std::move(d);
    } catch (const nlohmann::json::exception&) {
      continue;  // a malformed record is no record
    }
  }
  return out;
}

}  // namespace gpureap::inventory
