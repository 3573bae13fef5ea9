// The Kubernetes gate's requests, built and read on a fake transport: the endpoint from
// the environment, the token re-read on a 401, the patches of both modes, the retry of
// a conflict, a foreign taint left alone. tests/e2e/kube_gate_test.cc runs the agent
// against a stand-in API server.

#include "agent/kube_gate.h"

#include <gtest/gtest.h>

#include <deque>
#include <fstream>
#include <map>

#include "util/test_temp_dir.h"

namespace gpureap::agent {
namespace {

using nlohmann::json;
using report::GateStep;

// Answers from a script, in order; records every request.
struct Exchange {
  std::vector<HttpCall> calls;
  std::deque<HttpReply> replies;
  std::function<void()> on_send;  // before each answer (a test rotates the token)
};
class FakeTransport final : public HttpTransport {
 public:
  explicit FakeTransport(Exchange& x) : x_(x) {}
  Result<HttpReply> send(const HttpCall& call) override {
    x_.calls.push_back(call);
    if (x_.on_send) x_.on_send();
    if (x_.replies.empty()) return fail("no answer");
    HttpReply r = x_.replies.front();
    x_.replies.pop_front();
    return r;
  }

 private:
  Exchange& x_;
};

HttpReply reply(long status, const json& body) { return {status, body.dump()}; }

std::string header(const HttpCall& c, const std::string& name) {
  for (const auto& h : c.headers)
    if (h.starts_with(name + ": ")) return h.substr(name.size() + 2);
  return "";
}

class KubeGateTest : public ::testing::Test {
 protected:
  KubeApi api() {
    std::ofstream(token_) << "token-1\n";
    return KubeApi({"https://10.96.0.1:443", token_, "/ca.crt", "gpu-7"},
                   std::make_unique<FakeTransport>(x_));
  }
  TestTempDir dir_;
  std::string token_ = dir_.dir() + "/token";
  Exchange x_;
};

TEST(KubeEndpoint, ComesFromThePodsEnvironmentAndRefusesWhatWouldLeakTheToken) {
  std::map<std::string, std::string> vars{{"NODE_NAME", "gpu-7.example"},
                                          {"KUBERNETES_SERVICE_HOST", "10.96.0.1"},
                                          {"KUBERNETES_SERVICE_PORT", "443"}};
  auto env = [&](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
  auto e = kube_endpoint_from_environment(env);
  ASSERT_TRUE(e) << e.error().message;
  EXPECT_EQ(e->server, "https://10.96.0.1:443");
  EXPECT_EQ(e->token_file, "/var/run/secrets/kubernetes.io/serviceaccount/token");
  EXPECT_EQ(e->ca_file, "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt");
  EXPECT_EQ(e->node, "gpu-7.example");
  vars["KUBERNETES_SERVICE_HOST"] = "fd00::1";
  EXPECT_EQ(kube_endpoint_from_environment(env)->server, "https://[fd00::1]:443");
  vars["GPUREAP_KUBE_API"] = "http://127.0.0.1:8080/";
  EXPECT_EQ(kube_endpoint_from_environment(env)->server, "http://127.0.0.1:8080");
  EXPECT_EQ(kube_endpoint_from_environment(env)->ca_file, "");
  vars["GPUREAP_KUBE_API"] = "http://10.0.0.5:8080";
  EXPECT_NE(kube_endpoint_from_environment(env).error().message.find("GPUREAP_KUBE_API"),
            std::string::npos);
  vars["NODE_NAME"] = "gpu-7/../../namespaces";
  EXPECT_NE(kube_endpoint_from_environment(env).error().message.find("NODE_NAME"),
            std::string::npos);
  vars.erase("NODE_NAME");
  EXPECT_NE(kube_endpoint_from_environment(env).error().message.find("NODE_NAME is not set"),
            std::string::npos);
}

TEST_F(KubeGateTest, TheTokenIsReadForEachRequestAndOnceMoreOnA401) {
  KubeApi a = api();
  x_.replies = {reply(401, {{"message", "Unauthorized"}}), reply(200, {{"kind", "Node"}})};
  // The kubelet rotates the token between the read and the request.
  x_.on_send = [&] { std::ofstream(token_) << "token-2"; };
  auto r = a.get_node();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  ASSERT_EQ(x_.calls.size(), 2u);
  EXPECT_EQ(x_.calls[0].method, "GET");
  EXPECT_EQ(x_.calls[0].url, "https://10.96.0.1:443/api/v1/nodes/gpu-7");
  EXPECT_EQ(header(x_.calls[0], "Authorization"), "Bearer token-1");
  EXPECT_EQ(header(x_.calls[1], "Authorization"), "Bearer token-2");
  // Still refused after the second read: said, with the server's words.
  x_.calls.clear();
  x_.replies = {reply(401, {{"message", "Unauthorized"}}), reply(401, {{"message", "Unauthorized"}})};
  r = a.get_node();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->describe(), "401 Unauthorized: Unauthorized");
  EXPECT_EQ(x_.calls.size(), 2u);
  // No token file: an error, no request.
  std::remove(token_.c_str());
  x_.calls.clear();
  EXPECT_FALSE(a.get_node());
  EXPECT_TRUE(x_.calls.empty());
}

const json kNode = {{"metadata", {{"name", "gpu-7"}, {"resourceVersion", "41"}, {"annotations", {{"a", "b"}}}}},
                    {"spec", {{"taints", {{{"key", "example.com/maintenance"}, {"effect", "NoSchedule"}}}}}},
                    {"status", {{"conditions", {{{"type", "Ready"}, {"status", "True"}}}}}}};

TEST(KubePatches, TheTaintIsAddedAndRemovedBesideOthersAfterTestingTheNodeAsRead) {
  const json foreign = {{"key", "example.com/maintenance"}, {"effect", "NoSchedule"}};
  const json ours = {{"key", "gpureap.io/gpu-memory-leak"}, {"effect", "NoSchedule"}};
  EXPECT_EQ(leak_taint(kNode), LeakTaint::absent);
  const json add = add_taint_patch(kNode, "gpureap: GPU 0 orphaned 8.00 GiB pid 42 (gpureap watch)");
  EXPECT_EQ(add, json::parse(R"j([
    {"op":"test","path":"/metadata/resourceVersion","value":"41"},
    {"op":"test","path":"/spec/taints","value":[{"key":"example.com/maintenance","effect":"NoSchedule"}]},
    {"op":"add","path":"/spec/taints","value":[{"key":"example.com/maintenance","effect":"NoSchedule"},
                                                {"key":"gpureap.io/gpu-memory-leak","effect":"NoSchedule"}]},
    {"op":"add","path":"/metadata/annotations/gpureap.io~1taint-owner",
     "value":"gpureap: GPU 0 orphaned 8.00 GiB pid 42 (gpureap watch)"}])j"));
  json tainted = kNode;
  tainted["spec"]["taints"].push_back(ours);
  EXPECT_EQ(leak_taint(tainted), LeakTaint::foreign) << "the key alone is not ownership";
  tainted["metadata"]["annotations"]["gpureap.io/taint-owner"] = "gpureap: GPU 0 ...";
  tainted["metadata"]["resourceVersion"] = "42";
  EXPECT_EQ(leak_taint(tainted), LeakTaint::ours);
  EXPECT_EQ(remove_taint_patch(tainted), json::parse(R"j([
    {"op":"test","path":"/metadata/resourceVersion","value":"42"},
    {"op":"test","path":"/spec/taints","value":[{"key":"example.com/maintenance","effect":"NoSchedule"},
                                                 {"key":"gpureap.io/gpu-memory-leak","effect":"NoSchedule"}]},
    {"op":"replace","path":"/spec/taints","value":[{"key":"example.com/maintenance","effect":"NoSchedule"}]},
    {"op":"remove","path":"/metadata/annotations/gpureap.io~1taint-owner"}])j"));
  // A bare node: the taint list and the annotations are made.
  const json bare = {{"metadata", {{"resourceVersion", "7"}}}, {"spec", json::object()}};
  EXPECT_EQ(add_taint_patch(bare, "gpureap: x"), json::parse(R"j([
    {"op":"test","path":"/metadata/resourceVersion","value":"7"},
    {"op":"add","path":"/spec/taints","value":[{"key":"gpureap.io/gpu-memory-leak","effect":"NoSchedule"}]},
    {"op":"add","path":"/metadata/annotations","value":{"gpureap.io/taint-owner":"gpureap: x"}}])j"));
}

TEST(KubePatches, TheConditionMergesByTypeAndKeepsItsTransitionTimeWhileUnchanged) {
  auto p = leak_condition_patch(true, "gpureap: GPU 1 driver_held 6.00 GiB (gpureap watch)",
                                "2026-12-06T10:00:00Z", nullptr);
  EXPECT_EQ(p, json::parse(R"j({"status":{"conditions":[{"type":"GpuMemoryLeak","status":"True",
    "reason":"GpuMemoryLeakFound","message":"gpureap: GPU 1 driver_held 6.00 GiB (gpureap watch)",
    "lastHeartbeatTime":"2026-12-06T10:00:00Z","lastTransitionTime":"2026-12-06T10:00:00Z"}]}})j"));
  const json previous = {{"type", "GpuMemoryLeak"}, {"status", "False"},
                         {"lastTransitionTime", "2026-12-01T00:00:00Z"}};
  auto same = leak_condition_patch(false, "m", "2026-12-06T10:00:00Z", &previous);
  EXPECT_EQ(same["status"]["conditions"][0]["lastTransitionTime"], "2026-12-01T00:00:00Z");
  auto flipped = leak_condition_patch(true, "m", "2026-12-06T10:00:00Z", &previous);
  EXPECT_EQ(flipped["status"]["conditions"][0]["lastTransitionTime"], "2026-12-06T10:00:00Z");
}

