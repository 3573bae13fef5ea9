#pragma once
// The system's log for audit records: the journal where journald runs (structured
// fields, `journalctl -t gpureap GPUREAP_TARGET_PID=1234`), else syslog(3).
//
// libsystemd is loaded at run time (dlopen of libsystemd.so.0, the way NVML is), not
// linked: the portable binary shares its objects with the others and must need only
// glibc, and Debian ships no static libsystemd. Its header, from libsystemd-dev, is
// used when CMake finds it (pkg-config libsystemd: GPUREAP_HAVE_SD_JOURNAL), so the
// call is type-checked against the real declaration; a build without it logs through
// syslog(3) only.

#include <functional>
#include <string>
#include <vector>

#include "util/result.h"

namespace gpureap::audit {

/// Sends one record's fields ("NAME=value" each, report::journal_fields) to a log.
using JournalSend = std::function<Result<void>(const std::vector<std::string>& fields)>;

/// The system's log: sd_journal_sendv when journald listens
/// (/run/systemd/journal/socket) and libsystemd.so.0 loads, else syslog(3) with
/// ident gpureap, facility authpriv and the record's PRIORITY (syslog_text). Loads
/// libsystemd at the first record, not before. A journal that refuses a record fails
/// (the caller says so once) after the record went to syslog(3) instead.
JournalSend system_journal();

/// The syslog(3) text of a record's fields: its MESSAGE, then " [" and the GPUREAP_*
/// fields as NAME=value, separated by spaces, "]". Values are escaped as on a terminal
/// and quoted when they hold a space, a quote or a bracket, so a field cannot forge
/// another field or another line.
std::string syslog_text(const std::vector<std::string>& fields);

/// True when gpureap was built with libsystemd's header (it can reach the journal).
bool built_with_journal();

}  // namespace gpureap::audit
