// /proc/PID/cgroup (the path is chosen by whoever creates the cgroup), the
// container hint read from it, and mountinfo (mount points with \ooo escapes).

#include "fuzz/fuzz_input.h"
#include "proc/cgroup_fs.h"
#include "proc/proc_parse.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace gpureap;
  const std::string_view text = fuzz::as_text(data, size);

  const auto entries = proc::parse_cgroup(text);
  const std::string path = proc::pick_cgroup_path(entries);
  (void)proc::container_hint(path);
  (void)proc::container_hint(text);

  if (auto mount = proc::parse_cgroup2_mount(text)) {
    (void)mount->dir_of(path);
    (void)mount->dir_of(text);
    (void)mount->dir_of(mount->root);
  }
  return 0;
}
