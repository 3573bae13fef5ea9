#pragma once
// Resolving where things are (device nodes, NVML) and how to print, from flags
// and the environment. Shared by every command.

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "cli/command.h"
#include "gpu/gpu_source.h"
#include "inventory/node.h"
#include "reclaim/audit.h"
#include "report/progress_view.h"
#include "report/style.h"
#include "report/table_layout.h"

namespace gpureap::cli {

/// --dev-dir, else $GPUREAP_DEV_DIR, else $GPUREAP_SIM_DIR/dev, else /dev.
std::string resolve_dev_dir(const GlobalOptions& global);

/// Colour on stdout only on a TTY, never with NO_COLOR or --no-color, never with --json.
report::Style stdout_style(const GlobalOptions& global);
report::Style stderr_style(const GlobalOptions& global);

/// How wide stdout's tables may be: $COLUMNS when set (a whole number, at least 40),
/// else the terminal's width (TIOCGWINSZ), else 80 on a terminal; none when stdout
/// is not a terminal and $COLUMNS is unset (the fixed layout scripts read). `wide`:
/// --wide, whole command lines.
report::TableWidth stdout_table_width(bool wide);
/// The same rule for stderr's lines (fd 2's terminal): $COLUMNS, else TIOCGWINSZ, else
/// nullopt (not a terminal: lines are not broken).
std::optional<std::size_t> stderr_columns();

/// The live view of a release on stderr: rows redrawn in place on a terminal (its
/// width), one line per phase change through a pipe.
std::shared_ptr<report::ProgressView> progress_view();

/// The node's GPU source for this run (gpu::make_node_source: the vendors of the device
/// directory; NVML from --nvml-library / $GPUREAP_NVML_LIBRARY / libnvidia-ml.so.1).
std::unique_ptr<gpu::GpuSource> open_gpu_source(const GlobalOptions& global);

/// Whether the first look may come from a running agent (status, free, wait),
/// or must be this process's own (run verifies its own command's release).
enum class FirstLook { agent_or_scan, scan };

/// The node context of one command: devices from resolve_dev_dir, the NVML source,
/// baselines from `state_dir` (nullopt: the default state directory, refused ones a
/// warning), the agent's socket (inventory::agent_socket_for) unless `first_look` is scan.
inventory::Node open_node(const GlobalOptions& global,
                          std::optional<std::string> state_dir = std::nullopt,
                          FirstLook first_look = FirstLook::agent_or_scan);

/// The audit sink of a command that signals (audit/recorder.h, docs/audit.md): the
/// audit file in `state_dir` (nullopt: inventory::state_dir(); a refused directory means
/// the system log only) and the journal or syslog. A record that cannot be written is
/// said once on stderr as "gpureap COMMAND: warning: ...", or given to `warn` when set
/// (`top`, whose terminal is a screen), and never stops the command.
std::shared_ptr<reclaim::AuditSink> open_audit(
    std::string_view command, std::optional<std::string> state_dir = std::nullopt,
    std::function<void(const std::string&)> warn = {});

/// The process control of a command that signals: the system's, each signal recorded
/// in the audit trail of `command` (open_audit) under `actor` and `caller`. One object
/// owns the sink, the trail and both controls (the trail and controls refer to each other).
std::shared_ptr<reclaim::AuditedControl> open_audited_control(
    std::string_view command, reclaim::AuditActor actor, reclaim::AuditCaller caller,
    const std::string& proc_root, std::optional<std::string> state_dir = std::nullopt,
    std::function<void(const std::string&)> warn = {});

/// A default duration as a flag value `parse_duration` reads back: "5s", "250ms".
/// Help shows the library's named defaults through it, never a copy.
std::string duration_flag(std::chrono::milliseconds d);

/// Writes `text` to stdout / stderr in full (handles short writes, ignores EPIPE).
/// Asks `question` on the terminal (/dev/tty) with " [y/N] "; anything but y/yes (or no
/// terminal) declines.
bool ask_on_tty(const std::string& question);

void print_out(std::string_view text);
void print_err(std::string_view text);

}  // namespace gpureap::cli
