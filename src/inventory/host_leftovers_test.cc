// /dev/shm segments of dead creators: named by SGLang's patterns, reported when their
// creator pid is gone or was reused after the segment was written.

#include "inventory/host_leftovers.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace gpureap::inventory {
namespace {

namespace fs = std::filesystem;

TEST(ShmCreator, SglangNamesCarryTheirCreator) {
  EXPECT_EQ(shm_creator("sgl_shm_scheduler_4242_a1b2"), 4242);
  EXPECT_EQ(shm_creator("sgl_shm_detok_17_x"), 17);
  EXPECT_EQ(shm_creator("multi_tokenizer_args_99"), 99);
  EXPECT_EQ(shm_creator("sgl_shm_scheduler_x_1"), 0);
  EXPECT_EQ(shm_creator("sgl_shm_"), 0);
  EXPECT_EQ(shm_creator("nccl-abc"), 0);
  EXPECT_EQ(shm_creator("multi_tokenizer_args_-3"), 0);
}

TEST(ShmLeftovers, OnlyThoseWhoseCreatorIsGone) {
  const fs::path root = fs::temp_directory_path() / ("gpureap-shm-" + std::to_string(::getpid()));
  fs::create_directories(root / "shm");
  fs::create_directories(root / "proc" / "500");
  // pid 500 runs, started at boot + 10 s, long before the segments were written.
  std::ofstream(root / "proc" / "stat") << "cpu 1 2 3\nbtime 1000\n";
  std::ofstream(root / "proc" / "500" / "stat")
      << "500 (python3) S 1 500 500 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 3 0 "
      << 10 * ::sysconf(_SC_CLK_TCK) << " 0 0\n";
  std::ofstream(root / "shm" / "sgl_shm_scheduler_500_live") << "x";
  std::ofstream(root / "shm" / "sgl_shm_scheduler_777_gone") << std::string(4096, 'y');
  std::ofstream(root / "shm" / "nccl-unrelated") << "z";
  auto found = find_shm_leftovers((root / "shm").string(), (root / "proc").string());
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].creator, 777);
  EXPECT_EQ(found[0].bytes, 4096u);
  EXPECT_TRUE(found[0].path.ends_with("sgl_shm_scheduler_777_gone"));
  // A pid reused after the segment was written is not its creator.
  std::ofstream(root / "proc" / "stat") << "cpu 1 2 3\nbtime 4000000000\n";
  EXPECT_EQ(find_shm_leftovers((root / "shm").string(), (root / "proc").string()).size(), 2u);
  EXPECT_TRUE(find_shm_leftovers((root / "nowhere").string(), (root / "proc").string()).empty());
  fs::remove_all(root);
}

}  // namespace
}  // namespace gpureap::inventory
