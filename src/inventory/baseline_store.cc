#include "inventory/baseline_store.h"

#include "inventory/state_file.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>

#include "util/units.h"

namespace gpureap::inventory {
namespace {

// A real baselines.json holds a few lines per GPU; anything this large was not
// written by gpureap.
constexpr off_t kMaxBaselineFile = 1 << 20;
constexpr const char* kBaselineFile = "baselines.json";

// "/run/gpureap/" -> "/run/gpureap": with a trailing slash, a symlink would be
// followed by every call below.
std::string without_trailing_slashes(std::string dir) {
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  return dir;
}

// Creates the directory (one level, 0700) unless it exists, then checks it.
Result<std::string> ensure_private_dir(std::string dir) {
  dir = without_trailing_slashes(std::move(dir));
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST)
    return std::unexpected(Error::from_errno("cannot create state directory " + dir));
  return check_state_dir(dir, ::geteuid());
}

std::string refusal(const std::string& dir, const std::string& what) {
  return fmt::format(
      "state directory {} {}; refusing to use it (anyone who can write there could plant "
      "baselines that hide held memory, or a lock file that points elsewhere). Remove it, or set "
      "GPUREAP_STATE_DIR to a directory of your own",
      dir, what);
}

}  // namespace

Result<std::string> check_state_dir(const std::string& path, uid_t uid) {
  std::string dir = without_trailing_slashes(path);
  // Opened, not lstat'ed: the checks and the answer are about the same inode.
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    struct stat st {};
    if (err == ELOOP || (::lstat(dir.c_str(), &st) == 0 && S_ISLNK(st.st_mode)))
      return fail(refusal(dir, "is a symbolic link"));
    if (err == ENOTDIR) return fail(refusal(dir, "is not a directory"));
    errno = err;
    return std::unexpected(Error::from_errno("cannot open state directory " + dir));
  }
  struct stat st {};
  int rc = ::fstat(fd, &st);
  ::close(fd);
  if (rc != 0) return std::unexpected(Error::from_errno("cannot stat state directory " + dir));
  if (st.st_uid != uid)
    return fail(
        refusal(dir, fmt::format("is owned by uid {}, not by you (uid {})", st.st_uid, uid)));
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0)
    return fail(refusal(dir, fmt::format("is writable by {} (mode {:04o})",
                                         (st.st_mode & S_IWOTH) ? "everyone" : "its group",
                                         st.st_mode & 07777)));
  return dir;
}

Result<std::string> state_dir() {
  if (const char* env = std::getenv("GPUREAP_STATE_DIR"); env && *env) {
    // Relative would tie the free lock to the working directory: two `free`
    // runs from different directories would not exclude each other.
    if (env[0] != '/')
      return fail(fmt::format(
          "GPUREAP_STATE_DIR must be an absolute path, not '{}' (a relative one would make the "
          "free lock depend on the working directory)",
          env));
    return ensure_private_dir(env);
  }
  if (::geteuid() == 0) return ensure_private_dir("/run/gpureap");
  // XDG_RUNTIME_DIR is private to the user by its specification (0700, owned by
  // them); a relative value is invalid there and ignored.
  if (const char* xdg = std::getenv("XDG_RUNTIME_DIR"); xdg && xdg[0] == '/')
    return ensure_private_dir(std::string(xdg) + "/gpureap");
  // No runtime dir (cron, su, many ssh and container setups): a directory in
  // /tmp, which any user could have created first, hence the checks.
  return ensure_private_dir(fmt::format("/tmp/gpureap-{}", ::geteuid()));
}

std::uint64_t baseline_cap(std::uint64_t total_bytes) {
  return std::max<std::uint64_t>(256 * kMiB, total_bytes / 100);
}

std::uint64_t freed_tolerance(std::uint64_t total_bytes) {
  return std::max<std::uint64_t>(64 * kMiB, total_bytes / 200);
}

