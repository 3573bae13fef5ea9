#include "proc/exiting.h"

#include <fcntl.h>
#include <unistd.h>

#include <fmt/format.h>

#include "proc/proc_files.h"
#include "proc/proc_parse.h"
#include "util/fd.h"

namespace gpureap::proc {
namespace {

// A thread (or the whole process, for the leader's PID/stat) that will not run its own
// code again: in do_exit(), a zombie, or dead.
bool thread_exiting(std::string_view stat_text) {
  auto st = parse_stat(stat_text);
  if (!st) return false;
  return (st->flags & kPfExiting) != 0 || st->state == 'Z' || st->state == 'X';
}

}  // namespace

bool exiting(pid_t pid, const std::string& proc_root) {
  if (!thread_exiting(read_small_file(fmt::format("{}/{}/stat", proc_root, pid)))) return false;
  UniqueFd task(open_dir_at(AT_FDCWD, fmt::format("{}/{}/task", proc_root, pid).c_str()));
  if (!task.valid()) return false;
  ReadBuffer scratch, stat;
  bool all = true, any = false;
  const int err = for_each_dirent(
      task.get(), scratch,
      [&](std::string_view tid) {
        if (!all) return;
        any = true;
        const std::string path = fmt::format("{}/stat", tid);
        // A thread gone between the listing and its stat has finished its exit.
        if (const int e = read_file_at(task.get(), path.c_str(), stat); e != 0) {
          if (!process_gone(e)) all = false;
          return;
        }
        if (!thread_exiting(stat.view())) all = false;
      },
      true);
  return err == 0 && any && all;
}

}  // namespace gpureap::proc
