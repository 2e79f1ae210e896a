// docs/CONFIG.md must document every key, and its complete example file must load.
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "config/key_registry.hpp"
#include "config_test_support.hpp"

namespace nerve {
namespace {

std::string read_docs() {
  std::ifstream stream(std::string(NERVE_SOURCE_DIR) + "/docs/CONFIG.md");
  std::ostringstream text;
  text << stream.rdbuf();
  return text.str();
}

TEST(ConfigDocs, MentionEveryImplementedKeyAndItsVariable) {
  const std::string docs = read_docs();
  ASSERT_FALSE(docs.empty()) << "cannot read " << NERVE_SOURCE_DIR << "/docs/CONFIG.md";
  for (const config::KeySpec& key : config::key_table()) {
    EXPECT_NE(docs.find("`" + std::string(key.name) + "`"), std::string::npos)
        << key.name << " is not documented";
    const std::string variable = config::environment_variable_name(key.name);
    EXPECT_NE(docs.find(variable), std::string::npos) << variable << " is not documented";
  }
}

TEST(ConfigDocs, ListEveryPlannedKey) {
  const std::string docs = read_docs();
  for (const config::PlannedKey& key : config::planned_key_table()) {
    EXPECT_NE(docs.find("`" + std::string(key.name) + "`"), std::string::npos)
        << key.name << " is not listed";
  }
}

TEST(ConfigDocs, CompleteExampleLoads) {
  const std::string docs = read_docs();
  const auto heading = docs.find("## Complete example");
  ASSERT_NE(heading, std::string::npos);
  const auto start = docs.find("```yaml\n", heading);
  ASSERT_NE(start, std::string::npos);
  const auto end = docs.find("```", start + 8);
  ASSERT_NE(end, std::string::npos);
  testing::TempDir dir;
  const auto file = dir.write("example.yaml", docs.substr(start + 8, end - start - 8));
  const Config config = Config::load(testing::hermetic().config_file(file));
  // The example sets every implemented key except topology.xml (it needs a real file).
  for (const auto& entry : config.entries) {
    if (entry.key == "topology.xml") continue;
    EXPECT_EQ(entry.origin.source, ConfigSource::file) << entry.key << " is missing from the example";
  }
}

}  // namespace
}  // namespace nerve
