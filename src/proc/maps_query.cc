#include "proc/maps_query.h"

#include <linux/types.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "util/text.h"

namespace gpureap::proc {
namespace {

// PROCMAP_QUERY from include/uapi/linux/fs.h (6.11); declared here because the
// build machine's kernel headers may predate it. The kernel accepts any size
// at least as large as its first version, so this layout stays valid.
struct ProcmapQuery {
  __u64 size;
  __u64 query_flags;
  __u64 query_addr;
  __u64 vma_start;
  __u64 vma_end;
  __u64 vma_flags;
  __u64 vma_page_size;
  __u64 vma_offset;
  __u64 inode;
  __u32 dev_major;
  __u32 dev_minor;
  __u32 vma_name_size;
  __u32 build_id_size;
  __u64 vma_name_addr;
  __u64 build_id_addr;
};
constexpr unsigned long kProcmapQuery = _IOWR('f', 17, ProcmapQuery);
constexpr __u64 kCoveringOrNextVma = 0x10;
constexpr __u64 kFileBackedVma = 0x20;

int read_text(int fd, ReadBuffer& buf, std::vector<MapsFileId>& out) {
  buf.clear();
  for (;;) {
    buf.reserve_more(16384);
    ssize_t n = ::read(fd, buf.data() + buf.size(), buf.capacity() - buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno;
    if (n == 0) break;
    buf.grow_by(static_cast<std::size_t>(n));
  }
  for_each_line(buf.view(), [&](std::string_view line) {
    if (auto id = parse_maps_file_id(line); id && id->inode != 0) out.push_back(*id);
  });
  return 0;
}

}  // namespace

int read_mapped_files(int maps_fd, ReadBuffer& text_buf, std::atomic<bool>& query_works,
                      std::vector<MapsFileId>& out) {
  if (query_works.load(std::memory_order_relaxed)) {
    std::size_t first = out.size();
    for (__u64 addr = 0;;) {
      ProcmapQuery q{};
      q.size = sizeof q;
      q.query_flags = kCoveringOrNextVma | kFileBackedVma;
      q.query_addr = addr;
      if (::ioctl(maps_fd, kProcmapQuery, &q) == 0) {
        out.push_back(MapsFileId{q.dev_major, q.dev_minor, q.inode});
        addr = q.vma_end;
        continue;
      }
      const int err = errno;
      if (err == ENOENT) return 0;  // no mapping at or after addr: done
      if (err == EINTR) continue;
      if ((err == ENOTTY || err == EINVAL || err == EOPNOTSUPP) && addr == 0) {
        query_works.store(false, std::memory_order_relaxed);  // older kernel
        out.resize(first);
        break;
      }
      return err;
    }
  }
  return read_text(maps_fd, text_buf, out);
}

}  // namespace gpureap::proc
