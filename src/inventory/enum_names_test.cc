// Every enum that travels by name (util/enum_names.h): its values are 0..N-1, each has
// one name, the names are distinct, and a name reads back as its value. A value added
// without a name fails to compile (-Wswitch); these tests catch a duplicated or empty one.

#include <gtest/gtest.h>

#include <set>
#include <string>

#include "gpu/gpu_source.h"
#include "inventory/inventory.h"
#include "inventory/node_check.h"
#include "inventory/reset_blockers.h"
#include "proc/holder.h"
#include "util/enum_names.h"

namespace gpureap {
namespace {

template <typename E>
void expect_one_table(std::size_t count) {
  const auto values = enum_values<E>();
  ASSERT_EQ(values.size(), count);
  std::set<std::string> names;
  for (std::size_t i = 0; i < values.size(); ++i) {
    EXPECT_EQ(static_cast<std::size_t>(values[i]), i);
    const std::string name(enum_name(values[i]));
    EXPECT_FALSE(name.empty());
    EXPECT_TRUE(names.insert(name).second) << "two values are named " << name;
    EXPECT_EQ(enum_from_name<E>(name), values[i]) << name;
  }
  EXPECT_EQ(enum_from_name<E>("no such name"), std::nullopt);
  EXPECT_EQ(enum_from_name<E>(""), std::nullopt);
}

TEST(EnumNames, EveryValueHasOneNameThatReadsBack) {
  expect_one_table<gpu::SourceState>(6);
  expect_one_table<gpu::ProcessKind>(3);
  expect_one_table<proc::NodeKind>(7);
  expect_one_table<proc::FoundBy>(3);
  expect_one_table<proc::OrphanEvidence>(6);
  expect_one_table<proc::Provenance>(4);
  expect_one_table<inventory::Unexplained>(6);
  expect_one_table<inventory::Busy>(4);
  expect_one_table<inventory::GpuState>(9);
  expect_one_table<inventory::Finding>(7);
  expect_one_table<inventory::Verdict>(3);
  expect_one_table<inventory::BlockerClass>(6);
}

TEST(EnumNames, TheWireSpellingsAreUnchanged) {
  // The agent's wire and `--json` (docs/json-schema.md) spell these; an older peer reads them.
  EXPECT_EQ(enum_name(gpu::SourceState::library_missing), "library_missing");
  EXPECT_EQ(enum_name(proc::NodeKind::uvm_tools), "uvm_tools");
  EXPECT_EQ(enum_name(proc::OrphanEvidence::run_gone), "run_gone");
  EXPECT_EQ(enum_name(proc::Provenance::witnessed), "witnessed");
  EXPECT_EQ(enum_name(inventory::Busy::orphan_computing), "orphan_computing");
  EXPECT_EQ(std::string(inventory::to_string(inventory::Unexplained::driver_held)), "driver_held");
}

}  // namespace
}  // namespace gpureap
