#include "report/man_page.h"

#include <fmt/format.h>

#include <cctype>
#include <map>
#include <regex>
#include <string_view>

#include "report/man_sections.h"
#include "report/table_layout.h"

namespace gpureap::report {
namespace {

// Text for a troff text line: backslashes escaped, an option's leading hyphens as
// \- (a minus: copy-pasting the option works), and a leading . or ' made literal.
std::string roff(std::string_view text) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    char ch = text[i];
    if (ch == '\\') {
      out += "\\e";
    } else if (ch == '-' && (i == 0 || text[i - 1] == ' ' || text[i - 1] == '-' ||
                             text[i - 1] == '(' || text[i - 1] == '[' || text[i - 1] == '`')) {
      out += "\\-";
    } else {
      out += ch;
    }
  }
  if (!out.empty() && (out[0] == '.' || out[0] == '\'')) out.insert(0, "\\&");
  return out;
}

// What an indented line of help has at MANWIDTH=80 (80 - 7 - 4).
constexpr std::size_t kManVerbatimColumns = 69;

std::vector<std::string> lines_of(std::string_view text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    out.emplace_back(text.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

// Help text as troff: paragraphs at blank lines; text lines filled, runs of indented
// lines (examples, tables) kept as they are, indented.
std::string roff_body(const std::vector<std::string>& lines) {
  std::string out = ".PP\n";
  bool verbatim = false;
  for (const auto& line : lines) {
    bool indented = line.starts_with("  ");
    if (line.empty()) {
      if (verbatim) out += ".fi\n.RE\n";
      verbatim = false;
      out += ".PP\n";
      continue;
    }
    if (indented && !verbatim) out += ".RS 4\n.nf\n";
    if (!indented && verbatim) out += ".fi\n.RE\n";
    verbatim = indented;
    if (!indented) {
      out += roff(line) + "\n";
      continue;
    }
    // Kept as typed, but within 80 columns at MANWIDTH=80: the body's 7 columns and
    // .RS 4 leave 69; a longer line breaks at words, lined up with its description.
    for (const auto& part :
         lines_of(wrap_lines(line, kManVerbatimColumns + 2, Hang::description)))
      out += roff(std::string_view(part).substr(std::min<std::size_t>(2, part.size()))) + "\n";
  }
  if (verbatim) out += ".fi\n.RE\n";
  return out;
}

// An "Exit status:" paragraph (cli/exit_codes.h, laid out by report/help_text's exit_status_help: one line
// a status, "  CODE  meaning") as tagged paragraphs: the code in bold, its meaning filled
// by man to the reader's width, so it is wrapped once, whatever MANWIDTH is. A line of
// another shape is a paragraph of its own.
std::string roff_exit_status(const std::vector<std::string>& lines) {
  std::string out;
  for (const auto& line : lines) {
    const auto first = line.find_first_not_of(' ');
    const std::string_view text =
        first == std::string::npos ? std::string_view() : std::string_view(line).substr(first);
    const auto gap = text.find("  ");
    if (!line.starts_with("  ") || gap == std::string_view::npos) {
      if (!text.empty()) out += ".PP\n" + roff(text) + "\n";
      continue;
    }
    const std::string_view meaning = text.substr(text.find_first_not_of(' ', gap));
    out += fmt::format(".TP\n.B {}\n{}\n", roff(text.substr(0, gap)), roff(meaning));
  }
  return out;
}

// The help text's sections: paragraphs under a heading line ("Examples:", "Exit
// status:") go to that section (upper-cased); the others to `rest`.
using Sections = std::map<std::string, std::vector<std::string>>;
void split_sections(std::string_view text, const std::string& rest, Sections& out) {
  std::string section = rest;
  for (const auto& line : lines_of(text)) {
    if (line.empty()) {
      section = rest;
    } else if (std::string remark, name = heading_of(line, remark); !name.empty()) {
      section = name;
      for (auto& ch : section) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
      if (!out[section].empty()) out[section].push_back("");
      if (!remark.empty()) out[section].push_back(remark);
      continue;
    }
    if (line.empty() && (out[section].empty() || out[section].back().empty())) continue;
    out[section].push_back(line);
  }
  for (auto& [name, body] : out)
    while (!body.empty() && body.back().empty()) body.pop_back();
}

std::string roff_options(const std::vector<OptionOutline>& options) {
  std::string out;
  for (const auto& o : options) {
    std::string names;
    for (const auto& n : o.names) names += (names.empty() ? "" : ", ") + fmt::format("\\fB{}\\fR", roff(n));
    if (!o.value_name.empty()) names += fmt::format(" \\fI{}\\fR", o.value_name);
    std::string text = o.description;
    if (!o.default_value.empty()) text += fmt::format(" (default: {})", o.default_value);
    out += ".TP\n" + names + "\n" + roff(text) + "\n";
  }
  return out;
}

constexpr const char* kEnvironment = R"(.TP
.B GPUREAP_NVML_LIBRARY
The NVML library to load when \fB\-\-nvml\-library\fR is not given (default:
\fIlibnvidia\-ml.so.1\fR, found by the dynamic loader).
.TP
.B GPUREAP_DEV_DIR
The directory holding the nvidia device nodes when \fB\-\-dev\-dir\fR is not given
(default: \fI/dev\fR).
.TP
.B GPUREAP_SIM_DIR
A simulated node's directory (made by \fBgpureap\-sim node\fR): its \fIdev\fR is the
device directory when neither \fB\-\-dev\-dir\fR nor \fBGPUREAP_DEV_DIR\fR is set.
.TP
.B GPUREAP_SYSFS_ROOT
Read AMD GPUs (KFD and amdgpu sysfs) under this directory: a simulated node's \fIsys\fR
(\fBgpureap\-sim node \-\-vendor amd\fR prints it). Unset, \fI/sys\fR. AMD GPUs are read
when its KFD topology lists one; with \fInvidiactl\fR in the device directory too, NVIDIA's
through NVML as well (a mixed node: NVIDIA's GPUs first, AMD's after them).
.TP
.B GPUREAP_STATE_DIR
The state directory (an absolute path; see FILES).
.TP
.B XDG_RUNTIME_DIR
Without \fBGPUREAP_STATE_DIR\fR and not root: the state directory is
\fI$XDG_RUNTIME_DIR/gpureap\fR.
.TP
.B GPUREAP_NVIDIA_SMI
The \fBnvidia\-smi\fR that \fBfree \-\-reset\fR runs (default: \fBnvidia\-smi\fR from
\fBPATH\fR).
.TP
.B GPUREAP_RUN_ID
Set by \fBgpureap run\fR in the environment of every process of a run
(\fIname\fR\-\fIpid\fR), so its leftovers stay identifiable when gpureap itself is gone.
.TP
.B GPUREAP_NO_AGENT
When set (not empty, not 0), \fBstatus\fR, \fBfree\fR and \fBwait\fR scan directly instead of
asking a running \fBgpureap watch\fR over its socket (as \fB\-\-no\-agent\fR does).
.TP
.B GPUREAP_SCONTROL
The \fBscontrol\fR that \fBgpureap slurm\fR runs when \fB\-\-scontrol\fR is not given
(default: \fI/usr/bin/scontrol\fR; Slurm's hooks have no \fBPATH\fR).
.TP
.B GPUREAP_GNUTLS_LIBRARY
The GnuTLS library that \fBwatch \-\-web\-config\fR loads when the file asks for TLS
(default: \fIlibgnutls.so.30\fR, found by the dynamic loader; Debian's \fBlibgnutls30\fR).
.TP
.B NODE_NAME\fR, \fBKUBERNETES_SERVICE_HOST\fR, \fBKUBERNETES_SERVICE_PORT
Read by \fBwatch \-\-gate kubernetes\-condition\fR, \fBkubernetes\-taint\fR and
\fBkubernetes\-device\-taint\fR: the node to close (the downward API's \fIspec.nodeName\fR)
and the API server, as a pod has them.
.TP
.B GPUREAP_KUBE_API\fR, \fBGPUREAP_KUBE_TOKEN_FILE\fR, \fBGPUREAP_KUBE_CA_FILE
Another API server for the Kubernetes gates (\fIhttps://\fR, or \fIhttp://\fR to the
loopback only), its bearer token file (default: the service account's \fItoken\fR, read
again at every request) and CA file (default: the service account's \fIca.crt\fR).
.TP
.B GPUREAP_DRA_DRIVER\fR, \fBGPUREAP_DRA_POOL\fR, \fBGPUREAP_DRA_DEVICE\fR, \fBGPUREAP_DRA_API\fR, \fBGPUREAP_DRA_TAINT_EFFECT
What \fBwatch \-\-gate kubernetes\-device\-taint\fR assumes of the DRA driver: its name
(default \fIgpu.nvidia.com\fR), its pool (default the node's name), how a GPU is found among
its devices (default \fIattribute:uuid\fR, the device whose \fIuuid\fR attribute is the GPU's
UUID; or a name such as \fIgpu\-{index}\fR), the API version (default
\fIresource.k8s.io/v1\fR; \fIresource.k8s.io/v1beta2\fR on Kubernetes 1.36) and the taint's
effect (\fINoSchedule\fR, \fINoExecute\fR or \fINone\fR).
.TP
.B SLURM_JOB_ID\fR, \fBSLURM_JOB_GPUS\fR, \fBCUDA_VISIBLE_DEVICES\fR, \fBSLURMD_NODENAME
Read by \fBgpureap slurm prolog\fR and \fBepilog\fR (the job, its GPUs as device minors or
UUIDs) and by \fBhealth\fR (the node), as slurmd sets them.
.TP
.B NO_COLOR
When set and not empty, no colour (colour is used only on a terminal).
)";

constexpr const char* kFiles = R"(.TP
.I /run/gpureap
The state directory when running as root (else \fI$XDG_RUNTIME_DIR/gpureap\fR, else
\fI/tmp/gpureap\-UID\fR; \fBGPUREAP_STATE_DIR\fR overrides). It must be a directory owned
by the effective uid and not writable by group or others, else it is refused.
.TP
.I STATE_DIR/baselines.json
Each GPU's idle memory reading, by UUID, learnt when the GPU has no holder.
.TP
.I STATE_DIR/free.lock
Held by a running \fBgpureap free\fR, so two of them do not fight.
.TP
.I /dev/nvidia*
The device nodes whose open files and mappings show who holds a GPU.
.TP
.I libnvidia\-ml.so.1
NVML, loaded at run time (dlopen); without it, \fBstatus\fR shows the \fI/proc\fR view only.
)";

std::string header(const std::string& title, const std::string& name, const std::string& summary,
                   const ManPageStamp& stamp) {
  return fmt::format(
      ".\\\" Generated by `gpureap man-page` from gpureap's own help; do not edit.\n"
      ".TH {} 1 \"{}\" \"gpureap {}\" \"User Commands\"\n"
      ".nh\n"  // no hyphenation: options and paths are copied from man pages
      ".SH NAME\n{} \\- {}\n",
      title, stamp.date, roff(stamp.version), roff(name),
      roff(summary));
}

std::string section(const std::string& name, const std::string& body) {
  return body.empty() ? "" : fmt::format(".SH {}\n{}", name, body);
}

std::string body_of(const Sections& s, const std::string& name) {
  auto it = s.find(name);
  return it == s.end() || it->second.empty() ? "" : roff_body(it->second);
}

std::string exit_status_of(const Sections& s) {
  auto it = s.find("EXIT STATUS");
  return it == s.end() ? "" : roff_exit_status(it->second);
}

std::string common_sections() {
  return section("ENVIRONMENT", kEnvironment) + section("FILES", kFiles);
}

std::string see_also(const std::vector<CommandOutline>& commands, const std::string& self) {
  std::string refs;
  if (self != "gpureap") refs = "\\fBgpureap\\fR(1)";
  for (const auto& c : commands)
    if (c.name != self) refs += (refs.empty() ? "" : ",\n") + fmt::format("\\fBgpureap\\-{}\\fR(1)", roff(c.name));
  return ".SH SEE ALSO\n" + refs + "\n.PP\n" +
         "The README and the documents in \\fI/usr/share/doc/gpureap\\fR (installed by the "
         "package).\n";
}

// The help names documents as the source tree has them (docs/watch.md, contrib/slurm/...);
// a man page names them where the package installs them (CMakeLists.txt: docs/*.md in the
// doc directory, contrib/ under its examples/).
// Done on the help's text, before it is laid out, so that a longer path is wrapped too.
std::string installed_paths(const std::string& text) {
  static const std::regex docs(R"((^|[^/\w])docs/)");
  static const std::regex contrib(R"((^|[^/\w])contrib/)");
  std::string out = std::regex_replace(text, docs, "$1/usr/share/doc/gpureap/");
  return std::regex_replace(out, contrib, "$1/usr/share/doc/gpureap/examples/");
}

CommandOutline with_installed_paths(CommandOutline c) {
  c.description = installed_paths(c.description);
  c.footer = installed_paths(c.footer);
  for (auto& o : c.options) o.description = installed_paths(o.description);
  for (auto& o : c.positionals) o.description = installed_paths(o.description);
  return c;
}

ManPage command_page(const CommandOutline& c, const std::vector<CommandOutline>& commands,
                     const ManPageStamp& stamp) {
  Sections s;
  split_sections(c.description, "DESCRIPTION", s);
  split_sections(c.footer, "NOTES", s);
  std::string synopsis = fmt::format(".SH SYNOPSIS\n.B gpureap\n[\\fIglobal options\\fR] \\fB{}\\fR [\\fIoptions\\fR]", roff(c.name));
  for (const auto& p : c.positionals) {
    if (p.kind == ValueKind::choice) {
      std::string words;
      for (const auto& w : p.choices) words += (words.empty() ? "" : "|") + roff(w);
      synopsis += fmt::format(" \\fB{}\\fR", words);
    } else {
      synopsis += fmt::format(" [\\fB\\-\\-\\fR] \\fI{}\\fR...", roff(p.names.front()));
    }
  }
  synopsis += "\n";
  std::string text = header("GPUREAP-" + [&] {
    std::string up = c.name;
    for (auto& ch : up) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
    return up;
  }(), "gpureap-" + c.name, summary_of(c.description), stamp);
  text += synopsis + section("DESCRIPTION", body_of(s, "DESCRIPTION")) +
          section("OPTIONS", roff_options(c.options) +
                                 ".PP\nThe global options of \\fBgpureap\\fR(1) (\\fB\\-\\-json\\fR, "
                                 "\\fB\\-\\-nvml\\-library\\fR, \\fB\\-\\-dev\\-dir\\fR, "
                                 "\\fB\\-\\-no\\-color\\fR) may also follow the command.\n") +
          section("EXIT STATUS", exit_status_of(s));
  for (const auto& [name, body] : s)
    if (name != "DESCRIPTION" && name != "EXIT STATUS" && name != "EXAMPLES")
      text += section(name, roff_body(body));
  for (const auto& [name, body] : extra_man_sections(c.name)) text += section(name, body);
  text += common_sections() + section("EXAMPLES", body_of(s, "EXAMPLES")) +
          see_also(commands, c.name);
  return {"gpureap-" + c.name + ".1", text};
}

// A command's first example for the overview, as a tagged paragraph: the command line in
// bold, what it does beneath (the example's own words, on its line or the next, else the
// command's summary), so that nothing is aligned by spaces that a narrow page would break.
// The first example whose command fits the tag's line whole (a man page breaks a long one
// at its hyphens): what man leaves a tag at MANWIDTH=80 (78 columns, indented by 7).
std::string first_example(const CommandOutline& c) {
  constexpr std::size_t kTagColumns = 70;
  Sections s;
  split_sections(c.description, "DESCRIPTION", s);
  auto it = s.find("EXAMPLES");
  if (it == s.end()) return "";
  const auto& lines = it->second;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    if (!lines[i].starts_with("  gpureap ")) continue;  // a remark, a continuation line
    std::string_view rest = std::string_view(lines[i]).substr(2);
    const auto gap = rest.find("  ");
    std::string command(rest.substr(0, gap)), what;
    if (command.ends_with("\\") || command.size() > kTagColumns) continue;
    if (gap != std::string_view::npos) what = std::string(rest.substr(gap));
    else if (i + 1 < lines.size() && lines[i + 1].starts_with("    ") &&
             lines[i + 1].find_first_not_of(' ') != std::string::npos)
      what = lines[i + 1];
    what.erase(0, what.find_first_not_of(' '));
    if (what.empty()) what = summary_of(c.description);
    return fmt::format(".TP\n.B {}\n{}\n", roff(command), roff(what));
  }
  return "";
}

ManPage main_page(const CommandOutline& top, const std::vector<CommandOutline>& commands,
                  const ManPageStamp& stamp) {
  Sections s;
  split_sections(top.description, "DESCRIPTION", s);
  split_sections(top.footer, "NOTES", s);
  std::string list, examples;
  for (const auto& c : commands) {
    list += fmt::format(".TP\n.B {}\n{}. See \\fBgpureap\\-{}\\fR(1).\n", roff(c.name),
                        roff(summary_of(c.description)), roff(c.name));
    examples += first_example(c);
  }
  std::string text =
      header("GPUREAP", "gpureap", "find and free GPU memory held by stray processes", stamp) +
      ".SH SYNOPSIS\n.B gpureap\n[\\fIglobal options\\fR] [\\fIcommand\\fR] [\\fIoptions\\fR]\n"
      ".br\n.B gpureap \\-\\-version\n" +
      section("DESCRIPTION", body_of(s, "DESCRIPTION")) + section("COMMANDS", list) +
      section("GLOBAL OPTIONS",
              roff_options(top.options) +
                  ".TP\n\\fB\\-h\\fR, \\fB\\-\\-help\\fR\nHelp, with examples; "
                  "\\fBgpureap \\fIcommand\\fB \\-\\-help\\fR for a command.\n") +
      section("EXIT STATUS", exit_status_of(s)) +
      section("VERDICTS AND EVIDENCE", evidence_man_section()) + common_sections() +
      section("EXAMPLES", examples) +
      see_also(commands, "gpureap");
  return {"gpureap.1", text};
}

}  // namespace

std::vector<ManPage> man_pages(const CommandOutline& top, const std::vector<CommandOutline>& commands,
                               const ManPageStamp& stamp) {
  std::vector<CommandOutline> installed;
  for (const auto& c : commands) installed.push_back(with_installed_paths(c));
  std::vector<ManPage> pages{main_page(with_installed_paths(top), installed, stamp)};
  for (const auto& c : installed) pages.push_back(command_page(c, installed, stamp));
  return pages;
}

}  // namespace gpureap::report
