#include "server/config/server_config.h"

#include <fstream>
#include <functional>
#include <set>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"

namespace witcert::config {
namespace {

using nlohmann::json;

const char* TypeName(const json& v) {
  switch (v.type()) {
    case json::value_t::null: return "null";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::string: return "a string";
    case json::value_t::array: return "an array";
    case json::value_t::object: return "an object";
    case json::value_t::number_float: return "a number";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned: return "an integer";
    default: return "a value";
  }
}

// Walks one JSON object, reading known keys into fields and remembering which keys were
// seen; Finish() reports the first unknown key. The first error wins.
class ObjectReader {
 public:
  ObjectReader(const json& object, std::string path, absl::Status* error)
      : object_(object), path_(std::move(path)), error_(error) {}

  std::string KeyPath(const std::string& key) const {
    return path_.empty() ? key : absl::StrCat(path_, ".", key);
  }

  void String(const std::string& key, std::string* out) {
    const json* v = Take(key);
    if (v == nullptr) return;
    if (!v->is_string()) return Fail(key, "a string", *v);
    *out = v->get<std::string>();
  }
  template <typename Int>
  void Integer(const std::string& key, Int* out, int64_t lo, int64_t hi) {
    const json* v = Take(key);
    if (v == nullptr) return;
    if (!v->is_number_integer()) return Fail(key, "an integer", *v);
    // Unsigned values above int64 max are out of any range here.
    if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
      return Range(key, lo, hi);
    const int64_t i = v->get<int64_t>();
    if (i < lo || i > hi) return Range(key, lo, hi);
    *out = static_cast<Int>(i);
  }
  void Unsigned(const std::string& key, uint64_t* out) {
    const json* v = Take(key);
    if (v == nullptr) return;
    if (!v->is_number_unsigned() && !(v->is_number_integer() && v->get<int64_t>() >= 0))
      return Fail(key, "a non-negative integer", *v);
    *out = v->get<uint64_t>();
  }
  void Number(const std::string& key, double* out, double lo, double hi) {
    const json* v = Take(key);
    if (v == nullptr) return;
    if (!v->is_number()) return Fail(key, "a number", *v);
    const double d = v->get<double>();
    if (!(d >= lo && d <= hi)) {
      return SetError(absl::StrFormat("%s: %g is out of range [%g, %g]", KeyPath(key), d, lo, hi));
    }
    *out = d;
  }
  void Bool(const std::string& key, bool* out) {
    const json* v = Take(key);
    if (v == nullptr) return;
    if (!v->is_boolean()) return Fail(key, "true or false", *v);
    *out = v->get<bool>();
  }
  // An object kept as its JSON text for a later reader (null → "").
  void ObjectText(const std::string& key, std::string* out) {
    const json* v = Take(key);
    if (v == nullptr) return;
    if (v->is_null()) {
      out->clear();
      return;
    }
    if (!v->is_object()) return Fail(key, "an object or null", *v);
    *out = v->dump();
  }
  void Object(const std::string& key, const std::function<void(ObjectReader&)>& body) {
    const json* v = Take(key);
    if (v == nullptr) return;
    if (!v->is_object()) return Fail(key, "an object", *v);
    ObjectReader child(*v, KeyPath(key), error_);
    body(child);
    child.Finish();
  }
  void Finish() {
    for (auto it = object_.begin(); it != object_.end(); ++it) {
      if (!seen_.count(it.key())) {
        return SetError(absl::StrFormat("%s: unknown key", KeyPath(it.key())));
      }
    }
  }
  void SetError(std::string message) {
    if (error_->ok()) *error_ = absl::InvalidArgumentError(std::move(message));
  }

 private:
  const json* Take(const std::string& key) {
    seen_.insert(key);
    auto it = object_.find(key);
    if (it == object_.end()) return nullptr;
    return &*it;
  }
  void Fail(const std::string& key, const char* want, const json& got) {
    SetError(absl::StrFormat("%s: expected %s, got %s", KeyPath(key), want, TypeName(got)));
  }
  void Range(const std::string& key, int64_t lo, int64_t hi) {
    SetError(absl::StrFormat("%s: out of range [%d, %d]", KeyPath(key), lo, hi));
  }

