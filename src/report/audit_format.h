#pragma once
// The audit record's formats (docs/audit.md): one JSON line per record in the audit
// file (written and read back by `gpureap log`), the journal's fields with a human
// MESSAGE, and `gpureap log`'s table. The line is a wire: text from processes (comm,
// cgroup, user) travels as util/wire_text writes it (a string, or {"hex": "..."} when
// it is not UTF-8), so a record reads back byte for byte.

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "reclaim/audit.h"
#include "report/style.h"
#include "report/table_layout.h"
#include "util/result.h"

namespace gpureap::report {

/// The schema version every line carries (docs/audit.md). 2: "hostname" (was "host"),
/// and a signal's target has its command line and lineage verdict. Version 1 lines are
/// still read (their host, no command line, no verdict).
inline constexpr int kAuditSchemaVersion = 2;

/// One record as one JSON line, ending in '\n'. Never throws on process text.
std::string audit_line(const reclaim::AuditRecord& record);

/// The record a line holds (without its '\n'); fails, saying what is wrong, on a line
/// that is not a whole record of this schema (a line cut short by a crash, garbage).
Result<reclaim::AuditRecord> parse_audit_line(std::string_view line);

/// The human sentence of a record: "free by root (pid 4242): SIGTERM to pid 1068
/// (python3, user alice) holding 20.0 GiB on GPU 0, via pidfd: delivered". Process
/// text escaped as on a terminal (a newline in a comm cannot forge a log line).
std::string audit_message(const reclaim::AuditRecord& record);

/// The record's syslog priority: 4 (warning) when a signal was refused or memory is
/// still held, 6 (info) for a target already gone, else 5 (notice).
int audit_priority(const reclaim::AuditRecord& record);

/// The record as journal fields, "NAME=value" each: MESSAGE (audit_message),
/// PRIORITY, SYSLOG_IDENTIFIER=gpureap, SYSLOG_FACILITY=10 (authpriv), and GPUREAP_*
/// (RECORD, ACTOR, OP, CALLER_*, TARGET_PID, TARGET_START_TIME, TARGET_COMM, ...,
/// GPU once per GPU, BYTES, SIGNAL, VIA, RESULT, ERROR, VERDICT, SIGNALS, SECONDS).
/// Values are the raw bytes (the journal keeps binary values); empty ones are left out.
std::vector<std::string> journal_fields(const reclaim::AuditRecord& record);

/// `gpureap log`'s table: a header, then one row per record, oldest first. Without a
/// width (`width.fixed()`: not a terminal) the fixed layout scripts read, whole. With
/// one, fitted (report/table_layout.h): no line wider than `width.columns`, COMMAND (the
/// last column) cut with "...", BY, MEMORY, USER, ACTOR, SIGNAL, GPU, INSTANCE and RESULT dropped in that
/// order when even that leaves COMMAND too little room, a free's verdict line cut too;
/// with `width.wide` (--wide) whole lines, the columns as wide as their cells.
std::string audit_table(const std::vector<reclaim::AuditRecord>& records, const Style& style,
                        TableWidth width = {});

}  // namespace gpureap::report
