#include "report/man_sections.h"

namespace gpureap::report {
namespace {

// What `gpureap status` prints, as src/report/status_table.cc prints it. A word changed
// there is changed here (Docs.StatusFieldsExplainEveryColumn checks the column names).
constexpr const char* kStatusFields = R"(Each GPU is a heading line, a memory line, a table of the processes that
hold it, and the marks below them. The same facts, by name, are in
\fBgpureap \-\-json status\fR (\fI/usr/share/doc/gpureap/json\-schema.md\fR).
.SS The GPU table
When a server spans GPUs, or with \fB\-\-compact\fR, the GPUs come first as one row each, in
index order: \fBGPU USED TOTAL STATE\fR, then per holder \fBINSTANCE\fR (the key of its
server instance, below), \fBPID\fR, \fBPARENT\fR (with \fBORPHAN\fR or \fBDETACHED\fR) and
\fBROLE\fR; \fBVENDOR\fR on a node with GPUs of two vendors.
.SS Instances
One line per server instance (the processes of one server: a process group, the children
of a dead launcher, a \fBgpureap run\fR): its engine, its launcher by its command line
(alive or gone), the model and port that command line names, its members and ranks, its
GPUs and memory, and \fBORPHANED\fR, \fBDETACHED\fR or \fBLIVE\fR. Under it, the verdict of
its members (VERDICTS AND EVIDENCE), what their provenance permits, and the command that
frees or replaces it. Its key is a process group id, a \fBgpureap run\fR id or
\fBparent\-\fR\fIPID\fR; a key that two containers share is named by each container,
\fIKEY\fR\fB@\fR\fICONTAINER\fR (\fBsglang\-1@docker:3f2a1b4c5d6e\fR), the form
\fB\-\-instance\fR and \fBrun \-\-replace\fR take.
.SS The GPU
.TP
.B GPU 3  NVIDIA H200  00000000:3A:00.0  /dev/nvidia3  GPU\-7282...
NVML index, model, PCI bus id, device node (its minor is not always the index) and UUID.
On a GPU in MIG mode each MIG device is a GPU of its own: \fBGPU 0/gi1/ci0\fR is GPU 0's
GPU instance 1, compute instance 0, the spelling \fB\-\-gpu\fR takes, followed by
"MIG device of GPU\-..." (\fI/usr/share/doc/gpureap/mig.md\fR).
.TP
.B used 90.0 GiB of 96.0 GiB  baseline 512 MiB (est.)  held, 8 holders (89.5 GiB)
Used and total memory (NVML). The baseline is what the idle GPU uses (the driver's own
share): recorded when gpureap saw the GPU idle; \fB(est.)\fR when it never did and the
figure is an estimate. Then the GPU's state, the word \fBtop\fR and \fB\-\-json\fR's
\fBstate\fR use: \fBfree\fR (at the baseline, no process uses it), \fBheld\fR,
\fBreleasing\fR, \fBno_holder\fR, \fBdriver_held\fR, \fBghost\fR (busy with no process, below),
\fBoutside_namespace\fR, \fBunknown\fR or \fBnot_measured\fR; then the holders and the
memory NVML gives them.
.TP
.B power 75 W of a 700 W cap; clocks held down by power brake; 0 uncorrected ECC errors ...
With \fB\-v\fR, the card's health as NVML gives it: the draw and the enforced power
limit, why the clocks are held down now (NVML's clock event reasons: power cap, hardware
slowdown, thermal, power brake, ...) and the uncorrected ECC errors since the driver
loaded; each part only where the driver can say. Marked \fB!\fR when heat, a hardware
slowdown, the power brake or an ECC error needs a look (\fBtop\fR names those on its
legend line). NVML keeps no Xid count: an Xid is an event, in the kernel log.
.TP
.B NVML's latest per-process sample (a hint): 4242 SM 37 %, ...
With \fB\-v\fR, each holder's share of the SM in NVML's latest per-process sample
(\fBnvmlDeviceGetProcessUtilization\fR), where NVML gives one: a hint for a person (an idle
holder reads 0 %), never evidence; no verdict or rule reads it. No line where the driver
does not support the call (MIG, some cards) or sampled none of the holders.
.SS The holders
.TP
.B PID
The process (its thread group leader).
.TP
.B USER
Its owner, the name cut to fit.
.TP
.B STATE
The leader's state letter, as in \fBps\fR(1): R running, S sleeping, D in the driver
(uninterruptible), Z zombie, T stopped. \fBZ+threads\fR: the leader has exited but other
threads still run and still hold the memory (a zombie leader): the process is not gone
until they are.
.TP
.B AGE
Time since the process started.
.TP
.B GPU MEM
What NVML says the process holds on this GPU; \fB?\fR when NVML does not say (no
permission, a process outside this PID namespace).
.TP
.B FOUND BY
How gpureap knows it holds the GPU, comma separated: \fBnvml\fR (NVML lists it),
\fBfd\fR (it has the GPU's device node open), \fBmap\fR (it has the node mapped into its
memory). \fBnvml,fd,map\fR is the usual CUDA process; \fBfd\fR or \fBmap\fR alone is one
NVML does not list (another PID namespace, or not yet allocating).
.TP
.B PARENT
Its parent's pid. \fBORPHAN\fR: re-parented, and the evidence says its server or
launcher is gone (its parent died holding a GPU, its process group's leader is gone
with the others of the group re-parented too, a worker's title, its \fBgpureap run\fR
gone); \fBfree \-\-orphans\fR and the agent's reaper act on these. \fBDETACHED\fR:
re-parented without that evidence (a \fBnohup\fR'd server with live workers, a process
started to outlive its shell); never freed as an orphan. The reasons are in
\fBorphan_reason\fR/\fBdetached_reason\fR of the JSON
(\fI/usr/share/doc/gpureap/orphans.md\fR).
.TP
.B ROLE
What its command line says it is in an inference server (SGLang, vLLM, Ray, torchrun,
MPI): \fBlauncher\fR, \fBscheduler\fR, \fBdetokenizer\fR, \fBworker\fR, \fBengine_core\fR,
\fBapi_server\fR, ... with the ranks its title names (\fBTP3\fR, \fBDP1 TP0\fR); \fB\-\fR
when it says nothing.
.TP
.B CONTAINER
Only when some holder is in one: \fBdocker:\fR, \fBk8s\-pod:\fR\fIuid/container\fR,
\fBlxc:\fR, \fBsystemd:\fR\fIunit\fR, from its cgroup
(\fI/usr/share/doc/gpureap/kubernetes.md\fR).
.TP
.B COMMAND
Its command line, cut to the room left (\fB\-\-wide\fR or \fB\-\-json\fR for all of it).
.SS The marks
.TP
.B also open here, memory on another GPU: PID...
Processes with this GPU's node open that allocate on another GPU (they block a reset of
this one, but hold none of its memory).
.TP
.B ! 12.0 GiB not explained by any visible process [\fIclass\fB]
Used memory above the baseline that no process explains. \fBreleasing\fR: a process just
exited and the driver is still giving the memory back (wait a moment);
\fBno_holder\fR: nobody saw the exit, so it cannot be told yet (look again; never a reset);
\fBdriver_held\fR: the memory stays although its process is gone (a reset or a reboot
frees it); \fBoutside_namespace\fR: held by processes gpureap cannot see (it runs in a
container); \fBunknown\fR: none of these can be told. The next line says why and what to do.
.TP
.B ! busy with no process [ghost]
The GPU computes with no process using it anywhere: work of a killed process still
running; only a reset or a reboot ends it. \fB[orphan_computing]\fR (busy with no
\fIlive\fR process): its only users are orphans, still computing.
\fB[outside_namespace]\fR: the users are outside this PID namespace.
.TP
.B ! QUERY FAILED\fR, \fB! NOT ANSWERING
An NVML query of this GPU failed (GPU lost, no permission) or did not return in time;
the \fI/proc\fR view is still shown.
.TP
.B Processes with nvidiactl/nvidia\-uvm open but no GPU node
CUDA clients that hold no GPU (yet), listed once after the GPUs.
.PP
The summary at the end counts the orphans and the memory they hold, and prints the
command that frees them.
)";

