#include "capacity/model_source.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <optional>

#include "capacity/hf_config.h"
#include "capacity/model_preset.h"
#include "capacity/plan_args.h"
#include "util/units.h"

namespace gpureap::capacity {
namespace {

namespace fs = std::filesystem;

// A path rather than a preset name: it names a file, has a directory part, or
// ends in .json.
bool looks_like_path(const std::string& s) {
  std::error_code ec;
  return s.ends_with(".json") || s.find('/') != std::string::npos || fs::exists(s, ec);
}

std::string preset_names() {
  std::string names;
  for (const auto& p : model_presets()) names += (names.empty() ? "" : ", ") + p.name;
  return names;
}

Result<std::uint64_t> index_total(const std::string& path, std::string_view flag) {
  auto text = read_text_file(path, flag);
  if (!text) return std::unexpected(text.error());
  auto total = parse_safetensors_index(*text, path);
  if (!total) return fail(fmt::format("{} {}", flag, total.error().message));
  return *total;
}

}  // namespace

Result<OpenFile> open_regular_file(const std::string& path, std::string_view flag) {
  // O_NONBLOCK: opening a FIFO for reading otherwise blocks until a writer comes,
  // which may be never; it is refused just below as not a regular file.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    if (errno == ENOENT || errno == ENOTDIR)
      return fail(fmt::format("{} {}: no such file", flag, path));
    return fail(fmt::format("{} {}: cannot open the file: {}", flag, path, std::strerror(errno)),
                errno);
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return fail(fmt::format("{} {}: not a regular file", flag, path));
  }
  // Regular files never block; clear the flag so reads behave as usual anyway.
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  return OpenFile{fd, static_cast<std::uint64_t>(st.st_size)};
}

Result<std::string> read_text_file(const std::string& path, std::string_view flag,
                                   std::uint64_t max_bytes) {
  auto opened = open_regular_file(path, flag);
  if (!opened) return std::unexpected(opened.error());
  const int fd = opened->fd;
  // The size is checked before reading (a sparse multi-GB file costs nothing),
  // and the read stops at the cap anyway in case the file grows meanwhile.
  const auto size = opened->size;
  auto too_big = [&](std::uint64_t bytes) {
    return fail(fmt::format("{} {}: {} bytes, more than the {} read from a model file", flag, path,
                            bytes, format_bytes(max_bytes)));
  };
  if (size > max_bytes) {
    ::close(fd);
    return too_big(size);
  }
  std::string text(static_cast<std::size_t>(size), '\0');
  std::size_t used = 0;
  for (;;) {
    if (used == text.size()) {
      if (text.size() > max_bytes) break;
      text.resize(std::min<std::size_t>(std::max<std::size_t>(text.size() * 2, 4096),
                                        static_cast<std::size_t>(max_bytes) + 1));
    }
    const ssize_t n = ::read(fd, text.data() + used, text.size() - used);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      return fail(fmt::format("{} {}: cannot read the file: {}", flag, path, std::strerror(err)),
                  err);
    }
    if (n == 0) break;
    used += static_cast<std::size_t>(n);
  }
  ::close(fd);
  if (used > max_bytes) return too_big(used);
  text.resize(used);
  return text;
}

Result<ResolvedModel> resolve_model(const std::string& arg) {
  ResolvedModel out;
  if (!looks_like_path(arg)) {
    auto preset = find_preset(arg);
    if (!preset) return std::unexpected(preset.error());
    out.spec = spec_of(**preset);
    out.shape = (*preset)->shape;
    out.bytes = (*preset)->bytes;
    return out;
  }
  std::error_code ec;
  std::string path = arg;
  if (fs::is_directory(path, ec)) path = (fs::path(path) / "config.json").string();
  if (!fs::is_regular_file(path, ec))
    return fail(fmt::format("--model {}: no such file (nor a preset: {})", path, preset_names()));
  auto text = read_text_file(path, "--model");
  if (!text) return std::unexpected(text.error());
  auto parsed = parse_hf_config(*text, path);
  if (!parsed) return fail(fmt::format("--model {}", parsed.error().message));
  out.spec = std::move(parsed->spec);
  out.shape = parsed->shape;
  out.bytes = parsed->bytes;
  out.notes = std::move(parsed->notes);
  out.config_path = path;
  return out;
}

Result<void> resolve_weights(ResolvedModel& model, const std::string& model_arg,
                             const std::string& weights_arg, bool required) {
  std::optional<std::uint64_t> total;
  std::string origin;
  if (!weights_arg.empty()) {
    if (looks_like_path(weights_arg)) {
      auto size = index_total(weights_arg, "--weights");
      if (!size) return std::unexpected(size.error());
      total = *size;
      origin = fmt::format("{}: metadata.total_size", weights_arg);
    } else {
      auto size = parse_size_flag("--weights", weights_arg);
      if (!size) return std::unexpected(size.error());
      total = *size;
      origin = fmt::format("--weights {}", weights_arg);
    }
  } else if (!model.config_path.empty()) {
    const std::string index =
        (fs::path(model.config_path).parent_path() / "model.safetensors.index.json").string();
    std::error_code ec;
    if (fs::is_regular_file(index, ec)) {
      auto size = index_total(index, "--model");
      if (!size) return std::unexpected(size.error());
      total = *size;
      origin = fmt::format("{}: metadata.total_size", index);
    }
  }
  if (total) {
    model.spec.weights = split_total(*total, model.shape, model.bytes);
    model.spec.weights_origin =
        fmt::format("{} ({} checkpoint; replicated share estimated from the geometry)", origin,
                    format_bytes(*total));
  } else if (!model.spec.weights && required) {
    return fail(fmt::format(
        "--model {}: weight bytes unknown: pass --weights SIZE (the checkpoint's total, e.g. "
        "600GB) or --weights model.safetensors.index.json, or put the index beside config.json",
        model_arg));
  }
  return {};
}

}  // namespace gpureap::capacity
