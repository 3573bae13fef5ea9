#pragma once
// Where gpureap's audit records go (docs/audit.md): the audit file in the state
// directory (audit_file.h) and the system's log (journal.h). A record that cannot be
// written never stops a signal or a free: the failure is said once (through the
// caller's ProblemSink, which prints it: library code never prints), and said again
// only after writing worked in between.
//
// And what `gpureap log` shows of them: select_records, the filters of --pid, --gpu
// and --since.

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "audit/audit_file.h"
#include "audit/journal.h"
#include "gpu/gpu_select.h"
#include "reclaim/audit.h"
#include "util/time_text.h"

namespace gpureap::audit {

using ProblemSink = std::function<void(const std::string&)>;

class Recorder final : public reclaim::AuditSink {
 public:
  /// Records to DIR/audit.jsonl when `dir` is set (else `no_dir_reason` is said at the
  /// first record), and to `journal`; problems go to `problems`.
  Recorder(std::optional<std::string> dir, std::string no_dir_reason, JournalSend journal,
           ProblemSink problems);

  void write(const reclaim::AuditRecord& record) noexcept override;

 private:
  // Says `problem` when `failing` turns true; quiet while it stays so.
  void said(bool& failing, bool failed, const std::string& problem);

  std::optional<std::string> dir_;
  std::string no_dir_reason_;
  JournalSend journal_;
  ProblemSink problems_;
  bool file_failing_ = false;
  bool journal_failing_ = false;
};

/// `gpureap log`'s filters; an empty one selects everything.
struct LogFilter {
  std::optional<pid_t> pid;       // signals to this pid
  gpu::GpuSelector gpus;          // signals on these GPUs (indices, ranges, UUIDs)
  std::optional<WallTime> since;  // records at or after this time
};

/// The records `filter` selects, oldest first. A verdict is selected with the signals of
/// its operation: a free that signalled pid 1068 shows its verdict under --pid 1068.
/// --gpu matches the GPUs as recorded (index and UUID): items of a PCI bus id or a
/// minor match no record.
std::vector<const StoredRecord*> select_records(const std::vector<StoredRecord>& records,
                                                const LogFilter& filter);

}  // namespace gpureap::audit
