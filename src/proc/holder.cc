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
  }
  return {};
}

}  // namespace gpureap::proc
