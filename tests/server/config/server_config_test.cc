#include "server/config/server_config.h"

#include <fstream>
#include <string>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace witcert::config {
namespace {

// The error must name the key path and say what was wrong.
void ExpectError(const std::string& text, const std::string& key, const std::string& what) {
  absl::StatusOr<ServerConfig> c = ParseServerConfig(text);
  ASSERT_FALSE(c.ok()) << text;
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  const std::string msg(c.status().message());
  EXPECT_NE(msg.find(key), std::string::npos) << msg;
  EXPECT_NE(msg.find(what), std::string::npos) << msg;
}

TEST(ServerConfig, EmbeddedDefaultParsesAndMatchesBuiltInDefaults) {
  absl::StatusOr<ServerConfig> c = ParseServerConfig(DefaultConfigText());
  ASSERT_TRUE(c.ok()) << c.status();
  const ServerConfig d;
  EXPECT_EQ(c->http.host, "127.0.0.1");
  EXPECT_EQ(c->http.port, 8000);
  EXPECT_GE(c->http.threads, 64);
  EXPECT_EQ(c->log.level, "info");
  EXPECT_EQ(c->metrics.cert_labels, CertLabels::kLayerHead);
  EXPECT_EQ(c->engine.kv.k_scheme, d.engine.kv.k_scheme);
  EXPECT_EQ(c->engine.kv.memory_bytes, d.engine.kv.memory_bytes);
  EXPECT_EQ(c->engine.kv.dither_seed, d.engine.kv.dither_seed);
  EXPECT_EQ(c->engine.scheduler.max_running, d.engine.scheduler.max_running);
  EXPECT_EQ(c->engine.scheduler.max_batched_tokens, d.engine.scheduler.max_batched_tokens);
  EXPECT_EQ(c->http.keep_alive_timeout_s, d.http.keep_alive_timeout_s);
  EXPECT_EQ(c->http.keep_alive_max_requests, d.http.keep_alive_max_requests);
  EXPECT_EQ(c->engine.gate.mode, GateMode::kObserve);
}

TEST(ServerConfig, TierBForm) {
  absl::StatusOr<ServerConfig> c = ParseServerConfig(R"({"gate": {"tier_b_form": "split-max"}})");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->engine.gate.tier_b_form, meter::TierBForm::kSplitMax);
  c = ParseServerConfig(R"({"gate": {"tier_b_form": "scale-only"}})", *c);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->engine.gate.tier_b_form, meter::TierBForm::kScaleOnly);
  c = ParseServerConfig(R"({"gate": {}})", *c);  // absent: the base's form
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->engine.gate.tier_b_form, meter::TierBForm::kScaleOnly);
  c = ParseServerConfig(R"({"gate": {"tier_b_form": "per-token"}})", *c);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->engine.gate.tier_b_form, meter::TierBForm::kPerToken);
}

TEST(ServerConfig, EmptyObjectKeepsBase) {
  ServerConfig base;
  base.http.port = 1234;
  absl::StatusOr<ServerConfig> c = ParseServerConfig("{}", base);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->http.port, 1234);
}

TEST(ServerConfig, CommentsAreAllowed) {
  absl::StatusOr<ServerConfig> c = ParseServerConfig(R"({
    // line comment
    "http": { "port": 9001 /* block */ },
    "gate": { "mode": "repair", "tv_threshold": 0.02 }
  })");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->http.port, 9001);
  EXPECT_EQ(c->engine.gate.mode, GateMode::kRepair);
  EXPECT_FLOAT_EQ(c->engine.gate.tv_threshold, 0.02f);
}

TEST(ServerConfig, NumbersBeyondDoubleAreAnErrorNotAThrow) {
  absl::StatusOr<ServerConfig> c = ParseServerConfig(R"({"gate": {"delta": 1e400}})");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(c.status().message().find("not valid JSON"), std::string::npos) << c.status();
}

TEST(ServerConfig, UnknownKeysNameTheirPath) {
  ExpectError(R"({"htp": {}})", "htp", "unknown key");
  ExpectError(R"({"gate": {"tv_treshold": 0.1}})", "gate.tv_treshold", "unknown key");
  ExpectError(R"({"kv": {"memory_mb": 64, "extra": 1}})", "kv.extra", "unknown key");
}

