#include "inventory/host_leftovers.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <optional>
#include <filesystem>
#include <string_view>

#include "proc/proc_files.h"
#include "proc/proc_parse.h"

namespace gpureap::inventory {
namespace {

pid_t leading_pid(std::string_view s) {
  pid_t pid = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), pid);
  if (ec != std::errc() || pid <= 0 || (end != s.data() + s.size() && *end != '_')) return 0;
  return pid;
}

// The process's start as wall-clock seconds, from its stat and the boot time; nullopt
// when it is not there.
std::optional<double> started_at(pid_t pid, const std::string& proc_root) {
  auto stat = proc::parse_stat(proc::read_small_file(proc_root + "/" + std::to_string(pid) + "/stat"));
  if (!stat) return std::nullopt;
  const std::string boot = proc::read_small_file(proc_root + "/stat");
  auto at = boot.find("\nbtime ");
  if (at == std::string::npos) return 0.0;  // unknown boot time: alive, nothing to compare
  const double btime = std::strtod(boot.c_str() + at + 7, nullptr);
  static const long ticks = ::sysconf(_SC_CLK_TCK);
  return btime + static_cast<double>(stat->start_time) / static_cast<double>(ticks > 0 ? ticks : 100);
}

}  // namespace

pid_t shm_creator(const std::string& name) {
  constexpr std::string_view sgl = "sgl_shm_", args = "multi_tokenizer_args_";
  std::string_view n = name;
  if (n.starts_with(args)) return leading_pid(n.substr(args.size()));
  if (!n.starts_with(sgl)) return 0;
  n.remove_prefix(sgl.size());
  // <kind>_<pid>_<rand>: the pid is the field after the kind.
  auto underscore = n.find('_');
  if (underscore == std::string_view::npos) return 0;
  return leading_pid(n.substr(underscore + 1));
}

std::vector<ShmLeftover> find_shm_leftovers(const std::string& shm_dir,
                                            const std::string& proc_root) {
  std::vector<ShmLeftover> out;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(shm_dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    const pid_t creator = shm_creator(name);
    if (creator == 0) continue;
    struct stat st {};
    if (::lstat(it->path().c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    auto started = started_at(creator, proc_root);
    const double written = static_cast<double>(st.st_mtim.tv_sec) + st.st_mtim.tv_nsec * 1e-9;
    if (started && *started <= written + 1.0) continue;  // its creator (or can't tell): alive
    out.push_back({it->path().string(), creator, static_cast<std::uint64_t>(st.st_size)});
  }
  std::sort(out.begin(), out.end(),
            [](const ShmLeftover& a, const ShmLeftover& b) { return a.path < b.path; });
  return out;
}

}  // namespace gpureap::inventory
