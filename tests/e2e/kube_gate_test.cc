// `gpureap watch --gate kubernetes-condition` and `--gate kubernetes-taint` against a
// stand-in API server (tests/e2e/kube_stand_in.py: Python, the loopback, a port of its
// own) that enforces what kube-apiserver does for these calls: the bearer token (401),
// resourceVersion conflicts (409), failed JSON Patch tests (422), the patch content types
// (415). No real cluster runs here (docs/kubernetes.md says so). A witnessed crash
// (SimNode::crash_watched) closes the node, `free --orphans` opens it; a foreign taint is
// never removed; conflicts are retried; a rotated token is said and then re-read; https
// with the CA as a pod has it.

#include <gtest/gtest.h>
#include <unistd.h>

#include <cctype>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "bench_record.h"
#include "harness.h"
#include "watch_child.h"

namespace gpureap::e2e {
namespace kube_gate_test {

using namespace std::chrono_literals;
using nlohmann::json;

constexpr const char* kNodeName = "gpu-node-1";
constexpr const char* kTaintKey = "gpureap.io/gpu-memory-leak";
constexpr const char* kOwner = "gpureap.io/taint-owner";

void write_file(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

// The stand-in, started with `node` as its node object; stopped by WatchChild (pidfd).
class StandIn {
 public:
  StandIn(std::string dir, const json& node, bool tls = false) : dir_(std::move(dir)) {
    std::filesystem::create_directories(dir_);
    write_file(dir_ + "/node.json", node.dump());
    accept_token("token-1");
    write_file(agent_token(), "token-1\n");
    std::vector<std::string> argv = {"/usr/bin/python3", GPUREAP_SOURCE_DIR "/tests/e2e/kube_stand_in.py",
                                     "--dir", dir_, "--node", kNodeName, "--token-file",
                                     dir_ + "/accepted-token"};
    if (tls) {
      auto r = run_command({"/usr/bin/openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                            "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2", "-subj",
                            "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1", "-keyout",
                            dir_ + "/server.key", "-out", ca()},
                           {{"PATH", "/usr/bin:/bin"}}, 30s);
      EXPECT_EQ(r.exit_code, 0) << r.err;
      argv.insert(argv.end(), {"--tls", ca(), dir_ + "/server.key"});
    }
    child_.emplace(argv, std::map<std::string, std::string>{});
    auto ready = child_->wait_for_json([](const json& j) { return j.value("event", "") == "ready"; }, 30s);
    EXPECT_TRUE(ready) << child_->transcript();
    if (ready) url_ = std::string(tls ? "https" : "http") + "://127.0.0.1:" +
                      std::to_string((*ready)["port"].get<int>());
  }
  const std::string& url() const { return url_; }
  std::string ca() const { return dir_ + "/server.crt"; }
  std::string agent_token() const { return dir_ + "/agent-token"; }
  void accept_token(const std::string& token) const { write_file(dir_ + "/accepted-token", token); }
  void inject(const json& what) const { write_file(dir_ + "/inject.json", what.dump()); }
  json node() const {
    std::ifstream in(dir_ + "/node.json");
    return json::parse(in, nullptr, false);
  }
  std::vector<json> requests() const {
    std::vector<json> out;
    std::ifstream in(dir_ + "/requests.jsonl");
    for (std::string line; std::getline(in, line);) out.push_back(json::parse(line));
    return out;
  }
  // The agent's environment for this stand-in, on `sim`.
  std::map<std::string, std::string> agent_env(const SimNode& sim) const {
    auto env = sim.env();
    env["NODE_NAME"] = kNodeName;
    env["GPUREAP_KUBE_API"] = url_;
    env["GPUREAP_KUBE_TOKEN_FILE"] = agent_token();
    if (url_.starts_with("https")) env["GPUREAP_KUBE_CA_FILE"] = ca();
    return env;
  }

 private:
  std::string dir_;
  std::string url_;
  std::optional<WatchChild> child_;
};

json condition(const json& node) {
  for (const auto& c : node["status"].value("conditions", json::array()))
    if (c.value("type", "") == "GpuMemoryLeak") return c;
  return json::object();
}

std::vector<std::string> taint_keys(const json& node) {
  std::vector<std::string> keys;
  for (const auto& t : node["spec"].value("taints", json::array())) keys.push_back(t["key"]);
  return keys;
}

class KubeGate : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::access("/usr/bin/python3", X_OK) != 0) GTEST_SKIP() << "python3 is needed";
  }
  WatchChild agent(const StandIn& api, const std::string& mode,
                   std::vector<std::string> extra = {}) {
    std::vector<std::string> argv = {GPUREAP_BIN, "--json", "watch", "--no-listen", "--tick",
                                     "200ms", "--gate", mode};
    argv.insert(argv.end(), extra.begin(), extra.end());
    WatchChild a(argv, api.agent_env(sim_));
    EXPECT_TRUE(a.wait_for_json([](const json& j) { return j.value("event", "") == "started"; }, 30s))
        << a.transcript();
    return a;
  }
  static std::optional<json> gate_step(WatchChild& a, const std::string& step) {
    return a.wait_for_json(
        [&](const json& j) { return j.value("event", "") == "gate" && j.value("step", "") == step; },
        30s);
  }
  // A server holding GPU 0 with a worker crashes; the agent saw both.
  void crash() { sim_.crash_watched({"--gpu", "0", "--children", "1", "--bytes", "8GiB"}); }
  void free_orphans() {
    auto freed = sim_.gpureap({"free", "--orphans", "--gpu", "all", "--yes"});
    EXPECT_EQ(freed.exit_code, 0) << freed.out << freed.err;
  }
  std::string dir() const { return sim_.dir() + "/kube"; }

