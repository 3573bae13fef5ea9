#include "proc/cgroup_fs.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "proc/proc_files.h"
#include "proc/proc_parse.h"

namespace gpureap::proc {
namespace {

Result<void> write_text(const std::string& path, std::string_view text) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return std::unexpected(Error::from_errno("cannot open " + path));
  ssize_t n = ::write(fd, text.data(), text.size());
  int err = errno;
  ::close(fd);
  if (n != static_cast<ssize_t>(text.size()))
    return std::unexpected(Error::from_errno("cannot write " + path, err));
  return {};
}

// mountinfo escapes space, tab, newline and backslash as \ooo.
std::string unescape_mount_path(std::string_view s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size()) {
      auto oct = s.substr(i + 1, 3);
      if (std::all_of(oct.begin(), oct.end(), [](char c) { return c >= '0' && c <= '7'; })) {
        out += static_cast<char>((oct[0] - '0') * 64 + (oct[1] - '0') * 8 + (oct[2] - '0'));
        i += 3;
        continue;
      }
    }
    out += s[i];
  }
  return out;
}

std::vector<std::string_view> split_spaces(std::string_view line) {
  std::vector<std::string_view> out;
  while (!line.empty()) {
    auto start = line.find_first_not_of(' ');
    if (start == std::string_view::npos) break;
    line.remove_prefix(start);
    auto end = line.find(' ');
    out.push_back(line.substr(0, end));
    if (end == std::string_view::npos) break;
    line.remove_prefix(end);
  }
  return out;
}

}  // namespace

std::optional<Cgroup2Mount> parse_cgroup2_mount(std::string_view mountinfo) {
  while (!mountinfo.empty()) {
    auto nl = mountinfo.find('\n');
    std::string_view line = mountinfo.substr(0, nl);
    mountinfo.remove_prefix(nl == std::string_view::npos ? mountinfo.size() : nl + 1);
    // "<id> <parent> <maj:min> <root> <mount point> <options> [optional...] - <fstype> <source>
    // <super>"
    auto fields = split_spaces(line);
    auto dash = std::find(fields.begin(), fields.end(), std::string_view("-"));
    if (fields.size() < 5 || dash == fields.end() || dash + 1 == fields.end()) continue;
    if (*(dash + 1) != "cgroup2") continue;
    return Cgroup2Mount{unescape_mount_path(fields[3]), unescape_mount_path(fields[4])};
  }
  return std::nullopt;
}

std::string Cgroup2Mount::dir_of(std::string_view path) const {
  if (root == "/") return mount_point + std::string(path);
  if (!path.starts_with(root)) return "";
  return mount_point + std::string(path.substr(root.size()));
}

Result<Cgroup2Mount> cgroup2_mount(std::string_view proc_root) {
  if (auto m = parse_cgroup2_mount(read_small_file(std::string(proc_root) + "/self/mountinfo")))
    return *m;
  return fail("no cgroup2 file system is mounted");
}

std::string cgroup2_path_of(pid_t pid, std::string_view proc_root) {
  for (const auto& e : parse_cgroup(read_small_file(fmt::format("{}/{}/cgroup", proc_root, pid))))
    if (e.hierarchy == 0) return e.path;
  return {};
}

Result<std::vector<pid_t>> cgroup_members(const std::string& dir) {
  std::ifstream in(dir + "/cgroup.procs");
  if (!in) return std::unexpected(Error::from_errno("cannot read " + dir + "/cgroup.procs"));
  std::vector<pid_t> pids;
  pid_t p;
  while (in >> p) pids.push_back(p);
  return pids;
}

Result<std::vector<CgroupMember>> cgroup_subtree_members(const std::string& dir) {
  std::vector<CgroupMember> out;
  std::vector<std::string> pending{dir};
  while (!pending.empty()) {
    std::string d = std::move(pending.back());
    pending.pop_back();
    auto pids = cgroup_members(d);
    if (!pids) return std::unexpected(pids.error());
    for (pid_t p : *pids) out.push_back({p, d});
    std::error_code ec;
    std::filesystem::directory_iterator it(d, ec), end;
    if (ec) return std::unexpected(Error{"cannot list " + d + ": " + ec.message(), ec.value()});
    for (; it != end; it.increment(ec)) {
      if (ec) return std::unexpected(Error{"cannot list " + d + ": " + ec.message(), ec.value()});
      if (it->is_directory(ec) && !it->is_symlink(ec)) pending.push_back(it->path().string());
    }
  }
  return out;
}

bool cgroup_freeze_requested(const std::string& dir) {
  std::string text = read_small_file(dir + "/cgroup.freeze");
  return !text.empty() && text[0] == '1';
}

Result<void> cgroup_freeze(const std::string& dir, bool frozen) {
  return write_text(dir + "/cgroup.freeze", frozen ? "1" : "0");
}

bool cgroup_wait_frozen(const std::string& dir, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  std::string events = dir + "/cgroup.events";
  for (;;) {
    if (read_small_file(events).find("frozen 1") != std::string::npos) return true;
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    // cgroup.events signals changes with POLLPRI (kernfs notify); wait for it.
    int fd = ::open(events.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    char buf[256];
    (void)!::read(fd, buf, sizeof buf);
    pollfd pfd{fd, POLLPRI, 0};
    ::poll(&pfd, 1, static_cast<int>(std::min<long>(left.count(), 50)));
    ::close(fd);
  }
}

Result<void> cgroup_kill(const std::string& dir) {
  return write_text(dir + "/cgroup.kill", "1");
}

bool cgroup_kill_available(const std::string& dir) {
  return ::access((dir + "/cgroup.kill").c_str(), W_OK) == 0;
}

}  // namespace gpureap::proc
