#include "inventory/import_witness.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "proc/proc_files.h"
#include "proc/proc_parse.h"
#include "util/units.h"

namespace gpureap::inventory {
namespace {

constexpr std::uint64_t kMiB8802 = 8802 * kMiB;

ListedProcess listed(pid_t pid, std::uint64_t bytes, std::uint64_t start = 0) {
  return {{pid, start ? start : 5000u + static_cast<unsigned>(pid), 0}, "python3", bytes};
}

// The H100's figures (docs/orphans.md): exporter 8802 MiB and importer 610 MiB; the
// exporter SIGKILLed, the importer alone at 8802 MiB. It grew by 8192 MiB: the exporter's
// bytes less its own context, which went with it.
TEST(WitnessImports, TheExportersDeathAndTheImportersGrowthAtOneLookAreAnImport) {
  const Listing before{{"GPU-0", {listed(100, kMiB8802), listed(200, 610 * kMiB)}}};
  const Listing after{{"GPU-0", {listed(200, kMiB8802)}}};
  auto dead = [](const proc::ProcessId& id) { return id.pid != 100; };
  auto records = witness_imports(before, after, dead, 1234.5);
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0].importer, (proc::ProcessId{200, 5200, 0}));
  EXPECT_EQ(records[0].exporter, (proc::ProcessId{100, 5100, 0}));
  EXPECT_EQ(records[0].exporter_comm, "python3");
  EXPECT_EQ(records[0].gpu_uuid, "GPU-0");
  EXPECT_EQ(records[0].bytes, 8192 * kMiB);
  EXPECT_EQ(records[0].died_at, 1234.5);
}

// No witness, no claim: each of these is one thing that does not hold.
TEST(WitnessImports, WithoutEveryPartOfTheWitnessThereIsNoClaim) {
  const Listing before{{"GPU-0", {listed(100, 8 * kGiB), listed(200, 512 * kMiB)}}};
  auto alive_but_100 = [](const proc::ProcessId& id) { return id.pid != 100; };
  auto all_alive = [](const proc::ProcessId&) { return true; };
  const Listing grew{{"GPU-0", {listed(200, 8 * kGiB + 512 * kMiB)}}};
  // The exporter still runs (NVML's list was late): no death seen.
  EXPECT_TRUE(witness_imports(before, grew, all_alive, 1).empty());
  // It died but nothing grew: its memory came back.
  EXPECT_TRUE(witness_imports(before, {{"GPU-0", {listed(200, 512 * kMiB)}}}, alive_but_100, 1).empty());
  // Something grew by far more than the exporter held: another allocation.
  EXPECT_TRUE(
      witness_imports(before, {{"GPU-0", {listed(200, 30 * kGiB)}}}, alive_but_100, 1).empty());
  // Or by far less.
  EXPECT_TRUE(
      witness_imports(before, {{"GPU-0", {listed(200, 2 * kGiB)}}}, alive_but_100, 1).empty());
  // Another process now under that pid (another start time) grew from nothing.
  EXPECT_TRUE(witness_imports(before, {{"GPU-0", {listed(200, 8 * kGiB + 512 * kMiB, 9)}}},
                              alive_but_100, 1)
                  .empty());
  // The growth on another GPU than the exporter's.
  const Listing two{{"GPU-0", {listed(100, 8 * kGiB)}}, {"GPU-1", {listed(200, 512 * kMiB)}}};
  EXPECT_TRUE(witness_imports(two, {{"GPU-0", {}}, {"GPU-1", {listed(200, 8 * kGiB + 512 * kMiB)}}},
                              alive_but_100, 1)
                  .empty());
}

// Two exporters of the same size die at once: the growth could be either's. Neither is named.
TEST(WitnessImports, AGrowthTwoDeadExportersCouldExplainNamesNeither) {
  const Listing before{
      {"GPU-0", {listed(100, 8 * kGiB), listed(101, 8 * kGiB), listed(200, 512 * kMiB)}}};
  const Listing after{{"GPU-0", {listed(200, 8 * kGiB + 512 * kMiB)}}};
  auto dead = [](const proc::ProcessId& id) { return id.pid == 200; };
  EXPECT_TRUE(witness_imports(before, after, dead, 1).empty());
}

std::string temp_dir() {
  char tmpl[] = "/tmp/gpureap-imports-XXXXXX";
  return ::mkdtemp(tmpl);
}

// The records survive the agent (a direct look, a restart) for the importer that still
// runs, as witnessed.json's do; an importer gone is pruned at load.
TEST(ImportStore, RecordsOfLiveImportersAreKeptAndGoneOnesPruned) {
  const std::string dir = temp_dir();
  auto stat = proc::read_small_file(fmt::format("/proc/{}/stat", ::getpid()));
  const proc::ProcessId me{::getpid(), proc::parse_stat(stat)->start_time, 0};
  ImportRecord live{me, {4242, 77, 0}, "python3", "GPU-0", 4 * kGiB, 10};
  ImportRecord gone{{me.pid, me.start_time + 1, 0}, {4243, 78, 0}, "python3", "GPU-0", kGiB, 10};
  ASSERT_TRUE(save_imports(dir, {live, gone}));
  auto loaded = load_imports(dir);
  ASSERT_EQ(loaded.size(), 1u);
  EXPECT_EQ(loaded[0], live);
  // Written by another user or writable by others: no record (state_file.h).
  ::chmod((dir + "/" + kImportFile).c_str(), 0666);
  EXPECT_TRUE(load_imports(dir).empty());
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace gpureap::inventory
