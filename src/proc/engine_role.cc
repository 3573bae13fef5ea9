#include "proc/engine_role.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <span>

namespace gpureap::proc {

namespace {
// Named so that a unity batch (8 files of src/proc in one translation unit) sees
// no second definition of a helper with a common name.
namespace engine_role_impl {

constexpr std::size_t kMaxText = 256;    // title, detail
constexpr std::size_t kMaxModel = 1024;  // a model path or name
constexpr std::size_t kCommLen = 15;     // TASK_COMM_LEN - 1: a comm this long may be cut
constexpr std::size_t kMinCutName = 3;   // bytes of a cut title's name needed to match it
constexpr unsigned kMaxPort = 65535;

// ---------------------------------------------------------------------------
// The tables: what is recognised. Add a row to extend.

/// The ranks a title's suffix can carry, `_<KEY><number>`, in the order rank_label
/// prints them (SGLang's DP PP ATTN_CP MOE_DP TP EP and vLLM's DP PP PCP TP DCP EP,
/// merged). A key is matched at the start of a `_`-separated token and must be
/// followed by a digit, so no key shadows another (CP / PCP / DCP / ATTN_CP).
struct RankKey {
  std::string_view key;
  std::optional<unsigned> Ranks::*field;
};
constexpr std::array<RankKey, 9> kRankKeys{{
    {"DP", &Ranks::dp},
    {"PP", &Ranks::pp},
    {"ATTN_CP", &Ranks::attn_cp},
    {"MOE_DP", &Ranks::moe_dp},
    {"CP", &Ranks::cp},
    {"PCP", &Ranks::pcp},
    {"TP", &Ranks::tp},
    {"DCP", &Ranks::dcp},
    {"EP", &Ranks::ep},
}};

/// What follows a title's name (after a '_'; a name is followed by the end or '_').
enum class TitleSuffix : std::uint8_t {
  none,   // nothing expected; anything there is ignored
  ranks,  // _DP1_TP3 ...
  index,  // _<i> (vLLM's APIServer_0)
  rest,   // the whole text after `::` is the detail (Ray's Class.method)
};

/// `prefix::name[_suffix]`. prefix kAnyPrefix: any text before the last `::`
/// (vLLM's VLLM_PROCESS_NAME_PREFIX; kept as detail). name empty: any non-empty text.
constexpr std::string_view kAnyPrefix = "*";
struct TitleRule {
  std::string_view prefix;
  std::string_view name;
  TitleSuffix suffix;
  Engine engine;
  EngineRole role;
};
// First match wins: the fixed namespaces (sglang::, ray::) come before vLLM's
// any-prefix rows, and each namespace's catch-all after its known names.
constexpr std::array<TitleRule, 10> kTitleRules{{
    {"sglang", "scheduler", TitleSuffix::ranks, Engine::sglang, EngineRole::scheduler},
    {"sglang", "detokenizer", TitleSuffix::none, Engine::sglang, EngineRole::detokenizer},
    {"sglang", "data_parallel_controller", TitleSuffix::none, Engine::sglang,
     EngineRole::dp_controller},
    {"sglang", "", TitleSuffix::rest, Engine::sglang, EngineRole::none},
    {"ray", "IDLE", TitleSuffix::rest, Engine::ray, EngineRole::ray_idle},
    {"ray", "", TitleSuffix::rest, Engine::ray, EngineRole::ray_worker},
    {kAnyPrefix, "EngineCore", TitleSuffix::ranks, Engine::vllm, EngineRole::engine_core},
    {kAnyPrefix, "Worker", TitleSuffix::ranks, Engine::vllm, EngineRole::worker},
    {kAnyPrefix, "APIServer", TitleSuffix::index, Engine::vllm, EngineRole::api_server},
    {kAnyPrefix, "DPCoordinator", TitleSuffix::none, Engine::vllm, EngineRole::dp_controller},
}};

/// How a command names what it runs.
enum class CommandForm : std::uint8_t {
  program,      // argv[0]'s basename, or the script a Python interpreter runs
  module,       // python -m <name>
  code_import,  // python -c 'from <name> import ...' (multiprocessing's children)
};

/// Which launcher arguments to read: --model-path/--model and --port.
enum class LaunchArgs : std::uint8_t {
  none,
  flags,       // --model-path M | --model M | --model=M, --port N | --port=N
  positional,  // as flags, but the first argument (after the subcommand) is the model
};

struct CommandRule {
  CommandForm form;
  std::string_view name;
  std::string_view subcommand;  // the next argument must be this; empty: none required
  Engine engine;
  EngineRole role;
  LaunchArgs args;
  std::string_view detail;  // empty: "<name>[ <subcommand>]"
};
constexpr std::array<CommandRule, 21> kCommandRules{{
    {CommandForm::module, "sglang.launch_server", "", Engine::sglang, EngineRole::launcher,
     LaunchArgs::flags, ""},
    {CommandForm::program, "sglang", "serve", Engine::sglang, EngineRole::launcher,
     LaunchArgs::flags, ""},
    {CommandForm::program, "vllm", "serve", Engine::vllm, EngineRole::launcher,
     LaunchArgs::positional, ""},
    {CommandForm::module, "vllm.entrypoints.cli.main", "serve", Engine::vllm, EngineRole::launcher,
     LaunchArgs::positional, ""},
    {CommandForm::module, "vllm.entrypoints.openai.api_server", "", Engine::vllm,
     EngineRole::launcher, LaunchArgs::flags, ""},
    {CommandForm::module, "vllm.entrypoints.api_server", "", Engine::vllm, EngineRole::launcher,
     LaunchArgs::flags, ""},
    {CommandForm::program, "torchrun", "", Engine::torchrun, EngineRole::elastic_agent,
     LaunchArgs::none, ""},
    {CommandForm::module, "torch.distributed.run", "", Engine::torchrun, EngineRole::elastic_agent,
     LaunchArgs::none, ""},
    {CommandForm::module, "torch.distributed.launch", "", Engine::torchrun,
     EngineRole::elastic_agent, LaunchArgs::none, ""},
    {CommandForm::program, "raylet", "", Engine::ray, EngineRole::ray_raylet, LaunchArgs::none, ""},
    {CommandForm::program, "gcs_server", "", Engine::ray, EngineRole::ray_gcs, LaunchArgs::none,
     ""},
    {CommandForm::program, "orted", "", Engine::mpi, EngineRole::mpi_daemon, LaunchArgs::none, ""},
    {CommandForm::program, "prted", "", Engine::mpi, EngineRole::mpi_daemon, LaunchArgs::none, ""},
    {CommandForm::program, "hydra_pmi_proxy", "", Engine::mpi, EngineRole::mpi_daemon,
     LaunchArgs::none, ""},
    {CommandForm::program, "mpirun", "", Engine::mpi, EngineRole::launcher, LaunchArgs::none, ""},
    {CommandForm::program, "mpiexec", "", Engine::mpi, EngineRole::launcher, LaunchArgs::none, ""},
    {CommandForm::program, "mpiexec.hydra", "", Engine::mpi, EngineRole::launcher, LaunchArgs::none,
     ""},
    {CommandForm::program, "prterun", "", Engine::mpi, EngineRole::launcher, LaunchArgs::none, ""},
    {CommandForm::code_import, "multiprocessing.spawn", "", Engine::python, EngineRole::mp_child,
     LaunchArgs::none, "spawn"},
    {CommandForm::code_import, "multiprocessing.forkserver", "", Engine::python,
     EngineRole::mp_child, LaunchArgs::none, "forkserver"},
    {CommandForm::code_import, "multiprocessing.popen_forkserver", "", Engine::python,
     EngineRole::mp_child, LaunchArgs::none, "forkserver"},
}};

constexpr std::array<std::string_view, 2> kModelFlags{"--model-path", "--model"};
constexpr std::string_view kPortFlag = "--port";

// ---------------------------------------------------------------------------
// Text helpers (byte-wise: titles need not be UTF-8).

bool is_blank(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f' || c == '\0';
}

std::string_view strip(std::string_view s) {
  while (!s.empty() && is_blank(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_blank(s.back())) s.remove_suffix(1);
  return s;
}

/// The first whitespace-separated word of `s` (s already stripped).
std::string_view first_word(std::string_view s) {
  std::size_t end = 0;
  while (end < s.size() && !is_blank(s[end])) ++end;
  return s.substr(0, end);
}

bool has_blank(std::string_view s) {
  for (char c : s)
    if (is_blank(c)) return true;
  return false;
}

/// Appends the whitespace-separated words of `s` to `out`.
void split_words(std::string_view s, std::vector<std::string_view>& out) {
  std::size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && is_blank(s[i])) ++i;
    const std::size_t start = i;
    while (i < s.size() && !is_blank(s[i])) ++i;
    if (i > start) out.push_back(s.substr(start, i - start));
  }
}

std::string_view base_name(std::string_view path) {
  const auto slash = path.rfind('/');
  return slash == std::string_view::npos ? path : path.substr(slash + 1);
}

std::string capped(std::string_view s, std::size_t max) {
  return std::string(s.substr(0, max));
}

/// A decimal number of only digits that fits `unsigned`; nullopt otherwise (a sign,
/// a space, an empty text, an overflow).
std::optional<unsigned> decimal(std::string_view s) {
  if (s.empty() || s.front() < '0' || s.front() > '9') return std::nullopt;
  unsigned value = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (ec != std::errc{} || end != s.data() + s.size()) return std::nullopt;
  return value;
}

bool is_digit(char c) {
  return c >= '0' && c <= '9';
}

/// python, python3, python3.11, python3.13t, python3.8m: a CPython interpreter.
bool is_python(std::string_view name) {
  if (!name.starts_with("python")) return false;
  std::string_view v = name.substr(6);
  while (!v.empty() && is_digit(v.front())) v.remove_prefix(1);
  if (v.starts_with('.')) {
    v.remove_prefix(1);
    if (v.empty() || !is_digit(v.front())) return false;
    while (!v.empty() && is_digit(v.front())) v.remove_prefix(1);
  }
  if (v.size() == 1 && (v[0] == 'm' || v[0] == 'd' || v[0] == 't')) v.remove_prefix(1);
  return v.empty();
}

// ---------------------------------------------------------------------------
// Titles.

/// The ranks of a suffix such as "_DP1_TP3". A token that is not `<KEY><digits>`,
/// or whose number overflows, is skipped; a key seen twice keeps its first value.
/// `drop_last`: the suffix may be cut (a 15-byte comm), so its last token is not read.
Ranks parse_ranks(std::string_view suffix, bool drop_last) {
  if (drop_last) {
    const auto cut = suffix.rfind('_');
    suffix = cut == std::string_view::npos ? std::string_view{} : suffix.substr(0, cut);
  }
  Ranks ranks;
  while (!suffix.empty()) {
    if (suffix.front() != '_') {  // junk: skip to the next token
      const auto next = suffix.find('_');
      suffix = next == std::string_view::npos ? std::string_view{} : suffix.substr(next);
      continue;
    }
    suffix.remove_prefix(1);
    bool read = false;
    // Every key starts with an upper-case letter: "__" and "_7" need no look-up.
    const bool may_be_key = !suffix.empty() && suffix.front() >= 'A' && suffix.front() <= 'Z';
    for (const auto& [key, field] : kRankKeys) {
      if (!may_be_key) break;
      if (!suffix.starts_with(key)) continue;
      const std::string_view after = suffix.substr(key.size());
      if (after.empty() || !is_digit(after.front())) continue;
      std::size_t end = 0;
      while (end < after.size() && after[end] != '_') ++end;
      const auto value = decimal(after.substr(0, end));  // "3abc", an overflow: nullopt
      if (value && !(ranks.*field)) ranks.*field = value;
      suffix = after.substr(end);
      read = true;
      break;
    }
    if (!read) {
      const auto next = suffix.find('_');
      suffix = next == std::string_view::npos ? std::string_view{} : suffix.substr(next);
    }
  }
  return ranks;
}

/// `title` (one word) against kTitleRules; `cut`: it is a comm that may be truncated.
std::optional<EngineIdentity> match_title(std::string_view title, bool cut) {
  const auto first = title.find("::");
  if (first == std::string_view::npos) return std::nullopt;
  const auto last = title.rfind("::");
  for (const TitleRule& rule : kTitleRules) {
    const bool any_prefix = rule.prefix == kAnyPrefix;
    const std::string_view prefix = title.substr(0, any_prefix ? last : first);
    if (!any_prefix && prefix != rule.prefix) continue;
    const std::string_view rest = title.substr((any_prefix ? last : first) + 2);
    // What follows the name: its suffix, from the '_' on.
    std::string_view suffix;
    bool name_cut = false;
    if (rule.name.empty()) {
      if (rest.empty()) continue;
    } else if (rest.starts_with(rule.name) &&
               (rest.size() == rule.name.size() || rest[rule.name.size()] == '_')) {
      suffix = rest.substr(rule.name.size());
    } else if (cut && rest.size() >= kMinCutName && rest.size() < rule.name.size() &&
               rule.name.starts_with(rest)) {
      name_cut = true;  // `VLLM::EngineCor`
    } else {
      continue;
    }
    EngineIdentity id;
    id.engine = rule.engine;
    id.role = rule.role;
    id.title = capped(title, kMaxText);
    id.truncated = cut;
    switch (rule.suffix) {
      case TitleSuffix::none:
        break;
      case TitleSuffix::ranks:
        id.ranks = parse_ranks(suffix, cut);
        break;
      case TitleSuffix::index:
        // The number of a cut comm may itself be cut: not read.
        if (!cut && !name_cut && suffix.size() > 1) id.index = decimal(suffix.substr(1));
        break;
      case TitleSuffix::rest: {
        std::string_view detail = rest;
        if (detail.ends_with("()")) detail.remove_suffix(2);  // older Ray: `ray::Actor.run()`
        id.detail = capped(detail, kMaxText);
        break;
      }
    }
    if (any_prefix) id.detail = capped(prefix, kMaxText);
    return id;
  }
  return std::nullopt;
}

// ---------------------------------------------------------------------------
// Commands.

/// What a command runs: a program (argv[0]'s basename, or a Python script's),
/// or a Python module or `-c` import, and the arguments after it.
struct Command {
  CommandForm form = CommandForm::program;
  std::string_view name;
  std::span<const std::string_view> args;
  bool python = false;
  bool code = false;  // python -c
};

/// The module a `-c` program imports first: `from M import ...`. A display
/// cmdline split at spaces gives "from" and M as separate arguments.
std::string_view imported_module(std::string_view code, std::span<const std::string_view> after) {
  if (code == "from") return after.empty() ? std::string_view{} : after.front();
  code = strip(code);
  if (!code.starts_with("from ")) return {};
  return first_word(strip(code.substr(5)));
}

/// Reads a command; a Python interpreter's options (-u, -O, -W arg, -X arg,
/// clusters such as -uB or -Wignore) are skipped up to -m, -c or the script.
Command read_command(std::span<const std::string_view> argv) {
  Command cmd;
  cmd.name = base_name(argv.front());
  cmd.args = argv.subspan(1);
  if (!is_python(cmd.name)) return cmd;
  cmd.python = true;
  cmd.name = {};
  std::size_t i = 1;
  bool found = false;  // -m or -c read
  while (i < argv.size() && !found) {
    const std::string_view a = argv[i];
    if (a == "--") {
      ++i;
      break;
    }
    if (a.size() < 2 || a.front() != '-') break;  // the script, or "-" (stdin)
    if (a.starts_with("--")) {                    // --check-hash-based-pycs MODE, --version
      i += a == "--check-hash-based-pycs" ? 2 : 1;
      continue;
    }
    ++i;
    for (std::size_t j = 1; j < a.size(); ++j) {
      const char c = a[j];
      if (c != 'm' && c != 'c' && c != 'W' && c != 'X') continue;  // a flag: -u -O -B -s -I ...
      std::string_view value = a.substr(j + 1);
      if (value.empty() && i < argv.size()) value = argv[i++];
      if (c == 'm') {
        cmd.form = CommandForm::module;
        cmd.name = value;
        found = true;
      } else if (c == 'c') {
        cmd.code = true;
        cmd.form = CommandForm::code_import;
        cmd.name = imported_module(value, argv.subspan(i));
        found = true;
      }
      break;
    }
  }
  if (!found && i < argv.size() && argv[i] != "-") {
    cmd.name = base_name(argv[i]);
    ++i;
  }
  cmd.args = argv.subspan(std::min(i, argv.size()));
  return cmd;
}

/// `a` is `flag` with its value inline (`--port=8000`) or next (`--port 8000`,
/// then `i` moves past it). nullopt when `a` is another argument.
std::optional<std::string_view> flag_value(std::string_view flag,
                                           std::span<const std::string_view> args, std::size_t& i) {
  const std::string_view a = args[i];
  if (!a.starts_with(flag)) return std::nullopt;
  if (a.size() == flag.size()) {
    if (i + 1 >= args.size()) return std::string_view{};
    return args[++i];
  }
  if (a[flag.size()] == '=') return a.substr(flag.size() + 1);
  return std::nullopt;  // --model-path is not --model
}

void read_launch_args(LaunchArgs kind, std::span<const std::string_view> args, EngineIdentity& id) {
  if (kind == LaunchArgs::none) return;
  std::optional<std::string_view> model;
  if (kind == LaunchArgs::positional && !args.empty() && !args.front().empty() &&
      args.front().front() != '-') {
    model = args.front();
    args = args.subspan(1);
  }
  std::optional<std::string_view> flag_model;
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--") break;
    bool matched = false;
    for (std::string_view flag : kModelFlags) {
      if (auto v = flag_value(flag, args, i)) {
        if (!v->empty()) flag_model = v;  // the last one given wins, as argparse's
        matched = true;
        break;
      }
    }
    if (matched) continue;
    if (auto v = flag_value(kPortFlag, args, i)) {
      const auto port = decimal(*v);
      id.port = port && *port <= kMaxPort ? port : std::nullopt;
    }
  }
  if (!model) model = flag_model;
  if (model) id.model = capped(*model, kMaxModel);
}

std::optional<EngineIdentity> match_command(const Command& cmd) {
  if (cmd.name.empty()) return std::nullopt;
  for (const CommandRule& rule : kCommandRules) {
    if (rule.form != cmd.form || rule.name != cmd.name) continue;
    std::span<const std::string_view> args = cmd.args;
    if (!rule.subcommand.empty()) {
      if (args.empty() || args.front() != rule.subcommand) continue;
      args = args.subspan(1);
    }
    EngineIdentity id;
    id.engine = rule.engine;
    id.role = rule.role;
    if (!rule.detail.empty()) {
      id.detail = rule.detail;
    } else {
      id.detail = rule.name;
      if (!rule.subcommand.empty()) id.detail.append(" ").append(rule.subcommand);
    }
    read_launch_args(rule.args, args, id);
    return id;
  }
  return std::nullopt;
}

/// A process not in the tables: a Python program (named by its module or
/// script), or nothing known.
EngineIdentity generic(const Command& cmd) {
  EngineIdentity id;
  if (!cmd.python) return id;
  id.engine = Engine::python;
  if (cmd.form == CommandForm::module) {
    id.detail = capped(cmd.name, kMaxText);
  } else if (cmd.code) {
    id.detail = "-c";
  } else {
    id.detail = capped(cmd.name, kMaxText);
  }
  return id;
}

EngineIdentity recognise(std::vector<std::string_view> argv, std::string_view comm) {
  // setproctitle leaves the rest of the old argv area empty (or blank).
  while (!argv.empty() && strip(argv.back()).empty()) argv.pop_back();
  if (argv.empty()) {
    const std::string_view c = strip(comm);
    if (c.empty()) return {};
    const std::string_view word = first_word(c);
    if (auto id = match_title(word, word.size() == kCommLen)) return *id;
    const std::array<std::string_view, 1> only{word};
    const Command cmd = read_command(only);
    if (auto id = match_command(cmd)) return *id;
    return generic(cmd);
  }
  argv.front() = strip(argv.front());
  if (argv.size() == 1 && has_blank(argv.front())) {
    // One argument with spaces: a title with padding, or a command line rewritten
    // as one string (`nginx: worker process` style).
    const std::string_view whole = argv.front();
    argv.clear();
    split_words(whole, argv);
    if (argv.empty()) return {};
  }
  if (auto id = match_title(first_word(argv.front()), false)) return *id;
  const Command cmd = read_command(argv);
  if (auto id = match_command(cmd)) return *id;
  return generic(cmd);
}

}  // namespace engine_role_impl
}  // namespace

