// The audit record's formats: the JSON line reads back as written (process text byte
// for byte), what is not a whole record is refused, the journal gets one field per
// fact (GPU once per GPU) and a human MESSAGE that process text cannot forge, and
// `gpureap log`'s table.

#include "report/audit_format.h"

#include <gtest/gtest.h>

#include <algorithm>

#include <sstream>

#include <csignal>
#include <cstdlib>
#include <nlohmann/json.hpp>

namespace gpureap::report {
// Named, not anonymous: the debug build compiles tests in batches (unity build).
namespace audit_format_test {

using reclaim::AuditRecord;
using reclaim::SignalRecord;
using reclaim::VerdictRecord;

constexpr std::uint64_t kGiB = 1ULL << 30;

class AuditLine : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const char* old = std::getenv("TZ")) old_ = old;
    ::setenv("TZ", "UTC0", 1);
    ::tzset();
  }
  void TearDown() override {
    if (old_)
      ::setenv("TZ", old_->c_str(), 1);
    else
      ::unsetenv("TZ");
    ::tzset();
  }
  std::optional<std::string> old_;
};

AuditRecord base_record() {
  AuditRecord r;
  r.time = WallTime(std::chrono::seconds(1748779207)) + std::chrono::microseconds(412907);
  r.host = "gpu-node-7";
  r.actor = reclaim::AuditActor::free;
  r.op = "4242-1748779207000";
  r.caller.pid = 4242;
  r.caller.uid = 0;
  r.caller.user = "root";
  r.caller.login_uid = 1000;
  r.caller.sudo_user = "alice";
  r.caller.tty = "pts/3";
  r.caller.cgroup = "/user.slice/user-1000.slice/session-4.scope";
  r.caller.command = "gpureap free --gpu 0,3 --yes";
  return r;
}

AuditRecord signal_record() {
  AuditRecord r = base_record();
  SignalRecord s;
  s.target.id = {1068, 13006};
  s.target.comm = "python3";
  s.target.uid = 1001;
  s.target.user = "bob";
  s.target.cgroup = "/system.slice/docker-3f2a1b4c5d6e.scope";
  s.target.container = "docker:3f2a1b4c5d6e";
  s.target.instance = "1066";
  s.target.cmdline = "python3 -m sglang.launch_server --tp 2";
  s.target.lineage = reclaim::TargetLineage{reclaim::LineageVerdict::orphaned,
                                            proc::OrphanEvidence::witnessed, "witnessed",
                                            "parent python3 (pid 1066) died 3 s ago"};
  s.gpus = {{gpu::DeviceId{0}, "GPU-256d5d71-7443-8924-ef21-14d992f490d8"},
            {gpu::DeviceId{3}, "GPU-7282aa00-0000-0000-0000-000000000003"}};
  s.bytes = 20 * kGiB;
  s.signal = SIGTERM;
  r.what = s;
  return r;
}

AuditRecord verdict_record() {
  AuditRecord r = base_record();
  VerdictRecord v;
  v.verdict = reclaim::AuditVerdict::still_held;
  v.gpus = {{{gpu::DeviceId{0}, "GPU-256d"}, true, true, 20 * kGiB, 2 << 20},
            {{gpu::DeviceId{3}, ""}, false, false, 30 * kGiB, std::nullopt}};
  v.signals = 4;
  v.seconds = 0.27000000001;
  r.what = v;
  return r;
}