  const json& object_;
  std::string path_;
  absl::Status* error_;
  std::set<std::string> seen_;
};

constexpr int64_t kMaxInt32 = INT32_MAX;

// Range checks of the gate policy the file may set (the parser already bounded each key;
// this is what must hold across them).
absl::Status CheckGate(const GatePolicy& g) {
  if (!(g.tv_threshold > 0.0f)) return absl::InvalidArgumentError("tv_threshold must be > 0");
  if (g.v_threshold < 0.0f) return absl::InvalidArgumentError("v_threshold must be >= 0");
  if (!(g.delta_req >= 0.0 && g.delta_req < 1.0))
    return absl::InvalidArgumentError("delta must be in [0, 1)");
  if (g.pagein_budget_per_step < 0) return absl::InvalidArgumentError("pagein_budget must be >= 0");
  if (!(g.audit_rate >= 0.0 && g.audit_rate <= 1.0))
    return absl::InvalidArgumentError("audit_rate must be in [0, 1]");
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<CertLabels> ParseCertLabels(std::string_view text) {
  if (text == "layer_head") return CertLabels::kLayerHead;
  if (text == "layer") return CertLabels::kLayer;
  if (text == "off") return CertLabels::kOff;
  return absl::InvalidArgumentError(
      absl::StrCat("'", std::string(text), "' is not one of layer_head, layer, off"));
}

const char* CertLabelsName(CertLabels labels) {
  switch (labels) {
    case CertLabels::kLayerHead: return "layer_head";
    case CertLabels::kLayer: return "layer";
    case CertLabels::kOff: return "off";
  }
  return "off";
}

absl::StatusOr<ServerConfig> ParseServerConfig(std::string_view text, const ServerConfig& base) {
  json root;
  try {
    root = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/true,
                       /*ignore_comments=*/true);
  } catch (const json::exception& e) {  // parse_error, or out_of_range for a number beyond double's
    return absl::InvalidArgumentError(absl::StrCat("not valid JSON: ", e.what()));
  }
  if (!root.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the config must be a JSON object, got ", TypeName(root)));
  }
  ServerConfig c = base;
  absl::Status error;
  ObjectReader top(root, "", &error);
  top.Object("http", [&](ObjectReader& r) {
    r.String("host", &c.http.host);
    r.Integer("port", &c.http.port, 0, 65535);
    r.Integer("threads", &c.http.threads, 1, 4096);
    r.Integer("max_body_bytes", &c.http.max_body_bytes, 1024, int64_t{1} << 32);
    r.Integer("read_timeout_s", &c.http.read_timeout_s, 1, 3600);
    r.Integer("write_timeout_s", &c.http.write_timeout_s, 1, 3600);
    r.Integer("keep_alive_timeout_s", &c.http.keep_alive_timeout_s, 1, 3600);
    r.Integer("keep_alive_max_requests", &c.http.keep_alive_max_requests, 1, 1 << 30);
    r.String("api_key", &c.http.api_key);
    r.String("model_name", &c.http.model_name);
    r.Integer("max_tokens_limit", &c.http.max_tokens_limit, 1, kMaxInt32);
    r.Integer("default_max_tokens", &c.http.default_max_tokens, 1, kMaxInt32);
  });
  top.Object("grpc", [&](ObjectReader& r) {
    r.Bool("enabled", &c.grpc.enabled);
    r.String("host", &c.grpc.host);
    r.Integer("port", &c.grpc.port, 0, 65535);
  });
  top.Object("log", [&](ObjectReader& r) {
    r.String("level", &c.log.level);
    static const std::set<std::string> kLevels = {"trace", "debug", "info", "warn",
                                                  "error", "critical", "off"};
    if (!kLevels.count(c.log.level)) {
      r.SetError(absl::StrCat(r.KeyPath("level"), ": '", c.log.level,
                              "' is not one of trace, debug, info, warn, error, critical, off"));
    }
  });
  top.Object("metrics", [&](ObjectReader& r) {
    r.Bool("enabled", &c.metrics.enabled);
    std::string labels = CertLabelsName(c.metrics.cert_labels);
    r.String("cert_labels", &labels);
    auto parsed = ParseCertLabels(labels);
    if (!parsed.ok()) r.SetError(absl::StrCat(r.KeyPath("cert_labels"), ": ", parsed.status().message()));
    else c.metrics.cert_labels = *parsed;
  });
  top.Object("model", [&](ObjectReader& r) {
    r.String("path", &c.engine.model_path);
    r.String("chat_template", &c.engine.chat_template);
    r.Integer("threads", &c.engine.threads, 0, 1024);
    r.Integer("max_context", &c.engine.max_context, 0, kMaxInt32);
    r.ObjectText("rope_scaling", &c.engine.rope_scaling);
    r.Bool("sampling_defaults", &c.engine.model_sampling_defaults);
  });
  top.Object("kv", [&](ObjectReader& r) {
    r.String("k_scheme", &c.engine.kv.k_scheme);
    r.String("v_scheme", &c.engine.kv.v_scheme);
    r.Integer("block_size", &c.engine.kv.block_size, 1, 1024);
    int64_t memory_mb = c.engine.kv.memory_bytes >> 20;
    r.Integer("memory_mb", &memory_mb, 1, int64_t{1} << 20);
    c.engine.kv.memory_bytes = memory_mb << 20;
    r.Integer("num_bands", &c.engine.kv.num_bands, 1, 64);
    r.Integer("outlier_channels", &c.engine.kv.outlier_channels, 0, 1024);
    r.Unsigned("dither_seed", &c.engine.kv.dither_seed);
    r.Bool("prefix_caching", &c.engine.kv.prefix_caching);
    int64_t backing_mb = c.engine.kv.backing_store_bytes >> 20;
    r.Integer("backing_store_mb", &backing_mb, 0, int64_t{1} << 24);
    c.engine.kv.backing_store_bytes = backing_mb << 20;
  });
  top.Object("gate", [&](ObjectReader& r) {
    std::string mode;
    r.String("mode", &mode);
    if (mode == "off") c.engine.gate.mode = GateMode::kOff;
    else if (mode == "observe") c.engine.gate.mode = GateMode::kObserve;
    else if (mode == "repair") c.engine.gate.mode = GateMode::kRepair;
    else if (!mode.empty())
      r.SetError(absl::StrCat(r.KeyPath("mode"), ": '", mode, "' is not one of off, observe, repair"));
    double tv = c.engine.gate.tv_threshold, v = c.engine.gate.v_threshold;
    r.Number("tv_threshold", &tv, 0.0, 1.0);
    r.Number("v_threshold", &v, 0.0, 1e9);
    c.engine.gate.tv_threshold = static_cast<float>(tv);
    c.engine.gate.v_threshold = static_cast<float>(v);
    r.Number("delta", &c.engine.gate.delta_req, 0.0, 1.0);
    r.Integer("pagein_budget", &c.engine.gate.pagein_budget_per_step, 0, kMaxInt32);
    r.Number("audit_rate", &c.engine.gate.audit_rate, 0.0, 1.0);
    r.Integer("exact_cache_blocks", &c.engine.gate.exact_cache_blocks, 0, int64_t{1} << 30);
    r.String("trace_path", &c.engine.trace_path);
    std::string tier_b_form;
    r.String("tier_b_form", &tier_b_form);
    if (!tier_b_form.empty()) {
      const absl::StatusOr<meter::TierBForm> form = ParseTierBForm(tier_b_form);
      if (form.ok()) {
        c.engine.gate.tier_b_form = *form;
      } else {
        r.SetError(absl::StrCat(r.KeyPath("tier_b_form"), ": ", form.status().message()));
      }
    }
  });
  top.Object("scheduler", [&](ObjectReader& r) {
    r.Integer("max_running", &c.engine.scheduler.max_running, 1, 1 << 20);
    r.Integer("max_batched_tokens", &c.engine.scheduler.max_batched_tokens, 0, 1 << 24);
  });
  top.Finish();
  if (!error.ok()) return error;
  if (absl::Status s = CheckGate(c.engine.gate); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("gate: ", s.message()));
  }
  return c;
}

absl::StatusOr<ServerConfig> LoadServerConfig(const std::string& path) {
  absl::StatusOr<ServerConfig> defaults = ParseServerConfig(DefaultConfigText());
  if (!defaults.ok()) {
    return absl::InternalError(
        absl::StrCat("the embedded default config is invalid: ", defaults.status().message()));
  }
  if (path.empty()) return defaults;
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read config file ", path));
  std::stringstream text;
  text << in.rdbuf();
  absl::StatusOr<ServerConfig> parsed = ParseServerConfig(text.str(), *defaults);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", parsed.status().message()));
  }
  return parsed;
}

absl::Status ValidateServerConfig(const ServerConfig& config) {
  if (config.http.default_max_tokens > config.http.max_tokens_limit) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "http.default_max_tokens (%d) exceeds http.max_tokens_limit (%d)",
        config.http.default_max_tokens, config.http.max_tokens_limit));
  }
  if (absl::Status s = CheckGate(config.engine.gate); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("gate: ", s.message()));
  }
  return absl::OkStatus();
}

}  // namespace witcert::config
