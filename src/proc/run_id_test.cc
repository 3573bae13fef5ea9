// Run ids and the GPUREAP_RUN_ID marker.

#include "proc/run_id.h"

#include <gtest/gtest.h>

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