void expect_same(const AuditRecord& a, const AuditRecord& b) {
  EXPECT_EQ(a.time, b.time);
  EXPECT_EQ(a.host, b.host);
  EXPECT_EQ(a.actor, b.actor);
  EXPECT_EQ(a.op, b.op);
  EXPECT_EQ(a.caller.pid, b.caller.pid);
  EXPECT_EQ(a.caller.uid, b.caller.uid);
  EXPECT_EQ(a.caller.user, b.caller.user);
  EXPECT_EQ(a.caller.login_uid, b.caller.login_uid);
  EXPECT_EQ(a.caller.sudo_user, b.caller.sudo_user);
  EXPECT_EQ(a.caller.tty, b.caller.tty);
  EXPECT_EQ(a.caller.cgroup, b.caller.cgroup);
  EXPECT_EQ(a.caller.command, b.caller.command);
  EXPECT_EQ(a.caller.job_id, b.caller.job_id);
  EXPECT_EQ(a.caller.run_id, b.caller.run_id);
  ASSERT_EQ(a.what.index(), b.what.index());
  if (const auto* s = std::get_if<SignalRecord>(&a.what)) {
    const auto& t = std::get<SignalRecord>(b.what);
    EXPECT_EQ(s->target.id, t.target.id);
    EXPECT_EQ(s->target.comm, t.target.comm);
    EXPECT_EQ(s->target.uid, t.target.uid);
    EXPECT_EQ(s->target.user, t.target.user);
    EXPECT_EQ(s->target.cgroup, t.target.cgroup);
    EXPECT_EQ(s->target.container, t.target.container);
    EXPECT_EQ(s->target.instance, t.target.instance);
    EXPECT_EQ(s->target.cmdline, t.target.cmdline);
    EXPECT_EQ(s->target.lineage, t.target.lineage);
    EXPECT_EQ(s->gpus, t.gpus);
    EXPECT_EQ(s->bytes, t.bytes);
    EXPECT_EQ(s->signal, t.signal);
    EXPECT_EQ(s->via, t.via);
    EXPECT_EQ(s->result, t.result);
    EXPECT_EQ(s->error, t.error);
  } else {
    const auto& v = std::get<VerdictRecord>(a.what);
    const auto& w = std::get<VerdictRecord>(b.what);
    EXPECT_EQ(v.verdict, w.verdict);
    ASSERT_EQ(v.gpus.size(), w.gpus.size());
    for (std::size_t i = 0; i < v.gpus.size(); ++i) {
      EXPECT_EQ(v.gpus[i].gpu, w.gpus[i].gpu);
      EXPECT_EQ(v.gpus[i].freed, w.gpus[i].freed);
      EXPECT_EQ(v.gpus[i].measured, w.gpus[i].measured);
      EXPECT_EQ(v.gpus[i].before_bytes, w.gpus[i].before_bytes);
      EXPECT_EQ(v.gpus[i].after_bytes, w.gpus[i].after_bytes);
    }
    EXPECT_EQ(v.signals, w.signals);
  }
}

std::string without_newline(std::string line) {
  EXPECT_EQ(line.back(), '\n');
  line.pop_back();
  return line;
}

TEST_F(AuditLine, ALineIsOneJsonObjectWithTheDocumentedFields) {
  const std::string line = audit_line(signal_record());
  ASSERT_EQ(line.find('\n'), line.size() - 1) << "one line, ending in a newline";
  auto j = nlohmann::json::parse(line);
  EXPECT_EQ(j["schema_version"], 2);
  EXPECT_EQ(j["time"], "2025-06-01T12:00:07.412907+00:00");
  EXPECT_EQ(j["hostname"], "gpu-node-7");  // as every document names its host
  EXPECT_FALSE(j.contains("host"));
  EXPECT_EQ(j["record"], "signal");
  EXPECT_EQ(j["actor"], "free");
  EXPECT_EQ(j["caller"]["sudo_user"], "alice");
  EXPECT_EQ(j["caller"]["login_uid"], 1000);
  EXPECT_TRUE(j["caller"]["job_id"].is_null());
  EXPECT_EQ(j["target"]["pid"], 1068);
  EXPECT_EQ(j["target"]["start_time"], 13006);
  EXPECT_EQ(j["target"]["instance"], "1066");
  EXPECT_EQ(j["target"]["cmdline"], "python3 -m sglang.launch_server --tp 2");
  EXPECT_EQ(j["target"]["verdict"], "orphaned");
  EXPECT_EQ(j["target"]["evidence"], "witnessed");
  EXPECT_EQ(j["target"]["provenance"], "witnessed");
  EXPECT_EQ(j["target"]["reason"], "parent python3 (pid 1066) died 3 s ago");
  EXPECT_EQ(j["gpus"][1]["index"], 3);
  EXPECT_EQ(j["bytes"], 20 * kGiB);
  EXPECT_EQ(j["signal"], "SIGTERM");
  EXPECT_EQ(j["via"], "pidfd");
  EXPECT_EQ(j["result"], "delivered");
  EXPECT_TRUE(j["error"].is_null());
  // The key order of docs/audit.md: time first, so a line reads left to right.
  EXPECT_EQ(line.rfind("{\"schema_version\":2,\"time\":", 0), 0u) << line;

  auto v = nlohmann::json::parse(audit_line(verdict_record()));
  EXPECT_EQ(v["record"], "verdict");
  EXPECT_EQ(v["verdict"], "still_held");
  EXPECT_EQ(v["seconds"], 0.27) << "milliseconds, no float noise";
  EXPECT_TRUE(v["gpus"][1]["after_bytes"].is_null());
  EXPECT_TRUE(v["gpus"][1]["uuid"].is_null());
}

