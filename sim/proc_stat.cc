#include "sim/proc_stat.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <string>
#include <vector>

namespace gpureap::sim {
namespace {

template <typename T>
bool parse_number(std::string_view text, T& out) {
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc() && end == text.data() + text.size();
}

std::optional<std::string> read_small_file(const char* path) {
  int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  std::string text(1024, '\0');
  std::size_t used = 0;
  for (;;) {
    ssize_t n = ::read(fd, text.data() + used, text.size() - used);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    used += static_cast<std::size_t>(n);
    if (used == text.size()) text.resize(text.size() * 2);
  }
  ::close(fd);
  text.resize(used);
  return text;
}

}  // namespace

std::optional<ProcStat> parse_proc_stat(std::string_view text) {
  auto open = text.find('(');
  auto close = text.rfind(')');
  if (open == std::string_view::npos || close == std::string_view::npos || close < open)
    return std::nullopt;
  ProcStat st;
  if (!parse_number(text.substr(0, open > 0 ? open - 1 : 0), st.pid)) return std::nullopt;
  st.comm = std::string(text.substr(open + 1, close - open - 1));
  // fields[0] is field 3 (state) of proc_pid_stat(5).
  std::vector<std::string_view> fields;
  std::string_view rest = text.substr(close + 1);
  while (!rest.empty() && fields.size() < 20) {
    while (!rest.empty() && (rest.front() == ' ' || rest.front() == '\n')) rest.remove_prefix(1);
    auto end = rest.find_first_of(" \n");
    if (rest.empty()) break;
    fields.push_back(rest.substr(0, end));
    rest = end == std::string_view::npos ? std::string_view{} : rest.substr(end);
  }
  if (fields.size() < 20 || fields[0].size() != 1) return std::nullopt;
  st.state = fields[0][0];
  if (!parse_number(fields[1], st.ppid) || !parse_number(fields[2], st.pgrp) ||
      !parse_number(fields[3], st.session) || !parse_number(fields[17], st.num_threads) ||
      !parse_number(fields[19], st.start_time))
    return std::nullopt;
  return st;
}

std::optional<ProcStat> read_proc_stat(pid_t pid) {
  std::string path = "/proc/" + std::to_string(pid) + "/stat";
  auto text = read_small_file(path.c_str());
  if (!text) return std::nullopt;
  return parse_proc_stat(*text);
}

bool holds_resources(const ProcStat& stat, std::uint64_t start_time) {
  if (stat.start_time != start_time) return false;
  if (stat.state == 'X') return false;
  if (stat.state == 'Z' && stat.num_threads <= 1) return false;
  return true;
}

bool holds_resources(pid_t pid, std::uint64_t start_time) {
  auto st = read_proc_stat(pid);
  return st && holds_resources(*st, start_time);
}

pid_t host_pid() {
  char buf[32];
  ssize_t n = ::readlink("/proc/self", buf, sizeof buf - 1);
  pid_t pid = 0;
  if (n > 0 && parse_number(std::string_view(buf, static_cast<std::size_t>(n)), pid)) return pid;
  return ::getpid();
}

std::uint64_t self_start_time() {
  auto text = read_small_file("/proc/self/stat");
  if (!text) return 0;
  auto st = parse_proc_stat(*text);
  return st ? st->start_time : 0;
}

}  // namespace gpureap::sim
