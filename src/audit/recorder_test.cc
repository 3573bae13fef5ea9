// The recorder: every record to the file and to the journal (a stand-in transport
// that captures the fields: CI containers run no journald; tests/e2e/audit_test.cc
// reads a real one where it can start one), a failure said once and never thrown;
// syslog's text; and the filters of `gpureap log`.

#include "audit/recorder.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <csignal>
#include <filesystem>

#include "report/audit_format.h"
#include "util/test_temp_dir.h"

namespace gpureap::audit {
// Named, not anonymous: the debug build compiles tests in batches (unity build).
namespace recorder_test {

reclaim::AuditRecord signal_to(pid_t pid, std::vector<reclaim::AuditGpu> gpus, std::string op,
                               long long at = 1748779207) {
  reclaim::AuditRecord r;
  r.time = WallTime(std::chrono::seconds(at));
  r.host = "node";
  r.op = std::move(op);
  r.caller.pid = 4242;
  r.caller.user = "root";
  reclaim::SignalRecord s;
  s.target.id = {pid, 77};
  s.target.comm = "python3";
  s.target.user = "bob";
  s.gpus = std::move(gpus);
  s.signal = SIGTERM;
  r.what = std::move(s);
  return r;
}

reclaim::AuditRecord verdict_of(std::string op, long long at = 1748779208) {
  reclaim::AuditRecord r = signal_to(0, {}, std::move(op), at);
  reclaim::VerdictRecord v;
  v.signals = 1;
  r.what = v;
  return r;
}

reclaim::AuditGpu g(unsigned index, std::string uuid = "") {
  return {gpu::DeviceId{index}, std::move(uuid)};
}

TEST(Recorder, WritesTheFileAndTheJournal) {
  TestTempDir dir("gpureap-recorder");
  std::vector<std::vector<std::string>> sent;
  std::vector<std::string> problems;
  Recorder rec(
      dir.dir(), "",
      [&](const std::vector<std::string>& f) -> Result<void> {
        sent.push_back(f);
        return {};
      },
      [&](const std::string& p) { problems.push_back(p); });
  rec.write(signal_to(1068, {g(0)}, "op-1"));
  rec.write(verdict_of("op-1"));
  auto reading = read_audit_log(dir.dir());
  ASSERT_TRUE(reading);
  EXPECT_EQ(reading->records.size(), 2u);
  ASSERT_EQ(sent.size(), 2u);
  EXPECT_NE(std::find(sent[0].begin(), sent[0].end(), "GPUREAP_TARGET_PID=1068"), sent[0].end());
  EXPECT_NE(std::find(sent[1].begin(), sent[1].end(), "GPUREAP_RECORD=verdict"), sent[1].end());
  EXPECT_TRUE(problems.empty());
}

TEST(Recorder, AFailureIsSaidOnceAndNeverStopsTheNextRecord) {
  TestTempDir dir("gpureap-recorder");
  const std::string gone = dir.path("missing");  // a state directory that is not there
  int journal_calls = 0;
  bool journal_up = false;
  std::vector<std::string> problems;
  Recorder rec(
      gone, "",
      [&](const std::vector<std::string>&) -> Result<void> {
        ++journal_calls;
        if (!journal_up) return fail("the journal refused an audit record: No buffer space");
        return {};
      },
      [&](const std::string& p) { problems.push_back(p); });
  for (int i = 0; i < 5; ++i) rec.write(signal_to(1068, {}, "op"));
  EXPECT_EQ(journal_calls, 5) << "a file that fails does not stop the journal's record";
  ASSERT_EQ(problems.size(), 2u);
  EXPECT_NE(problems[0].find("audit record not written: cannot open " + gone), std::string::npos)
      << problems[0];
  EXPECT_NE(problems[1].find("the journal refused"), std::string::npos) << problems[1];
  // Working again, then failing again: said again.
  journal_up = true;
  rec.write(signal_to(1068, {}, "op"));
  journal_up = false;
  rec.write(signal_to(1068, {}, "op"));
  EXPECT_EQ(problems.size(), 3u);
}

TEST(Recorder, NoStateDirectoryIsSaidOnceAndTheJournalStillGetsEverything) {
  int sent = 0;
  std::vector<std::string> problems;
  Recorder rec(
      std::nullopt, "state directory /run/gpureap is writable by everyone",
      [&](const std::vector<std::string>&) -> Result<void> {
        ++sent;
        return {};
      },
      [&](const std::string& p) { problems.push_back(p); });
  rec.write(signal_to(1, {}, "op"));
  rec.write(signal_to(2, {}, "op"));
  EXPECT_EQ(sent, 2);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_EQ(problems[0],
            "audit records go to the system log only: state directory /run/gpureap is writable "
            "by everyone");
}

TEST(Recorder, ATransportThatThrowsIsAProblemNotACrash) {
  std::vector<std::string> problems;
  Recorder rec(
      std::nullopt, "none",
      [](const std::vector<std::string>&) -> Result<void> { throw std::runtime_error("boom"); },
      [&](const std::string& p) { problems.push_back(p); });
  rec.write(signal_to(1, {}, "op"));  // noexcept: a throw here would terminate
  ASSERT_EQ(problems.size(), 2u);
  EXPECT_NE(problems[1].find("boom"), std::string::npos);
}

TEST(Journal, SyslogTextIsTheMessageAndTheFieldsUnforgeably) {
  auto fields = report::journal_fields(signal_to(1068, {g(0), g(3)}, "4242-1"));
  std::string text = syslog_text(fields);
  EXPECT_EQ(text.rfind("free by root (pid 4242): SIGTERM to pid 1068 (python3, user bob)", 0), 0u)
      << text;
  EXPECT_NE(text.find(" [GPUREAP_RECORD=signal GPUREAP_ACTOR=free GPUREAP_OP=4242-1 "),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("GPUREAP_GPU=0 GPUREAP_GPU=3"), std::string::npos) << text;
  EXPECT_EQ(text.find("PRIORITY"), std::string::npos) << "syslog has its own priority: " << text;
  // A comm that tries to close the bracket and add a field, or start a new line.
  auto forged = signal_to(1068, {}, "op");
  std::get<reclaim::SignalRecord>(forged.what).target.comm = "x] GPUREAP_RESULT=refused\nboo";
  text = syslog_text(report::journal_fields(forged));
  EXPECT_EQ(text.find('\n'), std::string::npos) << text;
  EXPECT_NE(text.find("GPUREAP_TARGET_COMM=\"x] GPUREAP_RESULT=refused\\\\nboo\""),
            std::string::npos)
      << text;
}

// --- gpureap log's filters ---

std::vector<StoredRecord> stored(std::vector<reclaim::AuditRecord> records) {
  std::vector<StoredRecord> out;
  for (auto& r : records) out.push_back(StoredRecord{std::move(r), ""});
  return out;
}

std::vector<std::string> ops_of(const std::vector<const StoredRecord*>& selected) {
  std::vector<std::string> out;
  for (const auto* r : selected)
    out.push_back(r->record.op +
                  (std::holds_alternative<reclaim::VerdictRecord>(r->record.what)
                       ? ":verdict"
                       : ":" + std::to_string(
                                   std::get<reclaim::SignalRecord>(r->record.what).target.id.pid)));
  return out;
}

gpu::GpuSelector selector(const char* text) {
  auto s = gpu::GpuSelector::parse(text);
  EXPECT_TRUE(s) << text;
  return *s;
}

TEST(LogFilter, ByPidWithTheVerdictOfItsFree) {
  auto records = stored({signal_to(100, {g(0)}, "a"), signal_to(200, {g(1)}, "a"), verdict_of("a"),
                         signal_to(300, {g(2)}, "b"), verdict_of("b")});
  EXPECT_EQ(ops_of(select_records(records, {})).size(), 5u);
  LogFilter f;
  f.pid = 200;
  EXPECT_EQ(ops_of(select_records(records, f)), (std::vector<std::string>{"a:200", "a:verdict"}));
  f.pid = 999;
  EXPECT_TRUE(select_records(records, f).empty());
}

TEST(LogFilter, ByGpuIndexRangeOrUuidAsRecorded) {
  auto records = stored({signal_to(100, {g(0, "GPU-aaaa1111")}, "a"),
                         signal_to(200, {g(3, "GPU-bbbb2222"), g(5, "GPU-cccc")}, "b"),
                         signal_to(300, {}, "c"), verdict_of("b")});
  LogFilter f;
  f.gpus = selector("3");
  EXPECT_EQ(ops_of(select_records(records, f)), (std::vector<std::string>{"b:200", "b:verdict"}));
  f.gpus = selector("0,5");  // each item on its own: a record of GPU 5 alone matches
  EXPECT_EQ(ops_of(select_records(records, f)),
            (std::vector<std::string>{"a:100", "b:200", "b:verdict"}));
  f.gpus = selector("1-4");
  EXPECT_EQ(ops_of(select_records(records, f)), (std::vector<std::string>{"b:200", "b:verdict"}));
  f.gpus = selector("gpu-AAAA");
  EXPECT_EQ(ops_of(select_records(records, f)), (std::vector<std::string>{"a:100"}));
  f.gpus = selector("minor:0");  // not recorded: matches nothing
  EXPECT_TRUE(select_records(records, f).empty());
  f.gpus = selector("all");
  EXPECT_EQ(select_records(records, f).size(), 4u) << "all: no filter, records without a GPU too";
}

reclaim::AuditGpu mig(unsigned index, unsigned gi, unsigned ci, std::string uuid,
                      std::string parent) {
  return {gpu::DeviceId{index, gi, ci}, std::move(uuid), std::move(parent)};
}

// W4_36: `log --gpu` had its own matcher, which read MIG-GPU-<uuid>/1/0 as GPU 0's gi1/ci0
// whatever GPU the UUID named. It now asks the matcher `--gpu` resolves with.
TEST(LogFilter, W4_36_MigItemsMatchAsGpuSelectsThem) {
  auto records = stored({signal_to(100, {mig(0, 1, 0, "MIG-aaaa0000", "GPU-0000aaaa")}, "a"),
                         signal_to(200, {mig(1, 1, 0, "MIG-bbbb1111", "GPU-1111bbbb")}, "b"),
                         signal_to(300, {mig(1, 2, 0, "MIG-cccc2222", "GPU-1111bbbb")}, "c")});
  LogFilter f;
  f.gpus = selector("MIG-GPU-1111bbbb/1/0");
  EXPECT_EQ(ops_of(select_records(records, f)), (std::vector<std::string>{"b:200"}));
  f.gpus = selector("mig-gpu-0000AAAA/1/0");
  EXPECT_EQ(ops_of(select_records(records, f)), (std::vector<std::string>{"a:100"}));
  f.gpus = selector("1/gi2");
  EXPECT_EQ(ops_of(select_records(records, f)), (std::vector<std::string>{"c:300"}));
  f.gpus = selector("1");  // a GPU in MIG mode: all its MIG devices
  EXPECT_EQ(ops_of(select_records(records, f)), (std::vector<std::string>{"b:200", "c:300"}));
  f.gpus = selector("MIG-bbbb");
  EXPECT_EQ(ops_of(select_records(records, f)), (std::vector<std::string>{"b:200"}));
  // The GPU's UUID survives the log: the record as stored is read back whole.
  const auto line = report::audit_line(records[1].record);
  EXPECT_NE(line.find(R"("gpu_uuid":"GPU-1111bbbb")"), std::string::npos) << line;
  auto back = report::parse_audit_line(line);
  ASSERT_TRUE(back) << line;
  EXPECT_EQ(std::get<reclaim::SignalRecord>(back->what).gpus,
            std::get<reclaim::SignalRecord>(records[1].record.what).gpus);
  // A record without its GPU's UUID (written before it was kept) names no GPU by UUID.
  records = stored({signal_to(400, {mig(0, 1, 0, "MIG-dddd", "")}, "d")});
  f.gpus = selector("MIG-GPU-0000aaaa/1/0");
  EXPECT_TRUE(select_records(records, f).empty());

  // The same items resolve to the same devices among these GPUs as `--gpu` would.
  std::vector<gpu::GpuInfo> gpus(3);
  gpus[0].id = {0, 1, 0}, gpus[0].uuid = "MIG-aaaa0000", gpus[0].parent_uuid = "GPU-0000aaaa";
  gpus[1].id = {1, 1, 0}, gpus[1].uuid = "MIG-bbbb1111", gpus[1].parent_uuid = "GPU-1111bbbb";
  gpus[2].id = {1, 2, 0}, gpus[2].uuid = "MIG-cccc2222", gpus[2].parent_uuid = "GPU-1111bbbb";
  auto resolved = selector("MIG-GPU-1111bbbb/1/0").resolve(gpus);
  ASSERT_TRUE(resolved);
  EXPECT_EQ(*resolved, (std::vector<gpu::DeviceId>{gpus[1].id}));
}

TEST(LogFilter, SinceATime) {
  auto records = stored({signal_to(100, {}, "a", 1000), verdict_of("a", 1001),
                         signal_to(200, {}, "b", 2000), verdict_of("b", 2001)});
  LogFilter f;
  f.since = WallTime(std::chrono::seconds(1001));
  EXPECT_EQ(ops_of(select_records(records, f)),
            (std::vector<std::string>{"a:verdict", "b:200", "b:verdict"}));
  f.pid = 200;
  EXPECT_EQ(ops_of(select_records(records, f)), (std::vector<std::string>{"b:200", "b:verdict"}));
}

}  // namespace recorder_test
}  // namespace gpureap::audit
