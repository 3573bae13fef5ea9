#pragma once
// Low-level /proc access shared by the readers of this module (with util/fd.h's
// UniqueFd): whole-file reads into a reusable buffer, and directory listing
// with getdents64. No iostreams: a scan of 10,000 processes reads ~30,000
// files, so each read is one open, as few read()s as the kernel allows, close.

#include <sys/types.h>

#include <cerrno>
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "util/fd.h"

namespace gpureap::proc {

/// A growable byte buffer reused across reads, so the steady state of a scan
/// allocates nothing.
class ReadBuffer {
 public:
  std::string_view view() const { return {data_.get(), size_}; }
  std::size_t size() const { return size_; }
  char* data() { return data_.get(); }
  std::size_t capacity() const { return capacity_; }
  void clear() { size_ = 0; }
  /// Makes room for at least `extra` more bytes after size().
  void reserve_more(std::size_t extra);
  void grow_by(std::size_t n) { size_ += n; }

 private:
  std::unique_ptr<char[]> data_;
  std::size_t capacity_ = 0;
  std::size_t size_ = 0;
};

/// True for the errno values that mean "the process exited" when reading its
/// /proc entries: ENOENT (entry gone) and ESRCH (task gone under an open fd).
inline bool process_gone(int err) {
  return err == ENOENT || err == ESRCH;
}

/// Opens `path` relative to `dirfd` (O_RDONLY | O_CLOEXEC) and reads it to EOF
/// into `buf` (replacing its contents). Returns 0 or the errno of the failure.
int read_file_at(int dirfd, const char* path, ReadBuffer& buf);

/// Reads a whole file into a string; empty when it cannot be read.
std::string read_small_file(const std::string& path);

/// Opens a directory (O_DIRECTORY | O_CLOEXEC) relative to `dirfd`; -1 + errno on failure.
int open_dir_at(int dirfd, const char* path);

/// Calls `fn(std::string_view name)` for each entry of the open directory `dirfd`
/// except "." and "..", using getdents64 with `scratch` as the buffer.
/// `short_read_is_end`: procfs fills a getdents64 buffer until it is full, so a
/// reply that leaves room for another record means the listing is complete and
/// the final empty call can be saved (one syscall per process in a scan). Only
/// pass true for /proc directories. Returns 0 or the errno of the failure.
template <typename Fn>
int for_each_dirent(int dirfd, ReadBuffer& scratch, Fn&& fn, bool short_read_is_end = false);

/// Numeric entries of the open /proc directory `proc_fd` (the pids), unsorted.
/// Returns 0 or the errno of the failure.
int list_pids(int proc_fd, ReadBuffer& scratch, std::vector<pid_t>& out);

/// Parses a decimal pid; 0 when `s` is not a positive decimal number.
pid_t parse_pid(std::string_view s);

// ---- implementation of the template ----

/// Raw getdents64 into `scratch`; returns bytes read, 0 at end, -1 + errno.
long read_dirents(int dirfd, ReadBuffer& scratch);
/// Decodes one record at `offset` of `scratch`; returns the record length.
std::size_t dirent_at(const ReadBuffer& scratch, std::size_t offset, std::string_view& name);

/// Largest getdents64 record procfs produces for a numeric name (header + 20 digits, aligned).
inline constexpr std::size_t kMaxProcDirentSize = 48;

template <typename Fn>
int for_each_dirent(int dirfd, ReadBuffer& scratch, Fn&& fn, bool short_read_is_end) {
  for (;;) {
    long n = read_dirents(dirfd, scratch);
    if (n < 0) return errno;
    if (n == 0) return 0;
    for (std::size_t off = 0; off < static_cast<std::size_t>(n);) {
      std::string_view name;
      off += dirent_at(scratch, off, name);
      if (name == "." || name == "..") continue;
      fn(name);
    }
    if (short_read_is_end &&
        static_cast<std::size_t>(n) + 4 * kMaxProcDirentSize < scratch.capacity())
      return 0;
  }
}

}  // namespace gpureap::proc
