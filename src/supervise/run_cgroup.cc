#include "supervise/run_cgroup.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <csignal>
#include <filesystem>
#include <utility>

#include "proc/cgroup_fs.h"
#include "proc/proc_files.h"
#include "proc/proc_parse.h"
#include "proc/run_id.h"

namespace gpureap::supervise {
namespace {

namespace fs = std::filesystem;

using proc::Cgroup2Mount;

std::optional<Cgroup2Mount> find_cgroup2(std::string_view mountinfo) {
  return proc::parse_cgroup2_mount(mountinfo);
}

bool read_whole(int fd, std::string& out) {
  out.clear();
  char buf[4096];
  off_t off = 0;
  for (;;) {
    ssize_t n = ::pread(fd, buf, sizeof buf, off);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    if (n == 0) return true;
    out.append(buf, static_cast<std::size_t>(n));
    off += n;
  }
}

bool write_string(const std::string& path, std::string_view text) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  ssize_t n = ::write(fd, text.data(), text.size());
  int err = errno;
  ::close(fd);
  errno = err;
  return n == static_cast<ssize_t>(text.size());
}

// Value of `key` in a "key value" flat-keyed file such as cgroup.events.
std::optional<long> flat_key(std::string_view text, std::string_view key) {
  while (!text.empty()) {
    auto nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
    if (line.size() > key.size() && line.starts_with(key) && line[key.size()] == ' ') {
      long v = 0;
      auto num = line.substr(key.size() + 1);
      if (std::from_chars(num.data(), num.data() + num.size(), v).ec == std::errc{}) return v;
    }
  }
  return std::nullopt;
}

// Every cgroup directory at or beneath `dir`, parents before children.
std::vector<std::string> cgroup_tree(const std::string& dir) {
  std::vector<std::string> out{dir};
  std::error_code ec;
  for (fs::recursive_directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->is_directory(ec)) out.push_back(it->path().string());
  }
  return out;
}

void append_pids(const std::string& procs_path, std::vector<pid_t>& out) {
  std::string text = proc::read_small_file(procs_path);
  std::string_view rest = text;
  while (!rest.empty()) {
    auto nl = rest.find('\n');
    if (pid_t pid = proc::parse_pid(rest.substr(0, nl)); pid > 0) out.push_back(pid);
    rest.remove_prefix(nl == std::string_view::npos ? rest.size() : nl + 1);
  }
}

// Where a run cgroup may go: beneath our own cgroup first (delegation under
// systemd or a container gives us exactly that subtree), then the mount root.
struct Placement {
  Cgroup2Mount mount;
  std::vector<std::string> parents;
};

std::optional<Placement> placement(std::string* why_none) {
  auto mount = find_cgroup2(proc::read_small_file("/proc/self/mountinfo"));
  if (!mount) {
    *why_none = "cgroup v2 is not mounted";
    return std::nullopt;
  }
  Placement out{*mount, {}};
  auto own = v2_cgroup_path(proc::read_small_file("/proc/self/cgroup"));
  if (own && own->starts_with(mount->root)) {
    std::string rel = own->substr(mount->root == "/" ? 0 : mount->root.size());
    if (rel != "/" && !rel.empty()) out.parents.push_back(mount->mount_point + rel);
  }
  out.parents.push_back(mount->mount_point);
  return out;
}

bool pid_alive(pid_t pid) {
  return ::kill(pid, 0) == 0 || errno == EPERM;
}

}  // namespace

std::optional<std::string> cgroup2_mount(std::string_view mountinfo) {
  auto m = find_cgroup2(mountinfo);
  if (!m) return std::nullopt;
  return m->mount_point;
}

std::optional<std::string> v2_cgroup_path(std::string_view text) {
  while (!text.empty()) {
    auto nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
    if (line.starts_with("0::")) return std::string(line.substr(3));
  }
  return std::nullopt;
}

std::optional<pid_t> run_cgroup_owner(std::string_view name) {
  if (!name.starts_with(kRunCgroupPrefix)) return std::nullopt;
  return proc::run_owner(name.substr(kRunCgroupPrefix.size()));
}

RunCgroup::RunCgroup(std::string dir, std::string cgroup_path, int procs_fd, int events_fd)
    : dir_(std::move(dir)),
      cgroup_path_(std::move(cgroup_path)),
      procs_fd_(procs_fd),
      events_fd_(events_fd) {}

RunCgroup::RunCgroup(RunCgroup&& o) noexcept
    : dir_(std::move(o.dir_)),
      cgroup_path_(std::move(o.cgroup_path_)),
      procs_fd_(std::exchange(o.procs_fd_, -1)),
      events_fd_(std::exchange(o.events_fd_, -1)) {}

RunCgroup& RunCgroup::operator=(RunCgroup&& o) noexcept {
  if (this != &o) {
    std::swap(dir_, o.dir_);
    std::swap(cgroup_path_, o.cgroup_path_);
    std::swap(procs_fd_, o.procs_fd_);
    std::swap(events_fd_, o.events_fd_);
  }
  return *this;
}

