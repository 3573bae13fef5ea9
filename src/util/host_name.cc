#include "util/host_name.h"

#include <unistd.h>

namespace gpureap {

std::string host_name() {
  // HOST_NAME_MAX is 64 on Linux; a larger buffer keeps the terminating NUL even when the
  // name was truncated (POSIX leaves it unspecified then).
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "";
  return buf;
}

}  // namespace gpureap
