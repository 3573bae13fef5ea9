#include "report/json.h"

#include <chrono>
#include <cmath>

#include "gpu/source_words.h"
#include "gpu/vendor.h"
#include "proc/lineage.h"
#include "report/device_json.h"
#include "report/json_values.h"
#include "util/host_name.h"
#include "util/time_text.h"

namespace gpureap::report {
namespace {

template <typename E>
std::string enum_name_text(E value) {
  return std::string(enum_name(value));
}

template <typename T>
nlohmann::ordered_json optional_json(const std::optional<T>& v) {
  return v ? nlohmann::ordered_json(*v) : nlohmann::ordered_json(nullptr);
}

}  // namespace

std::string json_text(const nlohmann::ordered_json& doc) {
  return doc.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n";
}

std::string json_line(const nlohmann::ordered_json& doc) {
  return doc.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n";
}


DocumentStamp DocumentStamp::now() {
  return {rfc3339(std::chrono::system_clock::now()), host_name()};
}

nlohmann::ordered_json stamped(const nlohmann::ordered_json& doc, const DocumentStamp& stamp) {
  // ordered_json keeps insertion order and cannot insert in the middle: rebuild it.
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  for (const char* head : {"schema_version", "command"})
    if (doc.contains(head)) out[head] = doc[head];
  out["time"] = stamp.time;
  out["hostname"] = stamp.hostname.empty() ? nlohmann::ordered_json(nullptr)
                                           : nlohmann::ordered_json(stamp.hostname);
  for (const auto& [key, value] : doc.items())
    if (!out.contains(key)) out[key] = value;
  return out;
}

nlohmann::ordered_json event_head(std::string_view event, std::string_view level, double time) {
  // Rounded to the microsecond, as the event's text line stamps it (report::stamp).
  const auto since_epoch = std::chrono::round<std::chrono::microseconds>(
      std::chrono::duration<double>(time));
  const std::string host = host_name();
  return {{"schema_version", kSchemaVersion},
          {"event", std::string(event)},
          {"level", std::string(level)},
          {"time", rfc3339(WallTime(since_epoch))},
          {"time_unix", std::round(time * 1e6) / 1e6},
          {"hostname", host.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(host)}};
}

std::string document_text(const nlohmann::ordered_json& doc) { return json_text(stamped(doc)); }

double seconds_value(double seconds) { return std::round(seconds * 1000.0) / 1000.0; }

nlohmann::ordered_json seconds_json(const std::optional<double>& seconds) {
  return seconds ? nlohmann::ordered_json(seconds_value(*seconds))
                 : nlohmann::ordered_json(nullptr);
}

namespace {

// The ranks a title names, only those it names: {"dp": 1, "tp": 3}.
nlohmann::ordered_json ranks_json(const proc::Ranks& r) {
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  const std::pair<const char*, const std::optional<unsigned>*> all[] = {
      {"dp", &r.dp},   {"pp", &r.pp}, {"attn_cp", &r.attn_cp}, {"moe_dp", &r.moe_dp}, {"cp", &r.cp},
      {"pcp", &r.pcp}, {"tp", &r.tp}, {"dcp", &r.dcp},         {"ep", &r.ep}};
  for (const auto& [name, value] : all)
    if (*value) out[name] = **value;
  return out;
}

// What the holder's command line says it is: engine, role, ranks (null when generic).
// The card's health (issue 53), each null where the driver cannot say.
nlohmann::ordered_json card_health_json(const gpu::GpuInfo& info) {
  nlohmann::ordered_json reasons = nullptr;
  if (info.clock_event_reasons) {
    reasons = nlohmann::ordered_json::array();
    for (auto word : gpu::clock_event_words(*info.clock_event_reasons)) reasons.push_back(word);
  }
  return {{"power_limit_watts", info.power_limit_mw
                                    ? nlohmann::ordered_json(*info.power_limit_mw / 1000.0)
                                    : nlohmann::ordered_json(nullptr)},
          {"clocks_held_down_by", reasons},
          {"ecc_uncorrected", optional_json(info.ecc_uncorrected)}};
}

nlohmann::ordered_json engine_json(const proc::EngineIdentity& e) {
  if (e.engine == proc::Engine::none && e.role == proc::EngineRole::none) return nullptr;
  return {
      {"engine", enum_name_text(e.engine)},
      {"role", e.role == proc::EngineRole::none ? nlohmann::ordered_json(nullptr)
                                                : nlohmann::ordered_json(enum_name_text(e.role))},
      {"ranks", ranks_json(e.ranks)},
      {"title", text_or_null(e.title)}};
}

}  // namespace

nlohmann::ordered_json instance_json(const inventory::Instance& in) {
  nlohmann::ordered_json members = nlohmann::ordered_json::array();
  for (const auto& m : in.members)
    members.push_back({{"pid", m.id.pid},
                       {"start_time", m.id.start_time},
                       {"role", m.role == proc::EngineRole::none
                                    ? nlohmann::ordered_json(nullptr)
                                    : nlohmann::ordered_json(enum_name_text(m.role))},
                       {"ranks", text_or_null(m.ranks)}});
  return {
      {"key", in.key},
      {"kind", enum_name_text(in.kind)},
      {"pgid", in.pgid},
      {"run_id", text_or_null(in.run_id)},
      {"run_gone", in.run_gone},
      {"container", text_or_null(in.container)},
      {"engine", in.engine == proc::Engine::none
                     ? nlohmann::ordered_json(nullptr)
                     : nlohmann::ordered_json(enum_name_text(in.engine))},
      {"launcher", in.launcher_pid > 0
                       ? nlohmann::ordered_json{{"pid", in.launcher_pid},
                                                {"alive", in.launcher_alive},
                                                {"comm", text_or_null(in.launcher_comm)},
                                                {"cmdline", text_or_null(in.launcher_cmdline)},
                                                {"died_at", seconds_json(in.launcher_died_at)}}
                       : nlohmann::ordered_json(nullptr)},
      {"model", optional_json(in.model)},
      {"port", optional_json(in.port)},
      {"listening_ports", in.ports},
      {"gpus", in.gpus},
      {"bytes",
       in.bytes_known ? nlohmann::ordered_json(in.bytes) : nlohmann::ordered_json(nullptr)},
      {"orphaned", in.orphaned},
      {"detached", in.detached},
      {"orphaned_members", in.orphaned},
      {"all_orphaned", in.orphaned > 0 && in.orphaned == in.members.size()},
      {"members", members},
  };
}

nlohmann::ordered_json holder_json(const proc::Holder& h, std::optional<std::uint64_t> gpu_bytes) {
  nlohmann::ordered_json threads = nlohmann::ordered_json::array();
  for (const auto& t : h.threads)
    threads.push_back({{"tid", t.tid}, {"state", std::string(1, t.state)}});
  nlohmann::ordered_json found = nlohmann::ordered_json::array();
  for (auto f : h.found_by) found.push_back(enum_name_text(f));
  nlohmann::ordered_json devices = nlohmann::ordered_json::array();
  for (const auto& n : h.nodes) devices.push_back(n.path);
  return {
      {"pid", h.id.pid},
      {"start_time", h.id.start_time},
      {"user", h.user},
      {"uid", h.uid},
      {"state", std::string(1, h.state)},
      {"threads", threads},
      {"zombie_leader", h.zombie_leader},
      {"ppid", h.ppid},
      {"pgid", h.pgid},
      {"sid", h.sid},
      {"orphaned", h.orphaned},
      {"orphan_reason", h.orphan_reason.empty() ? nlohmann::ordered_json(nullptr)
                                                : nlohmann::ordered_json(h.orphan_reason)},
      {"orphan_evidence",
       h.orphaned ? nlohmann::ordered_json(std::string(proc::enum_name(h.orphan_evidence)))
                  : nlohmann::ordered_json(nullptr)},
      {"provenance",
       h.orphaned ? nlohmann::ordered_json(std::string(proc::enum_name(h.provenance)))
                  : nlohmann::ordered_json(nullptr)},
      {"orphaned_since", h.orphaned ? seconds_json(h.orphaned_since) : nullptr},
      {"keeper", h.keeper == proc::KeeperClass::none
                     ? nlohmann::ordered_json(nullptr)
                     : nlohmann::ordered_json{{"class", std::string(proc::enum_name(h.keeper))},
                                              {"owner_pid", h.kept_owner},
                                              {"provenance", std::string(proc::enum_name(h.keeper_provenance))},
                                              {"reason", h.keeper_reason}}},
      {"detached", h.detached},
      {"detached_reason", h.detached_reason.empty() ? nlohmann::ordered_json(nullptr)
                                                    : nlohmann::ordered_json(h.detached_reason)},
      {"cgroup", h.cgroup},
      {"container",
       h.container.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(h.container)},
      {"run_id",
       h.run_id.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(h.run_id)},
      {"nspid", h.nspid},
      {"comm", h.comm},
      {"cmdline", h.cmdline},
      {"argv", h.argv},
      {"age_seconds", seconds_value(h.age_seconds)},
      {"found_by", found},
      {"devices", devices},
      {"gpu_bytes", optional_json(gpu_bytes)},
      {"pinned_host_bytes", h.pinned_host_bytes},
      {"engine", engine_json(h.engine)},
      {"instance", text_or_null(h.instance)},
  };
}

nlohmann::ordered_json gpu_json(const inventory::GpuView& view) {
  const auto& info = view.info;
  nlohmann::ordered_json memory = nullptr;
  if (info.memory) {
    memory = {
        {"total_bytes", info.memory->total},
        {"used_bytes", info.memory->used},
        {"reserved_bytes", optional_json(info.memory->reserved)},
        {"baseline_bytes", view.baseline.bytes},
        {"baseline_recorded", view.baseline.recorded},
    };
  }
  nlohmann::ordered_json holders = nlohmann::ordered_json::array();
  for (const auto& gh : view.holders) {
    auto j = holder_json(gh.holder, gh.gpu_bytes);
    j["uses_gpu"] = gh.uses_gpu;
    j["client"] = gh.client;
    j["sm_percent"] = optional_json(gh.sm_percent);
    holders.push_back(std::move(j));
  }
  nlohmann::ordered_json unseen = nlohmann::ordered_json::array();
  for (const auto& p : view.source_unseen)
    unseen.push_back({{"pid", p.pid}, {"gpu_bytes", optional_json(p.used_bytes)}});
  nlohmann::ordered_json unexplained = nullptr;
  if (view.unexplained != inventory::Unexplained::none)
    unexplained = {{"class", enum_name(view.unexplained)},
                   {"detail", view.unexplained_detail}};
  nlohmann::ordered_json busy = nullptr;
  if (view.busy.kind != inventory::Busy::none)
    busy = {{"class", enum_name(view.busy.kind)},
            {"samples", view.busy.samples},
            {"threshold_percent", inventory::kBusyThreshold},
            {"detail", view.busy.detail}};
  return {
      {"index", info.id},
      {"name", info.name},
      {"vendor", gpu::enum_name(gpu::vendor_of(info.uuid))},
      {"uuid",
       info.uuid.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(info.uuid)},
      {"pci_bus_id", info.pci_bus_id.empty() ? nlohmann::ordered_json(nullptr)
                                             : nlohmann::ordered_json(info.pci_bus_id)},
      {"minor", optional_json(info.minor)},
      {"persistence_mode", optional_json(info.persistence_mode)},
      {"nvml",
       {{"state", info.problem.empty() ? "ok"
                  : info.hung          ? "hung"
                                       : "query_failed"},
        {"problem", info.problem.empty() ? nlohmann::ordered_json(nullptr)
                                         : nlohmann::ordered_json(info.problem)}}},
      {"state", enum_name(inventory::gpu_state(view))},
      {"memory", memory},
      {"attributed_bytes", view.attributed_bytes},
      {"orphaned_bytes", view.orphaned_bytes()},
      {"unattributed_bytes", view.unattributed_bytes},
      {"unattributed", unexplained},
      {"utilization",
       {{"gpu_percent", optional_json(info.utilization_gpu)},
        {"memory_percent", optional_json(info.utilization_memory)}}},
      {"sensors",
       {{"temperature_celsius", optional_json(info.temperature_c)},
        {"power_watts", info.power_mw ? nlohmann::ordered_json(*info.power_mw / 1000.0)
                                      : nlohmann::ordered_json(nullptr)}}},
      {"health", card_health_json(info)},
      {"busy_without_process", busy},
      {"holders", holders},
      {gpu::source_words::kUnseen, unseen},
  };
}

/// `degraded`: null unless an agent answered and says it is degraded (its
/// /healthz would answer 503): {"state": "degraded", "reasons": [...]}.
nlohmann::ordered_json agent_degraded_json(const inventory::Inventory& inv) {
  if (inv.source != "agent" || inv.agent_degraded.empty()) return nullptr;
  nlohmann::ordered_json reasons = nlohmann::ordered_json::array();
  for (const auto& why : inv.agent_degraded) reasons.push_back(why);
  return {{"state", "degraded"}, {"reasons", reasons}};
}

nlohmann::ordered_json status_json(const inventory::Inventory& inv) {
  nlohmann::ordered_json gpus = nlohmann::ordered_json::array();
  for (const auto& v : inv.gpus) gpus.push_back(gpu_json(v));
  nlohmann::ordered_json others = nlohmann::ordered_json::array();
  for (const auto& h : inv.other_holders) others.push_back(holder_json(h, std::nullopt));
  nlohmann::ordered_json problems = nlohmann::ordered_json::array();
  for (const auto& p : inv.problems) problems.push_back({{"pid", p.pid}, {"what", p.what}});
  nlohmann::ordered_json warnings = nlohmann::ordered_json::array();
  for (const auto& w : inv.warnings) warnings.push_back(w);
  nlohmann::ordered_json instances = nlohmann::ordered_json::array();
  for (const auto& in : inv.instances) instances.push_back(instance_json(in));
  nlohmann::ordered_json shm = nlohmann::ordered_json::array();
  for (const auto& l : inv.shm_leftovers)
    shm.push_back({{"path", l.path}, {"creator_pid", l.creator}, {"bytes", l.bytes}});
  return {
      {"schema_version", kSchemaVersion},
      {"command", "status"},
      {"nvml",
       {{"state", enum_name_text(inv.source_state)},
        {"problem", inv.source_problem.empty() ? nlohmann::ordered_json(nullptr)
                                             : nlohmann::ordered_json(inv.source_problem)},
        {"driver_version", inv.driver_version.empty()
                               ? nlohmann::ordered_json(nullptr)
                               : nlohmann::ordered_json(inv.driver_version)},
        {"cuda_version", inv.cuda_version.empty() ? nlohmann::ordered_json(nullptr)
                                                  : nlohmann::ordered_json(inv.cuda_version)}}},
      {"host_pid_namespace", inv.host_pid_namespace},
      {"gpus", gpus},
      {"instances", instances},
      {"shm_leftovers", shm},
      {"other_holders", others},
      {"problems", problems},
      {"warnings", warnings},
      {"scan", {{"processes", inv.processes_scanned}}},
      {"source", inv.source},
      {"agent_pid", inv.source == "agent" ? nlohmann::ordered_json(inv.agent_pid)
                                          : nlohmann::ordered_json(nullptr)},
      {"degraded", agent_degraded_json(inv)},
  };
}

}  // namespace gpureap::report
