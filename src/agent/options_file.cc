#include "agent/options_file.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <memory>

#include "report/terminal_text.h"
#include "util/text.h"

namespace gpureap::agent {

Result<std::set<std::string>> check_options_file(const std::string& path,
                                                 const std::vector<std::string_view>& keys) {
  std::set<std::string> keys_set;
  std::ifstream in(path);
  if (!in) return keys_set;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    std::string_view text = trim(line);
    if (text.empty() || text.front() == '#' || text.front() == ';') continue;
    auto where = [&] { return fmt::format("--config {}, line {}", path, number); };
    if (text.front() == '[')
      return fail(
          fmt::format("{}: sections are not read ({}): put the keys at the top of the "
                      "file, without a section",
                      where(), report::terminal_text(text)));
    const auto eq = text.find('=');
    if (eq == std::string_view::npos)
      return fail(fmt::format("{}: expected `key = value`, got '{}'", where(),
                              report::terminal_text(text)));
    std::string_view key = trim(text.substr(0, eq));
    if (key.size() >= 2 && key.front() == '"' && key.back() == '"')
      key = key.substr(1, key.size() - 2);
    if (std::find(keys.begin(), keys.end(), key) == keys.end())
      return fail(fmt::format("{}: unknown key '{}' (the file takes {})", where(),
                              report::terminal_text(key), fmt::join(keys, ", ")));
    // After a quoted value, only a `#` comment: CLI11 reads `"x" ; note` as several
    // values ("At Most 1 required but received 4", W3-12d).
    std::string_view value = trim(text.substr(eq + 1));
    if (!value.empty() && (value.front() == '"' || value.front() == '\'')) {
      const auto close = value.find(value.front(), 1);
      std::string_view rest =
          close == std::string_view::npos ? std::string_view{} : trim(value.substr(close + 1));
      if (!rest.empty() && rest.front() != '#')
        return fail(fmt::format("{}: '{}' after the value of '{}': a comment after a value starts "
                                "with # (; starts a comment only at the start of a line)",
                                where(), report::terminal_text(rest), report::terminal_text(key)));
    }
    keys_set.insert(std::string(key));
  }
  return keys_set;
}

Result<void> check_file_owner(const std::string& option, const std::string& path,
                              const std::string& steers) {
  std::unique_ptr<char, decltype(&std::free)> real(::realpath(path.c_str(), nullptr), &std::free);
  if (!real) return {};
  const uid_t me = ::geteuid();
  std::string at = real.get();
  for (bool is_file = true;; is_file = false) {
    struct stat st {};
    if (::stat(at.c_str(), &st) != 0) return {};
    const std::string what = is_file ? "the file" : "its directory " + at;
    auto refuse = [&](const std::string& why) {
      return fail(fmt::format(
          "{} {}: {} {}: whoever can write it {}; refusing it. It must be owned by root{} and "
          "writable by no one else",
          option, path, what, why, steers, me == 0 ? "" : fmt::format(" or uid {}", me)));
    };
    if (st.st_uid != 0 && st.st_uid != me)
      return refuse(fmt::format("is owned by uid {}", st.st_uid));
    const bool sticky_dir = !is_file && (st.st_mode & S_ISVTX) != 0;
    if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0 && !sticky_dir)
      return refuse(fmt::format("is writable by {} (mode {:04o})",
                                (st.st_mode & S_IWOTH) ? "everyone" : "its group",
                                st.st_mode & 07777));
    if (at == "/") return {};
    const auto slash = at.rfind('/');
    at = slash == 0 ? "/" : at.substr(0, slash);
  }
}

Result<void> check_private_file(const std::string& option, const std::string& path,
                                const std::string& steers) {
  if (auto owner = check_file_owner(option, path, steers); !owner) return owner;
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return {};  // left to the reader
  if ((st.st_mode & (S_IRWXG | S_IRWXO)) != 0)
    return fail(fmt::format("{} {}: the file is readable by {} (mode {:04o}): whoever can read "
                            "it {}; refusing it. Make it readable by its owner alone (chmod 0600)",
                            option, path, (st.st_mode & S_IRWXO) ? "everyone" : "its group",
                            st.st_mode & 07777, steers));
  return {};
}

}  // namespace gpureap::agent
