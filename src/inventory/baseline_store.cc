#include "inventory/baseline_store.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>

namespace gpureap::inventory {
namespace {

constexpr std::uint64_t kMiB = 1024ULL * 1024ULL;

Result<std::string> ensure_dir(std::string dir) {
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST)
    return std::unexpected(Error::from_errno("cannot create state directory " + dir));
  return dir;
}

}  // namespace

Result<std::string> state_dir() {
  if (const char* env = std::getenv("GPUREAP_STATE_DIR"); env && *env) return ensure_dir(env);
  if (::geteuid() == 0) return ensure_dir("/run/gpureap");
  if (const char* xdg = std::getenv("XDG_RUNTIME_DIR"); xdg && *xdg)
    return ensure_dir(std::string(xdg) + "/gpureap");
  return ensure_dir(fmt::format("/tmp/gpureap-{}", ::geteuid()));
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
  std::ifstream in(store.dir_ + "/baselines.json");
  if (!in) return store;
  auto doc = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object()) return store;
  for (auto& [uuid, entry] : doc.items())
    if (entry.is_object() && entry.contains("used_bytes") &&
        entry["used_bytes"].is_number_unsigned())
      store.bytes_[uuid] = entry["used_bytes"].get<std::uint64_t>();
  return store;
}

Baseline BaselineStore::get(const std::string& uuid, std::uint64_t total, std::uint64_t used,
                            std::uint64_t attributed) const {
  if (auto it = bytes_.find(uuid); it != bytes_.end()) return {it->second, true};
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
  std::string path = dir_ + "/baselines.json";
  std::string tmp = fmt::format("{}.{}.tmp", path, ::getpid());
  {
    std::ofstream out(tmp, std::ios::trunc);
    if (!out) return std::unexpected(Error::from_errno("cannot write " + tmp));
    out << doc.dump(2) << '\n';
    if (!out) return std::unexpected(Error::from_errno("cannot write " + tmp));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    auto err = Error::from_errno("cannot replace " + path);
    std::remove(tmp.c_str());
    return std::unexpected(err);
  }
  dirty_ = false;
  return {};
}

}  // namespace gpureap::inventory