TEST_F(KubeGateTest, TheTaintIsRetriedOnAConflictAndAFailedTestThenSaidAsAFailure) {
  auto gate = make_taint_gate(api(), false);
  json moved = kNode;
  moved["metadata"]["resourceVersion"] = "43";
  x_.replies = {reply(200, kNode), reply(409, {{"message", "the object has been modified"}}),
                reply(200, kNode), reply(422, {{"message", "test failed"}}),
                reply(200, moved), reply(200, moved)};
  auto done = gate->close({"gpureap: GPU 0 orphaned 8.00 GiB pid 42 (gpureap watch)", std::nullopt});
  ASSERT_TRUE(done) << done.error().message;
  EXPECT_EQ(done->step, GateStep::closed);
  EXPECT_EQ(done->target, "node gpu-7");
  EXPECT_EQ(done->detail,
            "taint gpureap.io/gpu-memory-leak:NoSchedule: gpureap: GPU 0 orphaned 8.00 GiB pid 42 "
            "(gpureap watch) (retried after 409, 422)");
  ASSERT_EQ(x_.calls.size(), 6u);
  EXPECT_EQ(x_.calls[5].method, "PATCH");
  EXPECT_EQ(x_.calls[5].url, "https://10.96.0.1:443/api/v1/nodes/gpu-7");
  EXPECT_EQ(header(x_.calls[5], "Content-Type"), "application/json-patch+json");
  EXPECT_EQ(json::parse(x_.calls[5].body)[0]["value"], "43") << "tested against the node re-read";
  // Conflicting every time: a failure after kTaintAttempts rounds, not a loop.
  x_.calls.clear();
  for (int i = 0; i < kTaintAttempts; ++i) {
    x_.replies.push_back(reply(200, kNode));
    x_.replies.push_back(reply(409, {{"message", "modified"}}));
  }
  done = gate->close({"gpureap: x", std::nullopt});
  ASSERT_FALSE(done);
  EXPECT_EQ(done.error().message,
            "PATCH node gpu-7: still conflicting after 5 attempts (409, 409, 409, 409, 409)");
  // Any other refusal is said at once.
  x_.replies = {reply(200, kNode), reply(403, {{"message", "nodes \"gpu-7\" is forbidden"}})};
  done = gate->close({"gpureap: x", std::nullopt});
  ASSERT_FALSE(done);
  EXPECT_EQ(done.error().message, "PATCH node gpu-7: 403 Forbidden: nodes \"gpu-7\" is forbidden");
}

