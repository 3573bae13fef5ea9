// Instant status (issue 11 §4): while `gpureap watch` runs on the simulated node,
// `status` (and the first look of `free` and `wait`) is answered by the agent
// over its socket, says so, and is what a direct scan shows: for root the same
// document, for another user no more than that user's own scan shows.

#include <grp.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <iterator>

#include "harness.h"
#include "watch_child.h"
#include "util/units.h"

namespace gpureap::e2e {
// A named namespace, not an anonymous one: the debug build compiles the e2e files
// in batches (unity build), and each file keeps its own helpers' names.
namespace watch_status_test {

using namespace std::chrono_literals;
using nlohmann::json;

// `gpureap --json watch --no-listen ARGS` on the node, with its "started" line
// read (nullopt in `started` when it did not come: the test then fails).
struct Agent {
  WatchChild child;
  json started;
  Agent(const SimNode& node, const std::vector<std::string>& args = {})
      : child(WatchChild::gpureap(node, with_watch(args))) {
    if (auto first = child.next_line(30s)) started = json::parse(first->text, nullptr, false);
  }
  bool ok() const { return started.is_object() && started.value("event", "") == "started"; }
  pid_t pid() const { return child.pid(); }

 private:
  static std::vector<std::string> with_watch(const std::vector<std::string>& args) {
    std::vector<std::string> argv = {"--json", "watch", "--no-listen"};
    argv.insert(argv.end(), args.begin(), args.end());
    return argv;
  }
};

// What differs between two looks a moment apart, or says who took them.
json comparable(json doc, bool baselines_too = true) {
  doc.erase("time");  // when each was made
  doc.erase("source");
  doc.erase("agent_pid");
  doc.erase("scan");  // processes on the machine come and go between two looks
  auto strip = [&](json& h) { h.erase("age_seconds"); };
  for (auto& g : doc["gpus"]) {
    for (auto& h : g["holders"]) strip(h);
    if (!baselines_too && g["memory"].is_object()) g["memory"].erase("baseline_recorded");
  }
  for (auto& h : doc["other_holders"]) strip(h);
  return doc;
}

// The JSON patch from the agent's answer to the direct scan's: short, and says where.
std::string dump_diff(const json& a, const json& b) {
  return "agent -> direct: " + json::diff(a, b).dump(1);
}

TEST(WatchStatus, TheAgentAnswersWhatADirectScanShows) {
  SimNode node;
  auto held = node.hold({"--gpu", "0", "--children", "8", "--bytes", "20GiB", "--orphan"});
  ASSERT_EQ(held.holders.size(), 8u);
  // A direct look first records the idle baselines both will read.
  ASSERT_EQ(node.gpureap({"--json", "status"}, 60s, {{"GPUREAP_NO_AGENT", "1"}}).exit_code, 0);

  Agent agent(node);
  ASSERT_TRUE(agent.ok()) << agent.child.transcript();
  EXPECT_EQ(agent.started["socket"], node.env().at("GPUREAP_STATE_DIR") + "/agent.sock");

  auto via_agent = node.gpureap({"--json", "status"});
  auto direct = node.gpureap({"--json", "status"}, 60s, {{"GPUREAP_NO_AGENT", "1"}});
  ASSERT_EQ(via_agent.exit_code, 0) << via_agent.err;
  ASSERT_EQ(direct.exit_code, 0) << direct.err;
  json a = via_agent.json(), d = direct.json();
  EXPECT_EQ(a["source"], "agent");
  EXPECT_EQ(a["agent_pid"], agent.pid());
  EXPECT_EQ(d["source"], "scan");
  EXPECT_TRUE(d["agent_pid"].is_null());
  EXPECT_TRUE(comparable(a) == comparable(d)) << dump_diff(comparable(a), comparable(d));
  // The case study itself, as the agent tells it.
  for (const auto& [pid, gpu] : held.holders) {
    const auto& g = a["gpus"][gpu];
    EXPECT_EQ(g["attributed_bytes"], 20 * kGiB);
    bool found = false;
    for (const auto& h : g["holders"])
      if (h["pid"] == pid) found = h["orphaned"].get<bool>();
    EXPECT_TRUE(found) << "orphan " << pid << " on GPU " << gpu;
  }

  auto table = node.gpureap({"status"});
  EXPECT_NE(
      table.out.find("answered by the gpureap agent (pid " + std::to_string(agent.pid()) + ")"),
      std::string::npos)
      << table.out;
  auto opted_out = node.gpureap({"--json", "--no-agent", "status"}).json();
  EXPECT_EQ(opted_out["source"], "scan");
  EXPECT_EQ(agent.child.terminate(), 0) << agent.child.transcript();
}

// `free` plans from the agent's answer; its re-scans and verification are its own.
TEST(WatchStatus, FreeAndWaitStayCorrectWithAnAgent) {
  SimNode node;
  auto held = node.hold({"--gpu", "0", "--children", "8", "--bytes", "20GiB", "--orphan"});
  ASSERT_EQ(held.holders.size(), 8u);
  Agent agent(node);
  ASSERT_TRUE(agent.ok()) << agent.child.transcript();

  // NVML's first answer gets part of --timeout: 300 ms left it 200 ms, which a loaded
  // machine's NVML start overran (ctest -j12: exit 3, "did not finish initializing").
  auto waited = node.gpureap({"--json", "wait", "--gpu", "0", "--timeout", "2s"});
  EXPECT_EQ(waited.exit_code, 5) << waited.out << waited.err;  // timed out: still held

  auto freed = node.gpureap({"--json", "free", "--orphans", "--gpu", "all", "--yes"});
  ASSERT_EQ(freed.exit_code, 0) << freed.out << freed.err;
  auto f = freed.json();
  ASSERT_EQ(f["plan"]["targets"].size(), 8u) << f.dump(1);
  for (const auto& g : f["gpus"]) EXPECT_TRUE(g["freed"]) << g.dump();
  for (const auto& [pid, gpu] : held.holders) EXPECT_FALSE(alive(pid)) << pid;

  // As fresh as a scan: the agent's next answer shows the memory back at baseline.
  auto after = node.gpureap({"--json", "status"}).json();
  EXPECT_EQ(after["source"], "agent");
  for (const auto& g : after["gpus"]) {
    EXPECT_TRUE(g["holders"].empty()) << g.dump();
    EXPECT_EQ(g["attributed_bytes"], 0u);
    EXPECT_EQ(g["memory"]["used_bytes"], g["memory"]["baseline_bytes"]) << g.dump();
  }
  auto idle = node.gpureap({"--json", "wait", "--gpu", "all", "--timeout", "5s"});
  EXPECT_EQ(idle.exit_code, 0) << idle.out << idle.err;
}

// The caller as uid 65534 (setpriv), the node's holders root's.
class NonRootCaller : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root to run the caller as another user";
    if (::access("/usr/bin/setpriv", X_OK) != 0) GTEST_SKIP() << "setpriv (util-linux) missing";
    }
  CommandResult as_nobody(const SimNode& node, std::vector<std::string> args,
                          std::map<std::string, std::string> extra = {}) {
    std::vector<std::string> argv = {"/usr/bin/setpriv", "--reuid=65534", "--regid=65534",
                                     "--clear-groups", GPUREAP_BIN};
    argv.insert(argv.end(), args.begin(), args.end());
    auto env = node.env();
    for (auto& [k, v] : extra) env[k] = v;
    return run_command(argv, env, 60s);
  }
};