RunCgroup::~RunCgroup() {
  if (procs_fd_ >= 0) ::close(procs_fd_);
  if (events_fd_ >= 0) ::close(events_fd_);
}

Result<RunCgroup> RunCgroup::create(const std::string& dir_name) {
  std::string why;
  auto where = placement(&why);
  if (!where) return fail(why);
  const Cgroup2Mount& mount = where->mount;
  for (const auto& parent : where->parents) {
    std::string dir = parent + "/" + dir_name;
    if (::mkdir(dir.c_str(), 0755) != 0) {
      why = Error::from_errno("cannot create " + dir).message;
      continue;
    }
    int procs = ::open((dir + "/cgroup.procs").c_str(), O_WRONLY | O_CLOEXEC);
    int events = ::open((dir + "/cgroup.events").c_str(), O_RDONLY | O_CLOEXEC);
    if (procs < 0 || events < 0) {
      why = Error::from_errno("cannot open " + dir + "/cgroup.procs").message;
      if (procs >= 0) ::close(procs);
      if (events >= 0) ::close(events);
      ::rmdir(dir.c_str());
      continue;
    }
    std::string rel = dir.substr(mount.mount_point.size());
    std::string cg = mount.root == "/" ? rel : mount.root + rel;
    return RunCgroup(dir, cg, procs, events);
  }
  return fail(why);
}

std::vector<pid_t> RunCgroup::members() const {
  std::vector<pid_t> out;
  for (const auto& d : cgroup_tree(dir_)) append_pids(d + "/cgroup.procs", out);
  return out;
}

bool RunCgroup::populated() const {
  std::string text;
  if (!read_whole(events_fd_, text)) return !members().empty();
  return flat_key(text, "populated").value_or(1) != 0;
}

bool RunCgroup::has_kill() const {
  return ::access((dir_ + "/cgroup.kill").c_str(), W_OK) == 0;
}

Result<void> RunCgroup::kill_all(Clock::time_point deadline) {
  // cgroup.kill SIGKILLs every member atomically, including children forked
  // while it runs (CGRP_KILL is checked in cgroup_post_fork()).
  if (has_kill()) {
    if (write_string(dir_ + "/cgroup.kill", "1")) return {};
    return fail(Error::from_errno("cannot write " + dir_ + "/cgroup.kill").message);
  }
  // Before 5.14: freeze so nothing forks while we read the member list, then
  // SIGKILL each (a fatal signal kills a task in the v2 freezer), then thaw.
  // A member in D state never reports frozen: the deadline bounds the wait.
  bool frozen = write_string(dir_ + "/cgroup.freeze", "1");
  if (frozen) {
    std::string text;
    while (Clock::now() < deadline) {
      if (read_whole(events_fd_, text) && flat_key(text, "frozen").value_or(0) == 1) break;
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      pollfd pfd{events_fd_, POLLPRI, 0};
      ::poll(&pfd, 1, static_cast<int>(std::clamp<long>(left.count(), 1, 50)));
    }
  }
  for (pid_t pid : members()) {
    int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
    if (pidfd < 0) continue;
    // The pid came from cgroup.procs; once the pidfd is open, confirm the
    // process it names is still in this cgroup (not a reused pid).
    auto cg = v2_cgroup_path(proc::read_small_file("/proc/" + std::to_string(pid) + "/cgroup"));
    if (cg && cg->starts_with(cgroup_path_))
      ::syscall(SYS_pidfd_send_signal, pidfd, SIGKILL, nullptr, 0);
    ::close(pidfd);
  }
  if (frozen) write_string(dir_ + "/cgroup.freeze", "0");
  return {};
}

bool RunCgroup::wait_empty(Clock::time_point deadline) const {
  for (;;) {
    if (!populated()) return true;
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) return false;
    // kernfs signals a change of cgroup.events with POLLPRI; the cap on the
    // timeout only guards against a missed notification.
    pollfd pfd{events_fd_, POLLPRI, 0};
    ::poll(&pfd, 1, static_cast<int>(std::min<long>(left.count(), 100)));
  }
}

Result<void> RunCgroup::remove() {
  auto tree = cgroup_tree(dir_);
  for (auto it = tree.rbegin(); it != tree.rend(); ++it) {
    if (::rmdir(it->c_str()) != 0 && errno != ENOENT)
      return fail(Error::from_errno("cannot remove " + *it).message, errno);
  }
  return {};
}

std::vector<std::string> sweep_stale_run_cgroups() {
  std::vector<std::string> removed;
  std::string why;
  auto where = placement(&why);
  if (!where) return removed;
  for (const auto& parent : where->parents) {
    DIR* d = ::opendir(parent.c_str());
    if (!d) continue;
    while (dirent* e = ::readdir(d)) {
      auto owner = run_cgroup_owner(e->d_name);
      if (!owner || pid_alive(*owner)) continue;
      std::string path = parent + "/" + e->d_name;
      if (::rmdir(path.c_str()) == 0) removed.push_back(path);
    }
    ::closedir(d);
  }
  return removed;
}

}  // namespace gpureap::supervise
