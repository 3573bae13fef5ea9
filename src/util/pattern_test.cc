#include "util/pattern.h"

#include <gtest/gtest.h>

namespace gpureap {
namespace {

TEST(Pattern, SearchesAnywhereInTheText) {
  auto p = Pattern::compile("python.*sglang");
  ASSERT_TRUE(p) << p.error().message;
  EXPECT_TRUE(p->search("/usr/bin/python3 -m sglang.launch_server --tp 8"));
  EXPECT_FALSE(p->search("/usr/bin/python3 -m vllm.entrypoints"));
  EXPECT_TRUE(Pattern::compile("^python3 -c")->search("python3 -c 'x'"));
  EXPECT_FALSE(Pattern::compile("^-c")->search("python3 -c 'x'"));
  EXPECT_TRUE(Pattern::compile("(vllm|sglang)")->search("bash -c sglang"));
  EXPECT_TRUE(Pattern::compile("[[:digit:]]+GiB")->search("hold --bytes 20GiB"));
}

TEST(Pattern, AnyByteIsACharacterAndDotMatchesNewline) {
  // Command lines hold newlines (`python -c` scripts) and bytes that are not UTF-8.
  EXPECT_TRUE(Pattern::compile("import.*torch")->search("python3 -c import os\nimport torch"));
  EXPECT_TRUE(Pattern::compile("caf.-..")->search("x caf\xe9-\xff\xfe y"));
  EXPECT_TRUE(Pattern::compile("\xff")->search("a\xff"));
  EXPECT_TRUE(Pattern::compile("caf\xc3\xa9")->search("caf\xc3\xa9"));  // UTF-8 é, byte by byte
}

TEST(Pattern, RejectedPatternsSayWhy) {
  for (const char* bad : {"(", "[a-", "a{2,1}", "(a)\\1", "(?=x)"}) {
    auto p = Pattern::compile(bad);
    ASSERT_FALSE(p) << bad;
    EXPECT_FALSE(p.error().message.empty()) << bad;
  }
  std::string too_big;
  for (int i = 0; i < 1000; ++i) too_big += "[a-z]{1000}";
  auto big = Pattern::compile(too_big);
  ASSERT_FALSE(big);
  EXPECT_NE(big.error().message.find("pattern too "), std::string::npos) << big.error().message;
}

// std::regex, which this replaced, recursed once per character and crashed on all
// of these (defects-wave1 D5). Each must run, or be refused with a reason.
TEST(Pattern, HostileSubjectsNeverCrash) {
  std::string long_cmdline = "python3 -c " + std::string(200 * 1024, 'x') + " sglang";
  auto p = Pattern::compile("python.*sglang");
  ASSERT_TRUE(p);
  EXPECT_TRUE(p->search(long_cmdline));
  EXPECT_FALSE(Pattern::compile("x+y")->search(std::string(1500 * 1024, 'x')));
  EXPECT_FALSE(Pattern::compile("python.*vllm")->search(long_cmdline));
  // The most complex pattern accepted, against a subject built to defeat RE2's DFA
  // (every attempt runs 999 bytes deep): linear, it finishes.
  std::string at_limit(Pattern::kMaxProgramSize - 4, 'a');
  auto limit = Pattern::compile(at_limit);
  ASSERT_TRUE(limit) << limit.error().message;
  std::string crafted;
  while (crafted.size() < 200 * 1024) crafted += at_limit.substr(1) + "b";
  EXPECT_FALSE(limit->search(crafted));
}

TEST(Pattern, HostilePatternsAreRefusedWithAReason) {
  auto long_pattern = Pattern::compile(std::string(128 * 1024, 'a'));
  ASSERT_FALSE(long_pattern);
  EXPECT_NE(long_pattern.error().message.find("too complex"), std::string::npos)
      << long_pattern.error().message;

  std::string nested = std::string(20000, '(') + "x" + std::string(20000, ')');
  auto deep = Pattern::compile(nested);
  ASSERT_FALSE(deep);
  EXPECT_NE(deep.error().message.find("too complex"), std::string::npos);

  auto unbalanced = Pattern::compile(std::string(20000, '('));
  ASSERT_FALSE(unbalanced);
  EXPECT_LE(unbalanced.error().message.size(), 100u) << "the message quotes the whole pattern";
}

TEST(Pattern, CopiesShareTheCompiledPattern) {
  auto p = Pattern::compile("sglang");
  ASSERT_TRUE(p);
  Pattern copy = *p;
  EXPECT_EQ(copy.text(), "sglang");
  EXPECT_TRUE(copy.search("python3 -m sglang"));
}

}  // namespace
}  // namespace gpureap
