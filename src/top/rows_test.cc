#include "top/rows.h"

#include <gtest/gtest.h>

#include "top/test_inventory.h"

namespace gpureap::top {
namespace {

using namespace testing;

std::vector<std::string> ids(const std::vector<Row>& rows) {
  std::vector<std::string> out;
  for (const auto& r : rows) out.push_back(r.id);
  return out;
}

TEST(TopRows, OrphansAreListedUnderTheirInstanceAndALoneProcessStandsAlone) {
  const auto inv = case_study();
  ViewState state;
  const auto rows = build_rows(inv, state);
  EXPECT_EQ(ids(rows), (std::vector<std::string>{"i:4721", "p:4722:1000", "p:4723:1000",
                                                 "p:5001:1000"}));
  EXPECT_TRUE(rows[1].nested);
  EXPECT_FALSE(rows[3].nested) << "a lone generic process gets no heading";
  EXPECT_EQ(rows[1].bytes, 20 * kGiB);
  EXPECT_EQ(rows[0].members.size(), 2u);
}

TEST(TopRows, FiltersSortAndCollapse) {
  const auto inv = case_study();
  ViewState state;
  state.orphans_only = true;
  EXPECT_EQ(ids(build_rows(inv, state)),
            (std::vector<std::string>{"i:4721", "p:4722:1000", "p:4723:1000"}));
  state = {};
  state.gpu = gpu::dev(1);
  EXPECT_EQ(ids(build_rows(inv, state)), (std::vector<std::string>{"p:5001:1000"}));
  state = {};
  state.text = "train";
  EXPECT_EQ(ids(build_rows(inv, state)), (std::vector<std::string>{"p:5001:1000"}));
  state = {};
  state.text = "docker:3f2a";  // the container
  EXPECT_EQ(build_rows(inv, state).size(), 3u);
  state = {};
  state.sort = SortKey::memory;  // the instance's 40 GiB before the lone 30 GiB
  EXPECT_EQ(build_rows(inv, state).front().id, "i:4721");
  state.sort = SortKey::pid;
  EXPECT_EQ(build_rows(inv, state).front().id, "i:4721");
  state = {};
  state.collapsed = {"4721"};
  const auto rows = build_rows(inv, state);
  EXPECT_EQ(ids(rows), (std::vector<std::string>{"i:4721", "p:5001:1000"}));
  EXPECT_EQ(row_processes(rows, 0).size(), 2u) << "a folded instance still stands for its members";
}

TEST(TopRows, MemorySortPutsTheLargestFirst) {
  auto inv = case_study();
  inv.gpus[1].holders[0].gpu_bytes = 50 * kGiB;
  ViewState state;
  state.sort = SortKey::memory;
  EXPECT_EQ(build_rows(inv, state).front().id, "p:5001:1000");
}

// The tree view inside an instance: each member under its parent when the parent is a
// listed member too, siblings in the sort order.
TEST(TopRows, MembersAreListedUnderTheirParentDepthFirst) {
  const auto inv = with_server_tree();
  ViewState state;
  state.gpu = gpu::dev(1);
  auto rows = build_rows(inv, state);
  ASSERT_EQ(ids(rows), (std::vector<std::string>{"i:7000", "p:7000:1000", "p:7001:1000",
                                                 "p:7002:1000", "p:7003:1000", "p:7004:1000",
                                                 "p:5001:1000"}));
  using Last = std::vector<bool>;
  EXPECT_EQ(rows[1].tree_last, Last{}) << "the server: a top member";
  EXPECT_EQ(rows[2].tree_last, (Last{false})) << "7001, 7004 to come after it";
  EXPECT_EQ(rows[3].tree_last, (Last{false, false}));
  EXPECT_EQ(rows[4].tree_last, (Last{false, true}));
  EXPECT_EQ(rows[5].tree_last, (Last{true}));
  EXPECT_TRUE(rows[6].tree_last.empty()) << "a lone process has no tree";
  // Sorted by memory, the siblings reorder (7004 first) and stay under their parent.
  state.sort = SortKey::memory;
  rows = build_rows(inv, state);
  ASSERT_EQ(ids(rows), (std::vector<std::string>{"p:5001:1000", "i:7000", "p:7000:1000",
                                                 "p:7004:1000", "p:7001:1000", "p:7002:1000",
                                                 "p:7003:1000"}));
  EXPECT_EQ(rows[3].tree_last, (Last{false}));
  EXPECT_EQ(rows[4].tree_last, (Last{true}));
  // A parent filtered out leaves its children as top members.
  state = {};
  state.text = "vllm-7002";
  rows = build_rows(inv, state);
  ASSERT_EQ(ids(rows), (std::vector<std::string>{"i:7000", "p:7002:1000"}));
  EXPECT_TRUE(rows[1].tree_last.empty());
}

TEST(TopRows, AParentCycleCannotHideAMember) {
  auto inv = with_server_tree();
  for (auto& gh : inv.gpus[1].holders)
    if (gh.holder.id.pid == 7000) gh.holder.ppid = 7002;  // 7000 -> 7001 -> 7002 -> 7000
  ViewState state;
  state.gpu = gpu::dev(1);
  EXPECT_EQ(build_rows(inv, state).size(), 7u);
}

TEST(TopRows, OpenersThatUseNoGpuAreNotListed) {
  auto inv = case_study();
  add_holder(inv.gpus[1], 6000, 0, Lineage::live, /*uses_gpu=*/false);
  EXPECT_EQ(build_rows(inv, {}).size(), 4u);
}

}  // namespace
}  // namespace gpureap::top
