// /proc/PID files that any process controls (its comm, its maps' paths): stat,
// status, maps, cmdline, and /proc/devices. Every parser sees every input.

#include "fuzz/fuzz_input.h"
#include "proc/proc_parse.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace gpureap;
  const std::string_view text = fuzz::as_text(data, size);

  if (auto stat = proc::parse_stat(text)) fuzz::check(stat->comm.size() <= text.size());
  const char state = proc::parse_stat_state(text);
  (void)state;

  const proc::StatusInfo status = proc::parse_status(text);
  fuzz::check(status.name.size() <= text.size());
  (void)status.sigkill_pending();

  // maps: every line, as the scan reads them.
  std::string_view rest = text;
  while (!rest.empty()) {
    const auto nl = rest.find('\n');
    const std::string_view line = rest.substr(0, nl);
    rest.remove_prefix(nl == std::string_view::npos ? rest.size() : nl + 1);
    auto entry = proc::parse_maps_line(line);
    auto id = proc::parse_maps_file_id(line);
    // The cheap reader and the full one agree on which lines are maps lines
    // they can identify, and on the identity.
    if (entry && id)
      fuzz::check(entry->inode == id->inode && entry->dev_major == id->dev_major &&
                  entry->dev_minor == id->dev_minor);
  }

  fuzz::check(proc::format_cmdline(text).size() <= text.size());
  (void)proc::parse_char_device_major(text, "nvidia-uvm");
  (void)proc::parse_char_device_major(text, "nvidia");
  return 0;
}
