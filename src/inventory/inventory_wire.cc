#include "inventory/inventory_wire.h"
#include "gpu/source_words.h"
#include "util/enum_names.h"
#include "gpu/nvml_wire.h"
#include "util/wire_text.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <utility>

namespace gpureap::inventory {
namespace {

using nlohmann::json;

// A decoding failure, caught once in decode_inventory and turned into an Error:
// nlohmann's own exceptions (missing key, wrong type) are caught there too.
using gpureap::WireError;  // util/wire_text.h

// ---- strings -----------------------------------------------------------------
// Command lines, comm, cgroup paths and device paths come from /proc and /dev as
// bytes, not necessarily UTF-8. JSON text cannot carry those bytes, and replacing
// them would make the agent's answer differ from a direct scan, so such a string
// travels as {"hex": "..."} instead.

json text(const std::string& s) { return wire_text(s); }

std::string text_of(const json& j, const char* what) {
  try {
    return text_from_wire(j);
  } catch (const WireError& e) {
    throw WireError(fmt::format("{}: {}", what, e.what()));
  }
}

// ---- typed reads ---------------------------------------------------------------

const json& field(const json& j, const char* key) { return wire_field(j, key); }

template <typename T>
T integer_value(const json& v, const char* key) {
  return wire_integer_value<T>(v, key);
}

template <typename T>
T integer(const json& j, const char* key) {
  return wire_integer<T>(j, key);
}

template <typename T>
std::optional<T> optional_integer(const json& j, const char* key) {
  return wire_optional_integer<T>(j, key);
}

bool boolean(const json& j, const char* key) { return wire_boolean(j, key); }

std::string string(const json& j, const char* key) {
  return text_of(field(j, key), key);
}

const json& array(const json& j, const char* key) {
  const json& v = field(j, key);
  if (!v.is_array()) throw WireError(fmt::format("'{}': not an array", key));
  return v;
}

// Enumerations travel by name (each enum's one table, util/enum_names.h), so a
// reordering of an enum cannot shift meanings.
template <typename E>
E enum_value(const json& v, const char* key) {
  std::string name = text_of(v, key);
  if (auto e = enum_from_name<E>(name)) return *e;
  throw WireError(fmt::format("'{}': unknown value '{}'", key, name));
}

template <typename E>
E enum_of(const json& j, const char* key) {
  return enum_value<E>(field(j, key), key);
}

template <typename E>
std::string name_of(E value) {
  return std::string(enum_name(value));
}

template <typename T>
json optional_json(const std::optional<T>& v) {
  return v ? json(*v) : json(nullptr);
}

// ---- encode --------------------------------------------------------------------

// A GPU's description travels as the NVML worker sends it: one encoding per type.
json encode_info(const gpu::GpuInfo& g) { return gpu::gpu_info_to_wire(g); }

json encode_holder(const proc::Holder& h) {
  json threads = json::array();
  for (const auto& t : h.threads) threads.push_back({t.tid, static_cast<unsigned char>(t.state)});
  json found = json::array();
  for (auto f : h.found_by) found.push_back(name_of(f));
  json mig = json::array();
  for (const auto& a : h.mig_access) mig.push_back({a.gpu_minor, a.gi, optional_json(a.ci)});
  json argv = json::array();
  for (const auto& a : h.argv) argv.push_back(text(a));
  json nodes = json::array();
  for (const auto& n : h.nodes)
    nodes.push_back({{"kind", name_of(n.kind)},
                     {"minor", optional_json(n.minor)},
                     {"path", text(n.path)}});
  return {{"pid", h.id.pid},
          {"start_time", h.id.start_time},
          {"pidfs_ino", h.id.pidfs_ino},
          {"uid", h.uid},
          {"user", text(h.user)},
          {"state", static_cast<unsigned char>(h.state)},
          {"threads", threads},
          {"zombie_leader", h.zombie_leader},
          {"ppid", h.ppid},
          {"pgid", h.pgid},
          {"sid", h.sid},
          {"reparented", h.reparented},
          {"reparent_reason", text(h.reparent_reason)},
          {"group_leader_gone", h.group_leader_gone},
          {"run_alive", h.run_alive},
          {"run_gone", h.run_gone},
          {"run_in_cgroup", h.run_in_cgroup},
          {"ignores_sighup", h.ignores_sighup},
          {"orphaned", h.orphaned},
          {"orphan_evidence", name_of(h.orphan_evidence)},
          {"provenance", name_of(h.provenance)},
          {"dead_parent", h.dead_parent},
          {"run_left_to_init", h.run_left_to_init},
          {"orphan_reason", text(h.orphan_reason)},
          {"orphaned_since", optional_json(h.orphaned_since)},
          {"keeper", name_of(h.keeper)},
          {"kept_owner", h.kept_owner},
          {"keeper_provenance", name_of(h.keeper_provenance)},
          {"keeper_reason", text(h.keeper_reason)},
          {"detached", h.detached},
          {"detached_reason", text(h.detached_reason)},
          {"cgroup", text(h.cgroup)},
          {"container", text(h.container)},
          {"run_id", text(h.run_id)},
          {"nspid", h.nspid},
          {"comm", text(h.comm)},
          {"cmdline", text(h.cmdline)},
          {"argv", argv},
          {"age_seconds", h.age_seconds},
          {"found_by", found},
          {"nodes", nodes},
          {"gpu_minors", h.gpu_minors},
          {"mig_access", mig},
          {"wchan", text(h.wchan)},
          {"pinned_host_bytes", h.pinned_host_bytes}};
}

json encode_view(const GpuView& v) {
  json holders = json::array();
  for (const auto& gh : v.holders)
    holders.push_back({{"holder", encode_holder(gh.holder)},
                       {"gpu_bytes", optional_json(gh.gpu_bytes)},
                       {"uses_gpu", gh.uses_gpu},
                       {"client", gh.client},
                       {"sm_percent", optional_json(gh.sm_percent)}});
  json unseen = json::array();
  for (const auto& p : v.source_unseen) unseen.push_back(gpu::process_to_wire(p));
  return {{"info", encode_info(v.info)},
          {"baseline", {{"bytes", v.baseline.bytes}, {"recorded", v.baseline.recorded}}},
          {"holders", holders},
          {gpu::source_words::kUnseen, unseen},
          {"attributed_bytes", v.attributed_bytes},
          {"unattributed_bytes", v.unattributed_bytes},
          {"unexplained", name_of(v.unexplained)},
          {"unexplained_detail", text(v.unexplained_detail)},
          {"busy",
           {{"kind", name_of(v.busy.kind)},
            {"samples", v.busy.samples},
            {"detail", text(v.busy.detail)}}}};
}

// ---- decode --------------------------------------------------------------------

gpu::GpuInfo decode_info(const json& j) {
  auto info = gpu::gpu_info_from_wire(j);
  if (!info) throw WireError(info.error().message);
  return std::move(*info);
}

proc::Holder decode_holder(const json& j) {
  proc::Holder h;
  h.id.pid = integer<pid_t>(j, "pid");
  h.id.start_time = integer<std::uint64_t>(j, "start_time");
  h.id.pidfs_ino = integer<std::uint64_t>(j, "pidfs_ino");
  h.uid = integer<uid_t>(j, "uid");
  h.user = string(j, "user");
  h.state = static_cast<char>(integer<unsigned char>(j, "state"));
  for (const auto& t : array(j, "threads")) {
    if (!t.is_array() || t.size() != 2) throw WireError("'threads': expected [tid, state] pairs");
    h.threads.push_back({integer_value<pid_t>(t[0], "threads"),
                         static_cast<char>(integer_value<unsigned char>(t[1], "threads"))});
  }
  h.zombie_leader = boolean(j, "zombie_leader");
  h.ppid = integer<pid_t>(j, "ppid");
  h.pgid = integer<pid_t>(j, "pgid");
  h.sid = integer<pid_t>(j, "sid");
  h.reparented = boolean(j, "reparented");
  h.reparent_reason = string(j, "reparent_reason");
  h.group_leader_gone = boolean(j, "group_leader_gone");
  h.run_alive = boolean(j, "run_alive");
  h.run_gone = boolean(j, "run_gone");
  h.orphaned = boolean(j, "orphaned");
  h.orphan_evidence = enum_of<proc::OrphanEvidence>(j, "orphan_evidence");
  // Newer than the wire's first version (wave 4): an older agent's answer lacks them.
  if (j.contains("provenance")) h.provenance = enum_of<proc::Provenance>(j, "provenance");
  if (j.contains("run_in_cgroup")) h.run_in_cgroup = boolean(j, "run_in_cgroup");
  if (j.contains("ignores_sighup")) h.ignores_sighup = boolean(j, "ignores_sighup");
  if (j.contains("dead_parent")) h.dead_parent = integer<pid_t>(j, "dead_parent");
  if (j.contains("run_left_to_init"))
    h.run_left_to_init = integer<pid_t>(j, "run_left_to_init");
  h.orphan_reason = string(j, "orphan_reason");
  h.detached = boolean(j, "detached");
  h.detached_reason = string(j, "detached_reason");
  // Newer than the wire's first version (issue 52): an older agent's answer has none.
  if (j.contains("keeper")) {
    h.keeper = enum_of<proc::KeeperClass>(j, "keeper");
    h.kept_owner = integer<pid_t>(j, "kept_owner");
    h.keeper_reason = string(j, "keeper_reason");
  }
  if (j.contains("keeper_provenance"))
    h.keeper_provenance = enum_of<proc::Provenance>(j, "keeper_provenance");
  h.cgroup = string(j, "cgroup");
  h.container = string(j, "container");
  h.run_id = string(j, "run_id");
  for (const auto& p : array(j, "nspid")) h.nspid.push_back(integer_value<pid_t>(p, "nspid"));
  h.comm = string(j, "comm");
  h.cmdline = string(j, "cmdline");
  // Newer than the wire's first version: an older agent's answer has neither.
  if (j.contains("argv"))
    for (const auto& a : array(j, "argv")) h.argv.push_back(text_of(a, "argv"));
  if (j.contains("orphaned_since") && !j["orphaned_since"].is_null()) {
    const json& since = j["orphaned_since"];
    if (!since.is_number()) throw WireError("'orphaned_since': not a number");
    h.orphaned_since = since.get<double>();
  }
  // Derived from the command line, so not on the wire: recognised again here.
  h.engine = proc::recognise_engine_cmdline(h.cmdline, h.comm);
  const json& age = field(j, "age_seconds");
  if (!age.is_number()) throw WireError("'age_seconds': not a number");
  h.age_seconds = age.get<double>();
  for (const auto& f : array(j, "found_by")) h.found_by.insert(enum_value<proc::FoundBy>(f, "found_by"));
  for (const auto& n : array(j, "nodes"))
    h.nodes.insert(proc::DeviceNode{enum_of<proc::NodeKind>(n, "kind"),
                                    optional_integer<unsigned>(n, "minor"), string(n, "path")});
  for (const auto& m : array(j, "gpu_minors"))
    h.gpu_minors.insert(integer_value<unsigned>(m, "gpu_minors"));
  if (j.contains("mig_access"))
    for (const auto& a : array(j, "mig_access")) {
      if (!a.is_array() || a.size() != 3) throw WireError("'mig_access': expected [minor, gi, ci]");
      h.mig_access.insert(proc::MigAccess{
          integer_value<unsigned>(a[0], "mig_access"), integer_value<unsigned>(a[1], "mig_access"),
          a[2].is_null() ? std::nullopt
                         : std::optional<unsigned>(integer_value<unsigned>(a[2], "mig_access"))});
    }
  h.wchan = string(j, "wchan");
  h.pinned_host_bytes = integer<std::uint64_t>(j, "pinned_host_bytes");
  return h;
}

GpuView decode_view(const json& j) {
  GpuView v;
  v.info = decode_info(field(j, "info"));
  const json& b = field(j, "baseline");
  v.baseline = Baseline{integer<std::uint64_t>(b, "bytes"), boolean(b, "recorded")};
  for (const auto& gh : array(j, "holders")) {
    v.holders.push_back(GpuHolder{decode_holder(field(gh, "holder")),
                                  optional_integer<std::uint64_t>(gh, "gpu_bytes"),
                                  boolean(gh, "uses_gpu"),
                                  gh.contains("client") && boolean(gh, "client")});
    if (gh.contains("sm_percent"))
      v.holders.back().sm_percent = optional_integer<unsigned>(gh, "sm_percent");
  }
  for (const auto& p : array(j, gpu::source_words::kUnseen)) v.source_unseen.push_back(gpu::process_from_wire(p));
  v.attributed_bytes = integer<std::uint64_t>(j, "attributed_bytes");
  v.unattributed_bytes = integer<std::uint64_t>(j, "unattributed_bytes");
  v.unexplained = enum_of<Unexplained>(j, "unexplained");
  v.unexplained_detail = string(j, "unexplained_detail");
  if (j.contains("busy")) {
    const json& b = field(j, "busy");
    v.busy.kind = enum_of<Busy>(b, "kind");
    for (const auto& s : array(b, "samples"))
      v.busy.samples.push_back(integer_value<unsigned>(s, "samples"));
    v.busy.detail = string(b, "detail");
  }
  return v;
}

}  // namespace

std::string encode_inventory(const Inventory& inv) {
  json gpus = json::array();
  for (const auto& v : inv.gpus) gpus.push_back(encode_view(v));
  json others = json::array();
  for (const auto& h : inv.other_holders) others.push_back(encode_holder(h));
  json problems = json::array();
  for (const auto& p : inv.problems) problems.push_back({{"pid", p.pid}, {"what", text(p.what)}});
  json warnings = json::array();
  for (const auto& w : inv.warnings) warnings.push_back(text(w));
  json degraded = json::array();
  for (const auto& d : inv.agent_degraded) degraded.push_back(text(d));
  json launchers = json::array();
  for (const auto& d : inv.dead_launchers)
    launchers.push_back({{"pid", d.pid},
                         {"comm", text(d.comm)},
                         {"cmdline", text(d.cmdline)},
                         {"died_at", d.died_at}});
  json doc = {{"wire_version", kWireVersion},
              {gpu::source_words::kState, name_of(inv.source_state)},
              {gpu::source_words::kProblem, text(inv.source_problem)},
              {"driver_version", text(inv.driver_version)},
              {"cuda_version", text(inv.cuda_version)},
              {"host_pid_namespace", inv.host_pid_namespace},
              {"as_root", inv.as_root},
              {"gpus", gpus},
              {"other_holders", others},
              {"problems", problems},
              {"warnings", warnings},
              {"dead_launchers", launchers},
              {"processes_scanned", inv.processes_scanned},
              {"source", text(inv.source)},
              {"agent_pid", inv.agent_pid},
              {"agent_degraded", degraded},
              {"node",
               {{"dev_dir", text(inv.node.dev_dir)},
                {"proc_root", text(inv.node.proc_root)},
                {"nvml_library", text(inv.node.nvml_library)},
                {"sim_dir", text(inv.node.sim_dir)}}}};
  // Every string went through text(), so strict dumping cannot throw.
  return doc.dump();
}

std::string encode_wire_error(std::string_view message) {
  return json{{"error", text(std::string(message))}}.dump();
}

std::string encode_source_answer(bool yielded, double until) {
  return yielded ? json{{"nvml", "yielded"}, {"until", until}}.dump()
                 : json{{"nvml", "resumed"}}.dump();
}

Result<double> decode_source_answer(std::string_view text_in) {
  json doc = json::parse(text_in.begin(), text_in.end(), nullptr, false);
  if (doc.is_object() && doc.contains("error") && doc["error"].is_string())
    return fail(doc["error"].get<std::string>());
  if (!doc.is_object() || !doc.contains("nvml") || !doc["nvml"].is_string())
    return fail("the agent's answer is not an NVML answer");
  if (doc["nvml"] == "resumed") return 0.0;
  if (doc["nvml"] == "yielded" && doc.contains("until") && doc["until"].is_number())
    return doc["until"].get<double>();
  return fail("the agent's answer is not an NVML answer");
}

Result<Inventory> decode_inventory(std::string_view text_in) {
  try {
    json doc = json::parse(text_in.begin(), text_in.end());
    if (auto problem = wire_envelope_problem(doc, kWireVersion)) return fail(*problem);
    Inventory inv;
    inv.source_state = enum_of<gpu::SourceState>(doc, gpu::source_words::kState);
    inv.source_problem = string(doc, gpu::source_words::kProblem);
    inv.driver_version = string(doc, "driver_version");
    // An older agent's answer has none.
    if (doc.contains("cuda_version")) inv.cuda_version = string(doc, "cuda_version");
    inv.host_pid_namespace = boolean(doc, "host_pid_namespace");
    inv.as_root = boolean(doc, "as_root");
    for (const auto& v : array(doc, "gpus")) inv.gpus.push_back(decode_view(v));
    for (const auto& h : array(doc, "other_holders")) inv.other_holders.push_back(decode_holder(h));
    for (const auto& p : array(doc, "problems"))
      inv.problems.push_back({integer<pid_t>(p, "pid"), string(p, "what")});
    for (const auto& w : array(doc, "warnings")) inv.warnings.push_back(text_of(w, "warnings"));
    // Optional: an agent of an earlier build of this wire version does not send it.
    if (doc.contains("dead_launchers"))
    for (const auto& d : array(doc, "dead_launchers")) {
      const json& died = field(d, "died_at");
      if (!died.is_number()) throw WireError("'died_at': not a number");
      inv.dead_launchers.push_back(proc::DeadParent{integer<pid_t>(d, "pid"), string(d, "comm"),
                                                    string(d, "cmdline"), died.get<double>()});
    }
    inv.processes_scanned = integer<std::size_t>(doc, "processes_scanned");
    inv.source = string(doc, "source");
    inv.agent_pid = integer<pid_t>(doc, "agent_pid");
    // Optional: an agent of an earlier build of this wire version does not send it.
    if (doc.contains("agent_degraded"))
      for (const auto& d : array(doc, "agent_degraded"))
        inv.agent_degraded.push_back(text_of(d, "agent_degraded"));
    // Required: an answer that does not say which node it describes is not used.
    const json& node = field(doc, "node");
    inv.node = {string(node, "dev_dir"), string(node, "proc_root"), string(node, "nvml_library"),
                string(node, "sim_dir")};
    return inv;
  } catch (const WireError& e) {
    return fail(std::string("agent answer: ") + e.what());
  } catch (const json::exception& e) {
    return fail(std::string("agent answer: ") + e.what());
  }
}

}  // namespace gpureap::inventory