  SimNode sim_;
};

const json kNode = {{"metadata", {{"name", kNodeName}, {"resourceVersion", "100"},
                                  {"annotations", {{"example.com/rack", "r7"}}}}},
                    {"spec", {{"taints", {{{"key", "example.com/maintenance"}, {"effect", "NoSchedule"}}}}}},
                    {"status", {{"conditions", {{{"type", "Ready"}, {"status", "True"}}}}}}};

TEST_F(KubeGate, AWitnessedCrashSetsTheConditionAndFreeingClearsIt) {
  StandIn api(dir(), kNode);
  auto a = agent(api, "kubernetes-condition");
  // The first verified look writes the condition False (a readiness rule waits for it).
  ASSERT_TRUE(SimNode::eventually([&] { return condition(api.node()).value("status", "") == "False"; }, 30s))
      << api.node().dump() << a.transcript();
  crash();
  auto closed = gate_step(a, "closed");
  ASSERT_TRUE(closed) << a.transcript();
  EXPECT_EQ((*closed)["target"], std::string("node ") + kNodeName);
  auto c = condition(api.node());
  EXPECT_EQ(c["status"], "True");
  EXPECT_TRUE(c.value("message", "").starts_with("gpureap: GPU 0 orphaned 8.00 GiB pid ")) << c;
  EXPECT_EQ(api.node()["status"]["conditions"][0]["type"], "Ready") << "the other conditions stay";
  RecordProperty("gate_seconds", std::to_string((*closed)["seconds"].get<double>()));

  free_orphans();
  ASSERT_TRUE(gate_step(a, "opened")) << a.transcript();
  EXPECT_EQ(condition(api.node())["status"], "False");
  for (const auto& r : api.requests()) {
    if (r["method"] != "PATCH") continue;
    EXPECT_EQ(r["path"], std::string("/api/v1/nodes/") + kNodeName + "/status");
    EXPECT_EQ(r["content_type"], "application/strategic-merge-patch+json");
    EXPECT_EQ(r["status"], 200) << r;
  }
  EXPECT_EQ(a.terminate(), 0) << a.transcript();
}

