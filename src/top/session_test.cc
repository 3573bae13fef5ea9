// One session of `gpureap top` on the simulated machine (reclaim/test_machine.h), through a
// scripted terminal: the keys a person presses, the screens drawn.

#include "top/session.h"

#include <gtest/gtest.h>

#include <deque>

#include "reclaim/test_machine.h"
#include "util/test_temp_dir.h"

namespace gpureap::top {
namespace {

using reclaim::testing::FakeProc;
using reclaim::testing::kGiB;
using reclaim::testing::TestMachine;

// Plays `keys`, then q forever; keeps every screen drawn as text.
class ScriptedTerminal final : public Terminal {
 public:
  explicit ScriptedTerminal(std::string keys) : keys_(keys.begin(), keys.end()) {}
  std::size_t width() const override { return 120; }
  std::size_t height() const override { return 40; }
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
  std::vector<std::string> screens;

 private:
  std::deque<char> keys_;
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
  explicit Session(std::string keys) : terminal(std::move(keys)) {}
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
  EXPECT_TRUE(s.terminal.drew("free 1 process(es)?"));
  EXPECT_TRUE(s.terminal.drew("freed and verified"));
  // Exactly one of the two was tagged (the first row) and signalled.
  EXPECT_NE(m.control.signals_of(a).empty(), m.control.signals_of(b).empty());
}

TEST(TopSession, NoInThePlansBoxSignalsNothing) {
  TestMachine m;
  auto a = m.spawn(holder(3300301, 0));
  Session s(" Fn");
  EXPECT_EQ(s.run(m), 0);
  EXPECT_TRUE(s.terminal.drew("free 1 process(es)?"));
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
