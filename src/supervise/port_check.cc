#include "supervise/port_check.h"

#include <dirent.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <map>

#include "proc/proc_files.h"
#include "proc/proc_parse.h"
#include "proc/tcp_listen.h"
#include "util/text.h"

namespace gpureap::supervise {
namespace {

std::vector<proc::ListeningSocket> listening(const std::string& proc_root) {
  if (auto asked = proc::listening_tcp_sockets()) return std::move(*asked);
  std::vector<proc::ListeningSocket> out;
  for (const char* table : {"tcp", "tcp6"})
    for (const auto& s :
         proc::parse_listening_tcp(proc::read_small_file(fmt::format("{}/net/{}", proc_root, table))))
      out.push_back(s);
  return out;
}

// The first process (by pid) with an fd on one of `inodes`, for each inode.
std::map<std::uint64_t, pid_t> socket_holders(const std::map<std::uint64_t, unsigned>& inodes,
                                              const std::string& proc_root) {
  std::map<std::uint64_t, pid_t> out;
  DIR* procs = ::opendir(proc_root.c_str());
  if (!procs) return out;
  std::vector<pid_t> pids;
  while (const dirent* d = ::readdir(procs)) {
    char* end = nullptr;
    const long pid = std::strtol(d->d_name, &end, 10);
    if (pid > 0 && end && *end == '\0') pids.push_back(static_cast<pid_t>(pid));
  }
  ::closedir(procs);
  std::sort(pids.begin(), pids.end());
  for (pid_t pid : pids) {
    for (std::uint64_t inode : proc::socket_inodes(pid, proc_root))
      if (inodes.contains(inode)) out.emplace(inode, pid);
    if (out.size() == inodes.size()) break;
  }
  return out;
}

}  // namespace

std::vector<OpenPort> ports_still_listening(const std::vector<unsigned>& ports,
                                            const std::string& proc_root) {
  if (ports.empty()) return {};
  std::map<std::uint64_t, unsigned> inodes;  // socket inode -> port
  for (const auto& s : listening(proc_root))
    if (std::find(ports.begin(), ports.end(), s.port) != ports.end()) inodes.emplace(s.inode, s.port);
  if (inodes.empty()) return {};
  const auto holders = socket_holders(inodes, proc_root);
  std::map<unsigned, OpenPort> open;  // one per port
  for (const auto& [inode, port] : inodes) {
    OpenPort p{port, 0, ""};
    if (auto h = holders.find(inode); h != holders.end()) {
      p.pid = h->second;
      p.comm = std::string(
          trim(proc::read_small_file(fmt::format("{}/{}/comm", proc_root, p.pid))));
    }
    if (!open.contains(port) || (open[port].pid == 0 && p.pid != 0)) open[port] = p;
  }
  std::vector<OpenPort> out;
  for (auto& [port, p] : open) out.push_back(std::move(p));
  return out;
}

}  // namespace gpureap::supervise
