#include "capacity/host_cache_flags.h"

#include <fmt/format.h>

#include "capacity/plan_args.h"
#include "util/text.h"

namespace gpureap::capacity {
namespace {

// SGLang's --hicache-size 0 is its default: "use the ratio".
bool size_is_default(std::string_view text) {
  const std::string_view t = trim(text);
  return t.find_first_not_of('0') == std::string_view::npos && !t.empty();
}

std::string gb_text(std::uint64_t bytes) {
  return fmt::format("{:.1f} GB", static_cast<double>(bytes) / 1e9);
}

}  // namespace

Result<HostCacheDecision> decide_host_cache(const HostCacheFlags& flags) {
  HostCacheDecision d;
  const bool size_given = !flags.size.empty() && !size_is_default(flags.size);
  // Every value is checked, used or not.
  std::optional<std::uint64_t> size;
  if (size_given) {
    auto s = parse_hicache_size(flags.size);
    if (!s) return std::unexpected(s.error());
    size = *s;
  }
  std::optional<double> ratio;
  if (!flags.ratio.empty()) {
    auto r = parse_hicache_ratio(flags.ratio);
    if (!r) return std::unexpected(r.error());
    ratio = *r;
  }
  const std::string_view mode = trim(flags.host_memory_mode);
  if (!mode.empty() && mode != "cache" && mode != "buffer_only")
    return fail(fmt::format("--hicache-host-memory-mode {}: expected cache or buffer_only", mode));

  if (!flags.enabled) {
    // SGLang reads these only with the switch on: it builds no host pool.
    std::vector<std::string> ignored;
    if (size_given) ignored.push_back("--hicache-size " + std::string(trim(flags.size)));
    if (ratio) ignored.push_back("--hicache-ratio " + std::string(trim(flags.ratio)));
    if (!mode.empty()) ignored.push_back("--hicache-host-memory-mode " + std::string(mode));
    if (!ignored.empty()) {
      std::string list;
      for (std::size_t i = 0; i < ignored.size(); ++i)
        list += (i == 0 ? "" : i + 1 == ignored.size() ? " and " : ", ") + ignored[i];
      d.notes.push_back(fmt::format(
          "{} {} ignored: SGLang builds a host cache only with --enable-hierarchical-cache "
          "(add it to plan one)",
          list, ignored.size() == 1 ? "is" : "are"));
    }
    return d;
  }
  if (size) {
    // server_args: --hicache-size "overrides --hicache-ratio".
    d.request.size_per_rank = *size;
    d.text = fmt::format("--hicache-size {} ({} per rank)", trim(flags.size), gb_text(*size));
    if (ratio)
      d.notes.push_back(fmt::format("--hicache-ratio {} is ignored: --hicache-size overrides it",
                                    trim(flags.ratio)));
    return d;
  }
  if (ratio) {
    d.request.ratio = *ratio;
    d.text = fmt::format("--hicache-ratio {}", *ratio);
    return d;
  }
  const bool buffer_only = mode == "buffer_only";
  d.request.ratio = buffer_only ? kSglangHicacheBufferOnlyRatio : kSglangHicacheRatio;
  d.text = fmt::format("--hicache-ratio {} (SGLang's default{})", *d.request.ratio,
                       buffer_only ? " in buffer_only mode" : "");
  return d;
}

}  // namespace gpureap::capacity
