#include "capacity/host_memory.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

namespace gpureap::capacity {
namespace {

TEST(MemAvailable, FromProcMeminfo) {
  std::ifstream in(std::string(GPUREAP_FIXTURES) + "/capacity/meminfo");
  std::ostringstream text;
  text << in.rdbuf();
  EXPECT_EQ(parse_mem_available(text.str()), 408'000'000'000u);  // 398,437,500 kB
}

TEST(MemAvailable, MissingOrMalformed) {
  EXPECT_FALSE(parse_mem_available("MemTotal: 100 kB\n"));
  EXPECT_FALSE(parse_mem_available("MemAvailable: lots\n"));
  EXPECT_FALSE(parse_mem_available("XMemAvailable: 5 kB\n"));
  EXPECT_EQ(parse_mem_available("MemAvailable: 5 kB"), 5u * 1024);
}

}  // namespace
}  // namespace gpureap::capacity