TEST_F(KubeGate, TheTaintIsAddedBesideAForeignOneThroughConflictsAndOnlyItsOwnRemoved) {
  StandIn api(dir(), kNode);
  auto a = agent(api, "kubernetes-taint");
  // Another writer wins twice: a 409, then a node changed between the GET and the PATCH.
  api.inject({{"conflict", 1}, {"race", 1}});
  crash();
  auto closed = gate_step(a, "closed");
  ASSERT_TRUE(closed) << a.transcript();
  EXPECT_NE((*closed)["detail"].get<std::string>().find("(retried after 409, 422)"), std::string::npos)
      << *closed;
  json node = api.node();
  EXPECT_EQ(taint_keys(node), (std::vector<std::string>{"example.com/maintenance", kTaintKey}));
  EXPECT_TRUE(node["metadata"]["annotations"].value(kOwner, "").starts_with("gpureap: GPU 0 orphaned 8.00 GiB"))
      << node;
  std::vector<long> patches;
  for (const auto& r : api.requests())
    if (r["method"] == "PATCH") patches.push_back(r["status"]);
  EXPECT_EQ(patches, (std::vector<long>{409, 422, 200}));

  free_orphans();
  ASSERT_TRUE(gate_step(a, "opened")) << a.transcript();
  node = api.node();
  EXPECT_EQ(taint_keys(node), std::vector<std::string>{"example.com/maintenance"});
  EXPECT_FALSE(node["metadata"]["annotations"].contains(kOwner)) << node;
  EXPECT_EQ(node["metadata"]["annotations"]["example.com/rack"], "r7");
  EXPECT_EQ(a.terminate(), 0) << a.transcript();
}

TEST_F(KubeGate, ATaintOfItsKeyThatGpureapDidNotAddIsNeverRemoved) {
  json node = kNode;
  node["spec"]["taints"].push_back({{"key", kTaintKey}, {"effect", "NoSchedule"}});
  StandIn api(dir(), node);
  auto a = agent(api, "kubernetes-taint");
  // The first look, clean, would open: the taint is not gpureap's to lift.
  ASSERT_TRUE(gate_step(a, "left_alone")) << a.transcript();
  crash();
  ASSERT_TRUE(gate_step(a, "left_alone")) << a.transcript();
  free_orphans();
  ASSERT_TRUE(gate_step(a, "left_alone")) << a.transcript();
  EXPECT_EQ(taint_keys(api.node()), (std::vector<std::string>{"example.com/maintenance", kTaintKey}));
  for (const auto& r : api.requests()) EXPECT_EQ(r["method"], "GET") << r;
  EXPECT_EQ(a.terminate(), 0) << a.transcript();
}

TEST_F(KubeGate, ARotatedTokenIsSaidAndTheNewOneReadFromItsFile) {
  StandIn api(dir(), kNode);
  auto a = agent(api, "kubernetes-condition");
  ASSERT_TRUE(SimNode::eventually([&] { return !condition(api.node()).empty(); }, 30s)) << a.transcript();
  api.accept_token("token-2");  // the API server takes the new token; the agent's file is old
  crash();
  auto failed = gate_step(a, "failed");
  ASSERT_TRUE(failed) << a.transcript();
  EXPECT_NE((*failed)["detail"].get<std::string>().find("401 Unauthorized"), std::string::npos) << *failed;
  EXPECT_NE(condition(api.node())["status"], "True");
  write_file(api.agent_token(), "token-2\n");  // the kubelet's rotation reaches the pod
  ASSERT_TRUE(gate_step(a, "closed")) << a.transcript();
  EXPECT_EQ(condition(api.node())["status"], "True");
  EXPECT_EQ(a.terminate(), 0) << a.transcript();
}

