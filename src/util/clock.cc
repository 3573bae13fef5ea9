#include "util/clock.h"

#include <thread>

namespace gpureap::util {
namespace {

class SystemClock final : public Clock {
 public:
  time_point now() const override { return std::chrono::steady_clock::now(); }
  void sleep_until(time_point t) override { std::this_thread::sleep_until(t); }
};

}  // namespace

Clock& system_clock() {
  static SystemClock clock;
  return clock;
}

}  // namespace gpureap::util
