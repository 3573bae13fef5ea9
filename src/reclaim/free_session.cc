#include "reclaim/free_session.h"

#include <algorithm>
#include <memory>
#include <utility>

#include "reclaim/free_lock.h"
#include "reclaim/plan.h"

namespace gpureap::reclaim {

FreeSession free_session(Freer& freer, FreeRequest request) {
  FreeSession out;
  inventory::Node& node = freer.node;
  ReclaimOptions& options = request.options;
  // A unique_ptr, not an optional: g++ 13 takes the optional's FreeLock for
  // maybe-uninitialized under -Werror (as in slurm_command).
  std::unique_ptr<FreeLock> lock;
  if (!request.lock_dir.empty()) {
    auto until = request.lock_until;
    if (options.deadline) until = std::min(until, *options.deadline);
    auto taken = FreeLock::acquire(request.lock_dir, until);
    if (!taken) {
      out.end = SessionEnd::lock_failed;
      out.problem = taken.error().message;
      return out;
    }
    lock = std::make_unique<FreeLock>(std::move(*taken));
  }
  if (request.taken) {
    out.look = std::move(*request.taken);
  } else {
    request.look.process_table = true;  // the plan's table from the look's own listing
    out.look = node.look(request.look.within(options.deadline, node.clock().now()));
  }
  if (request.gpus_from_ids) {
    options.selection.gpus = inventory::gpus_used_by(out.look, options.selection.ids);
    if (options.selection.gpus.empty()) {
      out.end = SessionEnd::no_gpus;
      return out;
    }
  }
  if (request.choose && !request.choose(out.look, options.selection)) {
    out.end = SessionEnd::not_chosen;
    return out;
  }
  const CallerContext caller = CallerContext::of(out.look, node.proc_root());
  out.outcome = free_selection(node, freer.control, out.look, caller, options, request.steps);
  return out;
}

}  // namespace gpureap::reclaim
