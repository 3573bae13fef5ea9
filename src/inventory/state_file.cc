#include "inventory/state_file.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <nlohmann/json.hpp>

namespace gpureap::inventory {

Result<void> write_state_file(const std::string& path, const std::string& text) {
  const std::string tmp = fmt::format("{}.{}.tmp", path, ::getpid());
  auto failed = [&](const std::string& what) -> Result<void> {
    auto err = Error::from_errno(what);
    ::unlink(tmp.c_str());
    return std::unexpected(err);
  };

  // A leftover of a crashed run with our pid; O_EXCL below then creates afresh.
  ::unlink(tmp.c_str());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return std::unexpected(Error::from_errno("cannot create " + tmp));
  // Every step checked: on a full filesystem the error may come from write,
  // fsync or close, and renaming a short file over the good one loses them all.
  for (std::size_t done = 0; done < text.size();) {
    ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (n == 0) errno = EIO;
      int err = errno;
      ::close(fd);
      errno = err;
      return failed("cannot write " + tmp);
    }
    done += static_cast<std::size_t>(n);
  }
  if (::fsync(fd) != 0) {
    int err = errno;
    ::close(fd);
    errno = err;
    return failed("cannot write " + tmp);
  }
  if (::close(fd) != 0) return failed("cannot write " + tmp);
  if (::rename(tmp.c_str(), path.c_str()) != 0) return failed("cannot replace " + path);
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

std::string boot_id(const std::string& proc_root) {
  // A /proc file has no size (st_size 0): read as a stream, one line.
  std::ifstream f(proc_root + "/sys/kernel/random/boot_id");
  std::string id;
  if (!f || !std::getline(f, id) || id.size() > 64) return "";
  while (!id.empty() && (id.back() == ' ' || id.back() == '\r')) id.pop_back();
  return id;
}

Result<void> write_boot_records(const std::string& path, const std::string& key,
                                const nlohmann::json& records) {
  const std::string text =
      nlohmann::json{{"boot_id", boot_id()}, {key, records}}.dump(
          -1, ' ', false, nlohmann::json::error_handler_t::replace) +
      "\n";
  return write_state_file(path, text);
}

nlohmann::json read_boot_records(const std::string& path, const std::string& key,
                                 std::size_t max_bytes) {
  auto none = nlohmann::json::array();
  auto text = read_state_file(path, max_bytes);
  if (!text) return none;
  auto doc = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object() || !doc.contains(key) || !doc[key].is_array()) return none;
  const std::string boot = boot_id();
  if (boot.empty() || !doc.contains("boot_id") || doc["boot_id"] != boot) return none;
  return std::move(doc[key]);
}

}  // namespace gpureap::inventory
