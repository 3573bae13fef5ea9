// The environment of a process: parsing NAME=VALUE, matching entries, and reading
// /proc/PID/environ of real processes (our own children, another user's, gone ones).

#include "proc/environ.h"

#include <gtest/gtest.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "proc/proc_parse.h"
#include "proc/process_handle.h"
#include "proc/test_children.h"

namespace gpureap::proc {
namespace {

using namespace std::string_view_literals;
using testing::Children;
using testing::signal_ready;

TEST(EnvEntry, ParsesNameAndValue) {
  EXPECT_EQ(parse_env_entry("SLURM_JOB_ID=42").value(), (EnvEntry{"SLURM_JOB_ID", "42"}));
  EXPECT_EQ(parse_env_entry("A=").value(), (EnvEntry{"A", ""}));
  EXPECT_EQ(parse_env_entry("OPTS=a=b").value(), (EnvEntry{"OPTS", "a=b"}));
  EXPECT_FALSE(parse_env_entry("SLURM_JOB_ID").has_value());
  EXPECT_FALSE(parse_env_entry("=42").has_value());
  EXPECT_NE(parse_env_entry("").error().message.find("NAME=VALUE"), std::string::npos);
}

TEST(Environ, ValueIsTheFirstEntryForTheName) {
  auto env = "PATH=/bin\0SLURM_JOB_ID=42\0SLURM_JOB_ID=7\0SLURM_JOB_IDX=9\0"sv;
  EXPECT_EQ(environ_value(env, "SLURM_JOB_ID"), "42");
  EXPECT_EQ(environ_value(env, "SLURM_JOB"), std::nullopt);
  EXPECT_EQ(environ_value("EMPTY=\0"sv, "EMPTY"), "");
  EXPECT_EQ(environ_value(""sv, "PATH"), std::nullopt);
  // No terminating NUL on the last entry (a truncated or rewritten block).
  EXPECT_EQ(environ_value("A=1\0B=2"sv, "B"), "2");
}

TEST(Environ, HasMatchesWholeEntriesOnly) {
  auto env = "SLURM_JOB_ID=42\0X=a=b\0EMPTY=\0"sv;
  EXPECT_TRUE(environ_has(env, {"SLURM_JOB_ID", "42"}));
  EXPECT_FALSE(environ_has(env, {"SLURM_JOB_ID", "4"}));
  EXPECT_FALSE(environ_has(env, {"SLURM_JOB_ID", "420"}));
  EXPECT_FALSE(environ_has(env, {"SLURM_JOB", "ID=42"}));
  EXPECT_TRUE(environ_has(env, {"X", "a=b"}));
  EXPECT_TRUE(environ_has(env, {"EMPTY", ""}));
  EXPECT_FALSE(environ_has(""sv, {"EMPTY", ""}));
  // Any entry counts, not only the first for the name.
  EXPECT_TRUE(environ_has("A=1\0A=2\0"sv, {"A", "2"}));
}

TEST(Environ, ReadsAChildsOwnEnvironment) {
  Children children;
  pid_t child = children.spawn([](int ready) {
    char entry[] = "GPUREAP_ENVIRON_TEST=child-42";
    // The kernel shows the environment block a process was exec'd with: exec one.
    char* argv[] = {const_cast<char*>("sleep"), const_cast<char*>("60"), nullptr};
    char* envp[] = {entry, nullptr};
    signal_ready(ready);
    ::execve("/bin/sleep", argv, envp);
  });
  children.ready(child);
  // The exec happens after the ready line: wait until the block is the new one.
  Result<std::string> env;
  for (int i = 0; i < 500; ++i) {
    auto id = read_process_id(child, "/proc");
    ASSERT_TRUE(id.has_value());
    env = read_environ(*id, "/proc");
    if (env && environ_has(*env, {"GPUREAP_ENVIRON_TEST", "child-42"})) break;
    ::usleep(2000);
  }
  ASSERT_TRUE(env.has_value()) << env.error().message;
  EXPECT_EQ(environ_value(*env, "GPUREAP_ENVIRON_TEST"), "child-42");
}

TEST(Environ, AGoneOrReusedProcessIsSaidToBeGone) {
  Children children;
  pid_t child = testing::spawn_parked(children);
  auto id = read_process_id(child, "/proc");
  ASSERT_TRUE(id.has_value());
  ProcessId other = *id;
  other.start_time += 1;  // the same pid, another process
  auto reused = read_environ(other, "/proc");
  ASSERT_FALSE(reused.has_value());
  EXPECT_EQ(reused.error().sys_errno, ESRCH);
  ::kill(child, SIGKILL);
  children.reap(child);
  auto gone = read_environ(*id, "/proc");
  ASSERT_FALSE(gone.has_value());
  EXPECT_EQ(gone.error().sys_errno, ESRCH);
}

TEST(Environ, AnUnreadableEnvironmentIsAnErrorNotAnEmptyOne) {
  // A fixture /proc whose environ cannot be read as a file (root reads any mode,
  // so the test makes it a directory).
  char tmpl[] = "/tmp/gpureap-environ-test-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  std::string root = tmpl;
  std::filesystem::create_directories(root + "/4242/environ");
  {
    FILE* f = std::fopen((root + "/4242/stat").c_str(), "w");
    std::fputs("4242 (x) S 1 4242 4242 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 777 0 0", f);
    std::fclose(f);
  }
  auto r = read_environ(ProcessId{4242, 777}, root);
  std::filesystem::remove_all(root);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().sys_errno, EISDIR);
  EXPECT_NE(r.error().message.find("pid 4242"), std::string::npos) << r.error().message;
}

TEST(Environ, AnotherUsersEnvironmentIsDeniedWithoutRoot) {
  if (::getuid() != 0) GTEST_SKIP() << "needs root to drop to another user";
  Children children;
  pid_t target = testing::spawn_parked(children);  // root's
  auto id = read_process_id(target, "/proc");
  ASSERT_TRUE(id.has_value());
  pid_t reader = children.spawn([&](int ready) {
    if (::setgid(65534) != 0 || ::setuid(65534) != 0) return signal_ready(ready, "setuid failed");
    auto r = read_environ(*id, "/proc");
    signal_ready(ready, r ? "read" : std::to_string(r.error().sys_errno) + " " + r.error().message);
  });
  std::string got = children.ready(reader);
  EXPECT_TRUE(got.starts_with(std::to_string(EACCES) + " ")) << got;
  EXPECT_NE(got.find("cannot be read"), std::string::npos) << got;
}

TEST(Environ, ANonDumpableProcessOfTheSameUserIsDeniedWithoutRoot) {
  if (::getuid() != 0) GTEST_SKIP() << "needs root to drop to another user";
  Children children;
  pid_t target = children.spawn([](int ready) {
    if (::setgid(65534) != 0 || ::setuid(65534) != 0) return signal_ready(ready, "setuid failed");
    ::prctl(PR_SET_DUMPABLE, 0);
    signal_ready(ready, "ok");
    testing::park();
  });
  ASSERT_EQ(children.ready(target), "ok");
  auto id = read_process_id(target, "/proc");
  ASSERT_TRUE(id.has_value());
  pid_t reader = children.spawn([&](int ready) {
    if (::setgid(65534) != 0 || ::setuid(65534) != 0) return signal_ready(ready, "setuid failed");
    auto r = read_environ(*id, "/proc");
    signal_ready(ready, r ? "read" : std::to_string(r.error().sys_errno));
  });
  EXPECT_EQ(children.ready(reader), std::to_string(EACCES));
  // Root may read it.
  EXPECT_TRUE(read_environ(*id, "/proc").has_value());
}

// W2-12: a zombie leader (its main thread exited, another thread lives on and holds what
// the process holds) shows no environment or command line of its own; they are read from
// the live thread. Once every thread has exited, the process has.
TEST(Environ, AZombieLeadersEnvironmentAndCommandLineComeFromALiveThread) {
  Children children;
  pid_t pid = children.spawn([](int ready) { testing::become_zombie_leader(ready); });
  children.ready(pid);
  ASSERT_TRUE(testing::wait_state(pid, 'Z'));
  auto id = read_process_id(pid, "/proc");
  ASSERT_TRUE(id.has_value());
  // Forked, not exec'd: the child's memory shows the test process's own blocks.
  std::ifstream env_in("/proc/self/environ", std::ios::binary), cmd_in("/proc/self/cmdline");
  const std::string own_env(std::istreambuf_iterator<char>(env_in), {});
  const std::string own_cmdline(std::istreambuf_iterator<char>(cmd_in), {});
  auto env = read_environ(*id, "/proc");
  ASSERT_TRUE(env.has_value()) << env.error().message;
  EXPECT_EQ(*env, own_env);
  auto cmdline = read_process_cmdline(*id, "/proc");
  ASSERT_TRUE(cmdline.has_value()) << cmdline.error().message;
  EXPECT_EQ(*cmdline, format_cmdline(own_cmdline));
  EXPECT_FALSE(cmdline->empty());
  ::kill(pid, SIGKILL);
  children.wait_zombie(pid);  // every thread has exited; not reaped yet
  auto gone = read_environ(*id, "/proc");
  ASSERT_FALSE(gone.has_value());
  EXPECT_EQ(gone.error().sys_errno, ESRCH);
  children.reap(pid);
}

}  // namespace
}  // namespace gpureap::proc
