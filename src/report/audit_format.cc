#include "report/audit_format.h"

#include <fmt/format.h>

#include <cmath>
#include <csignal>
#include <cstring>
#include <nlohmann/json.hpp>

#include "report/terminal_text.h"
#include "util/enum_names.h"
#include "util/signal_name.h"
#include "util/units.h"
#include "util/wire_text.h"

namespace gpureap::report {
// A named namespace, not an anonymous one's generic names: the debug build compiles
// report/ in batches (unity build), and these helpers must not meet free_report's.
namespace audit_format {

using nlohmann::json;
using ordered = nlohmann::ordered_json;
using reclaim::AuditRecord;
using reclaim::SignalRecord;
using reclaim::VerdictRecord;

// Process text as a wire value (a string, or {"hex"}), in the ordered document.
ordered text(const std::string& s) {
  return ordered(wire_text(s));
}
// An empty string as null: "no terminal", "no container", "no error".
ordered text_or_null(const std::string& s) {
  return s.empty() ? ordered(nullptr) : text(s);
}
std::string text_back(const json& j, const char* key) {
  const json& v = wire_field(j, key);
  return v.is_null() ? std::string() : text_from_wire(v);
}

// A MIG device adds its instance ids ("gi", "ci") and its GPU's UUID ("gpu_uuid", null
// when unknown); a whole GPU's record has none of them.
ordered gpu_json(const reclaim::AuditGpu& g) {
  ordered out{{"index", g.id.index}, {"uuid", text_or_null(g.uuid)}};
  if (g.id.mig()) {
    out["gi"] = *g.id.gi;
    out["ci"] = g.id.ci ? ordered(*g.id.ci) : ordered(nullptr);
    out["gpu_uuid"] = text_or_null(g.parent_uuid);
  }
  return out;
}
reclaim::AuditGpu gpu_back(const json& j) {
  gpu::DeviceId id{wire_integer<unsigned>(j, "index")};
  if (j.contains("gi")) {
    id.gi = wire_integer<unsigned>(j, "gi");
    id.ci = wire_optional_integer<unsigned>(j, "ci");
  }
  // Records written before "gpu_uuid" was recorded lack it: unknown.
  return reclaim::AuditGpu{id, text_back(j, "uuid"),
                           j.contains("gpu_uuid") ? text_back(j, "gpu_uuid") : std::string()};
}

template <typename E>
E enum_back(const json& j, const char* key);

// A target's lineage verdict (reclaim/target_lineage.h): "verdict" (null for a target
// that holds no GPU), "evidence", "provenance" and "reason", null when not known.
void add_lineage(ordered& target, const std::optional<reclaim::TargetLineage>& l) {
  if (!l) {
    for (const char* key : {"verdict", "evidence", "provenance", "reason", "keeper"})
      target[key] = nullptr;
    return;
  }
  target["verdict"] = enum_name(l->verdict);
  target["evidence"] = l->evidence == proc::OrphanEvidence::none
                           ? ordered(nullptr)
                           : ordered(std::string(enum_name(l->evidence)));
  target["provenance"] = text_or_null(l->provenance);
  target["reason"] = text_or_null(l->reason);
  // A keeper of a dead owner's memory: whose, and how it is known (docs/orphans.md).
  target["keeper"] = l->keeper.empty() ? ordered(nullptr)
                                       : ordered{{"class", l->keeper},
                                                 {"owner_pid", l->kept_owner},
                                                 {"provenance", l->keeper_provenance},
                                                 {"reason", l->keeper_reason}};
}
std::optional<reclaim::TargetLineage> lineage_back(const json& t) {
  if (wire_field(t, "verdict").is_null()) return std::nullopt;
  reclaim::TargetLineage l;
  l.verdict = enum_back<reclaim::LineageVerdict>(t, "verdict");
  if (!wire_field(t, "evidence").is_null())
    l.evidence = enum_back<proc::OrphanEvidence>(t, "evidence");
  l.provenance = text_back(t, "provenance");
  l.reason = text_back(t, "reason");
  // Records written before keepers were recorded have none.
  if (t.contains("keeper") && t["keeper"].is_object()) {
    const json& k = t["keeper"];
    l.keeper = text_back(k, "class");
    l.kept_owner = wire_integer<pid_t>(k, "owner_pid");
    l.keeper_provenance = text_back(k, "provenance");
    l.keeper_reason = text_back(k, "reason");
  }
  return l;
}

template <typename E>
E enum_back(const json& j, const char* key) {
  const json& v = wire_field(j, key);
  if (!v.is_string()) throw WireError(std::string("'") + key + "': not a string");
  auto e = enum_from_name<E>(v.get<std::string>());
  if (!e)
    throw WireError(std::string("'") + key + "': unknown value '" + v.get<std::string>() + "'");
  return *e;
}

std::vector<gpu::DeviceId> ids_of(const std::vector<reclaim::AuditGpu>& gpus) {
  std::vector<gpu::DeviceId> ids;
  for (const auto& g : gpus) ids.push_back(g.id);
  return ids;
}

// "root", or "alice (sudo)" when sudo says who ran it.
std::string who(const reclaim::AuditCaller& c) {
  if (!c.sudo_user.empty() && c.sudo_user != c.user) return c.sudo_user + " (sudo)";
  return c.user.empty() ? std::to_string(c.uid) : c.user;
}

std::string result_text(const SignalRecord& s) {
  switch (s.result) {
    case reclaim::SignalResult::delivered:
      return fmt::format("delivered via {}", enum_name(s.via));
    case reclaim::SignalResult::already_gone:
      return "already gone";
    case reclaim::SignalResult::refused:
      return "refused: " + s.error;
  }
  return "";
}

// A target's lineage verdict in the log's VERDICT column: "orphaned (witnessed)", with
// how it is known (its provenance, else its evidence), "detached", "live"; "-" for a
// target that holds no GPU or a record written before verdicts were kept.
std::string lineage_text(const std::optional<reclaim::TargetLineage>& l) {
  if (!l) return "-";
  // A keeper says so after the verdict: "detached, inheritor (witnessed)".
  const std::string keeper =
      l->keeper.empty() ? "" : fmt::format(", {} ({})", l->keeper, l->keeper_provenance);
  if (!l->provenance.empty()) return terminal_text(reclaim::verdict_words(*l) + keeper);
  std::string text(enum_name(l->verdict));
  if (l->evidence != proc::OrphanEvidence::none)
    text += fmt::format(" ({})", enum_name(l->evidence));
  return terminal_text(text + keeper);
}

std::string verdict_text(const VerdictRecord& v) {
  std::string gpus;
  for (const auto& g : v.gpus) {
    if (!gpus.empty()) gpus += ", ";
    gpus += fmt::format("GPU {} {} -> {}", g.gpu.id, format_bytes(g.before_bytes),
                        g.after_bytes ? format_bytes(*g.after_bytes) : "not measured");
  }
  return fmt::format("{}{} after {} signal{} in {:.2f} s", enum_name(v.verdict),
                     gpus.empty() ? "" : " (" + gpus + ")", v.signals, v.signals == 1 ? "" : "s",
                     v.seconds);
}

}  // namespace audit_format

namespace af = audit_format;

std::string audit_line(const reclaim::AuditRecord& r) {
  const auto& c = r.caller;
  af::ordered doc = {
      {"schema_version", kAuditSchemaVersion},
      {"time", rfc3339(r.time)},
      {"hostname", af::text(r.host)},
      {"record", std::holds_alternative<reclaim::SignalRecord>(r.what) ? "signal" : "verdict"},
      {"actor", enum_name(r.actor)},
      {"op", af::text(r.op)},
      {"caller",
       {{"pid", c.pid},
        {"uid", c.uid},
        {"user", af::text(c.user)},
        {"login_uid", c.login_uid ? af::ordered(*c.login_uid) : af::ordered(nullptr)},
        {"sudo_user", af::text_or_null(c.sudo_user)},
        {"tty", af::text_or_null(c.tty)},
        {"cgroup", af::text_or_null(c.cgroup)},
        {"command", af::text(c.command)},
        {"job_id", af::text_or_null(c.job_id)},
        {"run_id", af::text_or_null(c.run_id)}}},
  };
  if (const auto* s = std::get_if<reclaim::SignalRecord>(&r.what)) {
    const auto& t = s->target;
    doc["target"] = {{"pid", t.id.pid},
                     {"start_time", t.id.start_time},
                     {"comm", af::text(t.comm)},
                     {"uid", t.uid ? af::ordered(*t.uid) : af::ordered(nullptr)},
                     {"user", af::text(t.user)},
                     {"cgroup", af::text_or_null(t.cgroup)},
                     {"container", af::text_or_null(t.container)},
                     {"instance", af::text_or_null(t.instance)},
                     {"cmdline", af::text_or_null(t.cmdline)}};
    af::add_lineage(doc["target"], t.lineage);
    af::ordered gpus = af::ordered::array();
    for (const auto& g : s->gpus) gpus.push_back(af::gpu_json(g));
    doc["gpus"] = std::move(gpus);
    doc["bytes"] = s->bytes;
    doc["signal"] = signal_name(s->signal);
    doc["via"] = enum_name(s->via);
    doc["result"] = enum_name(s->result);
    doc["error"] = af::text_or_null(s->error);
  } else {
    const auto& v = std::get<reclaim::VerdictRecord>(r.what);
    doc["verdict"] = enum_name(v.verdict);
    af::ordered gpus = af::ordered::array();
    for (const auto& g : v.gpus) {
      af::ordered o = af::gpu_json(g.gpu);
      o["freed"] = g.freed;
      o["measured"] = g.measured;
      o["before_bytes"] = g.before_bytes;
      o["after_bytes"] = g.after_bytes ? af::ordered(*g.after_bytes) : af::ordered(nullptr);
      gpus.push_back(std::move(o));
    }
    doc["gpus"] = std::move(gpus);
    doc["signals"] = v.signals;
    // Milliseconds' precision: no float noise in a record that is read by people.
    doc["seconds"] = std::round(v.seconds * 1000) / 1000;
  }
  // Every string went through wire_text: valid UTF-8, so dump() cannot throw on it.
  return doc.dump() + "\n";
}

Result<reclaim::AuditRecord> parse_audit_line(std::string_view line) {
  af::json j = af::json::parse(line, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return fail("not a JSON object");
  try {
    const int version = wire_integer<int>(j, "schema_version");
    if (version != kAuditSchemaVersion && version != 1)
      return fail("schema_version is not 1 or " + std::to_string(kAuditSchemaVersion));
    reclaim::AuditRecord r;
    const af::json& time = wire_field(j, "time");
    auto when = time.is_string() ? parse_time(time.get<std::string>()) : std::nullopt;
    if (!when) return fail("'time': not an RFC 3339 time");
    r.time = *when;
    r.host = af::text_back(j, version == 1 ? "host" : "hostname");
    r.actor = af::enum_back<reclaim::AuditActor>(j, "actor");
    r.op = af::text_back(j, "op");
    const af::json& c = wire_field(j, "caller");
    r.caller.pid = wire_integer<pid_t>(c, "pid");
    r.caller.uid = wire_integer<uid_t>(c, "uid");
    r.caller.user = af::text_back(c, "user");
    r.caller.login_uid = wire_optional_integer<uid_t>(c, "login_uid");
    r.caller.sudo_user = af::text_back(c, "sudo_user");
    r.caller.tty = af::text_back(c, "tty");
    r.caller.cgroup = af::text_back(c, "cgroup");
    r.caller.command = af::text_back(c, "command");
    r.caller.job_id = af::text_back(c, "job_id");
    r.caller.run_id = af::text_back(c, "run_id");
    const af::json& kind = wire_field(j, "record");
    const af::json& gpus = wire_field(j, "gpus");
    if (!gpus.is_array()) return fail("'gpus': not an array");
    if (kind == "signal") {
      reclaim::SignalRecord s;
      const af::json& t = wire_field(j, "target");
      s.target.id.pid = wire_integer<pid_t>(t, "pid");
      s.target.id.start_time = wire_integer<std::uint64_t>(t, "start_time");
      s.target.comm = af::text_back(t, "comm");
      s.target.uid = wire_optional_integer<uid_t>(t, "uid");
      s.target.user = af::text_back(t, "user");
      s.target.cgroup = af::text_back(t, "cgroup");
      s.target.container = af::text_back(t, "container");
      s.target.instance = af::text_back(t, "instance");
      if (version > 1) {
        s.target.cmdline = af::text_back(t, "cmdline");
        s.target.lineage = af::lineage_back(t);
      }
      for (const auto& g : gpus) s.gpus.push_back(af::gpu_back(g));
      s.bytes = wire_integer<std::uint64_t>(j, "bytes");
      const af::json& sig = wire_field(j, "signal");
      auto number = sig.is_string() ? signal_number(sig.get<std::string>()) : std::nullopt;
      if (!number) return fail("'signal': not a signal name");
      s.signal = *number;
      s.via = af::enum_back<reclaim::Delivery>(j, "via");
      s.result = af::enum_back<reclaim::SignalResult>(j, "result");
      s.error = af::text_back(j, "error");
      r.what = std::move(s);
    } else if (kind == "verdict") {
      reclaim::VerdictRecord v;
      v.verdict = af::enum_back<reclaim::AuditVerdict>(j, "verdict");
      for (const auto& g : gpus)
        v.gpus.push_back(reclaim::VerdictGpu{
            af::gpu_back(g), wire_boolean(g, "freed"), wire_boolean(g, "measured"),
            wire_integer<std::uint64_t>(g, "before_bytes"),
            wire_optional_integer<std::uint64_t>(g, "after_bytes")});
      v.signals = wire_integer<std::size_t>(j, "signals");
      const af::json& seconds = wire_field(j, "seconds");
      if (!seconds.is_number()) return fail("'seconds': not a number");
      v.seconds = seconds.get<double>();
      r.what = std::move(v);
    } else {
      return fail("'record': neither signal nor verdict");
    }
    return r;
  } catch (const WireError& e) {
    return fail(e.what());
  } catch (const af::json::exception& e) {
    return fail(e.what());
  }
}

std::string audit_message(const reclaim::AuditRecord& r) {
  const auto& c = r.caller;
  std::string by = fmt::format("{} by {} (pid {}{})", enum_name(r.actor), terminal_text(af::who(c)),
                               c.pid, c.job_id.empty() ? "" : ", job " + terminal_text(c.job_id));
  if (const auto* s = std::get_if<reclaim::SignalRecord>(&r.what)) {
    const auto& t = s->target;
    std::string holding;
    if (!s->gpus.empty())
      holding = fmt::format(" holding {} on GPU {}", s->bytes ? format_bytes(s->bytes) : "memory",
                            gpu::device_list(af::ids_of(s->gpus)));
    const std::string verdict =
        t.lineage ? fmt::format(", {}", af::lineage_text(t.lineage)) : std::string();
    return fmt::format("{}: {} to pid {} ({}, user {}{}){}: {}", by, signal_name(s->signal),
                       t.id.pid, terminal_text(t.comm), terminal_text(t.user), verdict, holding,
                       terminal_text(af::result_text(*s)));
  }
  return fmt::format("{}: {}", by, af::verdict_text(std::get<reclaim::VerdictRecord>(r.what)));
}

int audit_priority(const reclaim::AuditRecord& r) {
  constexpr int kWarning = 4, kNotice = 5, kInfo = 6;
  if (const auto* s = std::get_if<reclaim::SignalRecord>(&r.what)) {
    switch (s->result) {
      case reclaim::SignalResult::delivered:
        return kNotice;
      case reclaim::SignalResult::already_gone:
        return kInfo;
      case reclaim::SignalResult::refused:
        return kWarning;
    }
  }
  const auto* v = std::get_if<reclaim::VerdictRecord>(&r.what);
  return v && v->verdict == reclaim::AuditVerdict::freed ? kNotice : kWarning;
}

std::vector<std::string> journal_fields(const reclaim::AuditRecord& r) {
  std::vector<std::string> f;
  auto add = [&](std::string_view name, const std::string& value) {
    if (!value.empty()) f.push_back(fmt::format("{}={}", name, value));
  };
  // gpureap's own fields, GPUREAP_<NAME> in the journal (not environment variables: the
  // names are written without the prefix, so no source line reads as one).
  auto ours = [&](std::string_view name, const std::string& value) {
    add(fmt::format("GPUREAP_{}", name), value);
  };
  add("MESSAGE", audit_message(r));
  add("PRIORITY", std::to_string(audit_priority(r)));
  add("SYSLOG_IDENTIFIER", "gpureap");
  add("SYSLOG_FACILITY", "10");  // authpriv: who signalled whom is an audit record
  ours("RECORD",
      std::holds_alternative<reclaim::SignalRecord>(r.what) ? "signal" : "verdict");
  ours("ACTOR", std::string(enum_name(r.actor)));
  ours("OP", r.op);
  const auto& c = r.caller;
  ours("CALLER_PID", std::to_string(c.pid));
  ours("CALLER_UID", std::to_string(c.uid));
  ours("CALLER_USER", c.user);
  if (c.login_uid) ours("CALLER_LOGIN_UID", std::to_string(*c.login_uid));
  ours("CALLER_SUDO_USER", c.sudo_user);
  ours("CALLER_TTY", c.tty);
  ours("CALLER_CGROUP", c.cgroup);
  ours("CALLER_COMMAND", c.command);
  ours("JOB_ID", c.job_id);
  ours("RUN_ID", c.run_id);
  if (const auto* s = std::get_if<reclaim::SignalRecord>(&r.what)) {
    const auto& t = s->target;
    ours("TARGET_PID", std::to_string(t.id.pid));
    ours("TARGET_START_TIME", std::to_string(t.id.start_time));
    ours("TARGET_COMM", t.comm);
    if (t.uid) ours("TARGET_UID", std::to_string(*t.uid));
    ours("TARGET_USER", t.user);
    ours("TARGET_CGROUP", t.cgroup);
    ours("TARGET_CONTAINER", t.container);
    ours("TARGET_INSTANCE", t.instance);
    ours("TARGET_CMDLINE", t.cmdline);
    if (t.lineage) {
      ours("TARGET_VERDICT", std::string(enum_name(t.lineage->verdict)));
      if (t.lineage->evidence != proc::OrphanEvidence::none)
        ours("TARGET_EVIDENCE", std::string(enum_name(t.lineage->evidence)));
      ours("TARGET_PROVENANCE", t.lineage->provenance);
      ours("TARGET_KEEPER", t.lineage->keeper);
      if (t.lineage->kept_owner) ours("TARGET_KEPT_OWNER", std::to_string(t.lineage->kept_owner));
    }
    // One field per GPU: `journalctl GPUREAP_GPU=3` matches a record of GPUs 0 and 3.
    for (const auto& g : s->gpus) {
      ours("GPU", gpu::device_text(g.id));
      ours("GPU_UUID", g.uuid);
    }
    if (s->bytes) ours("BYTES", std::to_string(s->bytes));
    ours("SIGNAL", signal_name(s->signal));
    ours("VIA", std::string(enum_name(s->via)));
    ours("RESULT", std::string(enum_name(s->result)));
    ours("ERROR", s->error);
  } else {
    const auto& v = std::get<reclaim::VerdictRecord>(r.what);
    ours("VERDICT", std::string(enum_name(v.verdict)));
    for (const auto& g : v.gpus) {
      ours("GPU", gpu::device_text(g.gpu.id));
      ours("GPU_UUID", g.gpu.uuid);
    }
    ours("SIGNALS", std::to_string(v.signals));
    ours("SECONDS", fmt::format("{:.3f}", v.seconds));
  }
  return f;
}

namespace {

// The table fitted to a terminal (or --wide): the signal rows through render_table, each
// a line, and a free's verdict lines spliced in between them in the records' order.
std::string fitted_audit_table(const std::vector<reclaim::AuditRecord>& records,
                               const Style& style, TableWidth width) {
  const std::vector<TableColumn> columns = {
      {"TIME"},          {"ACTOR", false, 4}, {"BY", false, 1, 14}, {"PID", true},
      {"USER", false, 3, 10}, {"GPU", false, 6}, {"MEMORY", true, 2}, {"SIGNAL", false, 5},
      {"RESULT", false, 8}, {"VERDICT"},         {"INSTANCE", false, 7, 12}, {"COMMAND"}};
  std::vector<std::vector<TableCell>> rows;
  for (const auto& r : records) {
    const auto* s = std::get_if<reclaim::SignalRecord>(&r.what);
    if (!s) continue;
    const auto& t = s->target;
    const bool live = t.lineage && t.lineage->verdict == reclaim::LineageVerdict::live;
    rows.push_back({{local_time_text(r.time)},
                    {std::string(enum_name(r.actor))},
                    {af::who(r.caller)},
                    {std::to_string(t.id.pid)},
                    {t.user},
                    {s->gpus.empty() ? "-" : gpu::device_list(af::ids_of(s->gpus))},
                    {s->bytes ? format_bytes(s->bytes) : "-"},
                    {signal_name(s->signal)},
                    {af::result_text(*s), s->result == reclaim::SignalResult::refused ? "31" : ""},
                    {af::lineage_text(t.lineage), live ? "33" : ""},
                    {t.instance.empty() ? "-" : t.instance},
                    {t.cmdline.empty() ? t.comm : t.cmdline}});
  }
  const std::string table = render_table(columns, rows, style, "", width);
  std::vector<std::string_view> lines;
  for (std::size_t start = 0, nl; (nl = table.find('\n', start)) != std::string::npos;
       start = nl + 1)
    lines.push_back(std::string_view(table).substr(start, nl - start));
  std::string out = std::string(lines.empty() ? "" : lines[0]) + "\n";
  std::size_t next = 1;
  const auto limit = width.limit();
  for (const auto& r : records) {
    if (std::holds_alternative<reclaim::SignalRecord>(r.what)) {
      if (next < lines.size()) out += std::string(lines[next++]) + "\n";
      continue;
    }
    const auto& v = std::get<reclaim::VerdictRecord>(r.what);
    std::string text = local_time_text(r.time) + " " + std::string(enum_name(r.actor)) + " " +
                       af::who(r.caller) + " -> " + af::verdict_text(v);
    text = limit ? terminal_text(text, *limit) : terminal_text(text);
    out += (v.verdict == reclaim::AuditVerdict::freed ? style.green(text) : style.yellow(text)) +
           "\n";
  }
  return out;
}

}  // namespace

std::string audit_table(const std::vector<reclaim::AuditRecord>& records, const Style& style,
                        TableWidth width) {
  if (!width.fixed()) return fitted_audit_table(records, style, width);
  // VERDICT and INSTANCE answer "did gpureap kill a live server?"; COMMAND is the
  // target's command line (its comm in a record that has none), last: it is the long one.
  constexpr const char* kRow =
      "{:<23}  {:<12}  {:<14}  {:<8} {:<10} {:<5} {:>10}  {:<7}  {:<19}  {:<22}  {:<8}  {}\n";
  std::string out =
      style.dim(fmt::format(kRow, "TIME", "ACTOR", "BY", "PID", "USER", "GPU", "MEMORY", "SIGNAL",
                            "RESULT", "VERDICT", "INSTANCE", "COMMAND"));
  for (const auto& r : records) {
    const std::string time = local_time_text(r.time);
    const std::string by = terminal_text(af::who(r.caller), 14);
    if (const auto* s = std::get_if<reclaim::SignalRecord>(&r.what)) {
      const auto& t = s->target;
      std::string result = terminal_text(af::result_text(*s));
      if (s->result == reclaim::SignalResult::refused) result = style.red(result);
      std::string verdict = af::lineage_text(t.lineage);
      if (t.lineage && t.lineage->verdict == reclaim::LineageVerdict::live)
        verdict = style.yellow(fmt::format("{:<22}", verdict));  // padded before colour
      out += fmt::format(
          kRow, time, enum_name(r.actor), by, t.id.pid, terminal_text(t.user, 10),
          s->gpus.empty() ? "-" : gpu::device_list(af::ids_of(s->gpus)),
          s->bytes ? format_bytes(s->bytes) : "-", signal_name(s->signal), result, verdict,
          t.instance.empty() ? "-" : terminal_text(t.instance, 8),
          terminal_text(t.cmdline.empty() ? t.comm : t.cmdline));
    } else {
      const auto& v = std::get<reclaim::VerdictRecord>(r.what);
      std::string text = "-> " + af::verdict_text(v);
      out += fmt::format(
          "{:<23}  {:<12}  {:<14}  {}\n", time, enum_name(r.actor), by,
          v.verdict == reclaim::AuditVerdict::freed ? style.green(text) : style.yellow(text));
    }
  }
  return out;
}

}  // namespace gpureap::report
