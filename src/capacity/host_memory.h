#pragma once
// The host RAM a launch can use, for sizing SGLang's hierarchical cache.

#include <cstdint>
#include <optional>
#include <string_view>

namespace gpureap::capacity {

/// MemAvailable from /proc/meminfo text, in bytes (the kernel prints kB, meaning
/// KiB); the same figure psutil.virtual_memory().available reports, which SGLang
/// checks its host cache against. nullopt when the line is missing or malformed.
std::optional<std::uint64_t> parse_mem_available(std::string_view meminfo);

}  // namespace gpureap::capacity
