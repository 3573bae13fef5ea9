#include "proc/environ.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

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

Result<std::string> read_environ(const ProcessId& id, std::string_view proc_root) {
  std::string dir = fmt::format("{}/{}", proc_root, id.pid);
  UniqueFd dirfd(open_dir_at(AT_FDCWD, dir.c_str()));
  auto gone = [&] { return fail(fmt::format("pid {} has exited", id.pid), ESRCH); };
  if (dirfd.get() < 0) {
    if (process_gone(errno)) return gone();
    return std::unexpected(Error::from_errno(fmt::format("cannot open {}", dir)));
  }
  ReadBuffer buf;
  if (int err = read_file_at(dirfd.get(), "environ", buf); err != 0) {
    if (process_gone(err)) return gone();
    return std::unexpected(Error::from_errno(
        fmt::format("the environment of pid {} ({}/environ) cannot be read", id.pid, dir), err));
  }
  std::string text(buf.view());
  // The directory fd pins the process it was opened for (a reused pid makes its
  // reads fail with ESRCH), and the start time says it was the one we meant.
  ReadBuffer stat;
  if (read_file_at(dirfd.get(), "stat", stat) != 0) return gone();
  auto info = parse_stat(stat.view());
  if (!info || (id.start_time != 0 && info->start_time != id.start_time)) return gone();
  return text;
}

}  // namespace gpureap::proc