TEST_F(AuditLine, ALineReadsBackAsTheRecordItWasWrittenFrom) {
  for (const AuditRecord& r : {signal_record(), verdict_record()}) {
    auto back = parse_audit_line(without_newline(audit_line(r)));
    ASSERT_TRUE(back.has_value()) << back.error().message;
    expect_same(*back, r);
  }
  AuditRecord refused = signal_record();
  auto& s = std::get<SignalRecord>(refused.what);
  s.signal = SIGKILL;
  s.via = reclaim::Delivery::cgroup_kill;
  s.result = reclaim::SignalResult::refused;
  s.error = "cannot write cgroup.kill: Permission denied";
  refused.actor = reclaim::AuditActor::slurm_epilog;
  refused.caller.job_id = "42";
  refused.caller.login_uid.reset();
  auto back = parse_audit_line(without_newline(audit_line(refused)));
  ASSERT_TRUE(back.has_value()) << back.error().message;
  expect_same(*back, refused);
}

// A keeper the reaper signalled (issue 52): the record says whose memory it kept, how, and
// how that is known; it reads back; the log's VERDICT column and the journal say it too.
TEST_F(AuditLine, AKeepersRecordNamesTheDeadOwnerAndReadsBack) {
  AuditRecord r = signal_record();
  auto& l = *std::get<SignalRecord>(r.what).target.lineage;
  l.verdict = reclaim::LineageVerdict::detached;
  l.evidence = proc::OrphanEvidence::none;
  l.provenance.clear();
  l.reason = "re-parented to init (pid 1); it leads its own session";
  l.keeper = "importer";
  l.keeper_provenance = "witnessed";
  l.kept_owner = 1700;
  l.keeper_reason = "keeps 8.00 GiB of dead pid 1700 (python3), whose memory it imported (CUDA IPC)";
  const std::string line = audit_line(r);
  auto j = nlohmann::json::parse(line);
  EXPECT_EQ(j["target"]["keeper"]["class"], "importer");
  EXPECT_EQ(j["target"]["keeper"]["owner_pid"], 1700);
  EXPECT_EQ(j["target"]["keeper"]["provenance"], "witnessed");
  EXPECT_EQ(j["target"]["keeper"]["reason"], l.keeper_reason);
  auto back = parse_audit_line(without_newline(line));
  ASSERT_TRUE(back.has_value()) << back.error().message;
  expect_same(*back, r);
  // Not a keeper: null, and a record without the field (older) reads back as none.
  auto plain = nlohmann::json::parse(audit_line(signal_record()));
  EXPECT_TRUE(plain["target"]["keeper"].is_null());
  plain["target"].erase("keeper");
  auto old = parse_audit_line(plain.dump());
  ASSERT_TRUE(old.has_value()) << old.error().message;
  EXPECT_EQ(std::get<SignalRecord>(old->what).target.lineage->keeper, "");
  const auto fields = journal_fields(r);
  EXPECT_NE(std::find(fields.begin(), fields.end(), "GPUREAP_TARGET_KEEPER=importer"), fields.end());
  EXPECT_NE(std::find(fields.begin(), fields.end(), "GPUREAP_TARGET_KEPT_OWNER=1700"), fields.end());
}

TEST_F(AuditLine, ProcessTextThatIsNotUtf8ReadsBackByteForByte) {
  AuditRecord r = signal_record();
  auto& t = std::get<SignalRecord>(r.what).target;
  t.comm = std::string("py\xff\xfe\x1b[2J\n", 9);  // not UTF-8, with a newline and an escape
  t.cgroup = "/caf\xc3\xa9.slice";                 // UTF-8: stays a plain string
  const std::string line = audit_line(r);
  EXPECT_EQ(line.find('\n'), line.size() - 1) << "a newline in a comm stays inside its string";
  auto j = nlohmann::json::parse(line);
  EXPECT_TRUE(j["target"]["comm"].is_object()) << j["target"]["comm"].dump();
  EXPECT_EQ(j["target"]["cgroup"], "/caf\xc3\xa9.slice");
  auto back = parse_audit_line(without_newline(line));
  ASSERT_TRUE(back.has_value()) << back.error().message;
  EXPECT_EQ(std::get<SignalRecord>(back->what).target.comm, t.comm);
}

