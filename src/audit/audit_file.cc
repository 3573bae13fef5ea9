#include "audit/audit_file.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "report/audit_format.h"
#include "util/fd.h"
#include "util/line_reader.h"

namespace gpureap::audit {
namespace {

// A record is a few hundred bytes; a cgroup path can make one a few KiB. Longer
// lines are not ours (and are cut, then fail to parse).
constexpr std::size_t kMaxLine = 64 * 1024;

std::string rotated(const std::string& path, int n) {
  return fmt::format("{}.{}", path, n);
}

// Opens the current file for appending: created 0600 if missing, never through a
// symbolic link, only a regular file of ours.
Result<UniqueFd> open_for_append(const std::string& path) {
  // O_RDWR: the last byte is read to see whether a line was cut short.
  UniqueFd fd(::open(path.c_str(), O_RDWR | O_APPEND | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!fd.valid()) {
    if (errno == ELOOP) return fail(path + " is a symbolic link; refusing to follow it");
    return std::unexpected(Error::from_errno("cannot open " + path));
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return std::unexpected(Error::from_errno("cannot stat " + path));
  if (!S_ISREG(st.st_mode)) return fail(path + " is not a regular file; refusing to write to it");
  if (st.st_uid != ::geteuid())
    return fail(
        fmt::format("{} is owned by uid {}, not by you; refusing to write to it", path, st.st_uid));
  return fd;
}

Result<void> write_line(int fd, const std::string& path, std::string_view line) {
  // One write(2): with O_APPEND the kernel places it at the end as a whole, so lines of
  // concurrent writers never interleave. A short write (a full disk) leaves a cut line,
  // which readers skip.
  ssize_t n;
  do {
    n = ::write(fd, line.data(), line.size());
  } while (n < 0 && errno == EINTR);
  if (n < 0) return std::unexpected(Error::from_errno("cannot write " + path));
  if (static_cast<std::size_t>(n) != line.size())
    return fail(fmt::format("cannot write {}: only {} of {} bytes written (disk full?)", path, n,
                            line.size()));
  return {};
}

// The lock is held by a writer for one write(2) and maybe two renames: microseconds.
// Retried for at most this long; a holder that keeps it longer is stopped (SIGSTOP,
// a debugger), and the record is appended without it rather than wait on it.
constexpr auto kLockPatience = std::chrono::milliseconds(100);

bool lock_briefly(int fd) {
  const auto until = std::chrono::steady_clock::now() + kLockPatience;
  for (;;) {
    if (::flock(fd, LOCK_EX | LOCK_NB) == 0) return true;
    if (errno != EWOULDBLOCK && errno != EINTR) return false;
    if (std::chrono::steady_clock::now() >= until) return false;
    // No event tells that an flock was released (inotify does not see it); the holder
    // is done within microseconds, so a short pause is the whole wait.
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

// Same inode: `fd` is still the file at `path` (no other writer rotated it meanwhile).
bool is_current(int fd, const std::string& path) {
  struct stat a {
  }, b{};
  return ::fstat(fd, &a) == 0 && ::lstat(path.c_str(), &b) == 0 && a.st_dev == b.st_dev &&
         a.st_ino == b.st_ino;
}

}  // namespace

Result<void> append_audit_line(const std::string& dir, std::string_view line,
                               std::uint64_t rotate_at) {
  const std::string path = dir + "/" + std::string(kAuditFileName);
  // Bounded: each pass either writes or finds the file rotated under it (by us or
  // another writer) and takes the new one.
  for (int attempt = 0;; ++attempt) {
    auto fd = open_for_append(path);
    if (!fd) return std::unexpected(fd.error());
    // The lock decides who rotates, and keeps the size check and the write together.
    // Not had within kLockPatience: append without it (the line lands in whichever file
    // this fd is, kept either way) rather than wait on a stopped process.
    if (attempt >= 3 || !lock_briefly(fd->get())) return write_line(fd->get(), path, line);
    if (!is_current(fd->get(), path)) continue;  // rotated between our open and our lock
    struct stat st {};
    if (::fstat(fd->get(), &st) != 0)
      return std::unexpected(Error::from_errno("cannot stat " + path));
    const auto size = static_cast<std::uint64_t>(st.st_size);
    if (size == 0 || size + line.size() <= rotate_at) {
      // A line cut short (a writer killed mid-write, a full disk) is ended first, so it
      // does not swallow this record; it stays behind as one unreadable line.
      char last = '\n';
      if (size > 0 && ::pread(fd->get(), &last, 1, st.st_size - 1) == 1 && last != '\n')
        return write_line(fd->get(), path, "\n" + std::string(line));
      return write_line(fd->get(), path, line);
    }
    // Rotate while holding the lock of the current file: .2 dropped, .1 -> .2, current -> .1.
    // Only the holder of the current file's lock renames it, so two writers never rotate
    // the same file twice (which would drop a full file for an empty one).
    for (int n = kRotatedKept; n > 1; --n)
      if (::rename(rotated(path, n - 1).c_str(), rotated(path, n).c_str()) != 0 && errno != ENOENT)
        return std::unexpected(Error::from_errno("cannot rotate " + rotated(path, n - 1)));
    if (::rename(path.c_str(), rotated(path, 1).c_str()) != 0)
      return std::unexpected(Error::from_errno("cannot rotate " + path));
    // The next pass creates the new current file.
  }
}

Result<AuditReading> read_audit_log(const std::string& dir) {
  AuditReading out;
  const std::string path = dir + "/" + std::string(kAuditFileName);
  std::vector<std::string> files;
  for (int n = kRotatedKept; n >= 1; --n) files.push_back(rotated(path, n));
  files.push_back(path);
  for (const auto& file : files) {
    UniqueFd fd(::open(file.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
    if (!fd.valid()) {
      if (errno == ENOENT) continue;
      if (errno == ELOOP) return fail(file + " is a symbolic link; refusing to follow it");
      return std::unexpected(Error::from_errno("cannot open " + file));
    }
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode))
      return fail(file + " is not a regular file; refusing to read it");
    out.files.push_back(file);
    std::size_t bad = 0;
    bool last_bad = false;
    int err = for_each_line(fd.get(), kMaxLine, [&](std::string_view line) {
      last_bad = false;
      if (line.empty()) return;
      auto record = report::parse_audit_line(line);
      if (!record) {
        ++bad;
        last_bad = true;
        return;
      }
      out.records.push_back(StoredRecord{std::move(*record), std::string(line)});
    });
    if (err != 0) return std::unexpected(Error::from_errno("cannot read " + file, err));
    // A last line cut short is what a writer killed mid-write (or one writing now)
    // leaves: expected, skipped without a word.
    char tail = '\n';
    const bool cut_tail =
        st.st_size > 0 && ::pread(fd.get(), &tail, 1, st.st_size - 1) == 1 && tail != '\n';
    if (last_bad && cut_tail) --bad;
    if (bad > 0)
      out.warnings.push_back(fmt::format("{} line{} of {} {} not audit records; skipped", bad,
                                         bad == 1 ? "" : "s", file, bad == 1 ? "is" : "are"));
  }
  return out;
}

}  // namespace gpureap::audit
