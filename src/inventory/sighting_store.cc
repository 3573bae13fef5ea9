#include "inventory/sighting_store.h"

#include <fstream>
#include <nlohmann/json.hpp>

#include "inventory/state_file.h"

namespace gpureap::inventory {
namespace {

// One record per GPU: a few hundred bytes for a node of eight.
constexpr std::size_t kMaxSightingFile = 1 << 20;

std::int64_t to_ms(util::Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
}

}  // namespace

SightingStore SightingStore::load(std::string dir, std::string boot_id) {
  SightingStore store;
  if (dir.empty() || boot_id.empty()) return store;
  store.dir_ = std::move(dir);
  store.boot_id_ = std::move(boot_id);
  auto text = read_state_file(store.dir_ + "/" + kSightingFile, kMaxSightingFile);
  if (!text) return store;
  auto doc = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object() || !doc.contains("gpus") || !doc["gpus"].is_object()) return store;
  if (doc.value("boot_id", std::string()) != store.boot_id_) {
    store.dirty_ = true;  // another boot's: its records go with the next save
    return store;
  }
  for (const auto& [uuid, r] : doc["gpus"].items()) {
    if (!r.is_object() || !r.contains("bytes") || !r["bytes"].is_number_unsigned() ||
        !r.contains("first_seen_ms") || !r["first_seen_ms"].is_number_integer())
      continue;  // a malformed record is no record
    store.records_[uuid] = {
        r["bytes"].get<std::uint64_t>(),
        util::Clock::time_point(std::chrono::milliseconds(r["first_seen_ms"].get<std::int64_t>()))};
  }
  return store;
}

const Sighting* SightingStore::get(const std::string& uuid) const {
  auto it = records_.find(uuid);
  return it == records_.end() ? nullptr : &it->second;
}

void SightingStore::put(const std::string& uuid, Sighting s) {
  if (uuid.empty()) return;
  auto it = records_.find(uuid);
  if (it != records_.end() && it->second.bytes == s.bytes &&
      it->second.first_seen == s.first_seen)
    return;
  records_[uuid] = s;
  dirty_ = true;
}

void SightingStore::erase(const std::string& uuid) {
  if (records_.erase(uuid) > 0) dirty_ = true;
}

Result<void> SightingStore::save() {
  if (!dirty_ || dir_.empty()) return {};
  nlohmann::json gpus = nlohmann::json::object();
  for (const auto& [uuid, s] : records_)
    gpus[uuid] = {{"bytes", s.bytes}, {"first_seen_ms", to_ms(s.first_seen)}};
  const nlohmann::json doc = {{"boot_id", boot_id_}, {"gpus", gpus}};
  auto written = write_state_file(dir_ + "/" + kSightingFile,
                                  doc.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) +
                                      "\n");
  if (written) dirty_ = false;
  return written;
}

}  // namespace gpureap::inventory