TEST_F(AuditLine, WhatIsNotAWholeRecordIsRefused) {
  const std::string line = without_newline(audit_line(signal_record()));
  EXPECT_FALSE(parse_audit_line(line.substr(0, line.size() / 2)));  // cut short by a crash
  EXPECT_FALSE(parse_audit_line(""));
  EXPECT_FALSE(parse_audit_line("[]"));
  EXPECT_FALSE(parse_audit_line("{\"schema_version\":1}"));
  auto j = nlohmann::json::parse(line);
  for (const char* key : {"time", "actor", "caller", "target", "signal", "result"}) {
    auto broken = j;
    broken.erase(key);
    EXPECT_FALSE(parse_audit_line(broken.dump())) << key;
  }
  auto k = j;
  k["actor"] = "someone";
  EXPECT_FALSE(parse_audit_line(k.dump()));
  k = j;
  k["schema_version"] = 3;
  EXPECT_FALSE(parse_audit_line(k.dump()));
  k = j;
  k["signal"] = "SIGFOO";
  EXPECT_FALSE(parse_audit_line(k.dump()));
  k = j;
  k["target"]["pid"] = -1;
  EXPECT_TRUE(parse_audit_line(k.dump()));  // pid_t is signed: read as written
  k["target"]["pid"] = "1068";
  EXPECT_FALSE(parse_audit_line(k.dump()));
}

// W4_10: a record written before issue 40 (schema 1: "host", no command line, no
// verdict) still reads, and its verdict is unknown, not "live".
TEST_F(AuditLine, W4_10_AVersion1RecordStillReads) {
  const std::string v1 =
      R"({"schema_version":1,"time":"2025-06-01T12:00:07.412907+00:00","host":"old-node",)"
      R"("record":"signal","actor":"free","op":"4242-1","caller":{"pid":4242,"uid":0,)"
      R"("user":"root","login_uid":null,"sudo_user":null,"tty":null,"cgroup":null,)"
      R"("command":"gpureap free --gpu 0 --yes","job_id":null,"run_id":null},)"
      R"("target":{"pid":1068,"start_time":13006,"comm":"python3","uid":0,"user":"root",)"
      R"("cgroup":null,"container":null,"instance":null},"gpus":[{"index":0,"uuid":null}],)"
      R"("bytes":0,"signal":"SIGTERM","via":"pidfd","result":"delivered","error":null})";
  auto back = parse_audit_line(v1);
  ASSERT_TRUE(back.has_value()) << back.error().message;
  EXPECT_EQ(back->host, "old-node");
  const auto& t = std::get<SignalRecord>(back->what).target;
  EXPECT_FALSE(t.lineage.has_value());
  EXPECT_TRUE(t.cmdline.empty());
  const std::string table = audit_table({*back}, Style{});
  EXPECT_NE(table.find("python3"), std::string::npos) << table;  // its comm for a command
}

// W4_10: the table answers "did gpureap kill a live server?": a VERDICT column with how it
// is known, the INSTANCE, and the target's command line.
TEST_F(AuditLine, W4_10_TheTableShowsVerdictInstanceAndCommand) {
  auto live = signal_record();
  auto& t = std::get<SignalRecord>(live.what).target;
  t.id.pid = 1077;
  t.lineage = reclaim::TargetLineage{};  // live
  t.cmdline = "VLLM::Worker_TP0";
  const std::string table = audit_table({signal_record(), live}, Style{});
  std::istringstream lines(table);
  std::string header, orphan, alive;
  std::getline(lines, header);
  std::getline(lines, orphan);
  std::getline(lines, alive);
  for (const char* column : {"VERDICT", "INSTANCE", "COMMAND"})
    EXPECT_NE(header.find(column), std::string::npos) << header;
  EXPECT_NE(orphan.find("orphaned (witnessed)"), std::string::npos) << orphan;
  EXPECT_NE(orphan.find("1066"), std::string::npos) << orphan;
  EXPECT_NE(orphan.find("python3 -m sglang.launch_server --tp 2"), std::string::npos) << orphan;
  EXPECT_NE(alive.find(" live "), std::string::npos) << alive;
  EXPECT_NE(alive.find("VLLM::Worker_TP0"), std::string::npos) << alive;
  // The columns line up: VERDICT starts at the same place in the header and each row.
  EXPECT_EQ(orphan.find("orphaned"), header.find("VERDICT"));
  EXPECT_EQ(alive.find(" live ") + 1, header.find("VERDICT")) << header << "\n" << alive;
}