TEST_F(KubeGate, OverHttpsTheServerIsVerifiedWithTheCaFile) {
  StandIn api(dir(), kNode, /*tls=*/true);
  auto a = agent(api, "kubernetes-taint");
  crash();
  ASSERT_TRUE(gate_step(a, "closed")) << a.transcript();
  EXPECT_EQ(taint_keys(api.node()), (std::vector<std::string>{"example.com/maintenance", kTaintKey}));
  EXPECT_EQ(a.terminate(), 0) << a.transcript();
  // A CA that did not sign the server's certificate: refused, said, nothing patched.
  auto env = api.agent_env(sim_);
  env["GPUREAP_KUBE_CA_FILE"] = "/etc/ssl/certs/ca-certificates.crt";
  free_orphans();
  WatchChild b({GPUREAP_BIN, "--json", "watch", "--no-listen", "--tick", "200ms", "--gate",
                "kubernetes-taint"},
               env);
  auto failed = gate_step(b, "failed");
  ASSERT_TRUE(failed) << b.transcript();
  EXPECT_NE((*failed)["detail"].get<std::string>().find("SSL"), std::string::npos) << *failed;
  EXPECT_EQ(taint_keys(api.node()), (std::vector<std::string>{"example.com/maintenance", kTaintKey}));
  EXPECT_EQ(b.terminate(), 0) << b.transcript();
}

TEST_F(KubeGate, WithoutNodeNameTheGateIsRefusedAtStart) {
  auto env = sim_.env();
  auto r = run_command({GPUREAP_BIN, "watch", "--no-listen", "--gate", "kubernetes-taint"}, env, 30s);
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("NODE_NAME is not set"), std::string::npos) << r.err;
}

// --gate kubernetes-device-taint: one DeviceTaintRule per GPU (resource.k8s.io/v1), the
// GPU's device found by its uuid attribute in the node's ResourceSlices.
constexpr const char* kDraApi = "/apis/resource.k8s.io/v1/devicetaintrules";

// The rule's name as the agent makes it (agent/device_taint_gate.h), spelled again here.
std::string rule_name(const std::string& uuid) {
  std::string id;
  for (char c : uuid) id += std::isalnum(static_cast<unsigned char>(c)) ? static_cast<char>(std::tolower(c)) : '-';
  return std::string("gpureap-") + kNodeName + "-" + id;
}

class KubeDeviceGate : public KubeGate {
 protected:
  void SetUp() override {
    KubeGate::SetUp();
    if (IsSkipped()) return;
    auto status = sim_.gpureap({"--json", "status"});
    ASSERT_EQ(status.exit_code, 0) << status.out << status.err;
    const json doc = status.json();
    for (const auto& g : doc["gpus"]) uuids_.push_back(g["uuid"]);
    ASSERT_GE(uuids_.size(), 2u);
    std::filesystem::create_directories(dir());
    // NVIDIA's DRA driver's shape: the pool named after the node, gpu-N with a uuid
    // attribute; an older generation of the pool names GPU 1 otherwise (ignored).
    json devices = json::array();
    for (std::size_t i = 0; i < uuids_.size(); ++i)
      devices.push_back({{"name", "gpu-" + std::to_string(i)},
                         {"attributes", {{"uuid", {{"string", uuids_[i]}}}, {"index", {{"int", i}}}}}});
    json slice = {{"metadata", {{"name", std::string(kNodeName) + "-gpu.nvidia.com-x"}}},
                  {"spec", {{"driver", "gpu.nvidia.com"}, {"nodeName", kNodeName},
                            {"pool", {{"name", kNodeName}, {"generation", 2}, {"resourceSliceCount", 1}}},
                            {"devices", devices}}}};
    json stale = slice;
    stale["spec"]["pool"]["generation"] = 1;
    json old_device = {{"name", "gpu-9"}, {"attributes", {{"uuid", {{"string", uuids_[1]}}}}}};
    stale["spec"]["devices"] = json::array({old_device});
    write_file(dir() + "/resourceslices.json", json::array({stale, slice}).dump());
  }
  json rules() const {
    std::ifstream in(dir() + "/devicetaintrules.json");
    json j = json::parse(in, nullptr, false);
    return j.is_discarded() ? json::object() : j;
  }
  void seed_rules(const json& rules) const { write_file(dir() + "/devicetaintrules.json", rules.dump()); }
  std::vector<std::string> uuids_;
};

