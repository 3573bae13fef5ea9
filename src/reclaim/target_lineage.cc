#include "reclaim/target_lineage.h"

namespace gpureap::reclaim {

std::string_view enum_name(LineageVerdict verdict) {
  switch (verdict) {
    case LineageVerdict::orphaned:
      return "orphaned";
    case LineageVerdict::detached:
      return "detached";
    case LineageVerdict::live:
      return "live";
  }
  return {};
}

std::string verdict_words(const TargetLineage& l) {
  if (l.verdict == LineageVerdict::orphaned) return proc::orphan_verdict(l.provenance);
  return std::string(enum_name(l.verdict));
}

TargetLineage lineage_of(const proc::Holder& h) {
  TargetLineage out;
  if (h.orphaned) {
    out.verdict = LineageVerdict::orphaned;
    out.evidence = h.orphan_evidence;
    out.reason = h.orphan_reason;
  } else if (h.detached) {
    out.verdict = LineageVerdict::detached;
    out.reason = h.detached_reason;
  }
  // How the orphan verdict is known (proc::Provenance): "" when not orphaned.
  if (h.orphaned) out.provenance = std::string(enum_name(h.provenance));
  if (h.keeper != proc::KeeperClass::none) {
    out.keeper = std::string(enum_name(h.keeper));
    out.keeper_provenance = std::string(enum_name(h.keeper_provenance));
    out.kept_owner = h.kept_owner;
    out.keeper_reason = h.keeper_reason;
  }
  return out;
}

}  // namespace gpureap::reclaim
