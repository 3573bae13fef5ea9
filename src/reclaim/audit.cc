#include "reclaim/audit.h"

#include <fmt/format.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdlib>

#include "proc/proc_files.h"
#include "proc/proc_parse.h"
#include "proc/process_table.h"
#include "util/host_name.h"
#include "util/text.h"

namespace gpureap::reclaim {
namespace {

std::string read_text(const std::string& path) {
  return proc::read_small_file(path);
}

// "pts/3", "tty1", "ttyS0", or "136:3" for a terminal device number (stat field 7).
std::string tty_name(int tty_nr) {
  if (tty_nr == 0) return "";
  const auto dev = static_cast<dev_t>(static_cast<unsigned>(tty_nr));
  const unsigned major = ::major(dev), minor = ::minor(dev);
  if (major >= 136 && major <= 143) return fmt::format("pts/{}", (major - 136) * 256 + minor);
  if (major == 4)
    return minor < 64 ? fmt::format("tty{}", minor) : fmt::format("ttyS{}", minor - 64);
  return fmt::format("{}:{}", major, minor);
}

std::string cgroup_of(const std::string& dir) {
  return proc::pick_cgroup_path(proc::parse_cgroup(read_text(dir + "/cgroup")));
}

}  // namespace

std::string_view enum_name(AuditActor actor) {
  switch (actor) {
    case AuditActor::free:
      return "free";
    case AuditActor::watch_reaper:
      return "watch-reaper";
    case AuditActor::slurm_epilog:
      return "slurm-epilog";
    case AuditActor::slurm_prolog:
      return "slurm-prolog";
    case AuditActor::run_teardown:
      return "run-teardown";
    case AuditActor::top:
      return "top";
  }
  return {};
}

std::string_view enum_name(Delivery via) {
  switch (via) {
    case Delivery::pidfd:
      return "pidfd";
    case Delivery::cgroup_kill:
      return "cgroup.kill";
  }
  return {};
}

std::string_view enum_name(SignalResult result) {
  switch (result) {
    case SignalResult::delivered:
      return "delivered";
    case SignalResult::already_gone:
      return "already_gone";
    case SignalResult::refused:
      return "refused";
  }
  return {};
}

std::string_view enum_name(AuditVerdict verdict) {
  switch (verdict) {
    case AuditVerdict::freed:
      return "freed";
    case AuditVerdict::still_held:
      return "still_held";
    case AuditVerdict::unmeasured:
      return "unmeasured";
    case AuditVerdict::interrupted:
      return "interrupted";
  }
  return {};
}

AuditCaller AuditCaller::current(const std::string& proc_root) {
  AuditCaller c;
  c.pid = ::getpid();
  c.uid = ::getuid();
  c.user = proc::user_name(c.uid);
  if (proc_root.empty()) return c;
  const std::string self = proc_root + "/self";
  std::string login = std::string(trim(read_text(self + "/loginuid")));
  std::uint32_t login_uid = 0;
  auto [end, ec] = std::from_chars(login.data(), login.data() + login.size(), login_uid);
  // 4294967295 ((uid_t)-1): no login session (a service, a container's init).
  if (ec == std::errc{} && end == login.data() + login.size() && login_uid != 4294967295u)
    c.login_uid = login_uid;
  if (const char* sudo = std::getenv("SUDO_USER")) c.sudo_user = sudo;
  if (auto stat = proc::parse_stat(read_text(self + "/stat"))) c.tty = tty_name(stat->tty_nr);
  c.cgroup = cgroup_of(self);
  c.command = proc::format_cmdline(read_text(self + "/cmdline"));
  return c;
}

AuditTarget describe_process(const proc::ProcessId& id, const std::string& proc_root,
                             std::string comm, std::string user) {
  AuditTarget t;
  t.id = id;
  t.comm = std::move(comm);
  t.user = std::move(user);
  if (proc_root.empty()) return t;
  const std::string dir = fmt::format("{}/{}", proc_root, id.pid);
  if (t.comm.empty()) {
    t.comm = read_text(dir + "/comm");
    if (!t.comm.empty() && t.comm.back() == '\n') t.comm.pop_back();
  }
  t.uid = proc::parse_status(read_text(dir + "/status")).effective_uid;
  if (t.user.empty() && t.uid) t.user = proc::user_name(*t.uid);
  t.cgroup = cgroup_of(dir);
  t.container = proc::container_hint(t.cgroup);
  return t;
}

AuditTrail::AuditTrail(AuditSink& sink, AuditActor actor, AuditCaller caller, WallClock wall_clock)
    : sink_(sink),
      actor_(actor),
      caller_(std::move(caller)),
      wall_clock_(wall_clock ? std::move(wall_clock)
                             : WallClock([] { return std::chrono::system_clock::now(); })),
      host_(host_name()) {
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(wall_clock_().time_since_epoch())
          .count();
  op_ = fmt::format("{}-{}", caller_.pid, ms);
}

void AuditTrail::know_gpu(gpu::DeviceId id, std::string uuid, std::string parent_uuid) {
  if (!uuid.empty()) uuids_[id] = AuditGpu{id, std::move(uuid), std::move(parent_uuid)};
}

AuditGpu AuditTrail::gpu(gpu::DeviceId id) const {
  auto it = uuids_.find(id);
  return it == uuids_.end() ? AuditGpu{id, ""} : it->second;
}

AuditRecord AuditTrail::record() const {
  AuditRecord r;
  r.time = wall_clock_();
  r.host = host_;
  r.actor = actor_;
  r.op = op_;
  r.caller = caller_;
  return r;
}

void AuditTrail::signal(const AuditTarget& target, const std::vector<gpu::DeviceId>& gpus,
                        std::uint64_t bytes, int sig, Delivery via, const Result<void>& sent) {
  // Building the record may allocate; a failure to record never stops the signal
  // (it has been sent already) nor the free.
  try {
    SignalRecord s;
    s.target = target;
    for (auto id : gpus) s.gpus.push_back(gpu(id));
    s.bytes = bytes;
    s.signal = sig;
    s.via = via;
    if (!sent) {
      s.result =
          sent.error().sys_errno == ESRCH ? SignalResult::already_gone : SignalResult::refused;
      if (s.result == SignalResult::refused) s.error = sent.error().message;
    }
    AuditRecord r = record();
    r.what = std::move(s);
    ++signals_;
    sink_.write(r);
  } catch (...) {
  }
}

void AuditTrail::verdict(AuditVerdict verdict, const std::vector<GpuRelease>& gpus,
                         double seconds) {
  try {
    VerdictRecord v;
    v.verdict = verdict;
    for (const auto& g : gpus) {
      AuditGpu ag = gpu(g.gpu);
      if (ag.uuid.empty()) ag.uuid = g.uuid;
      v.gpus.push_back(VerdictGpu{ag, g.freed, g.measured, g.before, g.used});
    }
    v.signals = signals_;
    v.seconds = seconds;
    AuditRecord r = record();
    r.what = std::move(v);
    sink_.write(r);
  } catch (...) {
  }
}

}  // namespace gpureap::reclaim
