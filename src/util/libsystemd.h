#pragma once
// libsystemd, loaded at run time: the one place that dlopens it. gpureap links
// no libsystemd, so the same binary runs where there is none (the portable
// build, a container): what needs systemd asks for a symbol here and does
// without it when the answer is nullptr. Knows nothing of GPUs.

#include <string>

namespace gpureap {

/// The address of `name` in libsystemd.so.0, loaded at the first call and kept for
/// the life of the process; nullptr when the library or the symbol is missing, and
/// then `why` (when not null) says which. Thread-safe.
void* libsystemd_symbol(const char* name, std::string* why = nullptr);

}  // namespace gpureap
