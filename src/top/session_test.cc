// One session of `gpureap top` on the simulated machine (reclaim/test_machine.h), through a
// scripted terminal: the keys a person presses, the screens drawn.

#include "top/session.h"

#include <gtest/gtest.h>

#include <deque>

#include "reclaim/test_machine.h"
#include "util/test_golden.h"
#include "util/test_temp_dir.h"

namespace gpureap::top {
namespace {

using reclaim::testing::FakeProc;
using reclaim::testing::kGiB;
using reclaim::testing::TestMachine;

// Plays `keys`, then q forever; keeps every screen drawn as text.
class ScriptedTerminal final : public Terminal {
 public:
  explicit ScriptedTerminal(std::string keys, std::size_t width = 120, std::size_t height = 40)
      : keys_(keys.begin(), keys.end()), width_(width), height_(height) {}
  std::size_t width() const override { return width_; }
  std::size_t height() const override { return height_; }
  bool unicode() const override { return false; }
  void draw(const Screen& screen) override {
    std::string text;
    for (const auto& line : screen.lines) text += line.text() + "\n";
    screens.push_back(std::move(text));
  }
  Key read_key(std::chrono::milliseconds) override {
    if (keys_.empty()) return {KeyCode::character, 'q'};
    const char c = keys_.front();
    keys_.pop_front();
    return {KeyCode::character, c};
  }
  bool drew(std::string_view text) const {
    for (const auto& s : screens)
      if (s.find(text) != std::string::npos) return true;
    return false;
  }
  // The box drawn on the first screen that holds `title`: its rows from border to border
  // (lines that begin and end with a border once the blanks beside it are gone).
  std::string box_with(std::string_view title) const {
    for (const auto& s : screens) {
      if (s.find(title) == std::string::npos) continue;
      std::string box;
      std::size_t start = 0;
      for (std::size_t nl; (nl = s.find('\n', start)) != std::string::npos; start = nl + 1) {
        const std::string line = s.substr(start, nl - start);
        const auto left = line.find_first_not_of(' ');
        const auto right = line.find_last_not_of(' ');
        if (left == std::string::npos || right - left < 10) continue;
        const bool border_left = line[left] == '+' || line[left] == '|';
        const bool border_right = line[right] == '+' || line[right] == '|';
        if (border_left && border_right) box += line.substr(left, right - left + 1) + "\n";
      }
      return box;
    }
    return "";
  }
  std::vector<std::string> screens;

