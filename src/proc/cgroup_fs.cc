#include "proc/cgroup_fs.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <csignal>
#include <filesystem>
#include <span>

#include "proc/proc_files.h"
#include "proc/proc_parse.h"
#include "proc/process_handle.h"
#include "util/fd.h"
#include "util/poll.h"
#include "util/text.h"

namespace gpureap::proc {
namespace {

using Clock = std::chrono::steady_clock;

// The kernel's cgroup.events notifications can be missed only by a bug; this
// cap on each wait keeps such a bug from costing more than a moment.
constexpr std::chrono::milliseconds kEventsRecheck{50};

// One write of `text` to a cgroup control file (cgroup.freeze, cgroup.kill).
Result<void> write_text(const std::string& path, std::string_view text) {
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
  if (!fd.valid()) return std::unexpected(Error::from_errno("cannot open " + path));
  ssize_t n = ::write(fd.get(), text.data(), text.size());
  if (n != static_cast<ssize_t>(text.size()))
    return std::unexpected(Error::from_errno("cannot write " + path));
  return {};
}

// Value of `key` in a "key value" flat-keyed file such as cgroup.events.
std::optional<long> flat_key(std::string_view text, std::string_view key) {
  std::optional<long> value;
  for_each_line(text, [&](std::string_view line) {
    if (value || line.size() <= key.size() || !line.starts_with(key) || line[key.size()] != ' ')
      return;
    long v = 0;
    auto num = line.substr(key.size() + 1);
    if (std::from_chars(num.data(), num.data() + num.size(), v).ec == std::errc{}) value = v;
  });
  return value;
}

// The whole of an open file, from offset 0 (pread: one fd is re-read in place).
bool read_whole(int fd, std::string& out) {
  out.clear();
  char buf[4096];
  for (;;) {
    ssize_t n = ::pread(fd, buf, sizeof buf, static_cast<off_t>(out.size()));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return false;
    if (n == 0) return true;
    out.append(buf, static_cast<std::size_t>(n));
  }
}

// Reads cgroup.events of `dir` until `key` has the value `want` or `deadline`
// passes. kernfs raises POLLPRI on a change since the last read of the same
// open file, so read-then-poll on one fd misses nothing. nullopt when
// cgroup.events cannot be opened.
std::optional<bool> wait_events(const std::string& dir, std::string_view key, long want,
                                Clock::time_point deadline) {
  const std::string path = dir + "/cgroup.events";
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return std::nullopt;
  std::string text;
  for (;;) {
    if (!read_whole(fd.get(), text)) return std::nullopt;
    if (flat_key(text, key) == want) return true;
    if (Clock::now() >= deadline) return false;
    poll_until(fd.get(), POLLPRI, std::min(deadline, Clock::now() + kEventsRecheck));
  }
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
  std::optional<Cgroup2Mount> found;
  for_each_line(mountinfo, [&](std::string_view line) {
    if (found) return;
    // "<id> <parent> <maj:min> <root> <mount point> <options> [optional...] - <fstype> <source>
    // <super>"
    auto fields = split_spaces(line);
    auto dash = std::find(fields.begin(), fields.end(), std::string_view("-"));
    if (fields.size() < 5 || dash == fields.end() || dash + 1 == fields.end()) return;
    if (*(dash + 1) != "cgroup2") return;
    found = Cgroup2Mount{unescape_mount_path(fields[3]), unescape_mount_path(fields[4])};
  });
  return found;
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

std::optional<std::string> parse_cgroup2_path(std::string_view proc_pid_cgroup) {
  for (auto& e : parse_cgroup(proc_pid_cgroup))
    if (e.hierarchy == 0) return std::move(e.path);
  return std::nullopt;
}

std::string cgroup2_path_of(pid_t pid, std::string_view proc_root) {
  return parse_cgroup2_path(read_small_file(fmt::format("{}/{}/cgroup", proc_root, pid)))
      .value_or("");
}

std::string own_cgroup2_path(std::string_view proc_root) {
  return parse_cgroup2_path(read_small_file(fmt::format("{}/self/cgroup", proc_root)))
      .value_or("");
}

Result<std::vector<pid_t>> cgroup_members(const std::string& dir) {
  const std::string path = dir + "/cgroup.procs";
  ReadBuffer buf;
  if (int err = read_file_at(AT_FDCWD, path.c_str(), buf); err != 0)
    return std::unexpected(Error::from_errno("cannot read " + path, err));
  std::vector<pid_t> pids;
  for_each_line(buf.view(), [&](std::string_view line) {
    if (pid_t pid = parse_pid(line); pid > 0) pids.push_back(pid);
  });
  return pids;
}

Result<std::vector<std::string>> cgroup_subtree_dirs(const std::string& dir) {
  std::vector<std::string> out{dir};
  for (std::size_t next = 0; next < out.size(); ++next) {
    const std::string d = out[next];  // copied: `out` grows below
    std::error_code ec;
    std::filesystem::directory_iterator it(d, ec), end;
    for (; !ec && it != end; it.increment(ec))
      if (it->is_directory(ec) && !it->is_symlink(ec)) out.push_back(it->path().string());
    if (ec && !(next > 0 && ec == std::errc::no_such_file_or_directory))
      return std::unexpected(Error{"cannot list " + d + ": " + ec.message(), ec.value()});
  }
  return out;
}

Result<std::vector<CgroupMember>> cgroup_subtree_members(const std::string& dir) {
  auto dirs = cgroup_subtree_dirs(dir);
  if (!dirs) return std::unexpected(dirs.error());
  std::vector<CgroupMember> out;
  for (const auto& d : *dirs) {
    auto pids = cgroup_members(d);
    // A cgroup below `dir` removed since it was listed had no members left.
    if (!pids && d != dir && pids.error().sys_errno == ENOENT && ::access(d.c_str(), F_OK) != 0)
      continue;
    if (!pids) return std::unexpected(pids.error());
    for (pid_t p : *pids) out.push_back({p, d});
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

bool cgroup_wait_frozen(const std::string& dir, Clock::time_point deadline) {
  return wait_events(dir, "frozen", 1, deadline).value_or(false);
}

bool cgroup_wait_frozen(const std::string& dir, std::chrono::milliseconds timeout) {
  return cgroup_wait_frozen(dir, Clock::now() + timeout);
}

bool cgroup_populated(const std::string& dir) {
  ReadBuffer buf;
  if (read_file_at(AT_FDCWD, (dir + "/cgroup.events").c_str(), buf) == 0)
    if (auto populated = flat_key(buf.view(), "populated")) return *populated != 0;
  auto members = cgroup_subtree_members(dir);
  return !members || !members->empty();
}

bool cgroup_wait_empty(const std::string& dir, Clock::time_point deadline) {
  if (auto empty = wait_events(dir, "populated", 0, deadline)) return *empty;
  return !cgroup_populated(dir);
}

Result<void> cgroup_kill(const std::string& dir) {
  return write_text(dir + "/cgroup.kill", "1");
}

bool cgroup_kill_available(const std::string& dir) {
  return ::access((dir + "/cgroup.kill").c_str(), W_OK) == 0;
}

Result<void> cgroup_kill_all(const std::string& dir, Clock::time_point deadline,
                             std::string_view proc_root) {
  // cgroup.kill SIGKILLs every member atomically, including children forked
  // while it runs (CGRP_KILL is checked in cgroup_post_fork()).
  if (cgroup_kill_available(dir)) return cgroup_kill(dir);
  auto mount = cgroup2_mount(proc_root);
  if (!mount) return std::unexpected(mount.error());
  // Before 5.14: freeze so nothing forks while we read the member list, then
  // SIGKILL each (a fatal signal kills a task in the v2 freezer), then thaw.
  // A member in D state never reports frozen: the deadline bounds the wait.
  const bool frozen = cgroup_freeze(dir, true).has_value();
  if (frozen) cgroup_wait_frozen(dir, deadline);
  auto members = cgroup_subtree_members(dir);
  for (const auto& m : members ? *members : std::span<const CgroupMember>{}) {
    auto id = read_process_id(m.pid, proc_root);
    if (!id) continue;
    auto handle = ProcessHandle::open(*id, proc_root);
    if (!handle) continue;
    // The pid came from cgroup.procs; with the pidfd open, confirm that the
    // process it names is still in this subtree.
    std::string member_dir = mount->dir_of(cgroup2_path_of(m.pid, proc_root));
    if (member_dir == dir || member_dir.starts_with(dir + "/")) (void)handle->signal(SIGKILL);
  }
  if (frozen) (void)cgroup_freeze(dir, false);
  if (!members) return std::unexpected(members.error());
  return {};
}

}  // namespace gpureap::proc
