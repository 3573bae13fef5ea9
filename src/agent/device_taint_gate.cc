#include "agent/device_taint_gate.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>

#include "agent/kube_gate.h"
#include "gpu/device_id.h"
#include "util/text.h"

namespace gpureap::agent {
namespace {

using nlohmann::json;
using report::GateStep;

constexpr std::string_view kDeviceTemplate = "{index}";
constexpr std::string_view kAttributePrefix = "attribute:";

std::string text_at(const json& j, std::initializer_list<const char*> path) {
  const json* cur = &j;
  for (const char* key : path) {
    if (!cur->is_object() || !cur->contains(key)) return "";
    cur = &(*cur)[key];
  }
  return cur->is_string() ? cur->get<std::string>() : "";
}

// A device name as DRA takes it (a DNS label), from the template with the GPU's index.
std::string device_from_template(const std::string& pattern, unsigned index) {
  std::string out = pattern;
  if (auto at = out.find(kDeviceTemplate); at != std::string::npos)
    out.replace(at, kDeviceTemplate.size(), std::to_string(index));
  return out;
}

class DeviceTaintGate final : public NodeAction {
 public:
  DeviceTaintGate(KubeApi api, DeviceTaintConfig config, bool dry_run)
      : api_(std::move(api)), config_(std::move(config)), dry_run_(dry_run) {}
  std::string_view mode() const override { return "kubernetes-device-taint"; }
  bool per_gpu() const override { return true; }

  Result<GateOutcome> close(const GateTarget& target) override {
    auto found = rule_of(target);
    if (!found) return std::unexpected(found.error());
    const auto& gpu = *target.gpu;
    const std::string name = device_taint_rule_name(api_.node(), gpu.uuid);
    if (!found->is_null()) return existing(gpu, name, *found);
    auto device = device_of(gpu);
    if (!device) return std::unexpected(device.error());
    const std::string detail =
        fmt::format("taint {}={}:{} on device {}/{}/{}: {}", kLeakTaintKey, gpu.what,
                    config_.effect, config_.driver, config_.pool, *device, target.reason);
    if (dry_run_) return outcome(GateStep::would_close, gpu, name, detail);
    auto made = api_.call("POST", collection(),
                          device_taint_rule(config_, api_.node(), gpu, *device, target.reason));
    if (!made) return std::unexpected(made.error());
    if (made->ok()) return outcome(GateStep::closed, gpu, name, detail);
    if (made->status != 409) return fail("POST " + collection() + ": " + made->describe());
    // Made between the GET and the POST (another agent's restart, or a person): whose?
    found = read_rule(name);
    if (!found) return std::unexpected(found.error());
    if (found->is_null()) return fail("POST " + collection() + ": " + made->describe());
    return existing(gpu, name, *found);
  }

  Result<GateOutcome> open(const GateTarget& target) override {
    auto found = rule_of(target);
    if (!found) return std::unexpected(found.error());
    const auto& gpu = *target.gpu;
    const std::string name = device_taint_rule_name(api_.node(), gpu.uuid);
    if (found->is_null()) return GateOutcome{GateStep::opened, "", "", true};
    if (!gpureap_owns_rule(*found, api_.node(), gpu.uuid))
      return outcome(GateStep::left_alone, gpu, name, "a DeviceTaintRule of its name made by someone else");
    const std::string detail = "deleting its DeviceTaintRule: " + owner_of(*found);
    if (dry_run_) return outcome(GateStep::would_open, gpu, name, detail);
    // Preconditions: only the rule read goes, not one made again in between.
    const json options = {{"apiVersion", "v1"},
                          {"kind", "DeleteOptions"},
                          {"preconditions",
                           {{"uid", text_at(*found, {"metadata", "uid"})},
                            {"resourceVersion", text_at(*found, {"metadata", "resourceVersion"})}}}};
    auto gone = api_.call("DELETE", collection() + "/" + name, options);
    if (!gone) return std::unexpected(gone.error());
    if (gone->status == 404) return GateOutcome{GateStep::opened, "", "", true};
    if (!gone->ok()) return fail("DELETE " + collection() + "/" + name + ": " + gone->describe());
    return outcome(GateStep::opened, gpu, name, detail);
  }

 private:
  std::string collection() const { return "/apis/" + config_.api + "/devicetaintrules"; }

  // The target GPU's rule, or null when there is none.
  Result<json> rule_of(const GateTarget& target) {
    if (!target.gpu) return fail("kubernetes-device-taint: no GPU named");
    return read_rule(device_taint_rule_name(api_.node(), target.gpu->uuid));
  }

