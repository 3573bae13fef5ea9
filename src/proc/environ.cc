#include "proc/environ.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <vector>

#include "proc/proc_files.h"
#include "proc/proc_parse.h"

namespace gpureap::proc {

Result<EnvEntry> parse_env_entry(std::string_view text) {
  auto eq = text.find('=');
  if (eq == std::string_view::npos || eq == 0)
    return fail(fmt::format("'{}': expected NAME=VALUE (VALUE may be empty)", text));
  return EnvEntry{std::string(text.substr(0, eq)), std::string(text.substr(eq + 1))};
}

namespace {

// Calls fn(entry) for each NUL-separated entry until it returns true.
template <typename Fn>
bool any_entry(std::string_view environ, Fn&& fn) {
  while (!environ.empty()) {
    auto end = environ.find('\0');
    std::string_view entry = environ.substr(0, end);
    environ.remove_prefix(end == std::string_view::npos ? environ.size() : end + 1);
    if (fn(entry)) return true;
  }
  return false;
}

}  // namespace

std::optional<std::string_view> environ_value(std::string_view environ, std::string_view name) {
  std::optional<std::string_view> out;
  any_entry(environ, [&](std::string_view entry) {
    if (entry.size() <= name.size() || !entry.starts_with(name) || entry[name.size()] != '=')
      return false;
    out = entry.substr(name.size() + 1);
    return true;
  });
  return out;
}

bool environ_has(std::string_view environ, const EnvEntry& e) {
  return any_entry(environ, [&](std::string_view entry) {
    return entry.size() == e.name.size() + 1 + e.value.size() && entry.starts_with(e.name) &&
           entry[e.name.size()] == '=' && entry.substr(e.name.size() + 1) == e.value;
  });
}

namespace {

// One of the files of /proc/PID that show the process's memory: the environment block
// and the argument vector.
struct MemoryFile {
  const char* file;  // "environ", "cmdline"
  const char* what;  // "environment", "command line"
};
constexpr MemoryFile kEnviron{"environ", "environment"};
constexpr MemoryFile kCmdline{"cmdline", "command line"};

Result<std::string> gone(pid_t pid) {
  return fail(fmt::format("pid {} has exited", pid), ESRCH);
}

// `f` of a live thread under the open /proc/PID of the zombie leader `pid`: every
// thread shares the leader's memory, so any live one gives the process's answer.
// ESRCH when no thread is left to read; the last denial when every live one was denied.
Result<std::string> read_from_live_thread(int dirfd, pid_t pid, MemoryFile f) {
  UniqueFd task(open_dir_at(dirfd, "task"));
  if (!task.valid()) return gone(pid);
  ReadBuffer buf;
  std::vector<pid_t> tids;
  if (list_pids(task.get(), buf, tids) != 0) return gone(pid);
  int denied = 0;
  for (pid_t tid : tids) {
    if (tid == pid) continue;  // the dead main thread
    std::string path = fmt::format("task/{}/{}", tid, f.file);
    int err = read_file_at(dirfd, path.c_str(), buf);
    if (err == 0) return std::string(buf.view());
    if (!process_gone(err)) denied = err;
  }
  if (denied == 0) return gone(pid);
  return std::unexpected(Error::from_errno(
      fmt::format("the {} of pid {} (a zombie leader: read from its live threads' task/TID/{}) "
                  "cannot be read",
                  f.what, pid, f.file),
      denied));
}

// `f` of the process `id`, read through its /proc/PID directory, whose start time is
// checked after the read (a pid reused meanwhile is not `id`).
Result<std::string> read_memory_file(const ProcessId& id, MemoryFile f,
                                     std::string_view proc_root) {
  std::string dir = fmt::format("{}/{}", proc_root, id.pid);
  UniqueFd dirfd(open_dir_at(AT_FDCWD, dir.c_str()));
  if (dirfd.get() < 0) {
    if (process_gone(errno)) return gone(id.pid);
    return std::unexpected(Error::from_errno(fmt::format("cannot open {}", dir)));
  }
  ReadBuffer buf;
  const int err = read_file_at(dirfd.get(), f.file, buf);
  if (err != 0 && !process_gone(err))
    return std::unexpected(Error::from_errno(
        fmt::format("the {} of pid {} ({}/{}) cannot be read", f.what, id.pid, dir, f.file), err));
  std::string text(buf.view());
  // The directory fd pins the process it was opened for (a reused pid makes its
  // reads fail with ESRCH), and the start time says it was the one we meant.
  ReadBuffer stat;
  if (read_file_at(dirfd.get(), "stat", stat) != 0) return gone(id.pid);
  auto info = parse_stat(stat.view());
  if (!info || (id.start_time != 0 && info->start_time != id.start_time)) return gone(id.pid);
  // A zombie leader (its main thread exited, other threads live) has no memory of its
  // own: the file fails with ESRCH (or reads empty), yet the process runs on in its
  // threads and still holds what they hold. That is not "it has exited" (W2-12).
  if (info->state == 'Z' && (err != 0 || text.empty())) {
    if (info->num_threads <= 1) return gone(id.pid);  // every thread exited
    return read_from_live_thread(dirfd.get(), id.pid, f);
  }
  if (err != 0) return gone(id.pid);
  return text;
}

}  // namespace

Result<std::string> read_environ(const ProcessId& id, std::string_view proc_root) {
  return read_memory_file(id, kEnviron, proc_root);
}

Result<std::string> read_process_cmdline(const ProcessId& id, std::string_view proc_root) {
  auto raw = read_memory_file(id, kCmdline, proc_root);
  if (!raw) return raw;
  return format_cmdline(*raw);
}

}  // namespace gpureap::proc
