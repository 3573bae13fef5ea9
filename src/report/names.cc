#include "report/names.h"

namespace gpureap::report {

std::string_view to_string(reclaim::Outcome o) {
  using reclaim::Outcome;
  switch (o) {
    case Outcome::pending:
      return "";
    case Outcome::exited:
      return "exited";
    case Outcome::exiting:
      return "exiting, its GPU memory back";
    case Outcome::still_running:
      return "still running";
    case Outcome::still_running_after_grace:
      return "still running after grace";
    case Outcome::already_exited:
      return "already exited";
    case Outcome::signal_failed:
      return "signal failed: ";
    case Outcome::already_gone:
      return "already gone";
    case Outcome::pid_reused:
      return "pid reused by another process: not signalled";
    case Outcome::permission_denied:
      return "permission denied: not signalled";
    case Outcome::no_pidfd_support:
      return "no pidfd support in this kernel: not signalled";
    case Outcome::not_signalled:
      return "not signalled: ";
  }
  return "";
}

std::string outcome_text(const reclaim::Action& a) {
  return std::string(to_string(a.outcome)) + a.detail;
}

}  // namespace gpureap::report
