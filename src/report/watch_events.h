#pragma once
// What `gpureap watch` prints on stdout: a "started" line, then one line per event
// (inventory/events.h). Human lines answer who holds the memory, why, and what to
// do now, with the same next steps as `status` and `free`; `--json` prints one
// compact JSON object per line instead (docs/json-schema.md, "gpureap watch events").

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "inventory/events.h"
#include "report/style.h"

namespace gpureap::report {

/// One line, ending in "\n": the local time as RFC 3339 with the date (report::stamp), "GPU N: " for a GPU's
/// event, what happened with the bytes and the holders, why, and the next step.
/// Text from processes and the driver is escaped (terminal_text).
std::string watch_event_line(const inventory::Event& e, const Style& style);
/// The same event for a screen's one message line (`gpureap top`): the local time of day
/// ("22:42:27") in place of the full RFC 3339 stamp, no newline.
std::string watch_event_brief(const inventory::Event& e);

/// One JSON object on one line, ending in "\n": schema_version, event, level
/// (report::event_level: "warning", "error", "notice", "info"), time, time_unix,
/// hostname (report::event_head), gpu, gpus,
/// uuid, bytes, holders[{pid, start_time, comm, user, gpu_bytes}], parent{pid,
/// comm, cmdline, died_at} (absent when unknown), class, detail.
std::string watch_event_json(const inventory::Event& e);

/// In place of `dropped` event lines that stdout did not take in time: "<RFC 3339>
/// N events dropped while stdout was blocked", or {"schema_version":2,
/// "event":"events_dropped","level":"warning",<time>,"dropped":N} on one line.
std::string watch_dropped_line(std::uint64_t dropped, const Style& style);
std::string watch_dropped_json(std::uint64_t dropped);

}  // namespace gpureap::report
