#pragma once
// The name of this host as gethostname(2) gives it. Knows nothing of GPUs.

#include <string>

namespace gpureap {

/// This host's name (the kernel's nodename, as `hostname` prints it); "" when
/// gethostname(2) fails.
std::string host_name();

}  // namespace gpureap