// A person's rule on GPU 0, under a name of its own.
const json kMaintenanceRule = {
    {"apiVersion", "resource.k8s.io/v1"}, {"kind", "DeviceTaintRule"},
    {"metadata", {{"name", "maintenance-gpu-0"}, {"uid", "uid-admin"}, {"resourceVersion", "7"}}},
    {"spec", {{"deviceSelector", {{"driver", "gpu.nvidia.com"}, {"pool", kNodeName}, {"device", "gpu-0"}}},
              {"taint", {{"key", "example.com/maintenance"}, {"effect", "NoSchedule"}}}}}};

TEST_F(KubeDeviceGate, AWitnessedOrphanOnGpu1TaintsThatGpuAloneAndAVerifiedFreeDeletesItsRule) {
  seed_rules({{"maintenance-gpu-0", kMaintenanceRule}});
  StandIn api(dir(), kNode);
  auto a = agent(api, "kubernetes-device-taint");
  sim_.crash_watched({"--gpu", "1", "--children", "1", "--bytes", "8GiB"});
  auto closed = gate_step(a, "closed");
  ASSERT_TRUE(closed) << a.transcript();
  EXPECT_EQ((*closed)["mode"], "kubernetes-device-taint");
  EXPECT_EQ((*closed)["target"], "GPU 1 (DeviceTaintRule " + rule_name(uuids_[1]) + ")");
  json r = rules();
  ASSERT_TRUE(r.contains(rule_name(uuids_[1]))) << r.dump();
  EXPECT_FALSE(r.contains(rule_name(uuids_[0]))) << "GPU 0 has no leak: " << r.dump();
  EXPECT_EQ(r.size(), 2u) << r.dump();
  const json& rule = r[rule_name(uuids_[1])];
  EXPECT_EQ(rule["spec"]["deviceSelector"],
            json({{"driver", "gpu.nvidia.com"}, {"pool", kNodeName}, {"device", "gpu-1"}}));
  EXPECT_EQ(rule["spec"]["taint"]["key"], kTaintKey);
  EXPECT_EQ(rule["spec"]["taint"]["value"], "orphaned");
  EXPECT_EQ(rule["spec"]["taint"]["effect"], "NoSchedule");
  EXPECT_EQ(rule["metadata"]["labels"]["app.kubernetes.io/managed-by"], "gpureap");
  EXPECT_EQ(rule["metadata"]["annotations"]["gpureap.io/gpu-uuid"], uuids_[1]);
  EXPECT_TRUE(rule["metadata"]["annotations"].value(kOwner, "").starts_with("gpureap: GPU 1 orphaned 8.00 GiB"))
      << rule;

  free_orphans();
  auto opened = gate_step(a, "opened");
  ASSERT_TRUE(opened) << a.transcript();
  EXPECT_EQ((*opened)["target"], "GPU 1 (DeviceTaintRule " + rule_name(uuids_[1]) + ")");
  r = rules();
  EXPECT_FALSE(r.contains(rule_name(uuids_[1]))) << r.dump();
  EXPECT_TRUE(r.contains("maintenance-gpu-0")) << "a person's rule stays: " << r.dump();
  std::vector<std::string> writes;
  for (const auto& q : api.requests())
    if (q["method"] != "GET") writes.push_back(q["method"].get<std::string>() + " " + q["path"].get<std::string>() + " " + std::to_string(q["status"].get<int>()));
  EXPECT_EQ(writes, (std::vector<std::string>{std::string("POST ") + kDraApi + " 201",
                                              std::string("DELETE ") + kDraApi + "/" + rule_name(uuids_[1]) + " 200"}));
  EXPECT_EQ(a.terminate(), 0) << a.transcript();
}

TEST_F(KubeDeviceGate, ARuleOfItsNameThatGpureapDidNotMakeIsNeverDeleted) {
  json foreign = kMaintenanceRule;
  foreign["metadata"]["name"] = rule_name(uuids_[0]);
  seed_rules({{rule_name(uuids_[0]), foreign}});
  StandIn api(dir(), kNode);
  auto a = agent(api, "kubernetes-device-taint");
  // The first look, clean, would open GPU 0: the rule is not gpureap's to delete.
  ASSERT_TRUE(gate_step(a, "left_alone")) << a.transcript();
  sim_.crash_watched({"--gpu", "0", "--children", "1", "--bytes", "8GiB"});
  ASSERT_TRUE(gate_step(a, "left_alone")) << a.transcript();
  free_orphans();
  ASSERT_TRUE(gate_step(a, "left_alone")) << a.transcript();
  EXPECT_EQ(rules()[rule_name(uuids_[0])], foreign);
  for (const auto& q : api.requests()) EXPECT_EQ(q["method"], "GET") << q;
  EXPECT_EQ(a.terminate(), 0) << a.transcript();
}

