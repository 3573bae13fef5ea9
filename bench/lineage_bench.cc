// What the agent's lineage table (proc/event_lineage.h) keeps, and what feeding it costs,
// at N processes started while it listens: `gpureap_lineage_bench [--procs N]
// [--launchers L]` (root: the proc connector). L launchers (forks of this program) each
// fork N/L sleeping workers; the kernel's events are drained into an EventLineage with
// the agent's /proc reader, as the agent does. Then every launcher is SIGKILLed (the
// shape the table exists for: dead parents kept for their living workers), and at last
// every worker is killed (the table must empty). Prints one JSON object: entries, the
// table's own count of bytes and the allocator's (mallinfo2), per entry (a process the
// table keeps: these, and whatever else the machine forked meanwhile), and the CPU
// time of the drains. Kills only the processes it started, by pid.

#include <malloc.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "proc/event_lineage.h"
#include "proc/proc_events.h"

namespace {

using gpureap::proc::EventLineage;
using gpureap::proc::ProcEvents;

double cpu_seconds() {
  timespec ts{};
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

std::size_t heap_in_use() { return mallinfo2().uordblks; }

std::string comm_of(pid_t pid) {
  std::FILE* f = std::fopen(("/proc/" + std::to_string(pid) + "/comm").c_str(), "r");
  if (!f) return {};
  char buf[64] = {};
  const bool ok = std::fgets(buf, sizeof buf, f) != nullptr;
  std::fclose(f);
  return ok ? std::string(buf) : std::string();
}

struct Feeder {
  ProcEvents& events;
  EventLineage& table;
  double cpu = 0;
  std::size_t drained = 0;
  bool lost = false;
  // Drains until `done` holds or nothing came for a while (events are asynchronous).
  template <typename Done>
  void until(Done done) {
    auto quiet_since = std::chrono::steady_clock::now();
    const auto give_up = quiet_since + std::chrono::seconds(60);  // a node never quiet
    for (;;) {
      const double c0 = cpu_seconds();
      auto batch = events.drain();
      if (!batch) {
        std::fprintf(stderr, "drain: %s\n", batch.error().message.c_str());
        std::exit(1);
      }
      lost = lost || batch->lost;
      drained += batch->events.size();
      (void)table.apply(*batch, 0);
      cpu += cpu_seconds() - c0;
      if (!batch->events.empty()) quiet_since = std::chrono::steady_clock::now();
      if (done()) return;
      const auto now = std::chrono::steady_clock::now();
      if (now - quiet_since > std::chrono::seconds(5) || now > give_up) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
};

}  // namespace

int main(int argc, char** argv) {
  int procs = 10000, launchers = 100;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--procs") == 0) procs = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--launchers") == 0) launchers = std::atoi(argv[i + 1]);
  }
  if (procs <= 0 || launchers <= 0 || launchers > procs) {
    std::fprintf(stderr, "--procs N --launchers L: 0 < L <= N\n");
    return 2;
  }
  auto events = ProcEvents::open();
  if (!events) {
    std::fprintf(stderr, "the proc connector: %s (needs root)\n", events.error().message.c_str());
    return 1;
  }
  const std::size_t heap0 = heap_in_use();
  EventLineage table(gpureap::proc::proc_identity_reader("/proc"));
  Feeder feed{*events, table};
  const int per = procs / launchers;
  std::vector<pid_t> launcher_pids;
  for (int l = 0; l < launchers; ++l) {
    pid_t pid = ::fork();
    if (pid == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      for (int w = 0; w < per; ++w)
        if (::fork() == 0) {
          // A worker outlives its launcher (the shape under test); should this bench
          // die before it kills them, SIGALRM ends them.
          ::alarm(900);
          ::pause();
          ::_exit(0);
        }
      ::pause();
      ::_exit(0);
    }
    launcher_pids.push_back(pid);
    feed.until([] { return true; });  // one drain, as the agent's, between bursts
  }
  const std::size_t started = static_cast<std::size_t>(launchers) * (per + 1);
  feed.until([&] { return table.size() >= started; });
  const std::size_t live_entries = table.size(), live_bytes = table.bytes();
  const std::size_t live_heap = heap_in_use() - heap0;
  const double live_cpu = feed.cpu;

  for (pid_t l : launcher_pids) ::kill(l, SIGKILL);
  for (pid_t l : launcher_pids) ::waitpid(l, nullptr, 0);
  feed.until([&] { return table.dead() >= launcher_pids.size(); });
  const std::size_t dead_entries = table.size(), dead_parents = table.dead();
  const std::size_t dead_bytes = table.bytes(), dead_heap = heap_in_use() - heap0;

  // The workers, by pid: living processes whose dead parent is one of this bench's
  // launchers and that still carry this bench's name (a fork keeps it). Nothing else is
  // signalled: the table also holds the rest of the machine's forks.
  const std::string own_comm = comm_of(::getpid());
  const std::set<pid_t> ours(launcher_pids.begin(), launcher_pids.end());
  std::vector<pid_t> workers;
  for (pid_t pid = 2; pid < 4194304 && static_cast<int>(workers.size()) < launchers * per; ++pid)
    if (auto d = table.dead_parent_of(pid);
        d && ours.contains(d->dead.pid) && !own_comm.empty() && comm_of(pid) == own_comm)
      workers.push_back(pid);
  for (pid_t w : workers) ::kill(w, SIGKILL);
  feed.until([&] { return table.size() == 0; });

  std::printf(
      "{\"processes\": %zu, \"launchers\": %d, \"lost_events\": %s, \"events\": %zu,\n"
      " \"alive\": {\"entries\": %zu, \"table_bytes\": %zu, \"heap_bytes\": %zu, "
      "\"bytes_per_process\": %.1f, \"heap_bytes_per_process\": %.1f},\n"
      " \"launchers_killed\": {\"entries\": %zu, \"dead_kept\": %zu, \"table_bytes\": %zu, "
      "\"heap_bytes\": %zu, \"bytes_per_process\": %.1f, \"heap_bytes_per_process\": %.1f},\n"
      " \"all_gone\": {\"entries\": %zu, \"workers_killed\": %zu},\n"
      " \"drain_cpu_seconds\": {\"starting\": %.4f, \"total\": %.4f, \"per_event_us\": %.2f}}\n",
      started, launchers, feed.lost ? "true" : "false", feed.drained, live_entries, live_bytes,
      live_heap, static_cast<double>(live_bytes) / static_cast<double>(live_entries),
      static_cast<double>(live_heap) / static_cast<double>(live_entries), dead_entries, dead_parents,
      dead_bytes, dead_heap, static_cast<double>(dead_bytes) / static_cast<double>(dead_entries),
      static_cast<double>(dead_heap) / static_cast<double>(dead_entries), table.size(), workers.size(),
      live_cpu, feed.cpu, feed.drained ? feed.cpu * 1e6 / static_cast<double>(feed.drained) : 0.0);
  return table.size() == 0 && !feed.lost ? 0 : 1;
}
