#include "audit/recorder.h"

#include <algorithm>
#include <set>
#include <string_view>

#include "report/audit_format.h"

namespace gpureap::audit {
namespace {

bool gpu_selected(const std::vector<reclaim::AuditGpu>& gpus, const gpu::GpuSelector& selector) {
  for (const auto& g : gpus)
    for (const auto& item : selector.items())
      if (item.matches(g.id, g.uuid, g.parent_uuid)) return true;
  return false;
}

const std::vector<reclaim::AuditGpu>* gpus_of(const reclaim::AuditRecord& r) {
  if (const auto* s = std::get_if<reclaim::SignalRecord>(&r.what)) return &s->gpus;
  return nullptr;
}

bool every_gpu(const gpu::GpuSelector& selector) {
  if (selector.empty()) return true;
  return std::any_of(selector.items().begin(), selector.items().end(),
                     [](const auto& item) { return item.kind == gpu::SelectorItem::Kind::all; });
}

}  // namespace

Recorder::Recorder(std::optional<std::string> dir, std::string no_dir_reason, JournalSend journal,
                   ProblemSink problems)
    : dir_(std::move(dir)),
      no_dir_reason_(std::move(no_dir_reason)),
      journal_(std::move(journal)),
      problems_(std::move(problems)) {}

void Recorder::said(bool& failing, bool failed, const std::string& problem) {
  if (failed && !failing && problems_) problems_(problem);
  failing = failed;
}

void Recorder::write(const reclaim::AuditRecord& record) noexcept {
  try {
    if (dir_) {
      auto appended = append_audit_line(*dir_, report::audit_line(record));
      said(file_failing_, !appended,
           appended ? "" : "audit record not written: " + appended.error().message);
    } else {
      said(file_failing_, true, "audit records go to the system log only: " + no_dir_reason_);
    }
  } catch (const std::exception& e) {
    said(file_failing_, true, std::string("audit record not written: ") + e.what());
  } catch (...) {
  }
  try {
    if (journal_) {
      auto sent = journal_(report::journal_fields(record));
      said(journal_failing_, !sent, sent ? "" : sent.error().message);
    }
  } catch (const std::exception& e) {
    said(journal_failing_, true, std::string("audit record not logged: ") + e.what());
  } catch (...) {
  }
}

std::vector<const StoredRecord*> select_records(const std::vector<StoredRecord>& records,
                                                const LogFilter& filter) {
  const bool all_gpus = every_gpu(filter.gpus);
  auto signal_selected = [&](const reclaim::SignalRecord& s) {
    if (filter.pid && s.target.id.pid != *filter.pid) return false;
    return all_gpus || gpu_selected(s.gpus, filter.gpus);
  };
  // Operations with a selected signal: their verdicts come along.
  std::set<std::string> ops;
  for (const auto& r : records)
    if (const auto* s = std::get_if<reclaim::SignalRecord>(&r.record.what);
        s && signal_selected(*s))
      ops.insert(r.record.op);
  const bool narrowed = filter.pid || !all_gpus;
  std::vector<const StoredRecord*> out;
  for (const auto& r : records) {
    if (filter.since && r.record.time < *filter.since) continue;
    const bool selected = gpus_of(r.record)
                              ? signal_selected(std::get<reclaim::SignalRecord>(r.record.what))
                              : !narrowed || ops.contains(r.record.op);
    if (selected) out.push_back(&r);
  }
  return out;
}

}  // namespace gpureap::audit
