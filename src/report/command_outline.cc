#include "report/command_outline.h"

#include <algorithm>
#include <cctype>

namespace gpureap::report {

std::string summary_of(const std::string& description) {
  std::string text = description.substr(0, description.find("\n\n"));
  std::replace(text.begin(), text.end(), '\n', ' ');
  if (auto dot = text.find(". "); dot != std::string::npos) text.resize(dot + 1);
  if (!text.empty() && text.back() == '.') text.pop_back();
  return text;
}

std::string heading_of(std::string_view line, std::string& remark) {
  remark.clear();
  if (line.size() < 2 || line.back() != ':' || !std::isupper(static_cast<unsigned char>(line[0])))
    return "";
  line.remove_suffix(1);
  std::string_view name = line.substr(0, line.find(" ("));
  if (name.size() < line.size()) {
    if (line.back() != ')') return "";
    remark = line.substr(name.size() + 1);
  }
  for (char ch : name)
    if (!std::isalpha(static_cast<unsigned char>(ch)) && ch != ' ') return "";
  return std::string(name);
}

DescriptionParts split_description(std::string_view description) {
  std::string remark;
  for (std::size_t start = 0; start < description.size();) {
    std::size_t nl = description.find('\n', start);
    if (nl == std::string_view::npos) nl = description.size();
    if (!heading_of(description.substr(start, nl - start), remark).empty()) {
      std::string_view prose = description.substr(0, start);
      while (prose.ends_with('\n')) prose.remove_suffix(1);
      return {std::string(prose), std::string(description.substr(start))};
    }
    start = nl + 1;
  }
  return {std::string(description), ""};
}

}  // namespace gpureap::report
