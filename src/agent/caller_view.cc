#include "agent/caller_view.h"

#include <sys/stat.h>

#include <algorithm>
#include <charconv>
#include <fstream>
#include <sstream>

#include "util/text.h"

namespace gpureap::agent {
namespace {

// The pieces of `text` between runs of any of `separators`.
std::vector<std::string_view> words(std::string_view text, std::string_view separators = " \t") {
  std::vector<std::string_view> out;
  while (!text.empty()) {
    auto start = text.find_first_not_of(separators);
    if (start == std::string_view::npos) break;
    text.remove_prefix(start);
    auto end = text.find_first_of(separators);
    out.push_back(text.substr(0, end));
    if (end == std::string_view::npos) break;
    text.remove_prefix(end);
  }
  return out;
}

std::optional<gid_t> parse_gid(std::string_view text) {
  gid_t g = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), g);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return g;
}

std::optional<std::string> read_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

bool same_namespace(const std::string& proc_root, pid_t pid, const char* kind) {
  struct stat mine {
  }, theirs{};
  return ::stat((proc_root + "/self/ns/" + kind).c_str(), &mine) == 0 &&
         ::stat((proc_root + "/" + std::to_string(pid) + "/ns/" + kind).c_str(), &theirs) == 0 &&
         mine.st_dev == theirs.st_dev && mine.st_ino == theirs.st_ino;
}

// The "Groups:" line of /proc/PID/status: the supplementary groups.
std::vector<gid_t> supplementary_groups(std::string_view status) {
  std::vector<gid_t> out;
  for_each_line(status, [&](std::string_view line) {
    if (!line.starts_with("Groups:")) return;
    for (auto word : words(line.substr(7)))
      if (auto g = parse_gid(word)) out.push_back(*g);
  });
  return out;
}

}  // namespace

std::optional<std::string> proc_mount_options(std::string_view mountinfo,
                                              std::string_view mount_point) {
  // "36 35 0:21 / /proc rw,relatime shared:12 - proc proc rw,hidepid=invisible":
  // the mount point is the fifth field; after the lone "-", the type, the
  // source and the superblock options, where procfs keeps hidepid and gid.
  std::optional<std::string> found;
  for_each_line(mountinfo, [&](std::string_view line) {
    auto f = words(line);
    if (f.size() < 5 || f[4] != mount_point) return;
    auto dash = std::find(f.begin() + 5, f.end(), std::string_view("-"));
    if (f.end() - dash < 4) return;
    if (dash[1] == "proc")
      found = std::string(dash[3]);
    else
      found.reset();  // something else mounted over it
  });
  return found;
}

bool proc_shows_other_users(std::string_view options, const std::vector<gid_t>& groups) {
  std::string_view hidepid = "0";
  std::optional<gid_t> exempt;
  for (std::string_view option : words(options, ",")) {
    if (option.starts_with("hidepid=")) hidepid = option.substr(8);
    if (option.starts_with("gid=")) exempt = parse_gid(option.substr(4));
  }
  if (hidepid == "0" || hidepid == "off") return true;
  return exempt && std::find(groups.begin(), groups.end(), *exempt) != groups.end();
}

bool peer_sees_other_users(const Peer& peer, const std::string& proc_root) {
  if (peer.pid <= 0) return false;
  // A caller in a user namespace of its own may have mounted the procfs it looks
  // at; one in another PID namespace sees other pids than the agent's.
  if (!same_namespace(proc_root, peer.pid, "user") || !same_namespace(proc_root, peer.pid, "pid"))
    return false;
  const std::string dir = proc_root + "/" + std::to_string(peer.pid);
  auto mountinfo = read_file(dir + "/mountinfo");
  auto status = read_file(dir + "/status");
  if (!mountinfo || !status) return false;
  // The peer's own /proc mount, as its mountinfo names it (not our proc root's path).
  auto options = proc_mount_options(*mountinfo, "/proc");
  if (!options) return false;
  std::vector<gid_t> groups = supplementary_groups(*status);
  groups.push_back(peer.gid);
  return proc_shows_other_users(*options, groups);
}

}  // namespace gpureap::agent