bool has(const std::vector<std::string>& fields, const std::string& field) {
  return std::find(fields.begin(), fields.end(), field) != fields.end();
}

TEST(AuditFormat, TheJournalGetsAFieldPerFactAndAMessage) {
  auto f = journal_fields(signal_record());
  EXPECT_TRUE(has(f, "SYSLOG_IDENTIFIER=gpureap"));
  EXPECT_TRUE(has(f, "PRIORITY=5"));
  EXPECT_TRUE(has(f, "GPUREAP_ACTOR=free"));
  EXPECT_TRUE(has(f, "GPUREAP_TARGET_PID=1068"));
  EXPECT_TRUE(has(f, "GPUREAP_TARGET_START_TIME=13006"));
  EXPECT_TRUE(has(f, "GPUREAP_TARGET_COMM=python3"));
  EXPECT_TRUE(has(f, "GPUREAP_TARGET_USER=bob"));
  EXPECT_TRUE(has(f, "GPUREAP_TARGET_CONTAINER=docker:3f2a1b4c5d6e"));
  EXPECT_TRUE(has(f, "GPUREAP_TARGET_VERDICT=orphaned"));
  EXPECT_TRUE(has(f, "GPUREAP_TARGET_EVIDENCE=witnessed"));
  EXPECT_TRUE(has(f, "GPUREAP_TARGET_INSTANCE=1066"));
  // One field per GPU, so that `journalctl GPUREAP_GPU=3` finds a record of GPUs 0 and 3.
  EXPECT_TRUE(has(f, "GPUREAP_GPU=0"));
  EXPECT_TRUE(has(f, "GPUREAP_GPU=3"));
  EXPECT_TRUE(has(f, "GPUREAP_SIGNAL=SIGTERM"));
  EXPECT_TRUE(has(f, "GPUREAP_VIA=pidfd"));
  EXPECT_TRUE(has(f, "GPUREAP_RESULT=delivered"));
  EXPECT_TRUE(has(f, "GPUREAP_CALLER_SUDO_USER=alice"));
  EXPECT_TRUE(has(f, "GPUREAP_CALLER_LOGIN_UID=1000"));
  EXPECT_TRUE(has(f, "GPUREAP_BYTES=" + std::to_string(20 * kGiB)));
  EXPECT_TRUE(has(f,
                  "MESSAGE=free by alice (sudo) (pid 4242): SIGTERM to pid 1068 (python3, user "
                  "bob, orphaned (witnessed)) holding 20.0 GiB on GPU 0,3: delivered via pidfd"))
      << f[0];
  for (const auto& field : f) {
    EXPECT_NE(field.back(), '=') << "empty fields are left out: " << field;
    EXPECT_EQ(field.find("GPUREAP_ERROR"), std::string::npos);
    EXPECT_EQ(field.find("GPUREAP_JOB_ID"), std::string::npos);
  }
  auto v = journal_fields(verdict_record());
  EXPECT_TRUE(has(v, "GPUREAP_VERDICT=still_held"));
  EXPECT_TRUE(has(v, "PRIORITY=4"));
  EXPECT_TRUE(has(v, "GPUREAP_SIGNALS=4"));
}

TEST(AuditFormat, TheMessageShowsProcessTextEscaped) {
  AuditRecord r = signal_record();
  std::get<SignalRecord>(r.what).target.comm = "x\nfake line\x1b[31m";
  const std::string message = audit_message(r);
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  EXPECT_EQ(message.find('\x1b'), std::string::npos) << message;
  EXPECT_NE(message.find("x\\nfake line\\x1b[31m"), std::string::npos) << message;
  // The structured field keeps the bytes: the journal stores binary values as they are.
  EXPECT_TRUE(has(journal_fields(r), "GPUREAP_TARGET_COMM=x\nfake line\x1b[31m"));
}

