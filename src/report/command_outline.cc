#include "report/command_outline.h"

#include <algorithm>

namespace gpureap::report {

std::string summary_of(const std::string& description) {
  std::string text = description.substr(0, description.find("\n\n"));
  std::replace(text.begin(), text.end(), '\n', ' ');
  if (auto dot = text.find(". "); dot != std::string::npos) text.resize(dot + 1);
  if (!text.empty() && text.back() == '.') text.pop_back();
  return text;
}

}  // namespace gpureap::report