TEST_F(KubeGateTest, AForeignTaintOfTheSameKeyIsNeverRemovedNorClaimed) {
  auto gate = make_taint_gate(api(), false);
  json foreign = kNode;
  foreign["spec"]["taints"].push_back({{"key", "gpureap.io/gpu-memory-leak"}, {"effect", "NoSchedule"}});
  x_.replies = {reply(200, foreign), reply(200, foreign)};
  auto closed = gate->close({"gpureap: x", std::nullopt});
  ASSERT_TRUE(closed);
  EXPECT_EQ(closed->step, GateStep::left_alone);
  auto opened = gate->open({});
  ASSERT_TRUE(opened);
  EXPECT_EQ(opened->step, GateStep::left_alone);
  for (const auto& c : x_.calls) EXPECT_EQ(c.method, "GET");
}

TEST_F(KubeGateTest, TheConditionIsPatchedOnTheStatusAndADryRunOnlyReads) {
  auto gate = make_condition_gate(api(), false);
  x_.replies = {reply(200, kNode), reply(200, kNode)};
  auto done = gate->close({"gpureap: GPU 0 orphaned 8.00 GiB pid 42 (gpureap watch)", std::nullopt});
  ASSERT_TRUE(done) << done.error().message;
  EXPECT_EQ(done->step, GateStep::closed);
  ASSERT_EQ(x_.calls.size(), 2u);
  EXPECT_EQ(x_.calls[1].method, "PATCH");
  EXPECT_EQ(x_.calls[1].url, "https://10.96.0.1:443/api/v1/nodes/gpu-7/status");
  EXPECT_EQ(header(x_.calls[1], "Content-Type"), "application/strategic-merge-patch+json");
  const auto c = json::parse(x_.calls[1].body)["status"]["conditions"][0];
  EXPECT_EQ(c["status"], "True");
  EXPECT_EQ(c["message"], "gpureap: GPU 0 orphaned 8.00 GiB pid 42 (gpureap watch)");

  auto dry = make_condition_gate(api(), true);
  x_.calls.clear();
  x_.replies = {reply(200, kNode)};
  done = dry->close({"gpureap: x", std::nullopt});
  ASSERT_TRUE(done);
  EXPECT_EQ(done->step, GateStep::would_close);
  ASSERT_EQ(x_.calls.size(), 1u);
  EXPECT_EQ(x_.calls[0].method, "GET");
}

}  // namespace
}  // namespace gpureap::agent