// The verdict words every view prints (proc::orphan_verdict, proc::provenance_allows) and
// the memory classes, defined once: gpureap(1) and gpureap-status(1) carry this section
// (issue 53 #5: no man page defined inferred, witnessed, owned or no_holder).
constexpr const char* kEvidence = R"(Every view (\fBstatus\fR, its Instances block, the plans of \fBfree\fR and
\fBrun \-\-replace\fR, \fBtop\fR, the agent's events, \fBlog\fR) says a re-parented
holder's verdict in the same words, \fBorphaned (\fR\fIprovenance\fB)\fR or \fBdetached\fR,
followed by its pids and the reason (\fI/usr/share/doc/gpureap/orphans.md\fR).
.SS The verdicts
.TP
.B orphaned
A leak by the evidence: the process that started it is gone and it was part of that
parent's GPU work. \fBfree \-\-orphans\fR selects it; what may free it without a
person depends on its provenance.
.TP
.B detached
Re-parented, but nothing says it is a leak (a \fBnohup\fR'd server with live workers, a
process started to outlive its shell). Never selected by \fB\-\-orphans\fR nor by
anything unattended; free it by naming it (\fB\-\-pid\fR, \fB\-\-gpu\fR).
.TP
.B live
Its parent or its server is alive.
.SS The provenance: how an orphan verdict is known (JSON \fBprovenance\fR)
.TP
.B owned
gpureap holds the proof: the process is in the cgroup of a \fBgpureap run\fR
(\fBgpureap\-run\-\fR\fIid\fR, which only the run or root creates) whose gpureap is gone.
"Owned" is said of the evidence, not of the process: \fBorphaned (owned)\fR reads "orphaned,
and gpureap owns the proof". A person or the reaper may free it.
.TP
.B witnessed
The agent (\fBgpureap watch\fR) saw the workers' server alive and saw it crash (killed
by a signal, or a non\-zero exit, as the kernel reported). A person or the reaper may
free it.
.TP
.B inferred
One look's reading: a worker's title, re\-parented siblings, a process group leader
gone, a run named only by its environment. Nobody saw the launcher die, so a person may
free it (\fBfree \-\-orphans\fR shows the evidence and asks); nothing unattended will:
not the reaper, not the Slurm hooks, not \fBrun \-\-replace\fR without a terminal.
.SS Memory no process holds (JSON \fBunexplained.class\fR)
.TP
.B releasing
A holder exited and the driver is still giving its memory back: it falls, or less than
the release budget has passed. Wait (\fBgpureap wait \-\-gpu\fR \fIN\fR).
.TP
.B no_holder
No process holds it and it cannot yet be told whether it is releasing or held by the
driver: the exit was not seen and the GPU was not watched for a release budget (a
one\-shot \fBstatus\fR without the agent). Look again, or \fBgpureap wait\fR; never a
reason to reset.
.TP
.B driver_held
No process holds it and it stayed flat past the release budget: only a GPU reset or a
reboot frees it.
.TP
.B outside_namespace
Held by processes this PID namespace does not show (gpureap runs in a container).
.TP
.B unknown
The driver gave no process list to reason with.
)";

}  // namespace

std::vector<std::pair<std::string, std::string>> extra_man_sections(std::string_view command) {
  if (command == "status") return {{"FIELDS", kStatusFields}, {"VERDICTS AND EVIDENCE", kEvidence}};
  return {};
}

std::string evidence_man_section() { return kEvidence; }

}  // namespace gpureap::report
