#include "proc/proc_files.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <charconv>
#include <cstring>

namespace gpureap::proc {

void ReadBuffer::reserve_more(std::size_t extra) {
  if (capacity_ - size_ >= extra) return;
  std::size_t cap = capacity_ == 0 ? 4096 : capacity_;
  while (cap - size_ < extra) cap *= 2;
  auto bigger = std::make_unique<char[]>(cap);
  if (size_ > 0) std::memcpy(bigger.get(), data_.get(), size_);
  data_ = std::move(bigger);
  capacity_ = cap;
}

int read_file_at(int dirfd, const char* path, ReadBuffer& buf) {
  buf.clear();
  int fd = ::openat(dirfd, path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) return errno;
  int err = 0;
  for (;;) {
    // seq_file-backed /proc files hand out at most one page per read(), so a
    // bigger request does not save calls; 16 KiB of room avoids regrowth.
    buf.reserve_more(16384);
    ssize_t n = ::read(fd, buf.data() + buf.size(), buf.capacity() - buf.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      err = errno;
      break;
    }
    if (n == 0) break;
    buf.grow_by(static_cast<std::size_t>(n));
  }
  ::close(fd);
  return err;
}

std::string read_small_file(const std::string& path) {
  ReadBuffer buf;
  if (read_file_at(AT_FDCWD, path.c_str(), buf) != 0) return {};
  return std::string(buf.view());
}

int open_dir_at(int dirfd, const char* path) {
  return ::openat(dirfd, path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
}

long read_dirents(int dirfd, ReadBuffer& scratch) {
  scratch.clear();
  scratch.reserve_more(32768);
  for (;;) {
    ssize_t n = ::getdents64(dirfd, scratch.data(), scratch.capacity());
    if (n < 0 && errno == EINTR) continue;
    return static_cast<long>(n);
  }
}

std::size_t dirent_at(const ReadBuffer& scratch, std::size_t offset, std::string_view& name) {
  // struct dirent64 layout: d_ino, d_off, d_reclen, d_type, d_name[] (NUL-terminated).
  const char* rec = scratch.view().data() + offset;
  unsigned short reclen;
  std::memcpy(&reclen, rec + offsetof(struct dirent64, d_reclen), sizeof reclen);
  name = std::string_view(rec + offsetof(struct dirent64, d_name));
  return reclen;
}

pid_t parse_pid(std::string_view s) {
  pid_t pid = 0;
  if (s.empty() || s[0] < '1' || s[0] > '9') return 0;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), pid);
  if (ec != std::errc() || ptr != s.data() + s.size()) return 0;
  return pid;
}

int list_pids(int proc_fd, ReadBuffer& scratch, std::vector<pid_t>& out) {
  return for_each_dirent(proc_fd, scratch, [&](std::string_view name) {
    if (pid_t pid = parse_pid(name); pid > 0) out.push_back(pid);
  });
}

}  // namespace gpureap::proc
