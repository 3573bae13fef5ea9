// `gpureap top` driven in tmux on the simulated node (issue 26): a crashed server's
// orphaned workers shown marked under their instance at 80x24 and 200x50; tagged and
// freed through free's plan (confirmed in a box), the release verified on screen, the
// live server untouched; --readonly refuses; a resized terminal is redrawn to its size.
// Each test runs its own tmux server on its own socket (-L) and kills only that one.

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <fstream>

#include "harness.h"
#include "inventory/agent_client.h"
#include "util/units.h"
#include "watch_child.h"

namespace gpureap::e2e {
namespace top_test {

std::string find_tmux() {
  for (const char* dir : {"/usr/bin", "/bin", "/usr/local/bin"}) {
    std::string path = std::string(dir) + "/tmux";
    if (::access(path.c_str(), X_OK) == 0) return path;
  }
  return "";
}

// One tmux server running `gpureap top ARGS` in a window of width x height.
class TopInTmux {
 public:
  TopInTmux(const SimNode& node, const std::vector<std::string>& args, unsigned width,
            unsigned height, const std::string& interval = "300ms")
      : tmux_(find_tmux()), env_(node.env()) {
    static std::atomic<int> counter{0};
    socket_ = "gpureap-e2e-top-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
    // No status line (the pane is the whole window); the pane stays after top exits, so
    // its exit status can be read.
    const std::string conf = node.dir() + "/tmux.conf";
    std::ofstream(conf) << "set -g status off\nset -g remain-on-exit on\n";
    env_["LC_ALL"] = "C";  // ASCII sparklines: the same screen on every machine
    env_.erase("NO_COLOR");
    // top runs under sh, which writes its exit status to a file: tmux 3.3a at times
    // never reaps an exited pane's process (a zombie, the pane dead with no status),
    // which made the pane's own exit status an unreliable witness.
    status_file_ = node.dir() + "/top-exit-" + std::to_string(counter.load());
    std::vector<std::string> argv = {tmux_,      "-L", socket_, "-f", conf, "new-session", "-d",
                                     "-s",       "top", "-x",   std::to_string(width),
                                     "-y",       std::to_string(height), "/bin/sh", "-c",
                                     "\"$0\" \"$@\"; echo $? > '" + status_file_ + "'",
                                     GPUREAP_BIN, "top", "--interval", interval};
    argv.insert(argv.end(), args.begin(), args.end());
    started_ = tmux(argv);
  }
  ~TopInTmux() { tmux({tmux_, "-L", socket_, "kill-server"}); }
  TopInTmux(const TopInTmux&) = delete;
  TopInTmux& operator=(const TopInTmux&) = delete;

  const CommandResult& started() const { return started_; }

  std::string screen() {
    last_ = tmux({tmux_, "-L", socket_, "capture-pane", "-p", "-t", "top"}).out;
    return last_;
  }
  const std::string& last() const { return last_; }

  /// Polls the screen (bounded) until it holds every one of `texts`.
  bool wait_for(const std::vector<std::string>& texts,
                std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
    return SimNode::eventually(
        [&] {
          const std::string s = screen();
          for (const auto& t : texts)
            if (s.find(t) == std::string::npos) return false;
          return true;
        },
        timeout);
  }
  /// Polls until the screen no longer holds `text`.
  bool wait_without(const std::string& text,
                    std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
    return SimNode::eventually([&] { return screen().find(text) == std::string::npos; }, timeout);
  }

  void keys(const std::vector<std::string>& keys) {
    std::vector<std::string> argv = {tmux_, "-L", socket_, "send-keys", "-t", "top"};
    argv.insert(argv.end(), keys.begin(), keys.end());
    tmux(argv);
  }
  void resize(unsigned width, unsigned height) {
    tmux({tmux_, "-L", socket_, "resize-window", "-t", "top", "-x", std::to_string(width), "-y",
          std::to_string(height)});
  }
  /// top's exit status once it has exited (from the file sh writes), else "".
  std::string exit_status() const {
    std::ifstream in(status_file_);
    std::string word;
    in >> word;
    return word;
  }
  /// The pane as tmux sees it: "1 0" once its process exited with status 0.
  std::string pane_state() {
    return tmux({tmux_, "-L", socket_, "display-message", "-p", "-t", "top",
                 "#{pane_dead} #{pane_dead_status} sig=#{pane_dead_signal}"})
        .out;
  }