  // The rule of that name, or null when there is none (404).
  Result<json> read_rule(const std::string& name) {
    auto got = api_.call("GET", collection() + "/" + name);
    if (!got) return std::unexpected(got.error());
    if (got->status == 404) return json(nullptr);
    if (!got->ok()) return fail("GET " + collection() + "/" + name + ": " + got->describe());
    return got->body.is_object() ? got->body : json::object();
  }

  GateOutcome existing(const GateTarget::Gpu& gpu, const std::string& name, const json& rule) {
    if (gpureap_owns_rule(rule, api_.node(), gpu.uuid))
      return outcome(GateStep::kept_closed, gpu, name, owner_of(rule));
    return outcome(GateStep::left_alone, gpu, name, "a DeviceTaintRule of its name made by someone else");
  }

  Result<std::string> device_of(const GateTarget::Gpu& gpu) {
    if (!config_.device.starts_with(kAttributePrefix))
      return device_from_template(config_.device, gpu.id.index);
    const std::string attribute = config_.device.substr(kAttributePrefix.size());
    const std::string path =
        "/apis/" + config_.api + "/resourceslices?fieldSelector=spec.driver%3D" + config_.driver;
    auto slices = api_.call("GET", path);
    if (!slices) return std::unexpected(slices.error());
    if (!slices->ok()) return fail("GET " + path + ": " + slices->describe());
    std::string device =
        device_by_attribute(slices->body, config_.driver, config_.pool, attribute, gpu.uuid);
    if (device.empty())
      return fail(fmt::format("no device of driver {} in pool {} has {} {} (GPUREAP_DRA_DEVICE)",
                              config_.driver, config_.pool, attribute, gpu.uuid));
    return device;
  }

  static std::string owner_of(const json& rule) {
    return text_at(rule, {"metadata", "annotations", std::string(kTaintOwnerAnnotation).c_str()});
  }

  static GateOutcome outcome(GateStep step, const GateTarget::Gpu& gpu, const std::string& name,
                             std::string detail) {
    return GateOutcome{step, fmt::format("GPU {} (DeviceTaintRule {})", gpu::device_text(gpu.id), name),
                       std::move(detail), false};
  }

  KubeApi api_;
  DeviceTaintConfig config_;
  bool dry_run_;
};

bool label_value(std::string_view v) {
  if (v.size() > 63) return false;
  if (v.empty()) return true;
  auto alnum = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; };
  return alnum(v.front()) && alnum(v.back()) &&
         std::all_of(v.begin(), v.end(), [&](char c) { return alnum(c) || c == '-' || c == '_' || c == '.'; });
}

}  // namespace

Result<DeviceTaintConfig> device_taint_config_from_environment(
    const std::function<const char*(const char*)>& env, const std::string& node) {
  DeviceTaintConfig c;
  auto take = [&](const char* name, std::string& into) {
    if (const char* v = env(name); v && *v) into = v;
  };
  take("GPUREAP_DRA_API", c.api);
  take("GPUREAP_DRA_DRIVER", c.driver);
  c.pool = node;
  take("GPUREAP_DRA_POOL", c.pool);
  take("GPUREAP_DRA_DEVICE", c.device);
  take("GPUREAP_DRA_TAINT_EFFECT", c.effect);
  const std::string prefix = "--gate kubernetes-device-taint: ";
  if (c.api != "resource.k8s.io/v1" && c.api != "resource.k8s.io/v1beta2")
    return fail(prefix + "GPUREAP_DRA_API '" + c.api +
                "' is neither resource.k8s.io/v1 nor resource.k8s.io/v1beta2");
  if (!is_dns_subdomain(c.driver))
    return fail(prefix + "GPUREAP_DRA_DRIVER '" + c.driver + "' is not a driver name");
  // A pool name is one or more DNS subdomains joined by '/'; gpureap takes one.
  if (!is_dns_subdomain(c.pool))
    return fail(prefix + "GPUREAP_DRA_POOL '" + c.pool + "' is not a pool name");
  if (c.device.starts_with(kAttributePrefix)) {
    if (c.device.size() == kAttributePrefix.size())
      return fail(prefix + "GPUREAP_DRA_DEVICE '" + c.device + "' names no attribute");
  } else if (c.device.find(kDeviceTemplate) == std::string::npos ||
             !is_dns_subdomain(device_from_template(c.device, 0)) ||
             device_from_template(c.device, 0).find('.') != std::string::npos) {
    return fail(prefix + "GPUREAP_DRA_DEVICE '" + c.device +
                "' is neither attribute:NAME nor a device name with {index}");
  }
  if (c.effect != "NoSchedule" && c.effect != "NoExecute" && c.effect != "None")
    return fail(prefix + "GPUREAP_DRA_TAINT_EFFECT '" + c.effect +
                "' is not NoSchedule, NoExecute or None");
  return c;
}

