#pragma once
// For tests only: a private temporary directory, removed with everything in it on
// destruction.

#include <stdlib.h>

#include <filesystem>
#include <stdexcept>
#include <string>

namespace gpureap {

class TestTempDir {
 public:
  explicit TestTempDir(const std::string& prefix = "gpureap-test") {
    std::string tmpl = "/tmp/" + prefix + "-XXXXXX";
    if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp " + tmpl);
    dir_ = tmpl;
  }
  ~TestTempDir() {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  TestTempDir(const TestTempDir&) = delete;
  TestTempDir& operator=(const TestTempDir&) = delete;

  std::string path(const std::string& name) const { return dir_ + "/" + name; }
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
};

}  // namespace gpureap
