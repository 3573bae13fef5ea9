#pragma once
// A long-lived child for end-to-end tests (`gpureap watch`, or any command that
// runs until told to stop): started with its stdout and stderr on pipes, read
// line by line with a bounded wait, stopped through its pidfd with SIGTERM and
// its exit status returned. The destructor SIGKILLs and reaps it if a test left
// it running (a failed assertion), so no test leaks an agent.

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace gpureap::e2e {

class SimNode;

class WatchChild {
 public:
  /// One line of stdout, with when it was read (steady clock and wall clock).
  struct Line {
    std::string text;  // without the newline
    std::chrono::steady_clock::time_point read_at;
    double read_at_wall = 0;  // seconds since the epoch
  };

  /// Starts `argv` (argv[0] a path) with this process's environment plus `env`;
  /// stdin is /dev/null. Check running() afterwards.
  WatchChild(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env);
  /// `gpureap <args>` on the simulated node (its environment).
  static WatchChild gpureap(const SimNode& node, const std::vector<std::string>& args);
  ~WatchChild();
  WatchChild(WatchChild&& other) noexcept;
  WatchChild(const WatchChild&) = delete;
  WatchChild& operator=(const WatchChild&) = delete;
  WatchChild& operator=(WatchChild&&) = delete;

  pid_t pid() const { return pid_; }
  /// True while the child has not exited (checked through its pidfd).
  bool running();

  /// The next stdout line, waiting at most `timeout`; nullopt at the deadline or
  /// at EOF (the child closed stdout or exited).
  std::optional<Line> next_line(std::chrono::milliseconds timeout);
  /// Reads lines until one parses as a JSON object that satisfies `pred`, for at
  /// most `timeout`; returns it (nullopt at the deadline or EOF). Every line read
  /// is kept in lines().
  std::optional<nlohmann::json> wait_for_json(
      const std::function<bool(const nlohmann::json&)>& pred, std::chrono::milliseconds timeout,
      Line* line = nullptr);
  /// Every stdout line read so far, and what it wrote on stderr so far.
  const std::vector<Line>& lines() const { return lines_; }
  const std::string& err() const { return err_; }
  /// stdout lines read so far, then stderr, for failure messages.
  std::string transcript() const;

  /// SIGTERM through the pidfd, then waits at most `timeout` for the exit
  /// (reading the rest of stdout meanwhile). Returns the exit status, 128+signal
  /// when killed by one, or -1 when it did not exit in time (it is then SIGKILLed).
  /// `again`: SIGTERM once more every `again` until the exit, as timeout(1) signals
  /// its child and then the child's process group.
  int terminate(std::chrono::milliseconds timeout = std::chrono::seconds(10),
                std::optional<std::chrono::milliseconds> again = std::nullopt);

 private:
  // Reads whatever stdout and stderr have, waiting until `deadline` for something.
  // Returns false at EOF of stdout.
  bool pump(std::chrono::steady_clock::time_point deadline);
  void reap(int status_or_minus1);

  pid_t pid_ = -1;
  int pidfd_ = -1;
  int out_ = -1;
  int err_fd_ = -1;
  std::string out_buf_;
  std::string err_;
  std::vector<Line> lines_;
  std::size_t next_ = 0;    // lines_ index next_line() returns next
  std::vector<bool> taken_;  // lines wait_for_json() took out of order (next_line skips them)
  std::optional<int> exit_status_;
};

/// `gpureap --json watch --no-listen --tick 200ms` and `extra` (no second --tick), its
/// "started" line read.
WatchChild start_json_agent(const SimNode& node, const std::vector<std::string>& extra = {});

/// `gpureap --json watch` with the most eager reaper (anything orphaned for 300 ms,
/// ticks of 100 ms), its "started" line read.
WatchChild start_eager_reaper(const SimNode& node);

/// What the eager reaper (start_eager_reaper) planned, tried or did besides a control:
/// a witnessed orphan made now on `control_gpu` (a crashed server's worker, the test's
/// own), which the reaper must reap. Every reap event up to the control's "reaped" must
/// name the control's worker alone: anything the agent saw before the control and
/// wrongly took for a reapable orphan was due before it, so its reap came first or with
/// it. This stands in for a window of "nothing reaped for 3 s": the control's reap shows
/// that the reaper ran past its 300 ms, however fast or loaded the machine. Returns the
/// offending event lines ("" when none); a failure of the calling test when the control
/// was never reaped. `control_gpu` must hold nothing else.
std::string reaped_besides_a_control(SimNode& node, WatchChild& agent, unsigned control_gpu);

}  // namespace gpureap::e2e
