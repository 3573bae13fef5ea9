// The audit trail end to end (docs/audit.md): real holders on the simulated node, real
// signals, the records read back from the audit file in the state directory and through
// `gpureap log`; the agent's reaper and run's teardown under their own actors; and the
// journal, read from a real journald started in a private mount namespace where that is
// possible (root, unshare), since CI containers run none.

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "harness.h"
#include "util/units.h"
#include "watch_child.h"

namespace gpureap::e2e {
// A named namespace, not an anonymous one: the debug build compiles the e2e files
// in batches (unity build), and each file keeps its own helpers' names.
namespace audit_test {

using namespace std::chrono_literals;
using nlohmann::json;

std::string audit_path(const SimNode& node) {
  return node.env().at("GPUREAP_STATE_DIR") + "/audit.jsonl";
}

// Every record of the node's audit file, each line parsed (a line that is not JSON
// fails the test).
std::vector<json> audit_records(const SimNode& node) {
  std::vector<json> out;
  std::ifstream in(audit_path(node));
  for (std::string line; std::getline(in, line);) {
    auto j = json::parse(line, nullptr, false);
    EXPECT_FALSE(j.is_discarded()) << line;
    if (!j.is_discarded()) out.push_back(std::move(j));
  }
  return out;
}

std::vector<json> signals_to(const std::vector<json>& records, pid_t pid) {
  std::vector<json> out;
  for (const auto& r : records)
    if (r["record"] == "signal" && r["target"]["pid"] == pid) out.push_back(r);
  return out;
}

const json* verdict_of(const std::vector<json>& records, const std::string& op) {
  for (const auto& r : records)
    if (r["record"] == "verdict" && r["op"] == op) return &r;
  return nullptr;
}

std::string dump_all(const std::vector<json>& records) {
  std::string out;
  for (const auto& r : records) out += r.dump() + "\n";
  return out;
}

TEST(Audit, AFreeIsRecordedInTheStateDirectoryAndLogShowsIt) {
  SimNode node;
  auto held = node.hold({"--gpu", "0", "--bytes", "8GiB", "--children", "1", "--orphan"});
  ASSERT_EQ(held.holders.size(), 1u);
  const pid_t pid = held.holders[0].first;
  const std::uint64_t start = start_time_of(pid);
  auto r = node.gpureap({"free", "--json", "--yes", "--gpu", "0"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(r.err.find("audit"), std::string::npos) << "no problem recording: " << r.err;

  // The file: private, one signal record naming the process, then the verdict.
  struct stat st {};
  ASSERT_EQ(::stat(audit_path(node).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  auto records = audit_records(node);
  auto sig = signals_to(records, pid);
  ASSERT_EQ(sig.size(), 1u) << dump_all(records);
  const json& s = sig[0];
  EXPECT_EQ(s["actor"], "free");
  EXPECT_EQ(s["signal"], "SIGTERM");
  EXPECT_EQ(s["via"], "pidfd");
  EXPECT_EQ(s["result"], "delivered");
  EXPECT_EQ(s["target"]["start_time"], start);
  EXPECT_EQ(s["target"]["comm"], "gpureap-sim");
  EXPECT_EQ(s["target"]["uid"], ::geteuid());
  // The server instance it belonged to: its process group, the dead server's.
  EXPECT_EQ(s["target"]["instance"], std::to_string(held.leader)) << s.dump();
  EXPECT_EQ(s["gpus"][0]["index"], 0);
  EXPECT_TRUE(s["gpus"][0]["uuid"].get<std::string>().starts_with("GPU-")) << s.dump();
  EXPECT_EQ(s["bytes"], 8 * kGiB);
  EXPECT_GT(s["caller"]["pid"].get<pid_t>(), 0);
  EXPECT_NE(s["caller"]["pid"], pid);
  EXPECT_EQ(s["caller"]["uid"], ::getuid());
  EXPECT_NE(s["caller"]["command"].get<std::string>().find("free --json --yes --gpu 0"),
            std::string::npos)
      << s.dump();
  // RFC 3339 with the date, the microseconds and the offset.
  const std::string time = s["time"];
  ASSERT_EQ(time.size(), 32u) << time;
  EXPECT_EQ(time[10], 'T');
  EXPECT_EQ(time[19], '.');
  const json* v = verdict_of(records, s["op"]);
  ASSERT_NE(v, nullptr) << dump_all(records);
  EXPECT_EQ((*v)["verdict"], "freed");
  EXPECT_EQ((*v)["signals"], 1);
  EXPECT_EQ((*v)["gpus"][0]["freed"], true);

  // gpureap log: the table, filtered by pid, GPU and time.
  auto log = node.gpureap({"log", "--pid", std::to_string(pid)});
  ASSERT_EQ(log.exit_code, 0) << log.err;
  EXPECT_NE(log.out.find(std::to_string(pid)), std::string::npos) << log.out;
  EXPECT_NE(log.out.find("SIGTERM"), std::string::npos) << log.out;
  EXPECT_NE(log.out.find("delivered via pidfd"), std::string::npos) << log.out;
  EXPECT_NE(log.out.find("-> freed (GPU 0 "), std::string::npos) << log.out;
  auto other = node.gpureap({"log", "--pid", std::to_string(pid + 100000)});
  EXPECT_EQ(other.exit_code, 0);
  EXPECT_NE(other.out.find("No audit record matches"), std::string::npos) << other.out;
  EXPECT_NE(node.gpureap({"log", "--gpu", "0"}).out.find("SIGTERM"), std::string::npos);
  EXPECT_EQ(node.gpureap({"log", "--gpu", "1"}).out.find("SIGTERM"), std::string::npos);
  EXPECT_NE(node.gpureap({"log", "--since", "10m"}).out.find("SIGTERM"), std::string::npos);
  EXPECT_EQ(node.gpureap({"log", "--since", "2200-01-01"}).out.find("SIGTERM"), std::string::npos);
  auto bad = node.gpureap({"log", "--since", "last tuesday"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("--since 'last tuesday'"), std::string::npos) << bad.err;
  EXPECT_EQ(node.gpureap({"log", "--gpu", "zero"}).exit_code, 2);

  // --json: the records themselves, one a line, as stored.
  auto raw = node.gpureap({"--json", "log", "--pid", std::to_string(pid)});
  ASSERT_EQ(raw.exit_code, 0) << raw.err;
  std::vector<std::string> lines;
  std::istringstream in(raw.out);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  ASSERT_EQ(lines.size(), 2u) << raw.out;
  EXPECT_EQ(json::parse(lines[0]), s);
  EXPECT_EQ(json::parse(lines[1]), *v);
}

// W4_10 (ux-wave4 #10): `gpureap log` answers "did gpureap kill a live server?". A
// whole-GPU free over a crashed server's orphaned worker and a live server's worker
// records each target's lineage verdict (the plan's, carried), and the table shows them
// apart, with the instance and the command line.
TEST(Audit, W4_10_LogTellsOrphanedTargetsFromLiveOnes) {
  SimNode node({"--gpus", "2"});
  auto crashed = node.hold({"--gpu", "0", "--bytes", "4GiB", "--children", "1", "--orphan",
                            "--title", "sglang::scheduler_TP{k}"});
  auto live = node.hold({"--gpu", "1", "--bytes", "4GiB", "--children", "1", "--title",
                         "VLLM::Worker_TP{k}", "--server-title", "vllm serve org/M --port 8000"});
  const pid_t orphan = crashed.holders.at(0).first, worker = live.holders.at(0).first;
  auto r = node.gpureap({"free", "--json", "--yes", "--gpu", "all", "--grace", "2s"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  // The plan's targets say it as fields, not only in `why`.
  const json doc = json::parse(r.out);
  for (const auto& t : doc["plan"]["targets"]) {
    if (t["pid"] == orphan) {
      EXPECT_EQ(t["verdict"], "orphaned") << t.dump();
      EXPECT_FALSE(t["evidence"].is_null()) << t.dump();
      EXPECT_EQ(t["instance"], std::to_string(crashed.leader)) << t.dump();
    }
    if (t["pid"] == worker) {
      EXPECT_EQ(t["verdict"], "live") << t.dump();
    }
  }

  const auto records = audit_records(node);
  const auto to_orphan = signals_to(records, orphan), to_worker = signals_to(records, worker);
  ASSERT_FALSE(to_orphan.empty()) << dump_all(records);
  ASSERT_FALSE(to_worker.empty()) << dump_all(records);
  EXPECT_EQ(to_orphan[0]["schema_version"], 2);
  EXPECT_FALSE(to_orphan[0]["hostname"].is_null()) << to_orphan[0].dump();
  EXPECT_EQ(to_orphan[0]["target"]["verdict"], "orphaned") << to_orphan[0].dump();
  EXPECT_FALSE(to_orphan[0]["target"]["reason"].is_null()) << to_orphan[0].dump();
  EXPECT_EQ(to_worker[0]["target"]["verdict"], "live") << to_worker[0].dump();
  EXPECT_NE(to_worker[0]["target"]["cmdline"].get<std::string>().find("VLLM::Worker_TP0"),
            std::string::npos)
      << to_worker[0].dump();

  auto log = node.gpureap({"log"});
  ASSERT_EQ(log.exit_code, 0) << log.err;
  auto row_of = [&](pid_t pid) {
    const std::string key = "  " + std::to_string(pid) + " ";
    const auto at = log.out.find(key);
    if (at == std::string::npos) return std::string();
    const auto begin = log.out.rfind('\n', at) + 1;
    return log.out.substr(begin, log.out.find('\n', at) - begin);
  };
  const std::string header = log.out.substr(0, log.out.find('\n'));
  EXPECT_NE(header.find("VERDICT"), std::string::npos) << log.out;
  EXPECT_NE(header.find("INSTANCE"), std::string::npos) << log.out;
  EXPECT_NE(row_of(orphan).find("orphaned ("), std::string::npos) << log.out;
  EXPECT_NE(row_of(orphan).find(std::to_string(crashed.leader)), std::string::npos) << log.out;
  EXPECT_NE(row_of(worker).find(" live "), std::string::npos) << log.out;
  EXPECT_NE(row_of(worker).find("VLLM::Worker_TP0"), std::string::npos) << log.out;

  // Issue 40: at a terminal's width ($COLUMNS here: stdout is a pipe) no line is wider,
  // the verdicts and commands still there; a pipe without it, or --wide, gets them whole.
  for (const char* columns : {"80", "120"}) {
    auto fitted = node.gpureap({"log"}, std::chrono::seconds(60), {{"COLUMNS", columns}});
    ASSERT_EQ(fitted.exit_code, 0) << fitted.err;
    std::istringstream lines(fitted.out);
    for (std::string l; std::getline(lines, l);)
      EXPECT_LE(l.size(), std::stoul(columns)) << columns << ": " << l;
    EXPECT_NE(fitted.out.find("orphaned ("), std::string::npos) << fitted.out;
    EXPECT_NE(fitted.out.find(" live "), std::string::npos) << fitted.out;
    EXPECT_NE(fitted.out.find("COMMAND"), std::string::npos) << fitted.out;
  }
  auto wide = node.gpureap({"log", "--wide"}, std::chrono::seconds(60), {{"COLUMNS", "80"}});
  ASSERT_EQ(wide.exit_code, 0) << wide.err;
  EXPECT_NE(wide.out.find("VLLM::Worker_TP0"), std::string::npos) << wide.out;
  std::size_t widest = 0;
  std::istringstream wide_lines(wide.out);
  for (std::string l; std::getline(wide_lines, l);) widest = std::max(widest, l.size());
  EXPECT_GT(widest, 80U) << "--wide cuts nothing: " << wide.out;
}

TEST(Audit, EscalationAndAlreadyGoneAreRecordedAsTheKernelAnswered) {
  SimNode node;
  auto stubborn =
      node.hold({"--gpu", "2", "--bytes", "4GiB", "--children", "1", "--orphan", "--ignore-term"});
  ASSERT_EQ(stubborn.holders.size(), 1u);
  const pid_t pid = stubborn.holders[0].first;
  auto r = node.gpureap({"free", "--json", "--yes", "--gpu", "2", "--grace", "300ms"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  auto sig = signals_to(audit_records(node), pid);
  ASSERT_EQ(sig.size(), 2u) << dump_all(audit_records(node));
  EXPECT_EQ(sig[0]["signal"], "SIGTERM");
  EXPECT_EQ(sig[1]["signal"], "SIGKILL");
  EXPECT_EQ(sig[1]["result"], "delivered");
}

TEST(Audit, NothingSignalledWritesNothing) {
  SimNode node;
  node.hold({"--gpu", "0", "--bytes", "4GiB", "--children", "1", "--orphan"});
  EXPECT_EQ(node.gpureap({"free", "--json", "--dry-run", "--gpu", "0"}).exit_code, 0);
  EXPECT_EQ(node.gpureap({"free", "--json", "--yes", "--gpu", "3"}).exit_code, 4);
  EXPECT_FALSE(std::filesystem::exists(audit_path(node)));
  auto log = node.gpureap({"log"});
  EXPECT_EQ(log.exit_code, 0);
  EXPECT_NE(log.out.find("No audit records in"), std::string::npos) << log.out;
}

// A state directory whose audit file cannot be written: the free goes on, says so once.
TEST(Audit, AFileThatCannotBeWrittenNeverStopsAFree) {
  SimNode node;
  auto held =
      node.hold({"--gpu", "1", "--bytes", "4GiB", "--children", "2", "--same-gpu", "--orphan"});
  ASSERT_EQ(held.holders.size(), 2u);
  std::filesystem::create_directory(audit_path(node));  // a directory where the file goes
  auto r = node.gpureap({"free", "--json", "--yes", "--gpu", "1"});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  for (const auto& [pid, gpu] : held.holders) EXPECT_FALSE(alive(pid));
  auto said = [&](const std::string& text) {
    std::size_t n = 0;
    for (auto at = r.err.find(text); at != std::string::npos; at = r.err.find(text, at + 1)) ++n;
    return n;
  };
  EXPECT_EQ(said("gpureap free: warning: audit record not written: "), 1u) << r.err;
}

// An engine worker's title; the reaper acts on it because the agent saw its server die
// (SimNode::crash_watched: witnessed evidence, docs/orphans.md).
constexpr const char* kAuditWorkerTitle = "VLLM::Worker_TP0";

TEST(Audit, TheReaperRecordsUnderItsOwnName) {
  SimNode node;
  WatchChild agent = WatchChild::gpureap(
      node, {"--json", "watch", "--no-listen", "--tick", "200ms", "--reap-orphans-after", "500ms"});
  auto first = agent.next_line(30s);
  ASSERT_TRUE(first && first->text.find("\"started\"") != std::string::npos) << agent.transcript();
  auto doomed =
      node.crash_watched({"--gpu", "0", "--children", "1", "--bytes", "8GiB", "--comm", kAuditWorkerTitle});
  const pid_t pid = doomed.holders[0].first;
  auto reaped =
      agent.wait_for_json([](const json& j) { return j.value("event", "") == "reaped"; }, 30s);
  ASSERT_TRUE(reaped) << agent.transcript();
  EXPECT_EQ(agent.terminate(), 0) << agent.transcript();

  auto records = audit_records(node);
  auto sig = signals_to(records, pid);
  ASSERT_FALSE(sig.empty()) << dump_all(records);
  EXPECT_EQ(sig[0]["actor"], "watch-reaper");
  EXPECT_EQ(sig[0]["caller"]["pid"], agent.pid());
  EXPECT_NE(sig[0]["caller"]["command"].get<std::string>().find("watch"), std::string::npos);
  EXPECT_EQ(sig[0]["target"]["comm"], std::string(kAuditWorkerTitle).substr(0, 15));
  const json* v = verdict_of(records, sig[0]["op"]);
  ASSERT_NE(v, nullptr) << dump_all(records);
  EXPECT_EQ((*v)["actor"], "watch-reaper");
  EXPECT_EQ((*v)["verdict"], "freed");
  auto log = node.gpureap({"log", "--pid", std::to_string(pid)});
  EXPECT_NE(log.out.find("watch-reaper"), std::string::npos) << log.out;
}

TEST(Audit, RunsTeardownRecordsEveryWorkerItKills) {
  SimNode node;
  // CMD starts two workers that outlive it, then exits 0: the teardown kills them.
  std::string script = std::string("'") + GPUREAP_SIM_BIN + "' hold --dir '" + node.dir() +
                       "' --gpu 3 --bytes 4GiB --children 2 --same-gpu --detach && exit 0";
  auto r = node.gpureap({"run", "--name", "audited", "--", "/bin/sh", "-c", script});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  auto ready = json::parse(r.out.substr(0, r.out.find('\n')), nullptr, false);
  ASSERT_FALSE(ready.is_discarded()) << r.out;
  auto records = audit_records(node);
  ASSERT_EQ(ready["holders"].size(), 2u) << r.out;
  std::string op;
  for (const auto& h : ready["holders"]) {
    auto sig = signals_to(records, h["pid"].get<pid_t>());
    ASSERT_FALSE(sig.empty()) << "no record for " << h.dump() << "\n" << dump_all(records);
    EXPECT_EQ(sig[0]["actor"], "run-teardown");
    EXPECT_EQ(sig[0]["signal"], "SIGTERM");
    EXPECT_TRUE(sig[0]["caller"]["run_id"].get<std::string>().starts_with("audited-"))
        << sig[0].dump();
    EXPECT_EQ(sig[0]["gpus"][0]["index"], 3) << sig[0].dump();
    EXPECT_EQ(sig[0]["bytes"], 4 * kGiB);
    op = sig[0]["op"];
  }
  const json* v = verdict_of(records, op);
  ASSERT_NE(v, nullptr) << dump_all(records);
  EXPECT_EQ((*v)["actor"], "run-teardown");
  EXPECT_EQ((*v)["verdict"], "freed");
}

// ---- the journal ----

// The journal sink with a real journald. journald is started in a private mount
// namespace with tmpfs over /run and /var/log, so the machine's own journal, syslog and
// files are untouched, and it dies with the shell that started it (--pdeathsig); gpureap
// free runs in that namespace, finds journald's socket there, and journalctl reads the
// namespace's journal. Skipped where that cannot be done (not root, no unshare, no
// systemd-journald), as in most CI containers: the fields themselves are unit-tested
// (report/audit_format_test.cc) and the transport through a stand-in (audit/recorder_test.cc).
TEST(Audit, TheJournalGetsTheRecordWithItsFields) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root for a private mount namespace";
  const std::string journald = "/lib/systemd/systemd-journald";
  if (::access(journald.c_str(), X_OK) != 0) GTEST_SKIP() << "no " << journald;
  if (!GPUREAP_E2E_JOURNAL) GTEST_SKIP() << "built without libsystemd's header: syslog only";
  const std::string unshare = "/usr/bin/unshare";
  if (::access(unshare.c_str(), X_OK) != 0) GTEST_SKIP() << "no " << unshare;
  auto probe = run_command({unshare, "--mount", "/bin/true"}, {}, 10s);
  if (probe.exit_code != 0) GTEST_SKIP() << "unshare --mount refused: " << probe.err;

  SimNode node;
  auto held = node.hold({"--gpu", "5", "--bytes", "4GiB", "--children", "1", "--orphan"});
  const pid_t pid = held.holders[0].first;
  std::string script =
      "set -eu\n"
      "mount --make-rprivate /\n"
      "mount -t tmpfs gpureap-e2e /run\n"
      "mount -t tmpfs gpureap-e2e /var/log\n"
      "mkdir -p /run/systemd/journal /run/log/journal\n"
      "setpriv --pdeathsig KILL " +
      journald +
      " >/dev/null 2>&1 &\n"
      "jd=$!\n"
      "trap 'kill $jd 2>/dev/null; wait $jd 2>/dev/null || true' EXIT\n"
      "for i in $(seq 200); do [ -S /run/systemd/journal/socket ] && break; sleep 0.05; done\n"
      "'" GPUREAP_BIN
      "' free --json --yes --gpu 5 >/dev/null\n"
      "for i in $(seq 100); do\n"
      "  out=$(journalctl -D /run/log/journal -t gpureap GPUREAP_TARGET_PID=" +
      std::to_string(pid) +
      " -o json --no-pager 2>/dev/null || true)\n"
      "  [ -n \"$out\" ] && break; sleep 0.05\n"
      "done\n"
      "printf '%s\\n' \"$out\"\n";
  auto r = run_command({unshare, "--mount", "/bin/bash", "-c", script}, node.env(), 60s);
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  auto entry = json::parse(r.out.substr(0, r.out.find('\n')), nullptr, false);
  ASSERT_FALSE(entry.is_discarded()) << "nothing in the journal for pid " << pid << ":\n"
                                     << r.out << r.err;
  EXPECT_EQ(entry["SYSLOG_IDENTIFIER"], "gpureap");
  EXPECT_EQ(entry["GPUREAP_ACTOR"], "free");
  EXPECT_EQ(entry["GPUREAP_RECORD"], "signal");
  EXPECT_EQ(entry["GPUREAP_SIGNAL"], "SIGTERM");
  EXPECT_EQ(entry["GPUREAP_VIA"], "pidfd");
  EXPECT_EQ(entry["GPUREAP_RESULT"], "delivered");
  EXPECT_EQ(entry["GPUREAP_GPU"], "5");
  EXPECT_EQ(entry["GPUREAP_BYTES"], std::to_string(4 * kGiB));
  EXPECT_EQ(entry["PRIORITY"], "5");
  EXPECT_NE(entry["MESSAGE"].get<std::string>().find("SIGTERM to pid " + std::to_string(pid)),
            std::string::npos)
      << entry.dump();
  // The same record is in the file: the two sinks agree.
  auto sig = signals_to(audit_records(node), pid);
  ASSERT_EQ(sig.size(), 1u);
  EXPECT_EQ(entry["GPUREAP_OP"], sig[0]["op"]);
  EXPECT_EQ(entry["GPUREAP_TARGET_START_TIME"],
            std::to_string(sig[0]["target"]["start_time"].get<std::uint64_t>()));
}

}  // namespace audit_test
}  // namespace gpureap::e2e
