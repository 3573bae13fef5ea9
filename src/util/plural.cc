#include "util/plural.h"

#include <fmt/format.h>

namespace gpureap {

std::string count_of(std::size_t n, std::string_view one, std::string_view many) {
  return fmt::format("{} {}", n, n == 1 ? one : many);
}

std::string count_of(std::size_t n, std::string_view one) {
  return n == 1 ? fmt::format("1 {}", one) : fmt::format("{} {}s", n, one);
}

std::string_view agreeing(std::size_t n, std::string_view singular, std::string_view plural) {
  return n == 1 ? singular : plural;
}

}  // namespace gpureap
