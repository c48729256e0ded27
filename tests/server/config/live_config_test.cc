#include "server/config/live_config.h"

#include <fstream>
#include <string>

#include "gtest/gtest.h"

namespace witcert::config {
namespace {

void Write(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

TEST(LiveConfig, ValidReloadAppliesReloadableKeysOnly) {
  const std::string path = ::testing::TempDir() + "/witcert_live.jsonc";
  Write(path, R"({"gate": {"tv_threshold": 0.05}, "http": {"port": 8000}})");
  absl::StatusOr<ServerConfig> initial = LoadServerConfig(path);
  ASSERT_TRUE(initial.ok()) << initial.status();
  LiveConfig live(path, *initial, nullptr);
  int applied = 0;
  float applied_tv = 0;
  live.OnApply([&](const ServerConfig& c) {
    ++applied;
    applied_tv = c.engine.gate.tv_threshold;
  });

  Write(path, R"({"gate": {"tv_threshold": 0.01}, "log": {"level": "debug"},
                  "http": {"port": 9999}})");
  std::vector<std::string> ignored;
  ASSERT_TRUE(live.Reload(&ignored).ok());
  EXPECT_EQ(applied, 1);
  EXPECT_FLOAT_EQ(applied_tv, 0.01f);
  EXPECT_FLOAT_EQ(live.current().engine.gate.tv_threshold, 0.01f);
  EXPECT_EQ(live.current().log.level, "debug");
  // The port needs a restart: reported, not applied.
  EXPECT_EQ(live.current().http.port, 8000);
  EXPECT_EQ(ignored, std::vector<std::string>{"http.port"});
  EXPECT_EQ(live.reloads(), 1);
}

TEST(LiveConfig, InvalidReloadKeepsTheOldConfig) {
  const std::string path = ::testing::TempDir() + "/witcert_live_bad.jsonc";
  Write(path, R"({"gate": {"tv_threshold": 0.05}})");
  LiveConfig live(path, *LoadServerConfig(path), nullptr);
  int applied = 0;
  live.OnApply([&](const ServerConfig&) { ++applied; });
  Write(path, R"({"gate": {"tv_threshold": "tight"}})");
  absl::Status s = live.Reload();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(std::string(s.message()).find("gate.tv_threshold"), std::string::npos);
  EXPECT_EQ(applied, 0);
  EXPECT_FLOAT_EQ(live.current().engine.gate.tv_threshold, 0.05f);
  EXPECT_EQ(live.reloads(), 0);
}

TEST(LiveConfig, OverlayStillWinsAfterReload) {
  const std::string path = ::testing::TempDir() + "/witcert_live_overlay.jsonc";
  Write(path, R"({"gate": {"tv_threshold": 0.05}})");
  auto overlay = [](ServerConfig* c) {
    c->engine.gate.tv_threshold = 0.2f;  // as if --tv-threshold 0.2 was given
    return absl::OkStatus();
  };
  LiveConfig live(path, *LoadServerConfig(path), overlay);
  Write(path, R"({"gate": {"tv_threshold": 0.01}})");
  ASSERT_TRUE(live.Reload().ok());
  EXPECT_FLOAT_EQ(live.current().engine.gate.tv_threshold, 0.2f);
}

}  // namespace
}  // namespace witcert::config
