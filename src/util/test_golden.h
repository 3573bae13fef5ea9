#pragma once
// For tests only: compare a text with its golden file, or write the file when
// GPUREAP_UPDATE_GOLDEN=1 (a deliberate change of output, reviewed in git diff).

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

namespace gpureap {

inline void expect_golden_file(const std::string& file, const std::string& text) {
  if (const char* update = std::getenv("GPUREAP_UPDATE_GOLDEN"); update && *update == '1') {
    std::ofstream(file, std::ios::trunc) << text;
    return;
  }
  std::ifstream in(file);
  ASSERT_TRUE(in.good()) << file << " (GPUREAP_UPDATE_GOLDEN=1 writes it)";
  std::stringstream want;
  want << in.rdbuf();
  EXPECT_EQ(text, want.str()) << file;
}

}  // namespace gpureap
