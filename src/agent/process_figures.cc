#include "agent/process_figures.h"

#include <sys/resource.h>
#include <unistd.h>

#include <charconv>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "agent/descriptors.h"

namespace gpureap::agent {

std::optional<report::ProcessFigures> parse_process_figures(std::string_view stat,
                                                            double ticks_per_second,
                                                            double page_size, double boot_time) {
  // The comm may hold spaces and parentheses: the fields after it follow the last ')'.
  const auto close = stat.rfind(')');
  if (close == std::string_view::npos || ticks_per_second <= 0) return std::nullopt;
  std::vector<std::string_view> fields;  // fields[0] is field 3 (state)
  std::string_view rest = stat.substr(close + 1);
  while (!rest.empty()) {
    const auto start = rest.find_first_not_of(" \n");
    if (start == std::string_view::npos) break;
    rest.remove_prefix(start);
    const auto end = rest.find_first_of(" \n");
    fields.push_back(rest.substr(0, end));
    rest.remove_prefix(end == std::string_view::npos ? rest.size() : end);
  }
  auto field = [&](std::size_t number) -> std::optional<double> {  // stat(5)'s numbering
    if (number < 3 || number - 3 >= fields.size()) return std::nullopt;
    const std::string_view text = fields[number - 3];
    unsigned long long value = 0;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
    return static_cast<double>(value);
  };
  const auto utime = field(14), stime = field(15), start = field(22), vsize = field(23),
             rss = field(24);
  if (!utime || !stime || !start || !vsize || !rss) return std::nullopt;
  report::ProcessFigures out;
  out.cpu_seconds = (*utime + *stime) / ticks_per_second;
  out.virtual_bytes = *vsize;
  out.resident_bytes = *rss * page_size;
  out.start_time_seconds = boot_time + *start / ticks_per_second;
  return out;
}

namespace {

double boot_time() {
  std::ifstream in("/proc/stat");
  std::string line;
  while (std::getline(in, line))
    if (line.starts_with("btime ")) return std::stod(line.substr(6));
  return 0;
}

}  // namespace

std::optional<double> own_cpu_seconds() {
  rusage usage{};
  if (::getrusage(RUSAGE_SELF, &usage) != 0) return std::nullopt;
  auto seconds = [](const timeval& t) {
    return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) / 1e6;
  };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

std::optional<report::ProcessFigures> own_process_figures() {
  std::ifstream in("/proc/self/stat");
  std::stringstream text;
  text << in.rdbuf();
  static const double boot = boot_time();
  auto figures = parse_process_figures(text.str(), static_cast<double>(::sysconf(_SC_CLK_TCK)),
                                       static_cast<double>(::sysconf(_SC_PAGESIZE)), boot);
  if (!figures) return std::nullopt;
  // CPU time from getrusage: every thread's, in microseconds. /proc/self/stat counts
  // whole clock ticks (1/100 s), so an agent that has used less than one reads 0.
  if (auto cpu = own_cpu_seconds()) figures->cpu_seconds = *cpu;
  if (auto open = open_descriptors()) figures->open_fds = static_cast<double>(*open);
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) == 0) figures->max_fds = static_cast<double>(limit.rlim_cur);
  return figures;
}

}  // namespace gpureap::agent
