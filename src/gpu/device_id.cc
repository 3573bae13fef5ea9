#include "gpu/device_id.h"

#include <algorithm>

namespace gpureap::gpu {

std::string device_text(DeviceId id) {
  std::string out = std::to_string(id.index);
  if (id.gi) out += "/gi" + std::to_string(*id.gi);
  if (id.ci) out += "/ci" + std::to_string(*id.ci);
  return out;
}

std::string device_list(const std::vector<DeviceId>& ids) {
  std::string out;
  for (DeviceId id : ids) out += (out.empty() ? "" : ",") + device_text(id);
  return out;
}

void normalize(std::vector<DeviceId>& ids) {
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
}

bool contains(const std::vector<DeviceId>& ids, DeviceId id) {
  return std::find(ids.begin(), ids.end(), id) != ids.end();
}

}  // namespace gpureap::gpu