BaselineStore BaselineStore::load(std::string dir) {
  BaselineStore store;
  store.dir_ = std::move(dir);
  const std::string path = store.dir_ + "/" + kBaselineFile;
  auto ignored = [&](const std::string& why) {
    store.warnings_.push_back(
        fmt::format("{} {}; ignored, so baselines are estimated until a GPU is seen idle", path,
                    why));
    return std::move(store);
  };
  int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return store;
    if (errno == ELOOP) return ignored("is a symbolic link");
    return ignored(fmt::format("cannot be read ({})", std::strerror(errno)));
  }
  std::string text;
  struct stat st {};
  bool regular = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
  if (regular && st.st_size <= kMaxBaselineFile) {
    text.resize(static_cast<std::size_t>(st.st_size));
    ssize_t n = ::read(fd, text.data(), text.size());
    text.resize(n > 0 ? static_cast<std::size_t>(n) : 0);
  }
  ::close(fd);
  if (!regular) return ignored("is not a regular file");
  if (st.st_size > kMaxBaselineFile)
    return ignored(fmt::format("is {} (gpureap writes a few hundred bytes)",
                               format_bytes(static_cast<std::uint64_t>(st.st_size))));
  auto doc = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object()) return ignored("is not a JSON object");
  for (auto& [uuid, entry] : doc.items()) {
    if (entry.is_object() && entry.contains("used_bytes") &&
        entry["used_bytes"].is_number_unsigned()) {
      store.bytes_[uuid] = entry["used_bytes"].get<std::uint64_t>();
      continue;
    }
    std::string value = entry.is_object() && entry.contains("used_bytes")
                            ? entry["used_bytes"].dump()
                            : std::string("missing");
    if (value.size() > 40) value = value.substr(0, 37) + "...";
    store.warnings_.push_back(
        fmt::format("{}: the baseline of {} is not a byte count (used_bytes {}); ignored", path,
                    uuid.size() > 80 ? uuid.substr(0, 77) + "..." : uuid, value));
  }
  return store;
}

BaselineStore BaselineStore::load_default() {
  auto dir = state_dir();
  if (dir) return load(*dir);
  BaselineStore store;
  store.warnings_.push_back(dir.error().message +
                            " (baselines are estimated and none is recorded)");
  return store;
}

Baseline BaselineStore::get(const std::string& uuid, std::uint64_t total, std::uint64_t used,
                            std::uint64_t attributed) {
  if (auto it = bytes_.find(uuid); it != bytes_.end()) {
    // The store never learns a value above the cap; one on disk was put there
    // by something else, and trusting it would call held memory "idle".
    if (it->second <= baseline_cap(total)) return {it->second, true};
    warnings_.push_back(fmt::format(
        "{}/{}: the recorded baseline of {} ({}) is more than an idle GPU of {} uses (at most "
        "{}); ignored, the baseline is estimated",
        dir_, kBaselineFile, uuid, format_bytes(it->second), format_bytes(total),
        format_bytes(baseline_cap(total))));
    bytes_.erase(it);  // warned once; the file is corrected when the GPU is next seen idle
  }
  if (auto kept = kept_.find(uuid); kept != kept_.end()) return {kept->second, false};
  std::uint64_t unexplained = used > attributed ? used - attributed : 0;
  return {std::min(unexplained, baseline_cap(total)), false};
}

void BaselineStore::observe_idle(const std::string& uuid, std::uint64_t total, std::uint64_t used) {
  if (uuid.empty() || used > baseline_cap(total)) return;
  auto it = bytes_.find(uuid);
  if (it != bytes_.end() && it->second == used) return;
  bytes_[uuid] = used;
  dirty_ = true;
}

Result<void> BaselineStore::save() {
  if (!dirty_ || dir_.empty()) return {};
  nlohmann::json doc = nlohmann::json::object();
  for (const auto& [uuid, bytes] : bytes_) doc[uuid] = {{"used_bytes", bytes}};
  auto written = write_state_file(dir_ + "/" + kBaselineFile, doc.dump(2) + "\n");
  if (written) dirty_ = false;
  return written;
}

}  // namespace gpureap::inventory