TEST_F(AuditLine, TheTableHasARowPerRecord) {
  auto refused = signal_record();
  auto& s = std::get<SignalRecord>(refused.what);
  s.result = reclaim::SignalResult::refused;
  s.error = "Operation not permitted";
  const std::string table = audit_table({signal_record(), refused, verdict_record()}, Style{});
  EXPECT_EQ(std::count(table.begin(), table.end(), '\n'), 4) << table;
  EXPECT_NE(table.find("TIME"), std::string::npos);
  EXPECT_NE(table.find("2025-06-01 12:00:07.412"), std::string::npos) << table;
  EXPECT_NE(table.find("alice (sudo)"), std::string::npos) << table;
  EXPECT_NE(table.find("1068"), std::string::npos) << table;
  EXPECT_NE(table.find("0,3"), std::string::npos) << table;
  EXPECT_NE(table.find("20.0 GiB"), std::string::npos) << table;
  EXPECT_NE(table.find("delivered via pidfd"), std::string::npos) << table;
  EXPECT_NE(table.find("refused: Operation not permitted"), std::string::npos) << table;
  EXPECT_NE(table.find("-> still_held (GPU 0 20.0 GiB -> 2.00 MiB, GPU 3 30.0 GiB -> not measured) "
                       "after 4 signals in 0.27 s"),
            std::string::npos)
      << table;
}

// Issue 40: on a terminal the table fits its width: no line wider, COMMAND cut last with
// "...", the columns of lesser weight dropped when the terminal is narrow, a free's
// verdict line cut too; --wide and a pipe give every line whole.
TEST_F(AuditLine, TheTableFitsTheTerminalCuttingTheCommandLast) {
  auto r = signal_record();
  auto& t = std::get<SignalRecord>(r.what).target;
  t.cmdline = "python3 -m sglang.launch_server --model-path /models/deepseek-v3 --tp 8 "
              "--mem-fraction-static 0.9 --enable-hierarchical-cache --port 30000 END";
  const std::vector<AuditRecord> records = {r, verdict_record()};
  for (std::size_t width : {80U, 120U, 200U}) {
    const std::string table = audit_table(records, Style{}, TableWidth{width, false});
    std::istringstream lines(table);
    std::string header, row, verdict;
    std::getline(lines, header);
    std::getline(lines, row);
    std::getline(lines, verdict);
    for (const auto& l : {header, row, verdict}) EXPECT_LE(visible_width(l), width) << l;
    EXPECT_NE(header.find("COMMAND"), std::string::npos) << width << ": " << header;
    EXPECT_NE(header.find("VERDICT"), std::string::npos) << header;
    EXPECT_NE(row.find("orphaned (witnessed)"), std::string::npos) << row;
    EXPECT_NE(row.find("python3 -m sglang"), std::string::npos) << "COMMAND keeps room: " << row;
    EXPECT_EQ(row.find("END"), std::string::npos) << row;
    EXPECT_TRUE(row.ends_with("...")) << row;
    EXPECT_EQ(visible_width(row), width) << "COMMAND takes what is left: " << row;
    EXPECT_NE(verdict.find("-> still_held"), std::string::npos) << verdict;
    // The columns line up: the header's VERDICT over the row's verdict.
    EXPECT_EQ(row.find("orphaned"), header.find("VERDICT")) << header << "\n" << row;
  }
  // 80 columns drop BY (the caller) first; 200 keep it.
  EXPECT_EQ(audit_table({r}, Style{}, TableWidth{80, false}).find("alice (sudo)"),
            std::string::npos);
  EXPECT_NE(audit_table({r}, Style{}, TableWidth{200, false}).find("alice (sudo)"),
            std::string::npos);
  // --wide (on a terminal or not), and a pipe: whole.
  EXPECT_NE(audit_table(records, Style{}, TableWidth{80, true}).find("--port 30000 END"),
            std::string::npos);
  EXPECT_NE(audit_table(records, Style{}).find("--port 30000 END"), std::string::npos);
}

}  // namespace audit_format_test
}  // namespace gpureap::report
