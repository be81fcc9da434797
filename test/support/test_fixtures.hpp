// Fixtures shared by the suites that touch the file system or watch tx's
// warnings: a private temporary folder per test, and a warning collector.
#pragma once

#include <doctest/doctest.h>
#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "tx/error.hpp"

namespace tx::test {

// A fresh 0700 folder (mkdtemp), removed afterwards even if a test made
// parts of it read-only.
struct TempDir {
  std::string path;
  explicit TempDir(const std::string& prefix = "tx-test") {
    const char* t = std::getenv("TMPDIR");
    std::string tmpl = std::string(t && *t ? t : "/tmp") + "/" + prefix + "-XXXXXX";
    REQUIRE(mkdtemp(tmpl.data()) != nullptr);
    path = tmpl;
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir() {
    std::error_code ec;
    for (auto it = std::filesystem::recursive_directory_iterator(path, ec);
         it != std::filesystem::recursive_directory_iterator(); it.increment(ec))
      if (it->is_directory(ec)) chmod(it->path().c_str(), 0700);
    chmod(path.c_str(), 0700);
    std::filesystem::remove_all(path, ec);
  }
};

// A whole file's bytes ("" when it cannot be read).
inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Writes `data` as the whole file, mode 0600 whatever the umask (so only the
// damage a test makes differs from a file tx wrote).
inline void write_file(const std::string& path, const std::string& data) {
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(data.data(), static_cast<std::streamsize>(data.size()));
    REQUIRE(out.good());
  }
  REQUIRE(chmod(path.c_str(), 0600) == 0);
}

// The tx warnings issued while a WarningCapture is alive.
inline std::vector<std::string>& warnings() {
  static std::vector<std::string> w;
  return w;
}
struct WarningCapture {
  WarningCapture() {
    warnings().clear();
    tx::set_warning_handler([](const std::string& m) { warnings().push_back(m); });
  }
  WarningCapture(const WarningCapture&) = delete;
  WarningCapture& operator=(const WarningCapture&) = delete;
  ~WarningCapture() { tx::set_warning_handler(nullptr); }
  bool any_mentions(const std::string& s) const {
    for (const auto& w : warnings())
      if (w.find(s) != std::string::npos) return true;
    return false;
  }
};

}  // namespace tx::test
