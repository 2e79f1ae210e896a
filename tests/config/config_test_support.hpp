// config_test_support.hpp — helpers shared by the configuration tests.
#pragma once

#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include <stdlib.h>

#include <gtest/gtest.h>

#include "nerve/config.hpp"

namespace nerve::testing {

// TempDir is a fresh directory under the system temp directory, removed with everything in it when
// the object goes out of scope, so that tests running in parallel never share files.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "nerve-config-test-XXXXXX").string();
    if (!mkdtemp(pattern.data())) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }

  // write() creates (or replaces) file `name` in the directory with `text` and returns its path.
  std::filesystem::path write(const std::string& name, const std::string& text) const {
    const auto file = path_ / name;
    std::ofstream(file, std::ios::binary) << text;
    return file;
  }

 private:
  std::filesystem::path path_;
};

// hermetic() is Settings that ignore the process environment.
inline Settings hermetic() { return Settings().use_environment(false); }

// entry() gives the Config::entries row for `key` (a test failure if there is none).
inline const Config::Entry& entry(const Config& config, const std::string& key) {
  for (const auto& e : config.entries) {
    if (e.key == key) return e;
  }
  ADD_FAILURE() << "no entry for " << key;
  static const Config::Entry none{};
  return none;
}

}  // namespace nerve::testing