TEST_F(NonRootCaller, AClosedSocketMeansItsOwnScan) {
  SimNode node;
  ::chmod(node.dir().c_str(), 0755);  // the simulated driver's files, readable as on a host
  node.hold({"--gpu", "0", "--children", "8", "--bytes", "20GiB", "--orphan"});
  Agent agent(node);  // socket 0600, state directory 0700: root only
  ASSERT_TRUE(agent.ok()) << agent.child.transcript();
  auto asked = as_nobody(node, {"--json", "status"});
  auto direct = as_nobody(node, {"--json", "status"}, {{"GPUREAP_NO_AGENT", "1"}});
  ASSERT_EQ(asked.exit_code, 0) << asked.err;
  json a = asked.json(), d = direct.json();
  EXPECT_EQ(a["source"], "scan") << "nobody cannot reach a 0600 socket of root";
  json ca = comparable(a), cd = comparable(d);
  ca.erase("problems");  // one per process of another user: the machine's processes come and go
  cd.erase("problems");
  EXPECT_TRUE(ca == cd) << dump_diff(ca, cd);
}

TEST_F(NonRootCaller, TheSocketGroupGetsNoMoreThanItsOwnScanShows) {
  const group* nogroup = ::getgrgid(65534);
  if (!nogroup) GTEST_SKIP() << "no group 65534 on this machine";
  SimNode node;
  ::chmod(node.dir().c_str(), 0755);
  auto held = node.hold({"--gpu", "0", "--children", "8", "--bytes", "20GiB", "--orphan"});
  Agent agent(node, {"--socket-group", nogroup->gr_name});
  ASSERT_TRUE(agent.ok()) << agent.child.transcript();
  // --clear-groups then --regid 65534: the caller is in the socket's group.
  auto asked = as_nobody(node, {"--json", "status"});
  auto direct = as_nobody(node, {"--json", "status"}, {{"GPUREAP_NO_AGENT", "1"}});
  ASSERT_EQ(asked.exit_code, 0) << asked.err;
  ASSERT_EQ(direct.exit_code, 0) << direct.err;
  json a = asked.json(), d = direct.json();
  ASSERT_EQ(a["source"], "agent") << a.dump(1);
  EXPECT_EQ(a["agent_pid"], agent.pid());

  // The holders, memory and attribution: exactly what nobody's own scan shows
  // (root's workers only as NVML names them: no fds, no device nodes).
  json ca = comparable(a, /*baselines_too=*/false), cd = comparable(d, false);
  for (json* doc : {&ca, &cd}) {
    doc->erase("problems");
    doc->erase("warnings");
  }
  EXPECT_TRUE(ca == cd) << dump_diff(ca, cd);
  for (const auto& [pid, gpu] : held.holders) {
    for (const auto& h : a["gpus"][gpu]["holders"]) {
      if (h["pid"] != pid) continue;
      EXPECT_EQ(h["found_by"], json::array({"nvml"})) << h.dump();
      EXPECT_TRUE(h["devices"].empty()) << h.dump();
    }
  }
  // Problems: nobody's own scan lists root's processes one by one; the agent says
  // once that other users' processes were not inspected (docs/json-schema.md).
  ASSERT_FALSE(a["problems"].empty());
  EXPECT_EQ(a["problems"][0]["pid"], 0);
  EXPECT_FALSE(d["problems"].empty());
  // Whatever nobody's own scan warns about, the answer warns about too.
  for (const auto& w : d["warnings"])
    EXPECT_NE(std::find(a["warnings"].begin(), a["warnings"].end(), w), a["warnings"].end())
        << w << " missing from " << a["warnings"].dump(1);
}

