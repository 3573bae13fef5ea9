#pragma once
// End-to-end test harness: a simulated GPU node in a temp dir, the real gpureap
// binary run as a subprocess, real holder processes started with gpureap-sim.
// Every process a test starts is tracked and killed (through pidfds) when the
// SimNode goes out of scope, also when the test fails.

#include <sys/types.h>

#include <chrono>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace gpureap::e2e {

struct CommandResult {
  int exit_code = -1;  // exit status, or 128+signal
  std::string out;
  std::string err;
  double seconds = 0;
  nlohmann::json json() const;  // parses `out`; fails the test on bad JSON
};

/// The holders of every GPU in a `status --json` answer, by pid.
std::map<pid_t, nlohmann::json> holders_by_pid(const nlohmann::json& status);

/// SIGKILLs, at scope exit, pids that a test's own shells started (ours, by pid).
struct KillAtExit {
  std::vector<pid_t> pids;
  ~KillAtExit() { now(); }
  void now();  // SIGKILLs them at once (and not again at exit)
};

/// Checks that `text` is one --json document of `command` that starts as every document
/// does (docs/json-schema.md): "schema_version", "command", "time" (RFC 3339 with the
/// date, within a minute of now) and "hostname" (this host's), in that order.
void expect_document_head(const std::string& text, const std::string& command);

struct HoldResult {
  pid_t leader = 0;
  std::vector<pid_t> pids;                          // every process started
  std::vector<std::pair<pid_t, unsigned>> holders;  // (pid, gpu)
  unsigned listen_port = 0;  // --listen: the loopback port the server (and workers) listen on
  pid_t keeper = 0;          // --inheritor / --ipc-importer: the process that keeps the memory
  double killed_at = 0;      // crash_watched: wall clock seconds just before the SIGKILL
};

class SimNode {
 public:
  /// Creates a node: `gpureap-sim node --dir <tmp> <node_args>`.
  explicit SimNode(const std::vector<std::string>& node_args = {"--gpus", "8", "--memory",
                                                                "96GiB"});
  ~SimNode();
  SimNode(const SimNode&) = delete;
  SimNode& operator=(const SimNode&) = delete;

  const std::string& dir() const { return dir_; }
  /// Its GPUREAP_STATE_DIR (baselines, the free lock, unheld.json).
  const std::string& state_dir() const { return state_dir_; }
  /// The environment gpureap and the sim need (plus a private state dir; with AMD GPUs,
  /// GPUREAP_SYSFS_ROOT).
  std::map<std::string, std::string> env() const;

  /// Runs gpureap with `args`; stdin is /dev/null; bounded by `timeout`.
  CommandResult gpureap(const std::vector<std::string>& args,
                        std::chrono::milliseconds timeout = std::chrono::seconds(60),
                        const std::map<std::string, std::string>& extra_env = {}) const;
  /// Runs gpureap-sim with `args` (not `hold`).
  CommandResult sim(const std::vector<std::string>& args) const;

  /// `gpureap-sim hold --dir D <args>`; waits for its JSON ready line. The holder
  /// tree keeps running; it is tracked for cleanup. `--detach` is added unless
  /// `foreground` (then the hold process is our child and its pid is the leader).
  /// `extra_env` is added to the holders' environment (`free --env`, Slurm's variables).
  HoldResult hold(const std::vector<std::string>& args, bool foreground = false,
                  const std::map<std::string, std::string>& extra_env = {});

  /// A server crash the running agent witnesses (docs/orphans.md, provenance): holds
  /// `args` (workers under a server titled as vLLM's launcher, so its identity is a
  /// server's), waits until the agent answers with every worker, then SIGKILLs the
  /// server (ours, by pid). Its workers are orphaned by witnessed evidence, which the
  /// reaper may act on; an orphan no agent saw made is inferred, which it never does.
  HoldResult crash_watched(std::vector<std::string> args,
                           const std::map<std::string, std::string>& extra_env = {});
  /// Polls (bounded) until the running agent answers with each of `pids` found by its
  /// open device node (its own scan, which watches its parent); false at the deadline.
  bool agent_sees(const std::vector<pid_t>& pids) const;

  /// Polls (bounded) until `pred` holds; returns false at the deadline.
  static bool eventually(const std::function<bool()>& pred,
                         std::chrono::milliseconds timeout = std::chrono::seconds(10));

 private:
  std::string dir_;
  std::string state_dir_;
  std::string nvml_library_;     // the simulated driver, where any user can load it
  std::vector<pid_t> children_;  // our own children (foreground holds), reaped at the end
  std::vector<std::pair<pid_t, std::uint64_t>>
      tracked_;  // (pid, start time) of every holder process
};

/// The GPU of a status document's "gpus" whose index is `id` ("3", or a MIG device's
/// "0/gi1/ci0"), or null.
const nlohmann::json* gpu_of(const nlohmann::json& status, const std::string& id);
/// True when a process with this pid exists and is not a zombie.
bool alive(pid_t pid);
/// A new directory under the temporary directory, named `prefix` and six random characters.
std::string make_temp_dir(const char* prefix);
/// State letter from /proc/PID/stat, '\0' when gone.
char state_of(pid_t pid);
/// A Slurm job id of this test process's own, from `n`: the process id then `n` in three
/// digits. `ctest -j` runs tests at once, and an epilog takes every process on the machine
/// whose SLURM_JOB_ID is its job's, so two tests using job 42 would free each other's holders.
std::string own_job_id(unsigned n);
/// Start time (stat field 22) of a live process, 0 when gone.
std::uint64_t start_time_of(pid_t pid);
/// tests/e2e/pyhold.py, the Python holder that stays in its caller's group and session.
extern const std::string kPyhold;
/// The pid a holder wrote to `file`, waited for (bounded, 20 s); 0 when it never came.
pid_t pid_in(const std::string& file);
/// Waits until `pid` has run `seconds` (its start time against /proc/uptime): a monitor
/// is called a client only once older than NVML's list can be (kClientMinAgeSeconds).
void wait_until_older_than(pid_t pid, double seconds);
/// fork + execve of `argv` (argv[0] a path) with this process's environment (less
/// NO_COLOR and COLUMNS) plus `env`; stdin /dev/null, stdout and stderr to the given descriptors.
/// `die_with_parent`: the child gets SIGKILL if the test process dies. -1 if fork failed.
pid_t spawn_child(const std::vector<std::string>& argv,
                  const std::map<std::string, std::string>& env, int out_fd, int err_fd,
                  bool die_with_parent);
/// Runs a command line (no shell), returns its result.
CommandResult run_command(const std::vector<std::string>& argv,
                          const std::map<std::string, std::string>& env,
                          std::chrono::milliseconds timeout);

}  // namespace gpureap::e2e
