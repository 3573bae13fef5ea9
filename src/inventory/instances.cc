#include "inventory/instances.h"

#include <dirent.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <set>

#include "inventory/inventory.h"
#include "proc/proc_files.h"
#include "proc/proc_parse.h"
#include "proc/tcp_listen.h"

namespace gpureap::inventory {
namespace {

// `orphaned_groups`: the (container, pgid) pairs with an orphaned holder. A group whose
// workers were orphaned may hold live holders too (a wrapper such as `timeout` or a job
// script made the group, and something else of it still runs): the orphans are the
// crashed server, keyed by the pgid; the group's live holders are another instance,
// "<pgid>-live", never mixed into the one `free --orphans --instance` is told to free.
std::string instance_key(const proc::Holder& h, InstanceKind& kind,
                         const std::set<std::pair<std::string, pid_t>>& orphaned_groups,
                         const std::map<pid_t, std::set<pid_t>>& by_dead_parent) {
  if (!h.run_id.empty()) {
    kind = InstanceKind::run;
    return h.run_id;
  }
  // One dead parent's workers, in groups of their own (each made its own group, or
  // a launcher put each in one): the crash is one instance, keyed "parent-<pid>".
  if (auto it = by_dead_parent.find(h.dead_parent); h.dead_parent > 0 &&
                                                     it != by_dead_parent.end() &&
                                                     it->second.size() >= 2) {
    kind = InstanceKind::parent;
    return fmt::format("parent-{}", h.dead_parent);
  }
  if (h.pgid > 0) {
    kind = InstanceKind::process_group;
    const bool split = !h.orphaned && orphaned_groups.contains({h.container, h.pgid});
    return std::to_string(h.pgid) + (split ? "-live" : "");
  }
  kind = InstanceKind::process;
  return std::to_string(h.id.pid);
}

// The launcher's stat and command line, when this /proc shows it alive.
void read_launcher(Instance& in, const std::string& proc_root) {
  if (in.launcher_pid <= 0 || in.kind == InstanceKind::parent) return;
  const std::string dir = fmt::format("{}/{}", proc_root, in.launcher_pid);
  auto stat = proc::parse_stat(proc::read_small_file(dir + "/stat"));
  if (!stat || stat->state == 'Z' || stat->state == 'X') {
    if (in.kind == InstanceKind::run) in.launcher_pid = 0;  // only a candidate
    return;
  }
  // A group leader that left its group (setpgid) is not this instance's launcher.
  if (in.kind == InstanceKind::process_group && stat->pgid != in.pgid) return;
  const std::string cmdline = proc::read_small_file(dir + "/cmdline");
  proc::EngineIdentity launcher = proc::recognise_engine_cmdline(cmdline, stat->comm);
  // Orphaned workers lost their launcher: a live leader of their group that is no engine
  // launcher (`timeout`, a job script) only made the group. A run's members' parent is
  // its launcher only when it is an engine's (not the run's gpureap-reaper, a shell).
  if ((in.kind == InstanceKind::run || (in.orphaned == in.members.size() && in.orphaned > 0)) &&
      launcher.role != proc::EngineRole::launcher) {
    in.launcher_pid = 0;
    return;
  }
  in.launcher_alive = true;
  in.launcher_comm = stat->comm;
  in.launcher_cmdline = proc::format_cmdline(cmdline);
  if (launcher.engine != proc::Engine::none && launcher.engine != proc::Engine::python)
    in.engine = launcher.engine;
  if (launcher.model) in.model = launcher.model;
  if (launcher.port) in.port = launcher.port;
}

// The TCP ports its members listen on: the "port 30000 is in use" a relaunch meets when
// a crashed server's workers still hold its sockets. From the members' fd links, matched
// against the kernel's listening sockets (asked once per look, and only when some
// instance needs it: proc/tcp_listen.h).
std::vector<unsigned> listening_ports(
    const Instance& in, const std::string& proc_root,
    std::optional<std::vector<proc::ListeningSocket>>& listening) {
  std::set<std::uint64_t> inodes;
  for (const auto& m : in.members) inodes.merge(proc::socket_inodes(m.id.pid, proc_root));
  if (inodes.empty()) return {};
  if (!listening) {
    // The kernel's table through sock_diag; where that is refused, the /proc tables of the
    // first member's network namespace (slower on a large host: every socket is listed).
    auto asked = proc::listening_tcp_sockets();
    if (asked) {
      listening = std::move(*asked);
    } else {
      listening.emplace();
      for (const char* table : {"tcp", "tcp6"})
        for (const auto& s : proc::parse_listening_tcp(proc::read_small_file(
                 fmt::format("{}/{}/net/{}", proc_root, in.members.front().id.pid, table))))
          listening->push_back(s);
    }
  }
  std::set<unsigned> ports;
  for (const auto& s : *listening)
    if (inodes.contains(s.inode)) ports.insert(s.port);
  return {ports.begin(), ports.end()};
}

}  // namespace

std::string_view enum_name(InstanceKind kind) {
  switch (kind) {
    case InstanceKind::run:
      return "run";
    case InstanceKind::process_group:
      return "process_group";
    case InstanceKind::process:
      return "process";
    case InstanceKind::parent:
      return "parent";
  }
  return {};
}

std::vector<Instance> find_instances(Inventory& inv, const std::string& proc_root) {
  std::set<std::pair<std::string, pid_t>> orphaned_groups;
  for (const auto& view : inv.gpus)
    for (const auto& gh : view.holders)
      if (gh.uses_gpu && gh.holder.orphaned && gh.holder.pgid > 0)
        orphaned_groups.insert({gh.holder.container, gh.holder.pgid});
  // The groups each dead parent's GPU users are in: a key of its own only when they
  // span two or more groups (within one group the group is the instance already).
  std::map<pid_t, std::set<pid_t>> by_dead_parent;
  for (const auto& view : inv.gpus)
    for (const auto& gh : view.holders)
      if (gh.uses_gpu && gh.holder.dead_parent > 0)
        by_dead_parent[gh.holder.dead_parent].insert(gh.holder.pgid);
  // Keyed by (container, key): two containers' groups never merge, whatever their ids.
  std::map<std::pair<std::string, std::string>, Instance> by_key;
  std::map<proc::ProcessId, std::string> key_of;  // each GPU user's instance
  for (auto& view : inv.gpus) {
    for (auto& gh : view.holders) {
      proc::Holder& h = gh.holder;
      if (!gh.uses_gpu) continue;
      InstanceKind kind = InstanceKind::process;
      std::string key = instance_key(h, kind, orphaned_groups, by_dead_parent);
      h.instance = key;
      key_of.emplace(h.id, key);
      Instance& in = by_key[{h.container, key}];
      if (in.key.empty()) {
        in.key = key;
        in.kind = kind;
        in.pgid = h.pgid;
        in.run_id = h.run_id;
        in.container = h.container;
        in.launcher_pid = kind == InstanceKind::process_group ? h.pgid
                          : kind == InstanceKind::parent      ? h.dead_parent
                          : kind == InstanceKind::run && h.ppid > 1 ? h.ppid  // a candidate
                                                              : 0;
        in.run_gone = kind == InstanceKind::run && h.run_gone;
      }
      if (!h.run_gone) in.run_gone = false;
      if (h.run_in_cgroup) in.run_in_cgroup = true;
      if (!gpu::contains(in.gpus, view.info.id)) in.gpus.push_back(view.info.id);
      if (gh.gpu_bytes)
        in.bytes += *gh.gpu_bytes;
      else
        in.bytes_known = false;
      auto member = std::find_if(in.members.begin(), in.members.end(),
                                 [&](const InstanceMember& m) { return m.id == h.id; });
      if (member != in.members.end()) continue;  // the same process on another GPU
      in.members.push_back({h.id, h.engine.role, proc::rank_label(h.engine.ranks)});
      // Without a recognised launcher, the members say what it is (read_launcher's
      // engine wins); a member that is itself the launcher (a single-process server)
      // names the model and port.
      if (in.engine == proc::Engine::none && h.engine.engine != proc::Engine::none &&
          h.engine.engine != proc::Engine::python)
        in.engine = h.engine.engine;
      if (h.engine.role == proc::EngineRole::launcher) {
        if (h.engine.model) in.model = h.engine.model;
        if (h.engine.port) in.port = h.engine.port;
      }
      if (h.orphaned) ++in.orphaned;
      if (h.detached) ++in.detached;
    }
  }
  // A key two containers share names neither: each container's is qualified by it
  // ("sglang-1@docker:3f2a1b…"; the host's keeps the bare key), so every view, the
  // evidence under a heading and `--instance` name exactly one instance (W4-11(e): two
  // containers' `gpureap run --name sglang` are both sglang-1 inside their namespaces).
  std::map<std::string, std::size_t> containers_of;
  for (const auto& [k, in] : by_key) ++containers_of[k.second];
  for (auto& [k, in] : by_key)
    if (containers_of[k.second] > 1 && !k.first.empty()) in.key = k.second + "@" + k.first;
  for (auto& view : inv.gpus)
    for (auto& gh : view.holders)
      if (gh.uses_gpu && !gh.holder.instance.empty())
        if (auto it = by_key.find({gh.holder.container, gh.holder.instance});
            it != by_key.end() && it->second.key != gh.holder.instance) {
          key_of[gh.holder.id] = it->second.key;
          gh.holder.instance = it->second.key;
        }
  // Holders that only have a node open keep the instance of the same process.
  for (auto& view : inv.gpus)
    for (auto& gh : view.holders)
      if (!gh.uses_gpu && gh.holder.instance.empty())
        if (auto it = key_of.find(gh.holder.id); it != key_of.end())
          gh.holder.instance = it->second;

  std::vector<Instance> out;
  std::optional<std::vector<proc::ListeningSocket>> listening;  // asked at most once
  for (auto& [k, in] : by_key) {
    gpu::normalize(in.gpus);
    std::sort(in.members.begin(), in.members.end(),
              [](const InstanceMember& a, const InstanceMember& b) { return a.id < b.id; });
    read_launcher(in, proc_root);
    // A launcher gone from this /proc that the agent saw die names what it ran. Its pid
    // is the group's id, which the kernel does not reuse while the group has members.
    if (!in.launcher_alive && in.kind == InstanceKind::process_group && in.launcher_pid > 0)
      for (const auto& dead : inv.dead_launchers)
        if (dead.pid == in.pgid) remember_dead_launcher(in, dead);
    // One dead parent's workers: it is their launcher, dead by definition.
    if (in.kind == InstanceKind::parent)
      for (const auto& dead : inv.dead_launchers)
        if (dead.pid == in.launcher_pid) remember_dead_launcher(in, dead);
    // Only where it explains something: a server whose launcher is gone.
    if (!in.launcher_alive && in.orphaned > 0) in.ports = listening_ports(in, proc_root, listening);
    out.push_back(std::move(in));
  }
  std::sort(out.begin(), out.end(), [](const Instance& a, const Instance& b) {
    if (a.gpus.empty() != b.gpus.empty()) return !a.gpus.empty();
    if (!a.gpus.empty() && a.gpus.front() != b.gpus.front()) return a.gpus.front() < b.gpus.front();
    return a.key < b.key;
  });
  return out;
}

void remember_dead_launcher(Instance& in, const proc::DeadParent& launcher) {
  proc::EngineIdentity who = proc::recognise_engine_cmdline(launcher.cmdline, launcher.comm);
  in.launcher_comm = launcher.comm;
  in.launcher_cmdline = proc::format_cmdline(launcher.cmdline);
  if (launcher.died_at > 0) in.launcher_died_at = launcher.died_at;
  if (who.engine != proc::Engine::none && who.engine != proc::Engine::python)
    in.engine = who.engine;
  if (who.model) in.model = who.model;
  if (who.port) in.port = who.port;
}

const Instance* find_instance(const std::vector<Instance>& instances, std::string_view key) {
  for (const auto& in : instances)
    if (in.key == key) return &in;
  return nullptr;
}

std::vector<std::string> keys_in_containers(const std::vector<Instance>& instances,
                                            std::string_view key) {
  std::vector<std::string> out;
  for (const auto& in : instances)
    if (in.key.size() > key.size() && in.key.starts_with(key) && in.key[key.size()] == '@')
      out.push_back(in.key);
  return out;
}

}  // namespace gpureap::inventory
