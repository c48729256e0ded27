#include "server/cli/engine_flags.h"

#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <filesystem>

#include "absl/strings/str_format.h"

namespace witcert::cli {

void DeclareEngineFlags(Args& args) {
  args.Flag("model", "", "GGUF model file (default: the fetched SmolLM2-135M-Instruct)");
  args.Flag("device", "auto", "where the model runs: cuda | cpu | auto (cuda when a GPU is present "
                             "and the build has the CUDA backend)");
  args.Flag("threads", "0", "CPU threads (0 = all cores)");
  args.Flag("ctx-size", "0", "max context in tokens (0 = the model's)");
  args.Flag("rope-scaling", "", "replace the model's RoPE scaling: a rope_scaling JSON object as in "
                                "config.json, e.g. '{\"rope_type\":\"yarn\",\"factor\":4.0,"
                                "\"original_max_position_embeddings\":32768}'");
  args.Flag("chat-template", "",
            "override the chat template: chatml | llama3 | llama2 | mistral | mistral-v3 | mistral-tekken");
  args.Flag("kv-scheme", "", "KV scheme for K and V (fp16, bf16, fp8-e4m3, fp8-e4m3-raw, "
                             "int8-rtn, int8-dither, int4-rtn, kivi2)");
  args.Flag("k-scheme", "fp16", "KV scheme for keys");
  args.Flag("v-scheme", "fp16", "KV scheme for values");
  args.Flag("kv-memory-mb", "256", "quantized KV pool size in MiB");
  args.Flag("block-size", "16", "tokens per KV block");
  args.Flag("outlier-channels", "0", "channels per (layer, KV head) kept exact beside the codes");
  args.Flag("gate", "observe", "certificate gate: off | observe | repair");
  args.Flag("tv-threshold", "0.05", "TV bound above which a cell is uncertified");
  args.Flag("v-threshold", "0", "relative value-error bound above which a cell is uncertified "
                                "(0 = not checked)");
  args.Flag("delta", "0.01", "request failure budget δ for Tier B certificates (0 = Tier A only)");
  args.Flag("tier-b-form", "per-token",
            "Tier B certificates: per-token (min of Tier A and B per token) | scale-only (Tier B per "
            "token from the key scale: no witness reads) | split-max (from each KV split's largest key "
            "scale: loosest, least meter work)");
  args.Flag("pagein-budget", "4", "exact blocks paged in per cell per step (repair mode)");
  args.Flag("backing-store-mb", "1024", "exact KV copies kept in host memory for repair (MiB)");
  args.Flag("exact-cache-blocks", "16384",
            "(block, layer, KV head) exact copies kept after page-in (repair mode)");
  args.Flag("audit-rate", "0", "fraction of cells also checked against exact attention");
  args.Flag("trace-file", "", "write every certificate cell to this JSONL file");
  args.Switch("exact-matmul", "reference arithmetic (dequantized weights, double sums): slow, "
                              "for verification");
  args.Flag("max-running", "64", "max sequences decoded together");
  args.Flag("max-batched-tokens", "0",
            "max tokens per forward pass, the prefill chunk budget (0 = 512 on cpu, 2048 on cuda)");
}

absl::Status ApplyEngineFlags(const Args& args, EngineConfig* config) {
  if (args.Has("model") || config->model_path.empty()) {
    config->model_path = args.Has("model") ? args.Get("model") : DefaultModelPath();
  }
  long long i = 0;
  double d = 0;
  auto int_flag = [&](const char* name, auto* out) -> absl::Status {
    absl::Status s = args.GetInt(name, &i);
    if (!s.ok()) return s;
    if (i < 0) return absl::InvalidArgumentError(absl::StrFormat("--%s must be >= 0", name));
    *out = static_cast<std::remove_pointer_t<decltype(out)>>(i);
    return absl::OkStatus();
  };
  auto dbl_flag = [&](const char* name, auto* out) -> absl::Status {
    absl::Status s = args.GetDouble(name, &d);
    if (!s.ok()) return s;
    *out = static_cast<std::remove_pointer_t<decltype(out)>>(d);
    return absl::OkStatus();
  };
  // Values come from flags when given, else stay as the config file set them; the flags'
  // own defaults equal the built-in config defaults.
  auto given = [&](const char* name) { return args.Has(name); };
  absl::Status s;
  if (given("threads") && !(s = int_flag("threads", &config->threads)).ok()) return s;
  if (given("ctx-size") && !(s = int_flag("ctx-size", &config->max_context)).ok()) return s;
  if (given("chat-template")) config->chat_template = args.Get("chat-template");
  if (given("rope-scaling")) config->rope_scaling = args.Get("rope-scaling");
  if (given("device")) {
    const std::string device = args.Get("device");
    if (device != "cuda" && device != "cpu" && device != "auto") {
      return absl::InvalidArgumentError("--device must be cuda, cpu or auto");
    }
    config->device = device;
  }
  if (args.On("exact-matmul")) config->exact_matmul = true;
  if (given("trace-file")) config->trace_path = args.Get("trace-file");
  if (given("kv-scheme")) config->kv.k_scheme = config->kv.v_scheme = args.Get("kv-scheme");
  if (given("k-scheme")) config->kv.k_scheme = args.Get("k-scheme");
  if (given("v-scheme")) config->kv.v_scheme = args.Get("v-scheme");
  if (given("kv-memory-mb")) {
    int64_t mb = 0;
    if (!(s = int_flag("kv-memory-mb", &mb)).ok()) return s;
    config->kv.memory_bytes = mb << 20;
  }
  if (given("block-size") && !(s = int_flag("block-size", &config->kv.block_size)).ok()) return s;
  if (given("outlier-channels") &&
      !(s = int_flag("outlier-channels", &config->kv.outlier_channels)).ok())
    return s;
  if (given("gate")) {
    auto mode = ParseGateMode(args.Get("gate"));
    if (!mode.ok()) return mode.status();
    config->gate.mode = *mode;
  }
  if (given("tv-threshold") && !(s = dbl_flag("tv-threshold", &config->gate.tv_threshold)).ok())
    return s;
  if (given("v-threshold") && !(s = dbl_flag("v-threshold", &config->gate.v_threshold)).ok())
    return s;
  if (given("delta") && !(s = dbl_flag("delta", &config->gate.delta_req)).ok()) return s;
  if (given("tier-b-form")) {
    const absl::StatusOr<meter::TierBForm> form = ParseTierBForm(args.Get("tier-b-form"));
    if (!form.ok()) return form.status();
    config->gate.tier_b_form = *form;
  }
  if (given("pagein-budget") &&
      !(s = int_flag("pagein-budget", &config->gate.pagein_budget_per_step)).ok())
    return s;
  if (given("audit-rate") && !(s = dbl_flag("audit-rate", &config->gate.audit_rate)).ok())
    return s;
  if (given("backing-store-mb")) {
    int64_t mb = 0;
    if (!(s = int_flag("backing-store-mb", &mb)).ok()) return s;
    config->kv.backing_store_bytes = mb << 20;
  }
  if (given("exact-cache-blocks") &&
      !(s = int_flag("exact-cache-blocks", &config->gate.exact_cache_blocks)).ok())
    return s;
  if (given("max-running") &&
      !(s = int_flag("max-running", &config->scheduler.max_running)).ok())
    return s;
  if (given("max-batched-tokens") &&
      !(s = int_flag("max-batched-tokens", &config->scheduler.max_batched_tokens)).ok())
    return s;
  return ValidateGatePolicy(config->gate);
}

std::string DefaultModelPath() {
  if (const char* env = std::getenv("WITCERT_MODEL"); env != nullptr && *env != '\0') return env;
  namespace fs = std::filesystem;
  const fs::path local = fs::path("models") / kDefaultModelFile;
  if (fs::exists(local)) return local.string();
  char exe[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n > 0) {
    exe[n] = '\0';
    // build/server/witcert → <repo>/models
    for (fs::path dir = fs::path(exe).parent_path(); !dir.empty() && dir != dir.root_path();
         dir = dir.parent_path()) {
      const fs::path candidate = dir / "models" / kDefaultModelFile;
      if (fs::exists(candidate)) return candidate.string();
    }
  }
  return local.string();  // does not exist: loading reports NotFound with this path
}

}  // namespace witcert::cli