TEST(ServerConfig, WrongTypesNameTheirPath) {
  ExpectError(R"({"gate": {"tv_threshold": "0.1"}})", "gate.tv_threshold", "expected a number");
  ExpectError(R"({"http": {"port": 80.5}})", "http.port", "expected an integer");
  ExpectError(R"({"http": {"port": "80"}})", "http.port", "got a string");
  ExpectError(R"({"metrics": {"enabled": 1}})", "metrics.enabled", "true or false");
  ExpectError(R"({"gate": 3})", "gate", "expected an object");
  ExpectError(R"({"kv": {"k_scheme": 8}})", "kv.k_scheme", "expected a string");
}

TEST(ServerConfig, BadValuesNameTheirPath) {
  ExpectError(R"({"http": {"port": 70000}})", "http.port", "out of range");
  ExpectError(R"({"gate": {"tv_threshold": 1.5}})", "gate.tv_threshold", "out of range");
  ExpectError(R"({"gate": {"mode": "maybe"}})", "gate.mode", "maybe");
  ExpectError(R"({"gate": {"tier_b_form": "max"}})", "gate.tier_b_form", "per-token, scale-only, split-max");
  ExpectError(R"({"log": {"level": "loud"}})", "log.level", "loud");
  ExpectError(R"({"metrics": {"cert_labels": "per_cell"}})", "metrics.cert_labels", "per_cell");
  ExpectError(R"({"http": {"threads": 0}})", "http.threads", "out of range");
  ExpectError(R"({"http": {"keep_alive_timeout_s": 0}})", "http.keep_alive_timeout_s", "out of range");
  ExpectError(R"({"scheduler": {"max_batched_tokens": -1}})", "scheduler.max_batched_tokens",
              "out of range");
}

// model.rope_scaling is kept as JSON text for the model loader (engine/model/hf_model.h);
// null means the model's own scaling.
TEST(ServerConfig, RopeScalingKeepsItsObject) {
  absl::StatusOr<ServerConfig> c = ParseServerConfig(
      R"({"model": {"rope_scaling": {"rope_type": "yarn", "factor": 4.0}}})");
  ASSERT_TRUE(c.ok()) << c.status();
  const auto parsed = nlohmann::json::parse(c->engine.rope_scaling);
  EXPECT_EQ(parsed["rope_type"], "yarn");
  EXPECT_EQ(parsed["factor"], 4.0);
  absl::StatusOr<ServerConfig> cleared = ParseServerConfig(R"({"model": {"rope_scaling": null}})", *c);
  ASSERT_TRUE(cleared.ok()) << cleared.status();
  EXPECT_TRUE(cleared->engine.rope_scaling.empty());
  ExpectError(R"({"model": {"rope_scaling": "yarn"}})", "model.rope_scaling", "an object or null");
  EXPECT_TRUE(c->engine.model_sampling_defaults);
  absl::StatusOr<ServerConfig> off = ParseServerConfig(R"({"model": {"sampling_defaults": false}})");
  ASSERT_TRUE(off.ok()) << off.status();
  EXPECT_FALSE(off->engine.model_sampling_defaults);
  absl::StatusOr<ServerConfig> d = ParseServerConfig(DefaultConfigText());
  ASSERT_TRUE(d.ok());
  EXPECT_TRUE(d->engine.rope_scaling.empty());
}

TEST(ServerConfig, MalformedJsonAndNonObject) {
  ExpectError(R"({"http": )", "JSON", "JSON");
  ExpectError("[1, 2]", "JSON object", "array");
}

TEST(ServerConfig, CertLabelsParse) {
  EXPECT_EQ(*ParseCertLabels("layer"), CertLabels::kLayer);
  EXPECT_EQ(*ParseCertLabels("off"), CertLabels::kOff);
  EXPECT_FALSE(ParseCertLabels("head").ok());
}

TEST(ServerConfig, LoadNamesTheFile) {
  const std::string path = ::testing::TempDir() + "/witcert_bad.jsonc";
  std::ofstream(path) << R"({"scheduler": {"max_running": -1}})";
  absl::StatusOr<ServerConfig> c = LoadServerConfig(path);
  ASSERT_FALSE(c.ok());
  const std::string msg(c.status().message());
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_NE(msg.find("scheduler.max_running"), std::string::npos) << msg;
  EXPECT_EQ(LoadServerConfig("/nonexistent/witcert.jsonc").status().code(),
            absl::StatusCode::kNotFound);
}

TEST(ServerConfig, ValidateCatchesCrossFieldErrors) {
  ServerConfig c;
  c.http.default_max_tokens = 100;
  c.http.max_tokens_limit = 10;
  absl::Status s = ValidateServerConfig(c);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(std::string(s.message()).find("http.default_max_tokens"), std::string::npos);
}

}  // namespace
}  // namespace witcert::config
