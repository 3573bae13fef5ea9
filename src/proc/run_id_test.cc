// Run ids and the GPUREAP_RUN_ID marker.

#include "proc/run_id.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

namespace gpureap::proc {
namespace {

using namespace std::string_view_literals;

TEST(RunId, NameAndOwnerPid) {
  EXPECT_EQ(make_run_id("python3", 4242), "python3-4242");
  EXPECT_EQ(make_run_id("my server/x", 7), "my_server_x-7");
  EXPECT_EQ(make_run_id("..hidden", 7), "hidden-7");
  EXPECT_EQ(make_run_id("", 7), "run-7");
  EXPECT_EQ(make_run_id(std::string(100, 'a'), 7).size(), 42u);
  EXPECT_EQ(run_owner("python3-4242"), 4242);
  EXPECT_EQ(run_owner("sg-lang-9"), 9);
  EXPECT_EQ(run_owner("python3"), std::nullopt);
  EXPECT_EQ(run_owner("-5"), std::nullopt);
}

// W4-11(e): two containers' `gpureap run --name sglang` both ran as pid 1 and were both
// sglang-1. In a PID namespace of its own the id names the namespace too.
TEST(RunId, W4_11_InAContainerTheIdNamesItsPidNamespace) {
  EXPECT_EQ(make_run_id("sglang", 1, 4026532451), "sglang-ns4026532451-1");
  EXPECT_NE(make_run_id("sglang", 1, 4026532451), make_run_id("sglang", 1, 4026532452));
  EXPECT_EQ(make_run_id("sglang", 1, 0), "sglang-1");
  EXPECT_EQ(run_owner(make_run_id("sglang", 1, 4026532451)), 1);
  // This test runs in the host's namespace or a container's; either way the id says which.
  struct stat st {};
  ASSERT_EQ(::stat("/proc/self/ns/pid", &st), 0);
  EXPECT_EQ(run_pid_namespace("/proc"), st.st_ino == 0xEFFFFFFCU ? 0 : st.st_ino);
  EXPECT_EQ(run_pid_namespace("/nonexistent"), 0u);
}

TEST(RunId, DefaultNameIsTheCommandsBaseName) {
  EXPECT_EQ(default_run_name("/usr/bin/python3"), "python3");
  EXPECT_EQ(default_run_name("sglang"), "sglang");
}

TEST(RunId, FoundInEnviron) {
  EXPECT_EQ(run_id_from_environ("PATH=/bin\0GPUREAP_RUN_ID=python3-4242\0HOME=/root\0"sv),
            "python3-4242");
  EXPECT_EQ(run_id_from_environ("PATH=/bin\0GPUREAP_RUN_IDX=1\0"sv), std::nullopt);
  EXPECT_EQ(run_id_from_environ(""sv), std::nullopt);
}

}  // namespace
}  // namespace gpureap::proc