EngineIdentity recognise_engine(const std::vector<std::string>& argv, std::string_view comm) {
  std::vector<std::string_view> views(argv.begin(), argv.end());
  return engine_role_impl::recognise(std::move(views), comm);
}

EngineIdentity recognise_engine_cmdline(std::string_view cmdline, std::string_view comm) {
  std::vector<std::string_view> args;
  if (cmdline.find('\0') != std::string_view::npos) {
    std::size_t start = 0;
    while (start <= cmdline.size()) {
      const auto nul = cmdline.find('\0', start);
      const std::size_t end = nul == std::string_view::npos ? cmdline.size() : nul;
      args.push_back(cmdline.substr(start, end - start));
      if (nul == std::string_view::npos) break;
      start = nul + 1;
    }
  } else {
    engine_role_impl::split_words(cmdline, args);
  }
  return engine_role_impl::recognise(std::move(args), comm);
}

std::string_view enum_name(Engine engine) {
  switch (engine) {
    case Engine::none:
      return "none";
    case Engine::sglang:
      return "sglang";
    case Engine::vllm:
      return "vllm";
    case Engine::ray:
      return "ray";
    case Engine::torchrun:
      return "torchrun";
    case Engine::mpi:
      return "mpi";
    case Engine::python:
      return "python";
  }
  return {};
}