TEST_F(KubeDeviceGate, ALostTokenIsSaidAndTheRuleMadeOnceTheRotatedOneIsRead) {
  StandIn api(dir(), kNode);
  auto a = agent(api, "kubernetes-device-taint");
  api.accept_token("token-2");
  sim_.crash_watched({"--gpu", "1", "--children", "1", "--bytes", "8GiB"});
  auto failed = gate_step(a, "failed");
  ASSERT_TRUE(failed) << a.transcript();
  EXPECT_NE((*failed)["detail"].get<std::string>().find("401 Unauthorized"), std::string::npos) << *failed;
  EXPECT_TRUE(rules().empty()) << rules().dump();
  write_file(api.agent_token(), "token-2\n");
  ASSERT_TRUE(gate_step(a, "closed")) << a.transcript();
  EXPECT_TRUE(rules().contains(rule_name(uuids_[1]))) << rules().dump();
  EXPECT_EQ(a.terminate(), 0) << a.transcript();
}

TEST_F(KubeDeviceGate, ADryRunSaysTheRuleItWouldMakeAndMakesNone) {
  StandIn api(dir(), kNode);
  auto a = agent(api, "kubernetes-device-taint", {"--gate-dry-run"});
  sim_.crash_watched({"--gpu", "1", "--children", "1", "--bytes", "8GiB"});
  auto would = gate_step(a, "would_close");
  ASSERT_TRUE(would) << a.transcript();
  EXPECT_NE((*would)["detail"].get<std::string>().find("on device gpu.nvidia.com/" + std::string(kNodeName) + "/gpu-1"),
            std::string::npos) << *would;
  EXPECT_TRUE(rules().empty()) << rules().dump();
  for (const auto& q : api.requests()) EXPECT_EQ(q["method"], "GET") << q;
  EXPECT_EQ(a.terminate(), 0) << a.transcript();
}

TEST_F(KubeDeviceGate, AnUnknownEffectIsRefusedAtStart) {
  auto env = sim_.env();
  env["NODE_NAME"] = kNodeName;
  env["GPUREAP_KUBE_API"] = "http://127.0.0.1:9";
  env["GPUREAP_DRA_TAINT_EFFECT"] = "PreferNoSchedule";
  auto r = run_command({GPUREAP_BIN, "watch", "--no-listen", "--gate", "kubernetes-device-taint"}, env, 30s);
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("GPUREAP_DRA_TAINT_EFFECT 'PreferNoSchedule'"), std::string::npos) << r.err;
}

// The stand-in itself refuses what kube-apiserver refuses (so the tests above could fail).
TEST_F(KubeDeviceGate, TheStandInAnswersDeviceTaintRulesAsTheApiServerDoes) {
  if (::access("/usr/bin/curl", X_OK) != 0) GTEST_SKIP() << "curl is needed";
  StandIn api(dir(), kNode);
  auto send = [&](const std::string& method, const std::string& path, const json& body, bool token = true) {
    std::vector<std::string> argv = {"/usr/bin/curl", "-s", "-o", "/dev/null", "-w", "%{http_code}",
                                     "-X", method, "-H", "Content-Type: application/json"};
    if (token) argv.insert(argv.end(), {"-H", "Authorization: Bearer token-1"});
    if (!body.is_null()) argv.insert(argv.end(), {"--data", body.dump()});
    argv.push_back(api.url() + path);
    return run_command(argv, {{"PATH", "/usr/bin:/bin"}}, 30s).out;
  };
  json rule = kMaintenanceRule;
  rule["metadata"] = {{"name", "ok-rule"}};
  EXPECT_EQ(send("POST", kDraApi, rule, false), "401");
  json bad = rule;
  bad["spec"]["taint"]["effect"] = "PreferNoSchedule";
  EXPECT_EQ(send("POST", kDraApi, bad), "422");
  bad = rule;
  bad["metadata"]["name"] = "Not_A_Name";
  EXPECT_EQ(send("POST", kDraApi, bad), "422");
  EXPECT_EQ(send("POST", kDraApi, rule), "201");
  EXPECT_EQ(send("POST", kDraApi, rule), "409");
  EXPECT_EQ(send("DELETE", std::string(kDraApi) + "/ok-rule",
                 {{"preconditions", {{"uid", "someone-else"}}}}), "409");
  EXPECT_EQ(send("DELETE", std::string(kDraApi) + "/ok-rule", nullptr), "200");
  EXPECT_EQ(send("DELETE", std::string(kDraApi) + "/ok-rule", nullptr), "404");
  EXPECT_EQ(send("GET", std::string(kDraApi) + "/ok-rule", nullptr), "404");
}

