#include "inventory/state_file.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include "proc/proc_files.h"

namespace gpureap::inventory {

Result<void> write_state_file(const std::string& path, const std::string& text) {
  const std::string tmp = fmt::format("{}.{}.tmp", path, ::getpid());
  ::unlink(tmp.c_str());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return std::unexpected(Error::from_errno("cannot create " + tmp));
  std::size_t done = 0;
  while (done < text.size()) {
    ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += static_cast<std::size_t>(n);
  }
  const bool ok = done == text.size() && ::close(fd) == 0;
  if (!ok || ::rename(tmp.c_str(), path.c_str()) != 0) {
    auto err = Error::from_errno("cannot write " + path);
    ::unlink(tmp.c_str());
    return std::unexpected(err);
  }
  return {};
}

std::optional<std::string> read_state_file(const std::string& path, std::size_t max_bytes) {
  int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  struct stat st {};
  std::optional<std::string> text;
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == ::geteuid() &&
      (st.st_mode & (S_IWGRP | S_IWOTH)) == 0 && static_cast<std::size_t>(st.st_size) <= max_bytes) {
    text.emplace(static_cast<std::size_t>(st.st_size), '\0');
    ssize_t n = ::read(fd, text->data(), text->size());
    text->resize(n > 0 ? static_cast<std::size_t>(n) : 0);
  }
  ::close(fd);
  return text;
}

std::string boot_id() {
  std::string id = proc::read_small_file("/proc/sys/kernel/random/boot_id");
  while (!id.empty() && (id.back() == '\n' || id.back() == ' ')) id.pop_back();
  return id;
}

}  // namespace gpureap::inventory
