#pragma once
// The marker that tells a simulated node's device directory apart from a real
// /dev. `gpureap-sim node` (and the tests' simulated directories) write it;
// discover_devices accepts regular files as device nodes only where it is
// present. Header only: the simulator includes it without linking this module.

#include <string_view>

namespace gpureap::proc {

/// File name of the marker, inside the device directory.
inline constexpr std::string_view kSimNodeMarkerName = ".gpureap-sim-node";

/// Its exact content (a marker with anything else does not count).
inline constexpr std::string_view kSimNodeMarkerContent =
    "gpureap-sim node: the regular files nvidia<N>, nvidiactl and nvidia-uvm in this directory "
    "are simulated NVIDIA device nodes\n";

}  // namespace gpureap::proc