// Not a test: the gate's latency bench (bench/gate_latency.sh, docs/benchmarks.md), left
// out of ctest. N witnessed crashes against the stand-in with `watch --gate MODE`
// ($GPUREAP_BENCH_GATE, default kubernetes-condition) and its default tick: from just
// before the SIGKILL until the stand-in had received the whole PATCH, its body included
// (its own clock, the same machine's). `free --orphans` opens the node between rounds. It records; it asserts
// only that each round happened.
class GateBenchKube : public KubeGate {};

TEST_F(GateBenchKube, CrashToPatchReceived) {
  const char* gate = std::getenv("GPUREAP_BENCH_GATE");
  const std::string mode = gate ? gate : "kubernetes-condition";
  StandIn api(dir(), kNode);
  WatchChild a({GPUREAP_BIN, "--json", "watch", "--no-listen", "--gate", mode},
               api.agent_env(sim_));
  ASSERT_TRUE(a.wait_for_json([](const json& j) { return j.value("event", "") == "started"; }, 30s))
      << a.transcript();
  // The first PATCH the stand-in received after `since`.
  auto patch_after = [&](double since) -> std::optional<double> {
    for (const auto& r : api.requests())
      if (r["method"] == "PATCH" && r["received"].get<double>() >= since)
        return r["complete"].get<double>();
    return std::nullopt;
  };
  std::vector<double> crash_to_patch, verdict_to_patched, crash_to_announced;
  const int n = bench_crashes();
  for (int i = 0; i < n; ++i) {
    HoldResult held = sim_.crash_watched({"--gpu", "0", "--children", "1", "--bytes", "8GiB"});
    auto closed = gate_step(a, "closed");
    ASSERT_TRUE(closed) << "round " << i << "\n" << a.transcript();
    verdict_to_patched.push_back((*closed)["seconds"].get<double>());
    if (auto said = announced_after(a, held.killed_at))
      crash_to_announced.push_back(*said - held.killed_at);
    auto patched = patch_after(held.killed_at);
    ASSERT_TRUE(patched) << "round " << i << ": the gate closed with no PATCH received";
    crash_to_patch.push_back(*patched - held.killed_at);
    free_orphans();
    ASSERT_TRUE(gate_step(a, "opened")) << a.transcript();
  }
  EXPECT_EQ(a.terminate(), 0) << a.transcript();
  write_bench_result({{"bench", "gate_kubernetes"},
                      {"what", "SIGKILL of a watched GPU server's launcher -> PATCH received by "
                               "the stand-in API server (tests/e2e/kube_stand_in.py)"},
                      {"gate", mode},
                      {"tick", "1s (the default)"},
                      {"crashes", n},
                      {"unit", "seconds"},
                      {"crash_to_patch_received", latency_summary(crash_to_patch)},
                      {"verdict_to_patched", latency_summary(verdict_to_patched)},
                      {"crash_to_orphan_announced", latency_summary(crash_to_announced)}});
}

}  // namespace kube_gate_test
}  // namespace gpureap::e2e
