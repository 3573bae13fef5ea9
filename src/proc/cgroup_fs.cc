#include "proc/cgroup_fs.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

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

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

}  // namespace

Result<std::string> cgroup2_mount(std::string_view proc_root) {
  std::ifstream in(std::string(proc_root) + "/self/mountinfo");
  if (!in) return fail("cannot read mountinfo");
  std::string line;
  while (std::getline(in, line)) {
    // "36 35 0:30 / /sys/fs/cgroup/unified rw,... shared:9 - cgroup2 cgroup2 rw,..."
    auto dash = line.find(" - ");
    if (dash == std::string::npos) continue;
    std::istringstream after(line.substr(dash + 3));
    std::string fstype;
    after >> fstype;
    if (fstype != "cgroup2") continue;
    std::istringstream before(line.substr(0, dash));
    std::string id, parent, devno, root, mount_point;
    before >> id >> parent >> devno >> root >> mount_point;
    if (root == "/") return mount_point;
  }
  return fail("no cgroup2 file system is mounted");
}

std::string cgroup2_path_of(pid_t pid, std::string_view proc_root) {
  std::ifstream in(fmt::format("{}/{}/cgroup", proc_root, pid));
  std::string line;
  while (std::getline(in, line))
    if (line.starts_with("0::")) return line.substr(3);
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

Result<void> cgroup_freeze(const std::string& dir, bool frozen) {
  return write_text(dir + "/cgroup.freeze", frozen ? "1" : "0");
}

bool cgroup_wait_frozen(const std::string& dir, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  std::string events = dir + "/cgroup.events";
  for (;;) {
    if (read_text(events).find("frozen 1") != std::string::npos) return true;
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