 private:
  std::deque<char> keys_;
  std::size_t width_, height_;
};

FakeProc holder(pid_t pid, unsigned gpu) {
  FakeProc p;
  p.pid = pid;
  p.gpu = gpu;
  p.bytes = 8 * kGiB;
  p.cmdline = "python3 -m vllm.entrypoints.openai.api_server";
  return p;
}

struct Session {
  explicit Session(std::string keys, std::size_t width = 120, std::size_t height = 40)
      : terminal(std::move(keys), width, height) {}
  int run(TestMachine& m) {
    TopSession session({m.node(), terminal, stop, interrupted,
                        [this]() -> Result<std::string> { return state.dir(); },
                        [&m](const std::string&, std::function<void(const std::string&)>) {
                          // The machine's own audited fake, owned by the machine.
                          return std::shared_ptr<reclaim::AuditedControl>(std::shared_ptr<void>(),
                                                                          &m.audited());
                        }},
                       SessionOptions{});
    return session.run();
  }
  ScriptedTerminal terminal;
  std::atomic<bool> stop{false};
  std::atomic<bool> interrupted{false};
  TestTempDir state{"gpureap-top-session"};
};

TEST(TopSession, DrawsTheGpusAndQuitsOnQ) {
  TestMachine m;
  m.spawn(holder(3300101, 0));
  Session s("q");
  EXPECT_EQ(s.run(m), 0);
  ASSERT_FALSE(s.terminal.screens.empty());
  EXPECT_TRUE(s.terminal.drew("3300101")) << s.terminal.screens.back();
}

TEST(TopSession, AStopSignalEndsTheSessionBeforeAnyKey) {
  TestMachine m;
  Session s("");
  s.stop.store(true);
  EXPECT_EQ(s.run(m), 0);
  EXPECT_TRUE(s.terminal.screens.empty());
}

TEST(TopSession, FFreesOnlyTheTaggedProcessOnceConfirmedAndShowsTheVerdict) {
  TestMachine m;
  auto a = m.spawn(holder(3300201, 0));
  auto b = m.spawn(holder(3300202, 1));
  Session s(" Fy");  // tag the row under the cursor, F, y in the plan's box
  EXPECT_EQ(s.run(m), 0);
  EXPECT_TRUE(s.terminal.drew("free 1 process?"));
  EXPECT_TRUE(s.terminal.drew("freed and verified"));
  // Exactly one of the two was tagged (the first row) and signalled.
  EXPECT_NE(m.control.signals_of(a).empty(), m.control.signals_of(b).empty());
}

// An SGLang worker left to init, its launcher (its group's leader) gone: an orphan by its
// title (inferred), with long reasons. Spawned with spawn_orphan.
FakeProc orphaned_worker(pid_t pid, unsigned gpu) {
  FakeProc p = holder(pid, gpu);
  p.ppid = 1;
  p.comm = "sglang::schedul";
  p.cmdline = "sglang::scheduler_TP0";
  return p;
}
void spawn_orphan(TestMachine& m, const FakeProc& p) {
  m.spawn(p);
  m.set_parent(p, 1, p.pid - 1, p.pid - 1);
}

// Issue 53 #11: at 80 columns the F box cut every reason ("orphaned~", "(inferred):
// re-parented to init (~") and the verdict box showed clock ticks ("start 116253") cut at
// the edge. Both boxes are read whole at 80 columns: golden files of the boxes as drawn.
TEST(TopSession, TheFreeAndVerdictBoxesAt80ColumnsCutNothing) {
  TestMachine m;
  spawn_orphan(m, orphaned_worker(3300501, 0));
  Session s(" Fy", 80, 24);
  EXPECT_EQ(s.run(m), 0);
  const std::string plan = s.terminal.box_with("free 1 process?");
  const std::string verdict = s.terminal.box_with("freed and verified");
  ASSERT_FALSE(plan.empty()) << s.terminal.screens.back();
  ASSERT_FALSE(verdict.empty()) << s.terminal.screens.back();
  for (const std::string& box : {plan, verdict}) {
    EXPECT_EQ(box.find("~|"), std::string::npos) << "a line cut at the box's edge:\n" << box;
    EXPECT_EQ(box.find("start 1"), std::string::npos) << "clock ticks:\n" << box;
  }
  const std::string dir = std::string(GPUREAP_FIXTURES) + "/top/";
  expect_golden_file(dir + "free-box-80.txt", plan);
  expect_golden_file(dir + "verdict-box-80.txt", verdict);
}

// Issue 53 #11: starting top announced what was already there as news (a zombie leader
// from minutes before on the message line). The first look only learns the node.
TEST(TopSession, StartingDoesNotAnnounceWhatWasAlreadyThere) {
  TestMachine m;
  spawn_orphan(m, orphaned_worker(3300601, 0));
  Session s("q", 80, 24);
  EXPECT_EQ(s.run(m), 0);
  ASSERT_FALSE(s.terminal.screens.empty());
  EXPECT_TRUE(s.terminal.drew("3300601")) << s.terminal.screens.front();
  EXPECT_FALSE(s.terminal.drew("GPU 0: 8.0 GiB orphaned")) << s.terminal.screens.front();
  EXPECT_FALSE(s.terminal.drew("orphaned:")) << s.terminal.screens.front();
}

TEST(TopSession, NoInThePlansBoxSignalsNothing) {
  TestMachine m;
  auto a = m.spawn(holder(3300301, 0));
  Session s(" Fn");
  EXPECT_EQ(s.run(m), 0);
  EXPECT_TRUE(s.terminal.drew("free 1 process?"));
  EXPECT_TRUE(s.terminal.drew("not confirmed: nothing was signalled"));
  EXPECT_TRUE(m.control.signals_of(a).empty());
}

TEST(TopSession, ReadOnlyTagsNothingAndFreesNothing) {
  TestMachine m;
  auto a = m.spawn(holder(3300401, 0));
  ScriptedTerminal terminal(" Fy");
  std::atomic<bool> stop{false}, interrupted{false};
  TopSession session({m.node(), terminal, stop, interrupted,
                      []() -> Result<std::string> { return fail("no state directory"); },
                      [](const std::string&, std::function<void(const std::string&)>) {
                        ADD_FAILURE() << "a control was opened";
                        return std::shared_ptr<reclaim::AuditedControl>();
                      }},
                     SessionOptions{.readonly = true});
  EXPECT_EQ(session.run(), 0);
  EXPECT_TRUE(terminal.drew("read-only"));
  EXPECT_TRUE(m.control.signals_of(a).empty());
}

}  // namespace
}  // namespace gpureap::top
