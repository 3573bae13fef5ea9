#pragma once
// One session of `gpureap top` (nitvop's tui/ over its api/): look through the agent or a
// scan -> rows -> screen -> keys, until q or a signal; the tagged set freed through the
// one free session (reclaim/free_session.h): a fresh look, the plan confirmed in a box,
// then free's lock, a fresh look under it and only the confirmed processes, the release
// watched, the verdict in a box. Everything on screen comes from the inventory `status`
// shows; cli/top_command.cc parses the options, opens the node, the terminal and the
// audit trail, and catches the signals.

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "inventory/events.h"
#include "inventory/node.h"
#include "reclaim/audited_control.h"
#include "reclaim/free_flow.h"
#include "top/history.h"
#include "top/keys.h"
#include "top/process_usage.h"
#include "top/rows.h"
#include "top/screen_model.h"
#include "top/terminal.h"
#include "util/result.h"

namespace gpureap::top {

/// The options of `gpureap top`.
struct SessionOptions {
  std::chrono::milliseconds interval{1000};  // between looks
  bool readonly = false;                     // the tag and free keys are off
};

/// The F key's process control, made afresh for each free: signals through the audit
/// trail in `state_dir` (actor `top`); a record that cannot be written is given to
/// `warn` (shown under the verdict). The pointer owns whatever the control wraps.
using OpenControl = std::function<std::shared_ptr<reclaim::AuditedControl>(
    const std::string& state_dir, std::function<void(const std::string&)> warn)>;

/// What a session runs on, all owned by the caller.
struct SessionContext {
  inventory::Node& node;
  Terminal& terminal;
  /// Raised by SIGTERM or SIGHUP: quit.
  const std::atomic<bool>& stop;
  /// Raised by Ctrl-C: stops a free's waits (the session lowers it after), else quits.
  std::atomic<bool>& interrupted;
  /// The state directory free's lock is taken in, asked at each F (an error: F says it
  /// cannot free).
  std::function<Result<std::string>()> state_dir;
  OpenControl open_control;
};

/// The box that shows a free's verdict: its title and ink, then the report, the per-GPU
/// result first ("any key closes").
Box verdict_box(const reclaim::FreeOutcome& out);

class TopSession {
 public:
  TopSession(SessionContext context, const SessionOptions& options);

  /// Looks, draws and acts on keys until q, `stop` or `interrupted` outside a free.
  /// Returns the exit status (0).
  int run();

 private:
  void look();
  void record_history();
  std::vector<gpu::DeviceId> gpu_ids() const;
  void say(std::string message);
  Screen layout(const std::string& message_override = {});
  void draw() { context_.terminal.draw(layout()); }
  bool stopping() const { return context_.stop.load() || context_.interrupted.load(); }
  void show_detail();
  Key show_box(Box box, bool wait);
  void find();
  void free_tagged();
  reclaim::FreeSteps free_steps(std::chrono::milliseconds grace,
                                std::vector<proc::ProcessId>& confirmed);
  void show_verdict(const reclaim::FreeOutcome& out, const std::vector<std::string>& warnings);

  SessionContext context_;
  SessionOptions options_;
  ViewState state_;
  MemoryHistory history_;
  bool history_asked_ = false;  // the agent's history is asked for at the first look only
  inventory::EventDetector events_;
  bool events_primed_ = false;  // the first look's events are the node as it was: not said
  inventory::Inventory inv_;
  std::vector<Row> rows_;
  std::size_t list_rows_ = 0;
  std::string message_;
  UsageSampler usage_;  // CPU% and host RSS per holder
  std::chrono::steady_clock::time_point message_until_{};
};

}  // namespace gpureap::top
