// Whether the kernel attests a process is dying (proc/exiting.h): on real processes for
// what can be caught (a zombie, a running process, a zombie leader whose thread lives),
// and on a fixture /proc for PF_EXITING itself, which a real process holds only for the
// moments of its exit.

#include "proc/exiting.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "proc/test_children.h"

namespace gpureap::proc {
namespace {

using testing::Children;

TEST(Exiting, AZombieIsExitingAndARunningProcessIsNot) {
  Children children;
  const pid_t running = testing::spawn_parked(children);
  EXPECT_FALSE(exiting(running, "/proc"));
  const pid_t zombie = children.spawn([](int) {});  // _exits at once; not reaped yet
  ASSERT_TRUE(testing::wait_state(zombie, 'Z'));
  EXPECT_TRUE(exiting(zombie, "/proc"));
}

// Its leader has exited (state Z) while a thread runs on and holds what the process
// holds: not dying.
TEST(Exiting, AZombieLeaderWithALiveThreadIsNotExiting) {
  Children children;
  const pid_t pid = children.spawn([](int ready) { testing::become_zombie_leader(ready); });
  children.ready(pid);
  ASSERT_TRUE(testing::wait_state(pid, 'Z'));
  EXPECT_FALSE(exiting(pid, "/proc"));
}

// Gone (reaped): nothing is left to attest anything.
TEST(Exiting, AReapedProcessIsNotAttestedExiting) {
  Children children;
  const pid_t pid = children.spawn([](int) {});
  ASSERT_EQ(::waitpid(pid, nullptr, 0), pid);
  EXPECT_FALSE(exiting(pid, "/proc"));
}

class FixtureProc {
 public:
  FixtureProc() {
    char tmpl[] = "/tmp/gpureap-exiting-XXXXXX";
    root_ = ::mkdtemp(tmpl);
  }
  ~FixtureProc() { std::filesystem::remove_all(root_); }
  // PID/stat (the leader) and PID/task/TID/stat with these flags and states.
  void thread(pid_t pid, pid_t tid, unsigned flags, char state = 'S') {
    const std::string line = fmt_stat(tid, flags, state);
    if (tid == pid) write(root_ + "/" + std::to_string(pid) + "/stat", line);
    write(root_ + "/" + std::to_string(pid) + "/task/" + std::to_string(tid) + "/stat", line);
  }
  const std::string& root() const { return root_; }

 private:
  static std::string fmt_stat(pid_t tid, unsigned flags, char state) {
    return std::to_string(tid) + " (python3) " + state + " 1 " + std::to_string(tid) + " " +
           std::to_string(tid) + " 0 -1 " + std::to_string(flags) +
           " 0 0 0 0 0 0 0 0 20 0 3 0 5000 0 0\n";
  }
  static void write(const std::string& path, const std::string& text) {
    std::filesystem::create_directories(std::filesystem::path(path).parent_path());
    std::ofstream(path) << text;
  }
  std::string root_;
};

constexpr unsigned kPfExiting = 0x4;

// A fatal signal puts every thread into do_exit(): only then is the process dying.
TEST(Exiting, EveryThreadInItsExitIsExitingAndOneThreadOutsideIsNot) {
  FixtureProc proc;
  proc.thread(700, 700, kPfExiting);
  proc.thread(700, 701, kPfExiting);
  proc.thread(700, 702, kPfExiting, 'Z');
  EXPECT_TRUE(exiting(700, proc.root()));
  proc.thread(700, 702, 0);  // one thread still runs its own code
  EXPECT_FALSE(exiting(700, proc.root()));
  proc.thread(800, 800, 0);  // a leader not exiting: its threads are not read
  proc.thread(800, 801, kPfExiting);
  EXPECT_FALSE(exiting(800, proc.root()));
}

}  // namespace
}  // namespace gpureap::proc
