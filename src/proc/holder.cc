#include "proc/holder.h"

namespace gpureap::proc {

std::string_view enum_name(NodeKind kind) {
  switch (kind) {
    case NodeKind::gpu: return "gpu";
    case NodeKind::ctl: return "ctl";
    case NodeKind::uvm: return "uvm";
    case NodeKind::uvm_tools: return "uvm_tools";
    case NodeKind::mig_cap: return "mig_cap";
    case NodeKind::modeset: return "modeset";
    case NodeKind::other: return "other";
  }
  return {};
}

std::string_view enum_name(FoundBy found_by) {
  switch (found_by) {
    case FoundBy::source: return "nvml";
    case FoundBy::fd: return "fd";
    case FoundBy::mapping: return "mapping";
  }
  return {};
}

std::string_view enum_name(OrphanEvidence evidence) {
  switch (evidence) {
    case OrphanEvidence::none: return "none";
    case OrphanEvidence::group: return "group";
    case OrphanEvidence::title: return "title";
    case OrphanEvidence::siblings: return "siblings";
    case OrphanEvidence::run_gone: return "run_gone";
    case OrphanEvidence::witnessed: return "witnessed";
  }
  return {};
}

std::string_view enum_name(Provenance provenance) {
  switch (provenance) {
    case Provenance::none: return "none";
    case Provenance::inferred: return "inferred";
    case Provenance::witnessed: return "witnessed";
    case Provenance::owned: return "owned";
  }
  return {};
}

std::string_view enum_name(KeeperClass keeper) {
  switch (keeper) {
    case KeeperClass::none: return "none";
    case KeeperClass::inheritor: return "inheritor";
    case KeeperClass::importer: return "importer";
  }
  return {};
}

std::string orphan_verdict(std::string_view provenance) {
  if (provenance.empty() || provenance == "none") return "orphaned";
  return "orphaned (" + std::string(provenance) + ")";
}

std::string orphan_verdict(Provenance provenance) { return orphan_verdict(enum_name(provenance)); }

std::string_view provenance_allows(Provenance provenance) {
  switch (provenance) {
    case Provenance::none: return "";
    case Provenance::inferred:
      return "inferred (one look): a person may free it; nothing unattended will";
    case Provenance::witnessed:
      return "witnessed (seen to die): a person or the reaper may free it";
    case Provenance::owned:
      return "owned (its gpureap run's cgroup): a person or the reaper may free it";
  }
  return "";
}

std::string verdict_words(const Holder& h) {
  if (h.orphaned) return orphan_verdict(h.provenance);
  return h.detached ? "detached" : "";
}

}  // namespace gpureap::proc