 private:
  CommandResult tmux(const std::vector<std::string>& argv) {
    return run_command(argv, env_, std::chrono::seconds(20));
  }

  std::string tmux_;
  std::map<std::string, std::string> env_;
  std::string socket_;
  std::string status_file_;
  CommandResult started_;
  std::string last_;
};

// The line of `screen` that holds `text`, or "".
std::string line_with(const std::string& screen, const std::string& text) {
  std::size_t at = screen.find(text);
  if (at == std::string::npos) return "";
  std::size_t begin = screen.rfind('\n', at);
  begin = begin == std::string::npos ? 0 : begin + 1;
  return screen.substr(begin, screen.find('\n', at) - begin);
}

// The crashed server (orphaned, GPU 0-1) and a live one (GPU 2).
struct CaseStudy {
  SimNode node{{"--gpus", "4", "--memory", "96GiB"}};
  HoldResult crashed = node.hold({"--gpu", "0", "--children", "2", "--bytes", "20GiB", "--orphan",
                                  "--title", "sglang::scheduler_TP{k}", "--server-title",
                                  "python3 -m sglang.launch_server --model-path org/M --port 30000"});
  HoldResult live = node.hold({"--gpu", "2", "--children", "1", "--bytes", "8GiB", "--title",
                               "VLLM::Worker_TP{k}", "--server-title",
                               "vllm serve org/Model-B --port 8000"});
  std::string heading() const { return "process group " + std::to_string(crashed.leader); }
};

// The orphans' rows follow their instance's heading and are marked.
void expect_orphans_under_instance(const std::string& screen, const CaseStudy& c) {
  const std::size_t heading = screen.find(c.heading());
  ASSERT_NE(heading, std::string::npos) << screen;
  for (const auto& [pid, gpu] : c.crashed.holders) {
    const std::string row = line_with(screen, " " + std::to_string(pid) + " ");
    EXPECT_NE(row.find("ORPHAN"), std::string::npos) << row << "\n" << screen;
    EXPECT_GT(screen.find(row), heading) << screen;
  }
  const std::string live_row = line_with(screen, " " + std::to_string(c.live.holders[0].first) + " ");
  EXPECT_NE(live_row.find("live"), std::string::npos) << screen;
  EXPECT_EQ(live_row.find("ORPHAN"), std::string::npos) << screen;
}

TEST(Top, ShowsOrphansMarkedUnderTheirInstanceAt80x24And200x50) {
  if (find_tmux().empty()) GTEST_SKIP() << "tmux is not installed (scripts/install-deps.sh)";
  CaseStudy c;
  for (auto [w, h] : {std::pair{80u, 24u}, std::pair{200u, 50u}}) {
    SCOPED_TRACE(std::to_string(w) + "x" + std::to_string(h));
    TopInTmux top(c.node, {}, w, h);
    ASSERT_EQ(top.started().exit_code, 0) << top.started().err;
    ASSERT_TRUE(top.wait_for({c.heading(), "ORPHAN", "GPU 3"})) << top.last();
    const std::string s = top.screen();
    expect_orphans_under_instance(s, c);
    // Every line fits the terminal: tmux would wrap a longer one onto the next row.
    std::size_t lines = 0;
    for (std::size_t at = 0; at < s.size();) {
      std::size_t nl = s.find('\n', at);
      if (nl == std::string::npos) nl = s.size();
      EXPECT_LE(nl - at, w) << s;
      ++lines;
      at = nl + 1;
    }
    EXPECT_EQ(lines, h) << s;
    // The orphaned memory is in GPU 0's bar.
    EXPECT_NE(line_with(s, "GPU 0").find("OOO"), std::string::npos) << s;
    if (w == 200) {
      EXPECT_NE(s.find("CONTAINER"), std::string::npos) << s;
    }
    top.keys({"q"});
    EXPECT_TRUE(SimNode::eventually([&] { return !top.exit_status().empty(); },
                                    std::chrono::seconds(30)))
        << top.pane_state();
    EXPECT_EQ(top.exit_status(), "0") << top.pane_state();
  }
}

// Issue 39: top on an AMD node (amdgpu's sysfs through GPUREAP_SYSFS_ROOT, which SimNode's
// environment carries): the orphaned workers under their instance, each GPU by its name.
TEST(Top, ShowsAnAmdNodesOrphansUnderTheirInstance) {
  if (find_tmux().empty()) GTEST_SKIP() << "tmux is not installed (scripts/install-deps.sh)";
  SimNode node({"--vendor", "amd", "--gpus", "2", "--memory", "192GiB"});
  HoldResult crashed = node.hold({"--gpu", "0", "--children", "2", "--bytes", "80GiB", "--orphan",
                                  "--title", "VLLM::Worker_TP{k}", "--server-title",
                                  "vllm serve org/Model --tensor-parallel-size 2"});
  ASSERT_EQ(crashed.holders.size(), 2u);
  TopInTmux top(node, {}, 200, 50);
  ASSERT_EQ(top.started().exit_code, 0) << top.started().err;
  const std::string heading = "process group " + std::to_string(crashed.leader);
  ASSERT_TRUE(top.wait_for({heading, "ORPHAN", "GPU 1"})) << top.last();
  const std::string s = top.screen();
  for (const auto& [pid, gpu] : crashed.holders) {
    const std::string row = line_with(s, " " + std::to_string(pid) + " ");
    EXPECT_NE(row.find("ORPHAN"), std::string::npos) << row << "\n" << s;
    EXPECT_GT(s.find(row), s.find(heading)) << s;
  }
  EXPECT_NE(line_with(s, "GPU 0").find("OOO"), std::string::npos) << s;  // 80 of 192 GiB orphaned
  top.keys({"q"});
  EXPECT_TRUE(SimNode::eventually([&] { return !top.exit_status().empty(); },
                                  std::chrono::seconds(30)))
      << top.pane_state();
  EXPECT_EQ(top.exit_status(), "0") << top.pane_state();
}

TEST(Top, TaggedOrphansAreFreedThroughThePlanAndVerifiedLiveServerUntouched) {
  if (find_tmux().empty()) GTEST_SKIP() << "tmux is not installed (scripts/install-deps.sh)";
  CaseStudy c;
  TopInTmux top(c.node, {}, 80, 24);
  ASSERT_EQ(top.started().exit_code, 0) << top.started().err;
  ASSERT_TRUE(top.wait_for({c.heading(), "ORPHAN"})) << top.last();
  // The cursor starts on the first row: the crashed server's heading (GPU 0 comes first).
  ASSERT_NE(line_with(top.screen(), c.heading()).find(">"), std::string::npos) << top.last();
  top.keys({"Space"});
  ASSERT_TRUE(top.wait_for({"2 tagged"})) << top.last();
  top.keys({"F"});
  ASSERT_TRUE(top.wait_for({"free 2 processes?", "Plan: signal 2 processes"})) << top.last();
  for (const auto& [pid, gpu] : c.crashed.holders) EXPECT_TRUE(alive(pid)) << "before y: " << pid;
  top.keys({"y"});
  ASSERT_TRUE(top.wait_for({"freed and verified", "Result after"}, std::chrono::seconds(60)))
      << top.last();
  const std::string verdict = top.last();
  EXPECT_NE(verdict.find("GPU 0"), std::string::npos) << verdict;
  EXPECT_NE(verdict.find("freed in"), std::string::npos) << verdict;
  for (const auto& [pid, gpu] : c.crashed.holders) EXPECT_FALSE(alive(pid)) << pid;
  for (pid_t pid : c.live.pids) EXPECT_TRUE(alive(pid)) << "live server " << pid;
  // Closed, the screen no longer lists the orphans; the live server is still there.
  top.keys({"Escape"});
  const std::string live = " " + std::to_string(c.live.holders[0].first) + " ";
  ASSERT_TRUE(SimNode::eventually([&] {
    const std::string s = top.screen();
    return s.find("Result after") == std::string::npos && s.find(live) != std::string::npos;
  })) << top.last();
  EXPECT_EQ(top.last().find("ORPHAN"), std::string::npos) << top.last();
  EXPECT_NE(line_with(top.last(), "GPU 0").find("free"), std::string::npos) << top.last();
  EXPECT_NE(line_with(top.last(), "GPU 2").find("held"), std::string::npos) << top.last();
  // The audit trail names top as the actor.
  auto log = c.node.gpureap({"--json", "log"});
  EXPECT_NE(log.out.find("\"actor\":\"top\""), std::string::npos) << log.out << log.err;
}

// W3-08: the plan box waits for a person without free's lock: a free (an epilog, the
// reaper) meanwhile takes it at once; on y, top takes it and frees what was confirmed.
TEST(Top, AnOpenPlanBoxHoldsNoLockW3_08) {
  if (find_tmux().empty()) GTEST_SKIP() << "tmux is not installed (scripts/install-deps.sh)";
  CaseStudy c;
  TopInTmux top(c.node, {}, 80, 24);
  ASSERT_TRUE(top.wait_for({c.heading(), "ORPHAN"})) << top.last();
  top.keys({"Space"});
  ASSERT_TRUE(top.wait_for({"2 tagged"})) << top.last();
  top.keys({"F"});
  ASSERT_TRUE(top.wait_for({"free 2 processes?"})) << top.last();
  // GPU 3 holds nothing: the free takes the lock, looks and says so (exit 4).
  auto other = c.node.gpureap({"free", "--gpu", "3", "--yes"}, std::chrono::seconds(60));
  EXPECT_EQ(other.exit_code, 4) << other.err;
  EXPECT_EQ(other.err.find("another gpureap free"), std::string::npos) << other.err;
  top.keys({"y"});
  ASSERT_TRUE(top.wait_for({"freed and verified", "Result after"}, std::chrono::seconds(60)))
      << top.last();
  for (const auto& [pid, gpu] : c.crashed.holders) EXPECT_FALSE(alive(pid)) << pid;
  for (pid_t pid : c.live.pids) EXPECT_TRUE(alive(pid)) << "live server " << pid;
}

TEST(Top, DeclinedPlanSignalsNothing) {
  if (find_tmux().empty()) GTEST_SKIP() << "tmux is not installed (scripts/install-deps.sh)";
  CaseStudy c;
  TopInTmux top(c.node, {}, 80, 24);
  ASSERT_TRUE(top.wait_for({c.heading(), "ORPHAN"})) << top.last();
  top.keys({"Space"});
  ASSERT_TRUE(top.wait_for({"2 tagged"})) << top.last();
  top.keys({"F"});
  ASSERT_TRUE(top.wait_for({"free 2 processes?"})) << top.last();
  top.keys({"n"});
  ASSERT_TRUE(top.wait_for({"not confirmed: nothing was signalled"})) << top.last();
  for (const auto& [pid, gpu] : c.crashed.holders) EXPECT_TRUE(alive(pid)) << pid;
}

TEST(Top, ReadOnlyRefusesToTagOrFree) {
  if (find_tmux().empty()) GTEST_SKIP() << "tmux is not installed (scripts/install-deps.sh)";
  CaseStudy c;
  TopInTmux top(c.node, {"--readonly"}, 80, 24);
  ASSERT_TRUE(top.wait_for({c.heading(), "ORPHAN", "read-only"})) << top.last();
  top.keys({"Space"});
  ASSERT_TRUE(top.wait_for({"tagging and freeing are off"})) << top.last();
  top.keys({"F"});
  ASSERT_TRUE(top.wait_for({"freeing is off"})) << top.last();
  EXPECT_EQ(top.last().find("tagged"), std::string::npos) << top.last();
  EXPECT_EQ(top.last().find("processes?"), std::string::npos) << top.last();
  for (const auto& [pid, gpu] : c.crashed.holders) EXPECT_TRUE(alive(pid)) << pid;
}

TEST(Top, AResizedTerminalIsRedrawnToItsNewSize) {
  if (find_tmux().empty()) GTEST_SKIP() << "tmux is not installed (scripts/install-deps.sh)";
  CaseStudy c;
  TopInTmux top(c.node, {}, 80, 24);
  ASSERT_TRUE(top.wait_for({c.heading(), "ORPHAN"})) << top.last();
  EXPECT_EQ(top.last().find("CONTAINER"), std::string::npos) << "no room at 80 columns";
  // A redraw is not atomic for capture-pane: wait for the whole list each time.
  const std::string live = " " + std::to_string(c.live.holders[0].first) + " ";
  top.resize(200, 50);
  ASSERT_TRUE(top.wait_for({"CONTAINER", c.heading(), live})) << top.last();
  expect_orphans_under_instance(top.last(), c);
  top.resize(80, 24);
  ASSERT_TRUE(SimNode::eventually([&] {
    const std::string s = top.screen();
    return s.find("CONTAINER") == std::string::npos && s.find(c.heading()) != std::string::npos &&
           s.find(live) != std::string::npos;
  })) << top.last();
  expect_orphans_under_instance(top.last(), c);
}

// With an agent watching, top's sparklines start with the agent's last readings (its
// history over the socket), not with top's first look: top here looks once (an interval of
// an hour), so a sparkline longer than one column can only be the agent's.
TEST(Top, SparklinesStartWithTheAgentsHistory) {
  if (find_tmux().empty()) GTEST_SKIP() << "tmux is not installed (scripts/install-deps.sh)";
  CaseStudy c;
  WatchChild agent = WatchChild::gpureap(c.node, {"--json", "watch", "--no-listen", "--tick", "100ms"});
  ASSERT_TRUE(agent.next_line(std::chrono::seconds(30))) << agent.transcript();
  const std::string socket = c.node.env().at("GPUREAP_STATE_DIR") + "/agent.sock";
  // The agent's answer to "history": a reading per look of every GPU, oldest first.
  constexpr std::size_t kReadings = 8;
  Result<inventory::GpuHistoryAnswer> past = fail("not asked yet");
  ASSERT_TRUE(SimNode::eventually([&] {
    past = inventory::ask_agent_history(socket, std::chrono::seconds(5));
    return past && past->gpus.size() == 4 && past->gpus[0].samples.size() >= kReadings;
  })) << (past ? "too few readings" : past.error().message) << "\n" << agent.transcript();
  for (const auto& trace : past->gpus) {
    EXPECT_TRUE(trace.key.starts_with("GPU-")) << trace.key;
    for (std::size_t i = 1; i < trace.samples.size(); ++i)
      EXPECT_LT(trace.samples[i - 1].time, trace.samples[i].time) << trace.key;
  }
  const auto& newest = past->gpus[0].samples.back();
  EXPECT_EQ(newest.total, 96 * kGiB);
  EXPECT_GE(newest.used, 20 * kGiB);
  // The orphaned bytes go to root only (what a caller that is not root may see).
  if (::geteuid() == 0)
    EXPECT_EQ(newest.orphaned, 20 * kGiB) << "GPU 0 holds one orphaned 20 GiB worker";
  else
    EXPECT_FALSE(newest.orphaned);

  TopInTmux top(c.node, {}, 80, 24, "1h");
  ASSERT_EQ(top.started().exit_code, 0) << top.started().err;
  ASSERT_TRUE(top.wait_for({c.heading(), "history: agent"})) << top.last();
  // GPU 0's sparkline (ASCII under LC_ALL=C), between its utilization and its state.
  const std::string gpu0 = line_with(top.last(), "GPU 0");
  const std::size_t pct = gpu0.find('%');
  const std::size_t state = gpu0.find(" held");
  ASSERT_TRUE(pct != std::string::npos && state != std::string::npos) << gpu0;
  const std::string spark = gpu0.substr(pct + 1, state - pct - 1);
  const auto shown = std::count_if(spark.begin(), spark.end(),
                                   [](char ch) { return std::string_view("_.-=#").contains(ch); });
  EXPECT_GE(shown, static_cast<long>(kReadings)) << "'" << spark << "'\n" << top.last();
  EXPECT_EQ(agent.terminate(), 0) << agent.transcript();
}

// A server that holds a GPU itself, with two workers it forked: the workers are drawn
// under it (their parent, read from /proc), the last one with the last branch.
TEST(Top, WorkersAreDrawnUnderTheirServer) {
  if (find_tmux().empty()) GTEST_SKIP() << "tmux is not installed (scripts/install-deps.sh)";
  SimNode node{{"--gpus", "2", "--memory", "96GiB"}};
  HoldResult server = node.hold({"--gpu", "0", "--children", "2", "--bytes", "8GiB",
                                 "--parent-holds", "--title", "VLLM::Worker_TP{k}",
                                 "--server-title", "vllm serve org/Model-B --port 8000"});
  ASSERT_EQ(server.holders.size(), 3u);
  std::vector<pid_t> workers;
  for (const auto& [pid, gpu] : server.holders)
    if (pid != server.leader) workers.push_back(pid);
  std::sort(workers.begin(), workers.end());
  ASSERT_EQ(workers.size(), 2u);
  TopInTmux top(node, {}, 80, 24);
  ASSERT_TRUE(top.wait_for({"Worker_TP1", "vllm serve"})) << top.last();
  const std::string s = top.last();
  const std::string leader = line_with(s, " " + std::to_string(server.leader) + " ");
  const std::string first = line_with(s, " " + std::to_string(workers[0]) + " ");
  const std::string last = line_with(s, " " + std::to_string(workers[1]) + " ");
  EXPECT_EQ(leader.find("|- "), std::string::npos) << leader;
  EXPECT_NE(first.find("|- worker TP0"), std::string::npos) << s;
  EXPECT_NE(last.find("`- worker TP1"), std::string::npos) << s;
  EXPECT_LT(s.find(leader), s.find(first)) << s;
  EXPECT_LT(s.find(first), s.find(last)) << s;
}

// W4_12 (ux-wave4 §4) at 80x24: a lone process's PID lines up with an instance member's;
// d shows a process whole (verdict, whole command line); / starts empty and Enter on
// nothing shows every holder again; nvitop's t gets a word.
TEST(Top, W4_12_AlignedRowsDetailBoxAndAClearableFilter) {
  if (find_tmux().empty()) GTEST_SKIP() << "tmux is not installed (scripts/install-deps.sh)";
  CaseStudy c;
  HoldResult lone = c.node.hold({"--gpu", "3", "--bytes", "1GiB"});
  const std::string lone_pid = " " + std::to_string(lone.holders.at(0).first) + " ";
  const std::string orphan_pid = " " + std::to_string(c.crashed.holders.at(0).first) + " ";
  TopInTmux top(c.node, {}, 80, 24);
  ASSERT_EQ(top.started().exit_code, 0) << top.started().err;
  ASSERT_TRUE(top.wait_for({c.heading(), "ORPHAN", lone_pid})) << top.last();
  const std::string s = top.last();
  const std::string orphan_row = line_with(s, orphan_pid), lone_row = line_with(s, lone_pid);
  EXPECT_EQ(orphan_row.find(orphan_pid) + orphan_pid.size(), lone_row.find(lone_pid) + lone_pid.size())
      << orphan_row << "\n" << lone_row;
  EXPECT_EQ(line_with(s, "    PID").find("PID") + 4, lone_row.find(lone_pid) + lone_pid.size())
      << s;

  // The cursor starts on the crashed server's heading; the row below is its first worker.
  top.keys({"Down"});
  top.keys({"d"});
  ASSERT_TRUE(top.wait_for({"verdict    orphaned (", "command    sglang::scheduler_TP"}))
      << top.last();
  top.keys({"Escape"});
  ASSERT_TRUE(top.wait_without("verdict    orphaned")) << top.last();

  top.keys({"/"});
  ASSERT_TRUE(top.wait_for({"find (user, command"})) << top.last();
  top.keys({"n", "o", "s", "u", "c", "h", "Enter"});
  ASSERT_TRUE(top.wait_without(orphan_pid)) << top.last();
  top.keys({"/"});
  ASSERT_TRUE(top.wait_for({"find (user, command"})) << top.last();
  EXPECT_EQ(line_with(top.last(), "find (user").find("nosuch"), std::string::npos)
      << "the prompt starts empty: " << top.last();
  top.keys({"Enter"});
  ASSERT_TRUE(top.wait_for({orphan_pid, lone_pid})) << top.last();

  top.keys({"t"});
  ASSERT_TRUE(top.wait_for({"the tree is always on"})) << top.last();
  top.keys({"q"});
}

// Issue 40: the GPU rows show temperature and power as the driver reads them ("-" where
// it cannot: a sensor NVML answers NOT_SUPPORTED for), and left/right scroll the list
// sideways to the end of a command line the 80 columns cut.
TEST(Top, GpuSensorsAndASidewaysScrollAt80x24) {
  if (find_tmux().empty()) GTEST_SKIP() << "tmux is not installed (scripts/install-deps.sh)";
  SimNode node{{"--gpus", "2", "--memory", "96GiB"}};
  ASSERT_EQ(node.sim({"sensors", "--dir", node.dir(), "--gpu", "0", "--temperature", "71",
                      "--power", "650"})
                .exit_code,
            0);
  auto off = node.sim({"sensors", "--dir", node.dir(), "--gpu", "1", "--temperature", "none",
                       "--power", "none"});
  ASSERT_EQ(off.exit_code, 0) << off.err;
  EXPECT_EQ(node.sim({"sensors", "--dir", node.dir(), "--gpu", "0", "--power", "hot"}).exit_code,
            2);
  const std::string tail = "--checkpoint-dir /ckpt/run-42 ZZEND";
  HoldResult h = node.hold({"--gpu", "0", "--bytes", "2GiB", "--title",
                            "python3 train.py --data /datasets/imagenet-21k --epochs 90 "
                            "--batch-size 1024 --learning-rate 0.0003 " + tail});
  const std::string pid = " " + std::to_string(h.holders.at(0).first) + " ";
  TopInTmux top(node, {}, 80, 24);
  ASSERT_EQ(top.started().exit_code, 0) << top.started().err;
  ASSERT_TRUE(top.wait_for({" 71C  650W ", "  -C    -W ", pid})) << top.last();
  EXPECT_EQ(top.last().find("ZZEND"), std::string::npos) << "cut at 80: " << top.last();
  const std::string gpu_row = line_with(top.last(), "GPU 0");
  // The holder's command line is its whole argv (the sim's path, the node's directory, the
  // title): far wider than 80, and wider than any 20 steps; 80 steps pass its end.
  for (int i = 0; i < 80; ++i) top.keys({"Right"});
  ASSERT_TRUE(top.wait_for({"ZZEND", "columns"})) << top.last();
  const std::string s = top.last();
  // Its last character in the last column (tmux drops trailing spaces): the end, not past.
  EXPECT_EQ(line_with(s, "ZZEND").size(), 80U) << "scrolled to the end, not past: " << s;
  EXPECT_NE(line_with(s, "GPU 0").find(" 71C  650W "), std::string::npos) << "GPU rows stay: " << s;
  // Only the command scrolls (issue 53 #11): the headings and the row's PID stay.
  EXPECT_NE(s.find("    PID"), std::string::npos) << "the headings stay: " << s;
  EXPECT_NE(line_with(s, "ZZEND").find(pid), std::string::npos) << "its PID stays: " << s;
  for (int i = 0; i < 80; ++i) top.keys({"Left"});
  // Back at the start: the title no longer says it is scrolled ("sort gpu" is then
  // followed by the driver, not by "command <- N columns").
  ASSERT_TRUE(top.wait_for({"sort gpu  driver", pid})) << top.last();
  EXPECT_EQ(top.last().find("ZZEND"), std::string::npos) << top.last();
  top.keys({"q"});
}

TEST(Top, RefusesWithoutATerminalAndOnBadFlags) {
  SimNode node({"--gpus", "1", "--memory", "96GiB"});
  auto r = node.gpureap({"top"});  // stdin is /dev/null, stdout a pipe
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("gpureap status"), std::string::npos) << r.err;
  r = node.gpureap({"top", "--interval", "10ms"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("--interval"), std::string::npos) << r.err;
  r = node.gpureap({"top", "--interval", "soon"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("--interval"), std::string::npos) << r.err;
  r = node.gpureap({"--json", "top"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("--json"), std::string::npos) << r.err;
}

}  // namespace top_test
}  // namespace gpureap::e2e
