// The DRA device taint's pieces without a server: its configuration from the
// environment, the rule's name, the device found by its uuid attribute, ownership.
// tests/e2e/kube_gate_test.cc (KubeDeviceGate) runs the agent against the stand-in.

#include "agent/device_taint_gate.h"

#include <gtest/gtest.h>

#include <map>

namespace gpureap::agent {
namespace {

using nlohmann::json;

Result<DeviceTaintConfig> config(std::map<std::string, std::string> vars) {
  return device_taint_config_from_environment(
      [&](const char* name) -> const char* {
        auto it = vars.find(name);
        return it == vars.end() ? nullptr : it->second.c_str();
      },
      "gpu-7");
}

TEST(DeviceTaintGate, TheConfigurationDefaultsToNvidiasDriverAndRefusesWhatTheApiWould) {
  auto c = config({});
  ASSERT_TRUE(c);
  EXPECT_EQ(c->api, "resource.k8s.io/v1");
  EXPECT_EQ(c->driver, "gpu.nvidia.com");
  EXPECT_EQ(c->pool, "gpu-7");
  EXPECT_EQ(c->device, "attribute:uuid");
  EXPECT_EQ(c->effect, "NoSchedule");
  EXPECT_TRUE(config({{"GPUREAP_DRA_DEVICE", "gpu-{index}"}, {"GPUREAP_DRA_TAINT_EFFECT", "None"},
                      {"GPUREAP_DRA_API", "resource.k8s.io/v1beta2"}}));
  for (auto [var, value] : std::map<std::string, std::string>{
           {"GPUREAP_DRA_TAINT_EFFECT", "PreferNoSchedule"},
           {"GPUREAP_DRA_API", "resource.k8s.io/v1alpha2"},
           {"GPUREAP_DRA_DRIVER", "GPU_Driver"},
           {"GPUREAP_DRA_DEVICE", "gpu-0"},
           {"GPUREAP_DRA_POOL", "Pool!"}}) {
    auto bad = config({{var, value}});
    ASSERT_FALSE(bad) << var;
    EXPECT_NE(bad.error().message.find(var + " '" + value + "'"), std::string::npos)
        << bad.error().message;
  }
}

TEST(DeviceTaintGate, TheRuleNameIsTheNodeAndTheUuidAsADnsSubdomain) {
  EXPECT_EQ(device_taint_rule_name("gpu-7", "GPU-8F3A1B2C-0000-1111-2222-333344445555"),
            "gpureap-gpu-7-gpu-8f3a1b2c-0000-1111-2222-333344445555");
  const std::string long_node(250, 'n');
  const auto name = device_taint_rule_name(long_node, "GPU-1");
  EXPECT_EQ(name.size(), 253u);
  EXPECT_TRUE(is_dns_subdomain(name));
  EXPECT_TRUE(name.ends_with("-gpu-1"));
}

json slice(const std::string& pool, long generation, const json& devices) {
  return {{"spec", {{"driver", "gpu.nvidia.com"}, {"pool", {{"name", pool}, {"generation", generation}}},
                    {"devices", devices}}}};
}
json device(const std::string& name, const std::string& key, const std::string& uuid) {
  return {{"name", name}, {"attributes", {{key, {{"string", uuid}}}}}};
}

TEST(DeviceTaintGate, TheDeviceIsFoundByItsUuidInThePoolsNewestGeneration) {
  const json slices = {
      {"items",
       {slice("gpu-7", 1, {device("gpu-0", "uuid", "GPU-B")}),  // an older generation
        slice("gpu-7", 2, {device("gpu-0", "uuid", "GPU-A"), device("gpu-1", "gpu.nvidia.com/uuid", "GPU-B")}),
        slice("gpu-8", 5, {device("gpu-3", "uuid", "GPU-C")})}}};
  EXPECT_EQ(device_by_attribute(slices, "gpu.nvidia.com", "gpu-7", "uuid", "GPU-A"), "gpu-0");
  EXPECT_EQ(device_by_attribute(slices, "gpu.nvidia.com", "gpu-7", "uuid", "gpu-b"), "gpu-1");
  EXPECT_EQ(device_by_attribute(slices, "gpu.nvidia.com", "gpu-7", "uuid", "GPU-C"), "")
      << "another node's pool";
  EXPECT_EQ(device_by_attribute(slices, "other.example.com", "gpu-7", "uuid", "GPU-A"), "");
}

TEST(DeviceTaintGate, ARuleIsGpureapsOnlyWithItsLabelNodeUuidAndReason) {
  DeviceTaintConfig c;
  c.pool = "gpu-7";
  const GateTarget::Gpu gpu{gpu::DeviceId{1, std::nullopt, std::nullopt}, "GPU-B", "orphaned"};
  json rule = device_taint_rule(c, "gpu-7", gpu, "gpu-1", "gpureap: GPU 1 orphaned 8.00 GiB");
  EXPECT_EQ(rule["spec"]["deviceSelector"],
            json({{"driver", "gpu.nvidia.com"}, {"pool", "gpu-7"}, {"device", "gpu-1"}}));
  EXPECT_EQ(rule["spec"]["taint"],
            json({{"key", "gpureap.io/gpu-memory-leak"}, {"value", "orphaned"}, {"effect", "NoSchedule"}}));
  EXPECT_TRUE(gpureap_owns_rule(rule, "gpu-7", "GPU-B"));
  EXPECT_FALSE(gpureap_owns_rule(rule, "gpu-8", "GPU-B")) << "another node's";
  EXPECT_FALSE(gpureap_owns_rule(rule, "gpu-7", "GPU-A")) << "another GPU's";
  rule["metadata"]["labels"].erase("app.kubernetes.io/managed-by");
  EXPECT_FALSE(gpureap_owns_rule(rule, "gpu-7", "GPU-B"));
}

}  // namespace
}  // namespace gpureap::agent
