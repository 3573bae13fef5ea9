// The witness keeper: a state directory that cannot be written is said once, not at every
// look, and nothing is written while what the agent saw die is unchanged.

#include "agent/witness_keeper.h"

#include <gtest/gtest.h>

#include <sys/stat.h>

#include "inventory/witness_store.h"
#include "util/test_temp_dir.h"

namespace gpureap::agent {
namespace {

WitnessKeeper::Witnesses one_death(pid_t holder, pid_t parent) {
  WitnessKeeper::Witnesses dead;
  dead[holder].pid = parent;
  dead[holder].comm = "python3";
  dead[holder].died_at = 1000;
  dead[holder].was_parent = true;
  dead[holder].holder_start = 12345;
  return dead;
}

TEST(WitnessKeeper, AStateDirectoryThatCannotBeWrittenIsSaidOnce) {
  TestTempDir dir;
  std::vector<std::string> said;
  WitnessKeeper keeper(dir.path("missing/state"), [&](const std::string& s) { said.push_back(s); });
  keeper.keep(one_death(10, 9));
  keeper.keep(one_death(11, 9));
  keeper.keep(one_death(12, 9));
  ASSERT_EQ(said.size(), 1u);
  EXPECT_NE(said[0].find("a direct look cannot see what the agent saw die"), std::string::npos);
}

TEST(WitnessKeeper, UnchangedWitnessesAreNotWrittenAgain) {
  TestTempDir dir;
  WitnessKeeper keeper(dir.path(""), nullptr);
  keeper.keep(one_death(10, 9));
  const std::string file = dir.path(inventory::kWitnessFile);
  struct stat first {};
  ASSERT_EQ(::stat(file.c_str(), &first), 0);
  ::unlink(file.c_str());
  keeper.keep(one_death(10, 9));  // the same: no write
  struct stat again {};
  EXPECT_NE(::stat(file.c_str(), &again), 0);
  keeper.keep(one_death(11, 9));  // changed: written
  EXPECT_EQ(::stat(file.c_str(), &again), 0);
}

}  // namespace
}  // namespace gpureap::agent
