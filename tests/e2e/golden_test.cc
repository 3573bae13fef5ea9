// Golden outputs: the --json documents of every command on the simulated case study
// (an 8-worker server SIGKILLed, its workers orphaned; a GPU whose memory the driver
// kept), compared byte for byte with tests/golden/*.json after masking what changes
// from run to run (pids, start times, durations, the user, temporary paths). A refactor
// that changes a key, its order, a number or a sentence fails here.
//
// To accept a deliberate change: GPUREAP_UPDATE_GOLDEN=1 ctest -R Golden, then review
// `git diff tests/golden` like any other change.

#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <sstream>

#include "harness.h"
#include "report/json.h"

namespace gpureap::e2e {
// A named namespace, not an anonymous one: the debug build compiles the e2e files
// in batches (unity build), and each file keeps its own helpers' names.
namespace golden_test {

using namespace std::chrono_literals;

const std::string kGoldenDir = std::string(GPUREAP_SOURCE_DIR) + "/tests/golden/";

void replace_all(std::string& s, const std::string& from, const std::string& to) {
  if (from.empty()) return;
  for (auto at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
    s.replace(at, from.size(), to);
}

// The cgroup paths of this test process (v2, and v1's on a hybrid host), which the
// holders it starts inherit and status shows: they depend on the session or CI job.
std::vector<std::string> own_cgroups() {
  std::vector<std::string> out;
  std::ifstream in("/proc/self/cgroup");
  for (std::string line; std::getline(in, line);) {
    auto colon = line.find(':', line.find(':') + 1);
    if (colon == std::string::npos) continue;
    std::string path = line.substr(colon + 1);
    if (path.size() > 1 && std::find(out.begin(), out.end(), path) == out.end())
      out.push_back(path);
  }
  return out;
}

// Replaces what differs between runs and machines, and nothing else.
class Masker {
 public:
  explicit Masker(std::string node_dir) : node_dir_(std::move(node_dir)) {}
  void add_pids(const std::vector<pid_t>& pids) {
    for (pid_t p : pids)
      if (std::find(pids_.begin(), pids_.end(), p) == pids_.end()) pids_.push_back(p);
    std::sort(pids_.begin(), pids_.end());
  }

  std::string operator()(std::string text) const {
    replace_all(text, GPUREAP_SIM_BIN, "<sim>");
    replace_all(text, GPUREAP_BIN, "<gpureap>");
    replace_all(text, node_dir_, "<dir>");
    replace_all(text, GPUREAP_SOURCE_DIR, "<source>");
    // The holders' cgroup is the one the test runs in (a session's, a CI job's).
    static const std::vector<std::string> cgroups = own_cgroups();
    for (const auto& c : cgroups)
      replace_all(text, "\"cgroup\": \"" + c + "\"", "\"cgroup\": \"<cgroup>\"");
    // Times, kernel identities and the user running the test: the key and whether
    // the value is null stay pinned.
    static const std::regex volatile_number(
        "\"(start_time|done_at_seconds|sent_at_seconds|exited_at_seconds|exiting_at_seconds|freed_after_seconds|"
        "seconds_to_free|settled_seconds|seconds|signal_to_exit|exit_to_unlisted|unlisted_to_baseline|age_seconds|orphaned_since|uid|ppid|pgid|sid|tid|"
        "processes)\": "
        "-?[0-9][0-9.e+-]*");
    text = std::regex_replace(text, volatile_number, "\"$1\": \"<$1>\"");
    // What the scan could not read depends on the machine (pid 1's maps as non-root).
    static const std::regex problems("\"problems\": \\[[^\\]]*\\]");
    text = std::regex_replace(text, problems, "\"problems\": \"<problems>\"");
    // The container hint comes from that same cgroup (docker:..., a CI job's slice).
    static const std::regex container("\"container\": (null|\"[^\"]*\")");
    text = std::regex_replace(text, container, "\"container\": \"<container>\"");
    static const std::regex user("\"user\": \"[^\"]*\"");
    text = std::regex_replace(text, user, "\"user\": \"<user>\"");
    // Orphans are re-parented to the nearest subreaper: init here, maybe not on CI.
    static const std::regex reparented("re-parented to [^()\"]*\\(pid [0-9]+\\)");
    text = std::regex_replace(text, reparented, "re-parented to <parent>");
    // The test's processes by their rank in pid order (which is creation order), so
    // that which pid is which stays pinned.
    for (std::size_t i = 0; i < pids_.size(); ++i) {
      std::regex pid("\\b" + std::to_string(pids_[i]) + "\\b");
      text = std::regex_replace(text, pid, "<pid" + std::to_string(i) + ">");
    }
    return text;
  }

 private:
  std::string node_dir_;
  std::vector<pid_t> pids_;
};

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// When and where a document was made (its "time" and "hostname"): masked in every
// document, also the plans that need no other mask. JsonDocument.* checks the values.
std::string mask_stamp(const std::string& text) {
  static const std::regex stamp("\"(time|hostname)\": (null|\"[^\"]*\")");
  return std::regex_replace(text, stamp, "\"$1\": \"<$1>\"");
}

// Compares `actual` with the golden file `name`, or rewrites it when asked to.
void expect_golden(const std::string& name, const std::string& unmasked) {
  const std::string path = kGoldenDir + name;
  const std::string actual = mask_stamp(unmasked);
  const char* update = std::getenv("GPUREAP_UPDATE_GOLDEN");
  if (update && std::string(update) == "1") {
    std::ofstream(path) << actual;
    return;
  }
  std::string expected = read_file(path);
  ASSERT_FALSE(expected.empty()) << path << " is missing: run with GPUREAP_UPDATE_GOLDEN=1";
  if (expected == actual) return;
  // Point at the first differing line rather than dumping two 15 KB documents.
  std::istringstream e(expected), a(actual);
  std::string el, al;
  for (int line = 1;; ++line) {
    bool more_e = static_cast<bool>(std::getline(e, el));
    bool more_a = static_cast<bool>(std::getline(a, al));
    if (!more_e && !more_a) break;
    if (el != al || more_e != more_a) {
      ADD_FAILURE() << name << " differs from the golden file at line " << line
                    << "\n  golden: " << (more_e ? el : "<end>")
                    << "\n  actual: " << (more_a ? al : "<end>")
                    << "\n(GPUREAP_UPDATE_GOLDEN=1 accepts a deliberate change)";
      return;
    }
  }
}

// A free that saw a holder inside its exit with its memory back (its threads all
// PF_EXITING or a zombie: Outcome::exiting, free's early end) rather than exited. Which of
// the two a free sees is timing: a loaded machine reaps its orphans later (1 run in ~5 of
// `make test`, beside the compiler). The unit tests pin each (Reclaim.AHolderWhoseMemory
// IsBackWhileItExitsIsNotWaitedFor, FreeText.AHolderExitingWithItsMemoryBackIsSaidSo);
// here the exit seen inside is written as the exit seen, so the golden file pins the rest:
// the action's exit time, the GPU's phases from the signal to the exit, no extra step.
std::string exit_seen_as_exited(const std::string& text) {
  auto doc = nlohmann::ordered_json::parse(text, nullptr, false);
  if (!doc.is_object() || !doc.contains("actions")) return text;
  bool inside = false;
  for (auto& a : doc["actions"]) {
    if (a.value("result", "") != "exiting") continue;
    inside = true;
    a["exited_at_seconds"] = a["exiting_at_seconds"];
    a["exiting_at_seconds"] = nullptr;
    a["result"] = "exited";
  }
  if (!inside) return text;
  auto& steps = doc["steps"];
  for (auto it = steps.begin(); it != steps.end();)
    it = (*it).value("step", "") == "exits" ? steps.erase(it) : it + 1;
  for (auto& g : doc["gpus"]) {
    if (!g.value("freed", false) || !g.contains("release")) continue;
    auto& phases = g["release"]["phases"];
    for (const char* phase : {"signal_to_exit", "exit_to_unlisted"})
      if (phases[phase].is_null()) phases[phase] = 0.0;
  }
  return report::json_text(doc);
}

std::vector<pid_t> pids_of(const HoldResult& h) {
  std::vector<pid_t> pids = h.pids;
  pids.push_back(h.leader);
  return pids;
}

TEST(Golden, JsonOfEveryCommandOnTheCaseStudyIsUnchanged) {
  SimNode node;
  Masker mask(node.dir());

  // The case study: the server is SIGKILLed, its 8 tensor-parallel workers are orphaned.
  auto server = node.hold({"--gpu", "0", "--bytes", "90GiB", "--children", "8", "--comm",
                           "sglang-server"});
  mask.add_pids(pids_of(server));
  ASSERT_EQ(::kill(server.leader, SIGKILL), 0);
  ASSERT_TRUE(SimNode::eventually([&] { return !alive(server.leader); }));

  auto status = node.gpureap({"--json", "status"});
  EXPECT_EQ(status.exit_code, 0) << status.err;
  expect_golden("status-orphans.json", mask(status.out));

  auto one_gpu = node.gpureap({"--json", "status", "--gpu", "3"});
  EXPECT_EQ(one_gpu.exit_code, 0) << one_gpu.err;
  expect_golden("status-gpu3.json", mask(one_gpu.out));

  // What blocks a reset of GPU 3: its orphaned worker (docs/mig.md, "What blocks ...").
  auto blockers = node.gpureap({"--json", "status", "--blockers", "--gpu", "3"});
  EXPECT_EQ(blockers.exit_code, 1) << blockers.err;
  expect_golden("status-blockers-gpu3.json", mask(blockers.out));

  auto dry = node.gpureap({"--json", "free", "--gpu", "all", "--dry-run"});
  EXPECT_EQ(dry.exit_code, 0) << dry.err;
  expect_golden("free-dry-run.json", mask(dry.out));

  auto held = node.gpureap({"--json", "wait", "--gpu", "0,1", "--timeout", "0"});
  EXPECT_EQ(held.exit_code, 5) << held.err;
  expect_golden("wait-held.json", mask(held.out));

  auto freed = node.gpureap({"--json", "free", "--gpu", "all", "--yes", "--grace", "2s"});
  EXPECT_EQ(freed.exit_code, 0) << freed.err;
  expect_golden("free-orphans.json", mask(exit_seen_as_exited(freed.out)));

  auto waited = node.gpureap({"--json", "wait", "--gpu", "all", "--timeout", "0"});
  EXPECT_EQ(waited.exit_code, 0) << waited.err;
  expect_golden("wait-free.json", mask(waited.out));

  auto nothing = node.gpureap({"--json", "free", "--gpu", "all", "--yes"});
  EXPECT_EQ(nothing.exit_code, 4) << nothing.err;
  expect_golden("free-nothing-to-do.json", mask(nothing.out));

  // The second box's GPU 3: memory the driver kept after its process died.
  auto stuck = node.hold({"--gpu", "3", "--bytes", "92GiB", "--stuck"});
  mask.add_pids(pids_of(stuck));
  ASSERT_FALSE(stuck.holders.empty());
  ASSERT_EQ(::kill(stuck.holders[0].first, SIGKILL), 0);
  ASSERT_TRUE(SimNode::eventually([&] { return !alive(stuck.holders[0].first); }));

  // Driver-held once flat past the release budget (docs/release.md): 1 s here.
  auto driver_held = node.gpureap(
      {"--json", "--release-budget", "1s", "free", "--gpu", "3", "--yes", "--timeout", "5s"});
  EXPECT_EQ(driver_held.exit_code, 1) << driver_held.err;
  expect_golden("free-driver-held.json", mask(driver_held.out));

  // A one-shot status counts from the free's first sighting, kept in the state directory
  // (issue 50): driver-held, as the free said, with the same budget.
  auto still = node.gpureap({"--json", "--release-budget", "1s", "status", "--gpu", "3"});
  EXPECT_EQ(still.exit_code, 0) << still.err;
  expect_golden("status-driver-held.json", mask(still.out));
}

// Pure computation, no node: pinned whole.
// The golden file's free, as if its last holder had been seen inside its exit: pinned as
// the same document (and one whose exits were all seen is left as it is).
TEST(Golden, AFreeThatSawAnExitFromInsideIsPinnedAsTheExitSeen) {
  const std::string golden = read_file(kGoldenDir + "free-orphans.json");
  ASSERT_FALSE(golden.empty());
  EXPECT_EQ(exit_seen_as_exited(golden), golden) << "not JSON (its pids are masked): as it is";
  // JSON again: the masked pids <pidN> as numbers 777000N, and back after.
  const std::string as_json = std::regex_replace(golden, std::regex("<pid([0-9]+)>"), "777000$1");
  auto back = [](const std::string& text) {
    return std::regex_replace(text, std::regex("\\b777000([0-9]+)\\b"), "<pid$1>");
  };
  ASSERT_EQ(back(exit_seen_as_exited(as_json)), golden) << "every exit seen: left as it is";
  auto doc = nlohmann::ordered_json::parse(as_json);
  auto& last = doc["actions"].back();
  last["exiting_at_seconds"] = 0.25;
  last["exited_at_seconds"] = nullptr;
  last["result"] = "exiting";
  nlohmann::ordered_json exits = nlohmann::ordered_json::object();
  exits["step"] = "exits";
  exits["done_at_seconds"] = 0.3;
  doc["steps"].insert(doc["steps"].end() - 1, exits);
  doc["gpus"].back()["release"]["phases"]["signal_to_exit"] = nullptr;
  doc["gpus"].back()["release"]["phases"]["exit_to_unlisted"] = nullptr;
  const std::string seen_inside = report::json_text(doc);
  ASSERT_NE(seen_inside, golden);
  EXPECT_EQ(back(Masker("/nonexistent")(exit_seen_as_exited(seen_inside))), golden);
}

TEST(Golden, PlanJsonIsUnchanged) {
  SimNode node({"--gpus", "1"});
  auto plan = node.gpureap({"--json", "plan", "--model", "Kimi-K2.5", "--gpu-memory", "97887MiB",
                            "--tp", "8", "--mem-fraction", "0.80:0.95:0.05", "--avg-output",
                            "4100"});
  EXPECT_EQ(plan.exit_code, 0) << plan.err;
  expect_golden("plan-kimi.json", plan.out);

  auto from_log = node.gpureap({"--json", "plan", "--model", "Kimi-K2.5", "--from-log",
                                std::string(GPUREAP_SOURCE_DIR) +
                                    "/tests/fixtures/capacity/sglang_kimi_k25_tp8.log",
                                "--mem-fraction", "0.93"});
  EXPECT_EQ(from_log.exit_code, 0) << from_log.err;
  expect_golden("plan-from-log.json", Masker(node.dir())(from_log.out));  // <source>
}

}  // namespace
}  // namespace gpureap::e2e
