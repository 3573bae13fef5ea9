#include "util/poll.h"

#include <poll.h>

#include <algorithm>
#include <cerrno>

namespace gpureap {

int poll_timeout_ms(std::chrono::steady_clock::time_point deadline) {
  using namespace std::chrono;
  const auto left = ceil<milliseconds>(deadline - steady_clock::now()).count();
  return static_cast<int>(std::clamp<long long>(left, 0, 24LL * 3600 * 1000));
}

short poll_until(int fd, short events, std::chrono::steady_clock::time_point deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int n = ::poll(&p, 1, poll_timeout_ms(deadline));
    if (n > 0) return p.revents;
    if (n == 0 || errno != EINTR) return 0;
  }
}

}  // namespace gpureap
