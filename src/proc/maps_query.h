#pragma once
// The files a process has mapped, as (device, inode): what a holder scan needs
// from /proc/PID/maps, without the text when the kernel can answer directly.

#include <atomic>
#include <vector>

#include "proc/proc_files.h"
#include "proc/proc_parse.h"

namespace gpureap::proc {

/// Appends the identity of every file-backed mapping of the open /proc/PID/maps
/// (or task/TID/maps) `maps_fd` to `out`, in address order.
///
/// Uses the PROCMAP_QUERY ioctl (Linux 6.11) with a file-backed filter and no
/// name: the kernel then neither formats lines nor resolves paths, about a
/// quarter of the cost of a maps read. When the kernel lacks it, `query_works`
/// is cleared (shared by all callers of a scan, so the probe happens once) and
/// the text is read and parsed instead, into `text_buf`.
/// Returns 0 or the errno of the failure (ESRCH / ENOENT: the process exited).
int read_mapped_files(int maps_fd, ReadBuffer& text_buf, std::atomic<bool>& query_works,
                      std::vector<MapsFileId>& out);

}  // namespace gpureap::proc
