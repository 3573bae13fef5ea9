#pragma once
// Terminal styling: colour only when asked for (a TTY without NO_COLOR).

#include <string>
#include <string_view>

namespace gpureap::report {

struct Style {
  bool color = false;

  std::string paint(std::string_view code, std::string_view text) const {
    if (!color) return std::string(text);
    return "\033[" + std::string(code) + "m" + std::string(text) + "\033[0m";
  }
  std::string bold(std::string_view t) const { return paint("1", t); }
  std::string dim(std::string_view t) const { return paint("2", t); }
  std::string red(std::string_view t) const { return paint("31", t); }
  std::string yellow(std::string_view t) const { return paint("33", t); }
  std::string green(std::string_view t) const { return paint("32", t); }
};

}  // namespace gpureap::report
