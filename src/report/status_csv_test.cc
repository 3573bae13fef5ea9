// `status --format csv`: --json's GPU and holder keys as columns, one row each.

#include "report/status_csv.h"

#include <gtest/gtest.h>

#include "inventory/test_views.h"
#include "report/json.h"
#include "report/status_table.h"

namespace gpureap::report {
namespace {

namespace tv = inventory::testing;

std::vector<std::string> csv_lines(const std::string& text) {
  std::vector<std::string> out;
  std::size_t at = 0;
  while (at < text.size()) {
    const auto nl = text.find('\n', at);
    out.push_back(text.substr(at, nl - at));
    at = nl == std::string::npos ? text.size() : nl + 1;
  }
  return out;
}

TEST(StatusCsv, AGpuRowHasJsonsGpuKeysAndAHolderRowItsHoldersKeys) {
  inventory::Inventory inv = tv::idle_node(2);
  tv::add_holder(inv.gpus[1], 4242, 10 * kGiB, tv::Lineage::orphaned);
  inv.gpus[1].holders[0].holder.provenance = proc::Provenance::inferred;
  inv.gpus[1].holders[0].holder.cmdline = "python3 serve.py --name \"a,b\"";
  const auto doc = status_json(inv);
  const auto gpus = csv_lines(status_gpus_csv(doc));
  ASSERT_EQ(gpus.size(), 3u);
  EXPECT_TRUE(gpus[0].starts_with("index,name,vendor,uuid,pci_bus_id,state,memory.total_bytes,"
                                  "memory.used_bytes,"))
      << gpus[0];
  const std::string used = std::to_string(512 * kMiB + 10 * kGiB);
  EXPECT_TRUE(gpus[2].starts_with("1,")) << gpus[2];
  EXPECT_NE(gpus[2].find(",held," + std::to_string(80 * kGiB) + "," + used + ","),
            std::string::npos)
      << gpus[2];
  const auto holders = csv_lines(status_holders_csv(doc));
  ASSERT_EQ(holders.size(), 2u);
  EXPECT_TRUE(holders[0].starts_with("gpu,pid,start_time,user,")) << holders[0];
  EXPECT_TRUE(holders[1].starts_with("1,4242,1000,me,")) << holders[1];
  EXPECT_NE(holders[1].find(",true,inferred,"), std::string::npos) << "orphaned, provenance";
  // RFC 4180: the comma and quotes of a command line stay one field.
  EXPECT_TRUE(holders[1].ends_with(",\"python3 serve.py --name \"\"a,b\"\"\"")) << holders[1];
  // Every row has the header's number of fields (outside quotes).
  auto fields = [](const std::string& l) {
    std::size_t n = 1;
    bool quoted = false;
    for (char c : l) {
      if (c == '"') quoted = !quoted;
      if (c == ',' && !quoted) ++n;
    }
    return n;
  };
  EXPECT_EQ(fields(holders[1]), fields(holders[0]));
  EXPECT_EQ(fields(gpus[1]), fields(gpus[0]));
}

// --compact: an idle 8-GPU node in a header and 8 rows (gpustat fits it in 9; the blocks
// made it 16-24 lines).
TEST(StatusCompact, AnIdleEightGpuNodeIsAHeaderAndARowPerGpu) {
  inventory::Inventory inv = tv::idle_node(8);
  tv::add_holder(inv.gpus[3], 4242, 10 * kGiB, tv::Lineage::live);
  const std::string out = status_table(inv, Style{}, {}, TableWidth{.columns = 80}, false, true);
  const auto lines = csv_lines(out);
  ASSERT_GE(lines.size(), 10u) << out;
  EXPECT_TRUE(lines[1].starts_with("  GPU ")) << out;
  for (unsigned g = 0; g < 8; ++g)
    EXPECT_TRUE(lines[2 + g].starts_with("  " + std::to_string(g) + " ")) << out;
  EXPECT_NE(lines[5].find("4242"), std::string::npos) << out;
  EXPECT_EQ(out.find("GPU 3 "), std::string::npos) << "no block: " << out;
  EXPECT_LE(lines.size(), 11u) << out;
}

// The driver and CUDA version head status's text (the peers' header), when NVML told them.
TEST(StatusHeader, TheFirstLineNamesTheDriverAndCuda) {
  inventory::Inventory inv = tv::idle_node(1);
  inv.driver_version = "580.65.06";
  inv.cuda_version = "13.0";
  EXPECT_TRUE(status_table(inv, Style{}, {}).starts_with("driver 580.65.06, CUDA 13.0\n"));
  inv.cuda_version.clear();
  EXPECT_EQ(driver_words(inv), "driver 580.65.06");
  inv.driver_version.clear();
  EXPECT_EQ(status_table(inv, Style{}, {}).find("driver"), std::string::npos);
}

}  // namespace
}  // namespace gpureap::report
