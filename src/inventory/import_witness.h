#pragma once
// CUDA IPC importers, witnessed (docs/orphans.md, "Keepers"). When an exporter dies, the
// driver keeps the memory another process imported from it and NVML moves those bytes to
// the importer (measured on an H100, driver 580: exporter 8802 MiB and importer 610 MiB;
// then the importer alone, at 8802 MiB). The import adds no descriptor and no mapping to
// the importer, so no single look can tell it: only a watcher that saw the exporter
// listed, then dead, while the importer's figure grew by about the exporter's bytes at the
// same look. The agent keeps such records in its state directory (`imported.json`, written
// and read as `witnessed.json` is: this boot's, this user's, pruned of gone importers), so
// that a direct look and a restarted agent name the same importer.

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "gpu/gpu_source.h"
#include "proc/holder.h"
#include "util/result.h"

namespace gpureap::inventory {

inline constexpr const char* kImportFile = "imported.json";

/// Importer `importer` keeps, on GPU `gpu_uuid`, `bytes` of the memory of exporter
/// `exporter`, which the agent saw die at `died_at` (seconds since the epoch).
struct ImportRecord {
  proc::ProcessId importer;
  proc::ProcessId exporter;
  std::string exporter_comm;
  std::string gpu_uuid;
  std::uint64_t bytes = 0;  // how much the importer's figure grew when the exporter died
  double died_at = 0;
  friend bool operator==(const ImportRecord&, const ImportRecord&) = default;
};

/// One look's NVML process list of one GPU, each process with its identity (from /proc).
struct ListedProcess {
  proc::ProcessId id;
  std::string comm;
  std::uint64_t bytes = 0;
};
using Listing = std::map<std::string, std::vector<ListedProcess>>;  // GPU uuid -> its list

/// The most an importer's figure may grow past the exporter's, and the most it may fall
/// short (the exporter's own context, about 0.6 GiB on an H100, goes with it).
inline constexpr std::uint64_t kImportSlack = 64ULL << 20;
inline constexpr std::uint64_t kExporterContextSlack = 1ULL << 30;

/// The imports two consecutive looks witness: on one GPU, an exporter listed `before`
/// that is listed no more `after` and is dead (`alive` false: gone or a zombie), and a
/// process listed in both (same identity) whose figure grew by g, more than kImportSlack
/// and within [exporter's bytes - kExporterContextSlack, exporter's bytes + kImportSlack].
/// A growth two dead exporters could explain names neither: no claim without a witness.
std::vector<ImportRecord> witness_imports(const Listing& before, const Listing& after,
                                          const std::function<bool(const proc::ProcessId&)>& alive,
                                          double now);

/// `records` to `<dir>/imported.json` atomically, with this boot's id (state_file.h).
Result<void> save_imports(const std::string& dir, const std::vector<ImportRecord>& records);
/// The records of `<dir>/imported.json` whose importer still runs under `proc_root`; none
/// for a missing, refused, malformed or another boot's file.
std::vector<ImportRecord> load_imports(const std::string& dir, const std::string& proc_root = "/proc");

/// The watcher's side: the last look's lists, and the records so far.
class ImportWitness {
 public:
  /// Loads what an earlier agent witnessed (`dir` empty: nothing kept).
  ImportWitness(std::string dir, std::string proc_root);

  /// A look: `snapshot` (NVML now) and the processes the look knows (pid -> holder, for
  /// identities). New witnesses are added, records of importers gone are dropped, and the
  /// file is rewritten when they changed. A snapshot without GPU lists changes nothing.
  void observe(const gpu::GpuSnapshot& snapshot, const std::map<pid_t, proc::Holder>& holders,
               double now);

  const std::vector<ImportRecord>& records() const { return records_; }

 private:
  std::string dir_;
  std::string proc_root_;
  Listing last_;
  std::vector<ImportRecord> records_;
};

}  // namespace gpureap::inventory
