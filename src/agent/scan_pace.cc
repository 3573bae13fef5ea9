#include "agent/scan_pace.h"

#include <algorithm>

namespace gpureap::agent {

std::chrono::milliseconds ScanPace::interval() const {
  if (!automatic_) return full_scan_;
  // As often as asked, unless that would take more than share_ of a core.
  const auto stretched = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::duration<double>(last_full_cpu_) / share_);
  return std::clamp(stretched, full_scan_, std::max(full_scan_, longest_));
}

}  // namespace gpureap::agent
