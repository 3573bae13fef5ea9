// The audit file: private, bounded and rotated, whole lines under concurrent writers
// (real processes appending at once), read back oldest first, tolerant of a last line
// cut short, and never written through a planted link.

#include "audit/audit_file.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "report/audit_format.h"
#include "util/test_temp_dir.h"

namespace gpureap::audit {
// Named, not anonymous: the debug build compiles tests in batches (unity build).
namespace audit_file_test {

reclaim::AuditRecord record_for(pid_t target, std::uint64_t seq) {
  reclaim::AuditRecord r;
  r.time = WallTime(std::chrono::seconds(1748779207 + seq));
  r.host = "node";
  r.op = fmt::format("1-{:04}", seq);  // every record of a test the same length
  r.caller.pid = ::getpid();
  r.caller.user = "root";
  reclaim::SignalRecord s;
  s.target.id = {target, 1000 + seq};
  s.target.comm = "python3";
  s.target.user = "bob";
  s.signal = 15;
  r.what = s;
  return r;
}

std::string read_all(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

std::size_t lines_in(const std::string& path) {
  std::string text = read_all(path);
  return static_cast<std::size_t>(std::count(text.begin(), text.end(), '\n'));
}

TEST(AuditFile, CreatedPrivateAndReadBack) {
  TestTempDir dir("gpureap-audit");
  ASSERT_TRUE(append_audit_line(dir.dir(), report::audit_line(record_for(100, 1))));
  ASSERT_TRUE(append_audit_line(dir.dir(), report::audit_line(record_for(101, 2))));
  struct stat st {};
  ASSERT_EQ(::stat(dir.path("audit.jsonl").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  auto reading = read_audit_log(dir.dir());
  ASSERT_TRUE(reading) << reading.error().message;
  ASSERT_EQ(reading->records.size(), 2u);
  EXPECT_EQ(std::get<reclaim::SignalRecord>(reading->records[0].record.what).target.id.pid, 100);
  EXPECT_EQ(std::get<reclaim::SignalRecord>(reading->records[1].record.what).target.id.pid, 101);
  EXPECT_EQ(reading->records[0].line + "\n", report::audit_line(record_for(100, 1)));
  EXPECT_TRUE(reading->warnings.empty());
  EXPECT_EQ(reading->files, std::vector<std::string>{dir.path("audit.jsonl")});
}

TEST(AuditFile, NoFileIsNoRecordAndNoError) {
  TestTempDir dir("gpureap-audit");
  auto reading = read_audit_log(dir.dir());
  ASSERT_TRUE(reading);
  EXPECT_TRUE(reading->records.empty());
  EXPECT_TRUE(reading->files.empty());
}

TEST(AuditFile, RotatesAtTheLimitAndKeepsTwoOlderFiles) {
  TestTempDir dir("gpureap-audit");
  const std::string line = report::audit_line(record_for(200, 0));
  const std::uint64_t limit = line.size() * 10;  // ten records a file
  for (std::uint64_t i = 0; i < 45; ++i)
    ASSERT_TRUE(append_audit_line(dir.dir(), report::audit_line(record_for(200, i)), limit));
  // 45 records: 10 + 10 dropped with the oldest files, then .2, .1 and the current file.
  EXPECT_FALSE(std::filesystem::exists(dir.path("audit.jsonl.3")));
  EXPECT_EQ(lines_in(dir.path("audit.jsonl.2")), 10u);
  EXPECT_EQ(lines_in(dir.path("audit.jsonl.1")), 10u);
  EXPECT_EQ(lines_in(dir.path("audit.jsonl")), 5u);
  for (const char* f : {"audit.jsonl", "audit.jsonl.1", "audit.jsonl.2"})
    EXPECT_LE(std::filesystem::file_size(dir.path(f)), limit) << f;
  auto reading = read_audit_log(dir.dir());
  ASSERT_TRUE(reading);
  ASSERT_EQ(reading->records.size(), 25u);
  // Oldest first, across the files: records 20..44.
  for (std::size_t i = 0; i < 25; ++i)
    EXPECT_EQ(std::get<reclaim::SignalRecord>(reading->records[i].record.what).target.id.start_time,
              1000 + 20 + i);
}

TEST(AuditFile, ALastLineCutShortIsSkippedQuietlyAndGarbageIsNamed) {
  TestTempDir dir("gpureap-audit");
  ASSERT_TRUE(append_audit_line(dir.dir(), report::audit_line(record_for(300, 1))));
  {
    std::ofstream out(dir.path("audit.jsonl"), std::ios::app);
    out << "not a record\n";
  }
  ASSERT_TRUE(append_audit_line(dir.dir(), report::audit_line(record_for(301, 2))));
  const std::string cut = report::audit_line(record_for(302, 3));
  {
    std::ofstream out(dir.path("audit.jsonl"), std::ios::app);
    out << cut.substr(0, cut.size() / 2);  // a writer killed mid-line
  }
  auto reading = read_audit_log(dir.dir());
  ASSERT_TRUE(reading);
  ASSERT_EQ(reading->records.size(), 2u);
  ASSERT_EQ(reading->warnings.size(), 1u);
  EXPECT_NE(reading->warnings[0].find("1 line of"), std::string::npos) << reading->warnings[0];
  // The next writer ends the cut line before its own: the cut record is lost alone
  // (and now named), the next one is whole.
  ASSERT_TRUE(append_audit_line(dir.dir(), report::audit_line(record_for(303, 4))));
  reading = read_audit_log(dir.dir());
  ASSERT_TRUE(reading);
  ASSERT_EQ(reading->records.size(), 3u) << "the cut line swallowed the next one";
  EXPECT_EQ(std::get<reclaim::SignalRecord>(reading->records[2].record.what).target.id.pid, 303);
  ASSERT_EQ(reading->warnings.size(), 1u);
  EXPECT_NE(reading->warnings[0].find("2 lines of"), std::string::npos) << reading->warnings[0];
}

TEST(AuditFile, NeverWritesThroughALinkOrIntoAnotherUsersFile) {
  TestTempDir dir("gpureap-audit");
  const std::string victim = dir.path("victim");
  { std::ofstream(victim) << "precious\n"; }
  ASSERT_EQ(::symlink(victim.c_str(), dir.path("audit.jsonl").c_str()), 0);
  auto r = append_audit_line(dir.dir(), report::audit_line(record_for(400, 1)));
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("symbolic link"), std::string::npos) << r.error().message;
  EXPECT_EQ(read_all(victim), "precious\n");
  EXPECT_FALSE(read_audit_log(dir.dir()));
  if (::geteuid() != 0) return;
  // Root's records never go into a file someone else planted in its directory.
  std::filesystem::remove(dir.path("audit.jsonl"));
  { std::ofstream(dir.path("audit.jsonl")) << ""; }
  ASSERT_EQ(::chown(dir.path("audit.jsonl").c_str(), 65534, 65534), 0);
  r = append_audit_line(dir.dir(), report::audit_line(record_for(400, 1)));
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("owned by uid 65534"), std::string::npos) << r.error().message;
}

// `writers` processes append `each` records at once; fails the test if one failed.
void run_writers(const std::string& dir, int writers, int each, std::uint64_t limit) {
  std::vector<pid_t> pids;
  for (int w = 0; w < writers; ++w) {
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      int failed = 0;
      for (int i = 0; i < each; ++i)
        if (!append_audit_line(
                dir, report::audit_line(record_for(10000 + w, static_cast<unsigned>(i))), limit))
          ++failed;
      ::_exit(failed == 0 ? 0 : 1);
    }
    pids.push_back(pid);
  }
  for (pid_t pid : pids) {
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
}

// Every line of the three files parses as a record, and none is there twice; returns them.
std::set<std::pair<pid_t, std::uint64_t>> whole_lines(const TestTempDir& dir) {
  std::set<std::pair<pid_t, std::uint64_t>> seen;
  for (const char* f : {"audit.jsonl.2", "audit.jsonl.1", "audit.jsonl"}) {
    std::ifstream in(dir.path(f));
    for (std::string line; std::getline(in, line);) {
      auto r = report::parse_audit_line(line);
      EXPECT_TRUE(r) << f << ": " << line;
      if (!r) continue;
      const auto& id = std::get<reclaim::SignalRecord>(r->what).target.id;
      EXPECT_TRUE(seen.insert({id.pid, id.start_time}).second) << "a line written twice";
    }
  }
  return seen;
}

// Several gpureap processes at once (a person's free, the reaper, an epilog): every
// line whole and none lost.
TEST(AuditFile, ConcurrentWritersNeverInterleaveOrLoseALine) {
  TestTempDir dir("gpureap-audit");
  run_writers(dir.dir(), 6, 150, kRotateBytes);
  EXPECT_EQ(whole_lines(dir).size(), 6u * 150u);
  EXPECT_FALSE(std::filesystem::exists(dir.path("audit.jsonl.1")));
}

// ... and while they rotate: whole lines, each rotated file full but within the limit
// (a writer that cannot get the lock in time appends past it: slack of a line each), no
// file rotated twice (which would leave a nearly empty .1 or .2).
TEST(AuditFile, ConcurrentWritersRotateOnce) {
  TestTempDir dir("gpureap-audit");
  constexpr int kWriters = 6;
  const std::uint64_t line = report::audit_line(record_for(10000, 100)).size();
  const std::uint64_t limit = 40 * line;
  run_writers(dir.dir(), kWriters, 150, limit);
  auto seen = whole_lines(dir);
  EXPECT_GT(seen.size(), 80u);
  for (const char* f : {"audit.jsonl.2", "audit.jsonl.1"}) {
    ASSERT_TRUE(std::filesystem::exists(dir.path(f))) << f;
    const auto size = std::filesystem::file_size(dir.path(f));
    EXPECT_LE(size, limit + kWriters * (line + 2)) << f;
    EXPECT_GE(size, limit - line) << f << " was rotated before it was full";
  }
}

}  // namespace audit_file_test
}  // namespace gpureap::audit