std::string_view enum_name(EngineRole role) {
  switch (role) {
    case EngineRole::none:
      return "none";
    case EngineRole::launcher:
      return "launcher";
    case EngineRole::scheduler:
      return "scheduler";
    case EngineRole::detokenizer:
      return "detokenizer";
    case EngineRole::dp_controller:
      return "dp_controller";
    case EngineRole::engine_core:
      return "engine_core";
    case EngineRole::worker:
      return "worker";
    case EngineRole::api_server:
      return "api_server";
    case EngineRole::ray_worker:
      return "ray_worker";
    case EngineRole::ray_idle:
      return "ray_idle";
    case EngineRole::ray_raylet:
      return "ray_raylet";
    case EngineRole::ray_gcs:
      return "ray_gcs";
    case EngineRole::elastic_agent:
      return "elastic_agent";
    case EngineRole::mpi_daemon:
      return "mpi_daemon";
    case EngineRole::mp_child:
      return "mp_child";
  }
  return {};
}

std::string rank_label(const Ranks& ranks) {
  std::string out;
  for (const auto& [key, field] : engine_role_impl::kRankKeys) {
    if (!(ranks.*field)) continue;
    if (!out.empty()) out += ' ';
    out.append(key).append(std::to_string(*(ranks.*field)));
  }
  return out;
}

}  // namespace gpureap::proc