std::string device_taint_rule_name(const std::string& node, const std::string& uuid) {
  std::string id;
  for (char c : ascii_lower(uuid)) id += std::isalnum(static_cast<unsigned char>(c)) ? c : '-';
  std::string head = "gpureap-" + ascii_lower(node);
  const std::size_t room = 253 - id.size() - 1;
  if (head.size() > room) head.resize(room);
  while (!head.empty() && (head.back() == '-' || head.back() == '.')) head.pop_back();
  return head + "-" + id;
}

std::string device_by_attribute(const json& slices, const std::string& driver,
                                const std::string& pool, const std::string& attribute,
                                const std::string& uuid) {
  if (!slices.is_object() || !slices.contains("items") || !slices["items"].is_array()) return "";
  // Only the pool's newest generation counts (older slices are being replaced).
  long newest = -1;
  auto of_pool = [&](const json& s) {
    return text_at(s, {"spec", "driver"}) == driver && text_at(s, {"spec", "pool", "name"}) == pool;
  };
  auto generation = [](const json& s) {
    const json& spec = s.value("spec", json::object());
    const json& p = spec.is_object() ? spec.value("pool", json::object()) : json::object();
    return p.is_object() && p.contains("generation") && p["generation"].is_number_integer()
               ? p["generation"].get<long>()
               : 0L;
  };
  for (const auto& s : slices["items"])
    if (of_pool(s)) newest = std::max(newest, generation(s));
  const std::string qualified = driver + "/" + attribute;
  for (const auto& s : slices["items"]) {
    if (!of_pool(s) || generation(s) != newest) continue;
    const json& spec = s["spec"];
    if (!spec.contains("devices") || !spec["devices"].is_array()) continue;
    for (const auto& d : spec["devices"]) {
      if (!d.is_object() || !d.contains("attributes") || !d["attributes"].is_object()) continue;
      for (const auto& key : {attribute, qualified}) {
        const std::string value = text_at(d["attributes"], {key.c_str(), "string"});
        if (!value.empty() && ascii_lower(value) == ascii_lower(uuid)) return d.value("name", "");
      }
    }
  }
  return "";
}

bool gpureap_owns_rule(const json& rule, const std::string& node, const std::string& uuid) {
  return text_at(rule, {"metadata", "labels", std::string(kManagedByLabel).c_str()}) == "gpureap" &&
         text_at(rule, {"metadata", "annotations", std::string(kRuleNodeAnnotation).c_str()}) == node &&
         text_at(rule, {"metadata", "annotations", std::string(kRuleUuidAnnotation).c_str()}) == uuid &&
         text_at(rule, {"metadata", "annotations", std::string(kTaintOwnerAnnotation).c_str()})
             .starts_with("gpureap:");
}

json device_taint_rule(const DeviceTaintConfig& config, const std::string& node,
                       const GateTarget::Gpu& gpu, const std::string& device,
                       const std::string& reason) {
  const std::string value = label_value(gpu.what) ? gpu.what : "leak";
  return {{"apiVersion", config.api},
          {"kind", "DeviceTaintRule"},
          {"metadata",
           {{"name", device_taint_rule_name(node, gpu.uuid)},
            {"labels", {{kManagedByLabel, "gpureap"}}},
            {"annotations",
             {{kRuleNodeAnnotation, node},
              {kRuleUuidAnnotation, gpu.uuid},
              {kTaintOwnerAnnotation, reason}}}}},
          {"spec",
           {{"deviceSelector", {{"driver", config.driver}, {"pool", config.pool}, {"device", device}}},
            {"taint", {{"key", kLeakTaintKey}, {"value", value}, {"effect", config.effect}}}}}};
}

std::unique_ptr<NodeAction> make_device_taint_gate(KubeApi api, DeviceTaintConfig config,
                                                   bool dry_run) {
  return std::make_unique<DeviceTaintGate>(std::move(api), std::move(config), dry_run);
}

}  // namespace gpureap::agent
