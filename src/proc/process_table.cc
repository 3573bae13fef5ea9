#include "proc/process_table.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <pwd.h>
#include <sys/stat.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>

#include "proc/proc_files.h"
#include "proc/proc_parse.h"
#include "util/units.h"

namespace gpureap::proc {
namespace {

std::string pid_path(std::string_view proc_root, pid_t pid, std::string_view leaf) {
  return fmt::format("{}/{}/{}", proc_root, pid, leaf);
}

}  // namespace

Result<std::vector<ProcessEntry>> read_process_table(std::string_view proc_root) {
  const std::string root(proc_root);
  UniqueFd proc_fd(open_dir_at(AT_FDCWD, root.c_str()));
  if (!proc_fd.valid()) return std::unexpected(Error::from_errno("cannot open " + root));
  ReadBuffer scratch;
  std::vector<pid_t> pids;
  if (int err = list_pids(proc_fd.get(), scratch, pids); err != 0)
    return std::unexpected(Error::from_errno("cannot list " + root, err));
  return read_process_table_at(proc_fd.get(), std::move(pids));
}

std::vector<ProcessEntry> read_process_table_at(int proc_fd, std::vector<pid_t> pids) {
  std::sort(pids.begin(), pids.end());
  ReadBuffer scratch;
  std::vector<ProcessEntry> table;
  table.reserve(pids.size());
  for (pid_t pid : pids) {
    // Both reads go through one directory fd so that uid and stat describe the
    // same process even if the pid is reused meanwhile.
    UniqueFd dir(open_dir_at(proc_fd, std::to_string(pid).c_str()));
    if (!dir.valid()) continue;  // exited
    struct stat st {};
    if (::fstat(dir.get(), &st) != 0) continue;
    if (read_file_at(dir.get(), "stat", scratch) != 0) continue;
    auto stat = parse_stat(scratch.view());
    if (!stat) continue;
    table.push_back(ProcessEntry{ProcessId{pid, stat->start_time}, stat->ppid, stat->pgid,
                                 stat->sid, st.st_uid, stat->state, stat->flags,
                                 std::move(stat->comm), stat->is_kernel_thread(),
                                 stat->tty_nr});
  }
  return table;
}

const ProcessEntry* find_process(const std::vector<ProcessEntry>& table, const ProcessId& id) {
  auto e = std::find_if(table.begin(), table.end(), [&](const ProcessEntry& p) { return p.id == id; });
  return e == table.end() ? nullptr : &*e;
}

const ProcessEntry* find_process(const std::vector<ProcessEntry>& table, pid_t pid) {
  auto e = std::find_if(table.begin(), table.end(),
                        [&](const ProcessEntry& p) { return p.id.pid == pid; });
  return e == table.end() ? nullptr : &*e;
}

std::vector<ProcessId> descendants(const std::vector<ProcessEntry>& table, pid_t root) {
  std::multimap<pid_t, const ProcessEntry*> children;
  for (const auto& e : table) children.emplace(e.ppid, &e);
  std::vector<ProcessId> out;
  std::set<pid_t> seen{root};  // a snapshot taken across pid reuse could contain a cycle
  std::vector<pid_t> frontier{root};
  for (std::size_t i = 0; i < frontier.size(); ++i) {
    auto [b, e] = children.equal_range(frontier[i]);
    for (auto it = b; it != e; ++it) {
      const ProcessEntry* child = it->second;
      if (!seen.insert(child->id.pid).second) continue;
      out.push_back(child->id);
      frontier.push_back(child->id.pid);
    }
  }
  return out;
}

std::vector<pid_t> ancestors(pid_t pid, std::string_view proc_root) {
  std::vector<pid_t> chain;
  std::set<pid_t> seen{pid};
  ReadBuffer buf;
  for (pid_t cur = pid;;) {
    if (read_file_at(AT_FDCWD, pid_path(proc_root, cur, "stat").c_str(), buf) != 0) break;
    auto st = parse_stat(buf.view());
    if (!st || st->ppid <= 0 || !seen.insert(st->ppid).second) break;
    chain.push_back(st->ppid);
    cur = st->ppid;
  }
  return chain;
}

std::string read_cmdline(pid_t pid, std::string_view proc_root) {
  return format_cmdline(read_small_file(pid_path(proc_root, pid, "cmdline")));
}

std::string read_wchan(pid_t pid, std::string_view proc_root) {
  std::string w = read_small_file(pid_path(proc_root, pid, "wchan"));
  while (!w.empty() && (w.back() == '\n' || w.back() == ' ')) w.pop_back();
  return w == "0" ? std::string() : w;
}

std::string read_stack(pid_t pid, std::string_view proc_root) {
  return read_small_file(pid_path(proc_root, pid, "stack"));
}

std::vector<ThreadState> read_thread_states_at(int pid_dirfd) {
  std::vector<ThreadState> threads;
  UniqueFd task(open_dir_at(pid_dirfd, "task"));
  if (!task.valid()) return threads;
  ReadBuffer scratch;
  std::vector<pid_t> tids;
  if (list_pids(task.get(), scratch, tids) != 0) return threads;
  std::sort(tids.begin(), tids.end());
  for (pid_t tid : tids) {
    if (read_file_at(task.get(), fmt::format("{}/stat", tid).c_str(), scratch) != 0) continue;
    threads.push_back(ThreadState{tid, parse_stat_state(scratch.view())});
  }
  return threads;
}

std::vector<ThreadState> read_thread_states(pid_t pid, std::string_view proc_root) {
  UniqueFd dir(open_dir_at(AT_FDCWD, fmt::format("{}/{}", proc_root, pid).c_str()));
  if (!dir.valid()) return {};
  return read_thread_states_at(dir.get());
}

std::string user_name(uid_t uid) {
  passwd pw{};
  passwd* found = nullptr;
  std::vector<char> buf(16384);
  if (::getpwuid_r(uid, &pw, buf.data(), buf.size(), &found) == 0 && found != nullptr)
    return found->pw_name;
  return std::to_string(uid);
}

Result<uid_t> user_uid(const std::string& text) {
  struct passwd pw {};
  struct passwd* out = nullptr;
  char buf[1024];
  if (::getpwnam_r(text.c_str(), &pw, buf, sizeof buf, &out) == 0 && out) return out->pw_uid;
  if (!text.empty() && text.find_first_not_of("0123456789") == std::string::npos) {
    // (uid_t)-1 is "no uid" to the kernel, so 4294967294 is the largest.
    auto uid = parse_count(text, "uid", 0, 4294967294U);
    if (!uid) return std::unexpected(uid.error());
    return static_cast<uid_t>(*uid);
  }
  return fail(fmt::format("unknown user '{}'", text));
}

}  // namespace gpureap::proc