// W2-16: under hidepid nobody's own scan cannot read root's processes at all, not
// even where NVML lists them; through the agent it got their users and command
// lines (a secret in one). The caller's /proc is its own mount namespace's.
TEST_F(NonRootCaller, W2_16_UnderHidepidTheSocketGroupGetsNoOtherUsersProcess) {
  const group* nogroup = ::getgrgid(65534);
  if (!nogroup) GTEST_SKIP() << "no group 65534 on this machine";
  if (::access("/usr/bin/unshare", X_OK) != 0) GTEST_SKIP() << "unshare (util-linux) missing";
  SimNode node;
  ::chmod(node.dir().c_str(), 0755);
  auto held = node.hold({"--gpu", "0", "--children", "2", "--bytes", "6GiB", "--orphan", "--label",
                         "--api-key=sk-SECRET-of-root"});
  Agent agent(node, {"--socket-group", nogroup->gr_name});
  ASSERT_TRUE(agent.ok()) << agent.child.transcript();
  // A private mount namespace whose /proc hides other users' processes, then nobody.
  auto asked = run_command({"/usr/bin/unshare", "-m", "--propagation", "private", "/bin/sh", "-c",
                            "mount -t proc -o hidepid=invisible proc /proc || exit 99; exec "
                            "/usr/bin/setpriv --reuid=65534 --regid=65534 --clear-groups \"$0\" "
                            "--json status",
                            GPUREAP_BIN},
                           node.env(), 60s);
  if (asked.exit_code == 99) GTEST_SKIP() << "cannot mount /proc with hidepid here: " << asked.err;
  ASSERT_EQ(asked.exit_code, 0) << asked.err;
  json a = asked.json();
  ASSERT_EQ(a["source"], "agent") << a.dump(1);
  EXPECT_EQ(asked.out.find("sk-SECRET-of-root"), std::string::npos) << asked.out;
  for (const auto& g : a["gpus"])
    for (const auto& h : g["holders"])
      for (pid_t pid : held.pids) EXPECT_NE(h["pid"], pid) << "root's process shown: " << h.dump();
  ASSERT_FALSE(a["problems"].empty());
  EXPECT_NE(a["problems"][0].value("what", "").find("hidepid"), std::string::npos)
      << a["problems"].dump(1);

  // Without hidepid (this test's own /proc) the same caller sees them as before.
  std::ifstream mounts("/proc/self/mountinfo");
  std::string mount_text((std::istreambuf_iterator<char>(mounts)),
                         std::istreambuf_iterator<char>());
  if (mount_text.find("hidepid") != std::string::npos) return;  // this host hides them too
  auto plain = as_nobody(node, {"--json", "status"});
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_NE(plain.out.find("sk-SECRET-of-root"), std::string::npos)
      << "a world-readable command line, as nobody's own scan reads it";
}

}  // namespace
}  // namespace gpureap::e2e
