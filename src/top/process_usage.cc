#include "top/process_usage.h"

#include <unistd.h>

#include "proc/proc_files.h"
#include "proc/proc_parse.h"

namespace gpureap::top {

std::optional<double> cpu_percent(std::uint64_t before_ticks, std::uint64_t after_ticks,
                                  double seconds, long clock_ticks) {
  if (seconds <= 0 || clock_ticks <= 0 || after_ticks < before_ticks) return std::nullopt;
  return static_cast<double>(after_ticks - before_ticks) / static_cast<double>(clock_ticks) /
         seconds * 100.0;
}

void UsageSampler::sample(const std::vector<proc::ProcessId>& ids,
                          std::chrono::steady_clock::time_point now) {
  static const long ticks_per_second = ::sysconf(_SC_CLK_TCK);
  static const long page = ::sysconf(_SC_PAGESIZE);
  std::map<proc::ProcessId, Seen> seen;
  usage_.clear();
  for (const auto& id : ids) {
    const std::string text =
        proc::read_small_file(proc_root_ + "/" + std::to_string(id.pid) + "/stat");
    auto st = proc::parse_stat(text);
    // Gone, or the pid is another process's now: nothing to say of it.
    if (!st || st->start_time != id.start_time) continue;
    ProcessUsage u;
    if (st->rss_pages && *st->rss_pages >= 0 && page > 0)
      u.rss_bytes = static_cast<std::uint64_t>(*st->rss_pages) * static_cast<std::uint64_t>(page);
    const std::uint64_t ticks = st->utime + st->stime;
    if (auto before = seen_.find(id); before != seen_.end())
      u.cpu_percent = cpu_percent(before->second.ticks, ticks,
                                  std::chrono::duration<double>(now - before->second.at).count(),
                                  ticks_per_second);
    seen[id] = {ticks, now};
    usage_[id] = u;
  }
  seen_ = std::move(seen);
}

}  // namespace gpureap::top
