#include "engine/backend/cuda/cuda_backend.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/common/status.h"
#include "kernels/cuda/metered_decode_cuda.h"
#include "kernels/cuda/metered_prefill_cuda.h"
#include "kernels/cuda/ops/prefill_attention_cuda.h"
#include "kernels/cuda/ops/transformer_ops_cuda.h"

namespace witcert {
namespace {

constexpr size_t kAlign = 256;
size_t AlignUp(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

}  // namespace

bool CudaBackend::DeviceAvailable() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

absl::StatusOr<std::unique_ptr<CudaBackend>> CudaBackend::Create(const Model& model,
                                                                 const KvCacheOptions& kv_options,
                                                                 Options options) {
  const ModelConfig& c = model.config();
  RETURN_IF_ERROR(CheckKvMatchesModel(c, kv_options));
  if (!DeviceAvailable()) return absl::FailedPreconditionError("no CUDA device is available");
  if (kv_options.k_scheme != kv_options.v_scheme) {
    return absl::UnimplementedError(absl::StrCat("the CUDA backend stores K and V in one scheme; "
                                                 "got K ", kv_options.k_scheme, ", V ",
                                                 kv_options.v_scheme));
  }
  if (c.head_dim != 64 && c.head_dim != 128) {
    return absl::UnimplementedError(
        absl::StrCat("the CUDA decode kernel needs head_dim 64 or 128, the model has ",
                     c.head_dim));
  }
  if (c.group_size() > 8) {
    return absl::UnimplementedError("the CUDA decode kernel needs Hq/Hkv <= 8");
  }
  KvCacheOptions host = kv_options;
  host.host_storage = false;
  host.backing_store_bytes = 0;
  host.exact_cache_blocks = 0;
  ASSIGN_OR_RETURN(std::unique_ptr<KvCache> kv, KvCache::Create(host));
  std::unique_ptr<CudaBackend> backend(new CudaBackend(c, std::move(kv)));
  RETURN_IF_ERROR(backend->Init(model, kv_options, options));
  return backend;
}

CudaBackend::CudaBackend(const ModelConfig& config, std::unique_ptr<KvCache> kv)
    : config_(config), kv_(std::move(kv)) {}

CudaBackend::~CudaBackend() {
  if (kv_ != nullptr) kv_->set_block_observer(nullptr);
  if (stream_ != nullptr) cudaStreamSynchronize(stream_);
  repair_.reset();
  DropGraphs();
  if (cublas_ != nullptr) cublasDestroy(cublas_);
  if (step_begin_ != nullptr) cudaEventDestroy(step_begin_);
  if (step_end_ != nullptr) cudaEventDestroy(step_end_);
  if (certs_written_ != nullptr) cudaEventDestroy(certs_written_);
  if (certs_copied_ != nullptr) cudaEventDestroy(certs_copied_);
  if (certs_on_host_ != nullptr) cudaEventDestroy(certs_on_host_);
  if (cert_stream_ != nullptr) cudaStreamDestroy(cert_stream_);
  if (sampling_staged_ != nullptr) cudaEventDestroy(sampling_staged_);
  if (sample_stream_ != nullptr) cudaStreamDestroy(sample_stream_);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

absl::Status CudaBackend::Init(const Model& model, const KvCacheOptions& o,
                               const Options& options) {
  device_ = options.device;
  cell_pool_ = std::make_unique<ThreadPool>(
      static_cast<int>(std::min(16u, std::max(1u, std::thread::hardware_concurrency()))));
  WITCERT_CUDA_OK(cudaSetDevice(device_));
  WITCERT_CUDA_OK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  WITCERT_CUDA_OK(cudaEventCreate(&step_begin_));
  WITCERT_CUDA_OK(cudaEventCreate(&step_end_));
  WITCERT_CUDA_OK(cudaStreamCreateWithFlags(&cert_stream_, cudaStreamNonBlocking));
  WITCERT_CUDA_OK(cudaEventCreateWithFlags(&certs_written_, cudaEventDisableTiming));
  WITCERT_CUDA_OK(cudaEventCreateWithFlags(&certs_copied_, cudaEventDisableTiming));
  WITCERT_CUDA_OK(cudaEventCreateWithFlags(&certs_on_host_, cudaEventDisableTiming));
  WITCERT_CUDA_OK(cudaStreamCreateWithFlags(&sample_stream_, cudaStreamNonBlocking));
  WITCERT_CUDA_OK(cudaEventCreateWithFlags(&sampling_staged_, cudaEventDisableTiming));
  WITCERT_CUBLAS_OK(cublasCreate(&cublas_));
  WITCERT_CUBLAS_OK(cublasSetStream(cublas_, stream_));
  WITCERT_CUBLAS_OK(cublasSetMathMode(cublas_, CUBLAS_DEFAULT_MATH));
  RETURN_IF_ERROR(cublas_workspace_.Grow(32 << 20));
  WITCERT_CUBLAS_OK(cublasSetWorkspace(cublas_, cublas_workspace_.get(), cublas_workspace_.size()));
  cuda_graphs_ = options.cuda_graphs;

  layout_.num_blocks = o.num_blocks;
  layout_.num_kv_heads = o.num_kv_heads;
  layout_.block_size = o.block_size;
  layout_.head_dim = o.head_dim;
  layout_.num_bands = o.num_bands;
  layout_.interleaved = o.rope_pairing == RopePairing::kInterleaved;
  layout_.outlier_channels = o.outlier_channels;  // exact schemes store none (layout_.outliers() = 0)
  if (!KvSchemeFromName(o.k_scheme, &layout_.scheme)) {
    return absl::UnimplementedError(
        absl::StrCat("KV scheme '", o.k_scheme, "' has no CUDA kernel (GPU schemes: fp32, fp16, "
                     "bf16, fp8-e4m3-raw, fp8-e4m3, int8-rtn, int8-dither, int4-rtn)"));
  }
  WITCERT_KERNEL_OK(ValidateLayout(layout_));
  exact_.shape = ExactUnitShape{.num_layers = o.num_layers, .num_kv_heads = o.num_kv_heads,
                                .block_size = o.block_size, .head_dim = o.head_dim};
  if (layout_.outliers() > 0) {  // channels chosen from the first block that fills: staged till then
    outliers_ = std::make_unique<OutlierState>();
    outliers_->channels =
        std::make_unique<OutlierChannels>(o.num_layers, o.num_kv_heads, o.head_dim, layout_.outliers());
    // Until the choice, a placeholder (channels 0..m−1, nothing filled): what it writes is never read.
    const int64_t units = int64_t{o.num_layers} * o.num_kv_heads * 2, m = layout_.outliers();
    std::vector<int32_t> table(units * (m + o.head_dim));
    for (int64_t u = 0; u < units; ++u) {
      for (int64_t j = 0; j < m; ++j) table[u * m + j] = static_cast<int32_t>(j);
      for (int64_t c = 0; c < o.head_dim; ++c) table[units * m + u * o.head_dim + c] = static_cast<int32_t>(c);
    }
    RETURN_IF_ERROR(outliers_->table.Grow(table.size()));
    WITCERT_CUDA_OK(cudaMemcpy(outliers_->table.get(), table.data(), table.size() * 4, cudaMemcpyHostToDevice));
  }
  if (layout_.group_keys() || outliers_ != nullptr) {  // blocks encoded once full: the rest is staged exact
    if (o.block_size < 2) {
      return absl::UnimplementedError(
          absl::StrCat("KV scheme '", o.k_scheme, "' needs block_size >= 2 on the CUDA backend"));
    }
    staged_ = std::make_unique<StagedState>();
    staged_->blocks = std::make_unique<StagedBlocks>(o.num_blocks, o.num_layers, o.num_kv_heads);
    RETURN_IF_ERROR(EnsureExactTable());
  }
  dither_seed_ = o.dither_seed;
  backing_store_bytes_ = o.backing_store_bytes;
  exact_cache_blocks_ = o.exact_cache_blocks;
  WITCERT_KERNEL_OK(pool_.Init(layout_, o.num_layers));
  if (!config_.rope_freq_factors.empty()) {  // RoPE scaling: the divisors every rotation reads
    const std::vector<float>& f = config_.rope_freq_factors;  // [head_dim/2]
    RETURN_IF_ERROR(rope_factors_.Grow(f.size()));
    WITCERT_CUDA_OK(cudaMemcpy(rope_factors_.get(), f.data(), f.size() * sizeof(float), cudaMemcpyHostToDevice));
  }
  block_events_ = std::make_unique<BlockEvents>(this);
  kv_->set_block_observer(block_events_.get());
  return UploadWeights(model, &weights_, options.progress);
}

void CudaBackend::DropGraphs() {
  for (auto& [key, exec] : graphs_) cudaGraphExecDestroy(exec);
  graphs_.clear();
}

void CudaBackend::set_cuda_graphs(bool on) {
  DropGraphs();
  cuda_graphs_ = on;
}

absl::Status CudaBackend::GrowScratch(int64_t n, int64_t s, int64_t m, int64_t max_blocks, size_t input_bytes,
                                      bool repair) {
  const int64_t h = config_.hidden_dim, q = config_.q_dim(), kv = config_.kv_dim();
  const int64_t ffn = config_.ffn_dim, hq = config_.num_heads, layers = config_.num_layers;
  RETURN_IF_ERROR(x_.Grow(n * h));
  RETURN_IF_ERROR(xn_.Grow(n * h));
  RETURN_IF_ERROR(qkv_.Grow(n * (q + 2 * kv)));
  RETURN_IF_ERROR(q_.Grow(n * q));
  // Repair steps keep every layer's K/V rows ([L, N, kv_dim]) for the write-through stream.
  RETURN_IF_ERROR(k_.Grow((repair ? layers : 1) * n * kv));
  RETURN_IF_ERROR(v_.Grow((repair ? layers : 1) * n * kv));
  RETURN_IF_ERROR(attn_.Grow(n * q));
  RETURN_IF_ERROR(attn_bf_.Grow(n * q));
  if (outliers_ != nullptr) {  // staged blocks a step fills: at most one per row reading stored KV
    const int64_t rows = std::max<int64_t>(s, 1) * layout_.block_size;
    RETURN_IF_ERROR(outliers_->rows.Grow(2 * rows * kv));
    RETURN_IF_ERROR(outliers_->slot_pos.Grow(2 * rows));
  }
  RETURN_IF_ERROR(gate_up_.Grow(n * 2 * ffn));
  RETURN_IF_ERROR(act_.Grow(n * ffn));
  RETURN_IF_ERROR(last_.Grow(std::max<int64_t>(m, 1) * h));
  RETURN_IF_ERROR(last_bf_.Grow(std::max<int64_t>(m, 1) * h));
  RETURN_IF_ERROR(logits_.Grow(std::max<int64_t>(m, 1) * config_.vocab_size));
  RETURN_IF_ERROR(logits_host_.Grow(std::max<int64_t>(m, 1) * config_.vocab_size));
  const int64_t cells = std::max<int64_t>(1, layers * s * hq);
  RETURN_IF_ERROR(cert_.Grow(cells));
  RETURN_IF_ERROR(out_norm_.Grow(cells));
  RETURN_IF_ERROR(cert_host_.Grow(cells));
  RETURN_IF_ERROR(out_norm_host_.Grow(cells));
  RETURN_IF_ERROR(inputs_.Grow(input_bytes));
  RETURN_IF_ERROR(inputs_host_.Grow(input_bytes));
  if (repair) {
    const int64_t rows = std::max<int64_t>(s, 1);
    RETURN_IF_ERROR(flagged_.Grow(1 + rows * hq));
    RETURN_IF_ERROR(flagged_host_.Grow(1 + rows * hq));
    RETURN_IF_ERROR(sub_q_.Grow(rows * q));
    RETURN_IF_ERROR(sub_out_.Grow(rows * q));
    RETURN_IF_ERROR(sub_tables_.Grow(rows * max_blocks));
    RETURN_IF_ERROR(sub_ctx_.Grow(rows));
    RETURN_IF_ERROR(sub_cert_.Grow(rows * hq));
    RETURN_IF_ERROR(sub_norm_.Grow(rows * hq));
  }
  return absl::OkStatus();
}

absl::Status CudaBackend::Forward(absl::Span<const ForwardItem> batch, ForwardResult* result) {
  WITCERT_CUDA_OK(cudaSetDevice(device_));
  const int64_t hidden = config_.hidden_dim, q_dim = config_.q_dim(), kv_dim = config_.kv_dim();
  const int64_t ffn = config_.ffn_dim;
  const int32_t hq = config_.num_heads, hkv = config_.num_kv_heads, d = config_.head_dim;
  const int32_t layers = config_.num_layers, bs = layout_.block_size;

  // Row order: items reading stored KV (start_pos > 0) first — single-row decodes grouped by
  // (meter, δ_loc), then later prompt chunks the chunked-prefill kernel takes — and prompt
  // chunks at position 0 last. first_row[b] is item b's first row in that order.
  const bool prefill_kernel = MeteredPrefillCudaSupports(layout_, hq);
  // Repair items' later chunks take the decode kernel row by row: only it reads promoted blocks.
  auto row_class = [&](const ForwardItem& item) {
    if (item.start_pos == 0) return 2;
    return prefill_kernel && item.tokens.size() > 1 && !RepairOn(item) ? 1 : 0;
  };
  std::vector<size_t> order(batch.size());
  std::iota(order.begin(), order.end(), size_t{0});
  bool repair_step = false;  // some item is in repair mode: write-through, check, page-in
  for (const ForwardItem& item : batch) {
    if (item.tokens.empty()) return absl::InvalidArgumentError("empty forward item");
    repair_step = repair_step || RepairOn(item);
  }
  if (repair_step) RETURN_IF_ERROR(EnsureRepairState());
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const ForwardItem &x = batch[a], &y = batch[b];
    if (row_class(x) != row_class(y)) return row_class(x) < row_class(y);
    if (MeterOn(x) != MeterOn(y)) return MeterOn(x);
    if (TierBFormOf(x) != TierBFormOf(y)) return TierBFormOf(x) > TierBFormOf(y);
    return x.delta_loc < y.delta_loc;
  });
  std::vector<int64_t> first_row(batch.size());
  std::vector<DecodeGroup> groups;
  std::vector<size_t> chunks;  // items run by the chunked-prefill kernel
  int64_t n = 0, s = 0, m = 0, max_blocks = 1;
  for (size_t b : order) {
    const ForwardItem& item = batch[b];
    const int64_t len = static_cast<int64_t>(item.tokens.size());
    first_row[b] = n;
    n += len;
    if (item.compute_logits) ++m;
    max_blocks = std::max(max_blocks, (item.start_pos + len + bs - 1) / bs);
    if (item.start_pos == 0) continue;
    if (row_class(item) == 1) {
      chunks.push_back(b);
      s += len;
      continue;
    }
    const bool meter = MeterOn(item);
    const double delta = meter ? item.delta_loc : 0.0;
    const meter::TierBForm form = TierBFormOf(item);
    if (groups.empty() || groups.back().meter != meter || groups.back().delta_loc != delta ||
        groups.back().tier_b_form != form) {
      groups.push_back(DecodeGroup{.first_row = s, .meter = meter, .delta_loc = delta, .tier_b_form = form});
    }
    groups.back().num_rows += len;
    groups.back().max_context = std::max(groups.back().max_context, item.start_pos + len);
    s += len;
  }
  // Decode-only steps replay a captured graph. So that one graph serves many consecutive
  // steps, the block-table width and each group's max_context (which sizes the splits) are
  // rounded up to 1024 tokens: the kernels read every row's true length from the inputs.
  // The rounding applies with graphs off too, so both paths launch the very same kernels.
  const bool decode_only = chunks.empty() && s == n;
  // Not in repair steps (they sync per layer), nor where the outlier channels are chosen (the
  // host reads a block's rows mid-step; see PackStagedStep).
  bool graph_step = cuda_graphs_ && decode_only && !repair_step;
  if (decode_only) {
    const int64_t bucket = std::max<int64_t>(1, 1024 / bs);
    max_blocks = (max_blocks + bucket - 1) / bucket * bucket;
    for (DecodeGroup& g : groups) {
      g.max_context = std::min<int64_t>((g.max_context + 1023) / 1024 * 1024, max_blocks * bs);
    }
  }
  // Packed inputs: ids [N] i32 | positions [N] i64 | slots [N] i64 | block tables [S, maxb]
  // i32 | context lengths [S] i32 | write-through entries [N] i32 | TV and value thresholds
  // [S] f32 each (the last three: repair steps) | staged schemes' group lists
  // [StagedInputInts(N, S)] i32 (PackStagedStep). One pinned buffer, one copy.
  const size_t off_pos = AlignUp(n * 4), off_slot = off_pos + AlignUp(n * 8);
  const size_t off_table = off_slot + AlignUp(n * 8);
  const size_t off_ctx = off_table + AlignUp(s * max_blocks * 4);
  const size_t off_entry = off_ctx + AlignUp(s * 4);
  const size_t off_tv = off_entry + AlignUp(n * 4);
  const size_t off_vt = off_tv + AlignUp(s * 4);
  const size_t off_staged = off_vt + AlignUp(s * 4);
  const size_t input_bytes = off_staged + (staged_ != nullptr ? AlignUp(StagedInputInts(n, s) * 4) : 0);
  RETURN_IF_ERROR(GrowScratch(n, s, m, max_blocks, input_bytes, repair_step));
  uint8_t* hbase = inputs_host_.get();
  auto* ids = reinterpret_cast<int32_t*>(hbase);
  auto* positions = reinterpret_cast<int64_t*>(hbase + off_pos);
  auto* slots = reinterpret_cast<int64_t*>(hbase + off_slot);
  auto* tables = reinterpret_cast<int32_t*>(hbase + off_table);
  auto* ctx = reinterpret_cast<int32_t*>(hbase + off_ctx);
  auto* entry = reinterpret_cast<int32_t*>(hbase + off_entry);
  auto* tv_thr = reinterpret_cast<float*>(hbase + off_tv);
  auto* v_thr = reinterpret_cast<float*>(hbase + off_vt);
  RepairStep rstep;
  if (repair_step) {
    rstep.s = s;
    rstep.max_blocks = max_blocks;
    rstep.host_tables = tables;
    rstep.host_ctx = ctx;
    rstep.row_seq.assign(s, 0);
    rstep.row_delta.assign(s, 0.0);
    rstep.row_budget.assign(s, 0);
    rstep.cells.assign(static_cast<size_t>(layers) * s * hq, RepairStep::Cell{});
  }
  std::vector<int32_t> blocks;
  StagedBlocks::StepEncodes encodes;  // staged schemes (PlanStagedItem)
  StagedBlocks::StagingMode staging_mode = StagingModeNow();
  const bool any_staged = staged_ != nullptr && staged_->blocks->staged() > 0;
  if (staged_ != nullptr) staged_->blocks->RecoverUnfinishedStep(&staged_->pending);
  for (size_t b = 0; b < batch.size(); ++b) {
    const ForwardItem& item = batch[b];
    RETURN_IF_ERROR(kv_->BlockIds(item.seq, &blocks));
    const int64_t len = static_cast<int64_t>(item.tokens.size());
    if (item.start_pos < 0 ||
        item.start_pos + len > static_cast<int64_t>(blocks.size()) * bs) {
      return absl::FailedPreconditionError(
          absl::StrFormat("sequence %d: positions [%d, %d) not reserved in the KV cache",
                          item.seq, item.start_pos, item.start_pos + len));
    }
    if (staged_ != nullptr) {
      RETURN_IF_ERROR(PlanStagedItem(item, blocks, first_row[b], &encodes, &staging_mode));
    }
    for (int64_t i = 0; i < len; ++i) {
      const int64_t row = first_row[b] + i, pos = item.start_pos + i;
      const TokenId token = item.tokens[i];
      if (token < 0 || token >= config_.vocab_size) {
        return absl::InvalidArgumentError(absl::StrFormat("token id %d out of range", token));
      }
      ids[row] = token;
      positions[row] = pos;
      slots[row] = int64_t{blocks[pos / bs]} * bs + pos % bs;
      if (repair_step) {
        entry[row] = RepairOn(item) ? repair_->entries->Acquire(blocks[pos / bs]) : -1;
      }
      if (item.start_pos == 0) continue;
      if (repair_step) {
        const bool repair_row = RepairOn(item);
        tv_thr[row] = repair_row ? item.policy->tv_threshold : NAN;
        v_thr[row] = repair_row ? item.policy->v_threshold : 0.0f;
        rstep.row_seq[row] = item.seq;
        rstep.row_delta[row] = item.delta_loc;
        rstep.row_budget[row] = repair_row ? item.policy->pagein_budget_per_step : 0;
        if (repair_row) rstep.repair_rows.push_back(static_cast<int32_t>(row));
      }
      int32_t* t = tables + row * max_blocks;  // decode rows are rows [0, S)
      std::fill(t, t + max_blocks, 0);
      std::copy(blocks.begin(),
                blocks.begin() + std::min<int64_t>(max_blocks, static_cast<int64_t>(blocks.size())),
                t);
      ctx[row] = static_cast<int32_t>(pos + 1);
    }
  }
  StagedStep staged_step;  // staged schemes' group lists
  if (staged_ != nullptr) {
    if (ChoosesOutliers(encodes)) graph_step = false;
    ASSIGN_OR_RETURN(staged_step, PackStagedStep(encodes, reinterpret_cast<int32_t*>(hbase + off_staged),
                                                 reinterpret_cast<const int32_t*>(inputs_.get() + off_staged), n,
                                                 s, graph_step, any_staged || layout_.group_keys()));
  }
  // Split counts and the decode workspace, once per batch.
  size_t workspace_bytes = 0;
  for (DecodeGroup& g : groups) {
    MeteredDecodeCudaArgs probe;
    probe.batch = static_cast<int32_t>(g.num_rows);
    probe.num_q_heads = hq;
    probe.max_blocks_per_seq = static_cast<int32_t>(max_blocks);
    probe.max_context = g.max_context;
    WITCERT_KERNEL_OK(ResolveNumSplits(layout_, probe, &g.num_splits));
    workspace_bytes = std::max(workspace_bytes,
                               MeteredDecodeWorkspaceBytes(probe.batch, hq, d, g.num_splits));
  }
  if (repair_step && s > 0) {  // exact re-runs: any subset of the rows; one row splits most
    MeteredDecodeCudaArgs probe;
    probe.batch = 1;
    probe.num_q_heads = hq;
    probe.max_blocks_per_seq = static_cast<int32_t>(max_blocks);
    probe.max_context = max_blocks * bs;
    int32_t splits = 0;
    WITCERT_KERNEL_OK(ResolveNumSplits(layout_, probe, &splits));
    workspace_bytes = std::max(
        workspace_bytes, MeteredDecodeWorkspaceBytes(static_cast<int32_t>(s), hq, d, splits));
  }
  RETURN_IF_ERROR(workspace_.Grow(std::max<size_t>(workspace_bytes, 1)));

  uint8_t* dbase = inputs_.get();
  const auto* d_ids = reinterpret_cast<const int32_t*>(dbase);
  const auto* d_pos = reinterpret_cast<const int64_t*>(dbase + off_pos);
  const auto* d_slots = reinterpret_cast<const int64_t*>(dbase + off_slot);
  const auto* d_tables = reinterpret_cast<const int32_t*>(dbase + off_table);
  const auto* d_ctx = reinterpret_cast<const int32_t*>(dbase + off_ctx);
  const auto* d_entry = reinterpret_cast<const int32_t*>(dbase + off_entry);
  if (repair_step) {
    std::sort(rstep.repair_rows.begin(), rstep.repair_rows.end());
    rstep.dev_tables = d_tables;
    rstep.dev_ctx = d_ctx;
    rstep.dev_tv_threshold = reinterpret_cast<const float*>(dbase + off_tv);
    rstep.dev_v_threshold = reinterpret_cast<const float*>(dbase + off_vt);
  }

  const int64_t vocab = config_.vocab_size;
  // Device sampling: rows (in logits order) with a SampleRequest; the logits go to the host
  // only when some row has none.
  std::vector<const SampleRequest*> row_samples;
  for (size_t b = 0; b < batch.size(); ++b) {
    if (batch[b].compute_logits) row_samples.push_back(batch[b].sample);
  }
  const bool any_device_sample =
      std::any_of(row_samples.begin(), row_samples.end(), [](const SampleRequest* r) { return r != nullptr; });
  const bool logits_to_host =
      std::any_of(row_samples.begin(), row_samples.end(), [](const SampleRequest* r) { return r == nullptr; });
  const bool any_meter =
      std::any_of(groups.begin(), groups.end(), [](const DecodeGroup& g) { return g.meter; }) ||
      std::any_of(chunks.begin(), chunks.end(), [&](size_t b) { return MeterOn(batch[b]); });
  const int64_t cells = int64_t{layers} * s * hq;
  const bool merge_stages_attention = MergeStagesAttention(n, decode_only, repair_step);

  // Everything the GPU does this step, on stream_: the input copy, the layers, the logits and
  // certificate copies back. Captured once per graph key for decode-only steps.
  auto enqueue = [&]() -> absl::Status {
    WITCERT_CUDA_OK(cudaMemcpyAsync(dbase, hbase, input_bytes, cudaMemcpyHostToDevice, stream_));
    const DeviceWeights& w = weights_;
    float* x = x_.get();
    WITCERT_KERNEL_OK(EmbeddingCuda(w.token_embd.get(), config_.vocab_size, hidden, d_ids, n, x,
                                    stream_));
    for (int32_t layer = 0; layer < layers; ++layer) {
      const DeviceLayerWeights& lw = w.layers[layer];
      // q_ [N, q_dim], k and v [N, kv_dim], q and k rotated (repair steps: the layer's own
      // slice of k and v, read later by the write-through stream).
      const int64_t kv_slice = repair_step ? int64_t{layer} * n * kv_dim : 0;
      float* k_rows = k_.get() + kv_slice;
      float* v_rows = v_.get() + kv_slice;
      const KvWriteArgs write = TokenWrite(k_rows, v_rows, d_slots, d_pos, n, layer);
      ASSIGN_OR_RETURN(const bool queries_pending, ProjectQkv(lw, x, n, write, k_rows, v_rows));
      if (repair_step) {  // exact copies to the host store, off the critical path
        RepairState& r = *repair_;
        WITCERT_CUDA_OK(cudaEventRecord(r.kv_ready[layer], stream_));
        WITCERT_CUDA_OK(cudaStreamWaitEvent(r.copy_stream, r.kv_ready[layer], 0));
        WITCERT_KERNEL_OK(WriteThroughExactCuda(exact_.shape, k_rows, v_rows, d_slots, d_entry, n, layer,
                                                r.host_store, r.copy_stream));
        WITCERT_CUDA_OK(cudaEventRecord(r.written[layer], r.copy_stream));
        r.write_pending = true;
        WITCERT_KERNEL_OK(UpdateCachedExactRowsCuda(exact_.shape, k_rows, v_rows, d_slots, n, layer,
                                                    exact_.slot.get(), exact_.kv.get(),
                                                    stream_));
      }
      if (queries_pending) {  // batch 1: the write, then the q rows that overlap it
        WITCERT_KERNEL_OK(WriteKvCuda(layout_, pool_.layer(layer), write, stream_));
        RETURN_IF_ERROR(ProjectQueries(lw, x, d_pos));
      }
      if (staged_ != nullptr) {
        RETURN_IF_ERROR(WriteStagedLayer(layer, k_rows, v_rows, d_slots, d_pos, n, staged_step, repair_step));
      }

      for (size_t b = 0; b < batch.size(); ++b) {  // prompt chunks: fresh causal attention
        if (batch[b].start_pos != 0) continue;
        const int64_t r = first_row[b];
        WITCERT_KERNEL_OK(PrefillAttentionCuda(
            q_.get() + r * q_dim, q_dim, k_rows + r * kv_dim, v_rows + r * kv_dim, kv_dim,
            static_cast<int64_t>(batch[b].tokens.size()), hq, hkv, d, attn_.get() + r * q_dim,
            q_dim, stream_));
      }
      for (size_t b : chunks) {  // later prompt chunks: the chunked-prefill kernel
        const int64_t r = first_row[b];
        const int64_t len = static_cast<int64_t>(batch[b].tokens.size());
        const bool meter = MeterOn(batch[b]);
        const int64_t cell0 = (int64_t{layer} * s + r) * hq;
        MeteredPrefillCudaArgs a;
        a.q = q_.get() + r * q_dim;
        a.q_stride = q_dim;
        a.num_rows = len;
        a.start_pos = batch[b].start_pos;
        a.block_table = d_tables + r * max_blocks;  // every row of the item holds its table
        a.max_blocks = static_cast<int32_t>(max_blocks);
        a.num_q_heads = hq;
        a.meter = meter;
        a.out = attn_.get() + r * q_dim;
        a.out_stride = q_dim;
        a.cert = meter ? cert_.get() + cell0 : nullptr;
        a.cert_row_stride = hq;
        a.layer = layer;
        a.dither_seed = dither_seed_;  // int8-dither: the write path's hash, and Tier B's δ_loc
        a.delta_loc = meter ? batch[b].delta_loc : 0.0;
        a.tier_b_form = TierBFormOf(batch[b]);
        if (staged_ != nullptr) {  // kivi2: the chunk's unfilled blocks are read exact
          a.exact_slot = exact_.slot.get();
          a.exact_kv = exact_.kv.get();
          a.num_layers = layers;
        }
        WITCERT_KERNEL_OK(MeteredPrefillCuda(layout_, pool_.layer(layer), a, stream_));
        if (meter) {
          WITCERT_KERNEL_OK(RowNormsCuda(a.out, len * hq, d, out_norm_.get() + cell0, stream_));
        }
      }
      const int32_t* fast_ctx = d_ctx;  // repair: rows read exact skip the fast kernels
      if (repair_step && !rstep.repair_rows.empty()) {
        ASSIGN_OR_RETURN(fast_ctx, BeginRepairLayer(layer, rstep));
      }
      for (const DecodeGroup& g : groups) {  // decode rows: metered kernel over the pool
        MeteredDecodeCudaArgs a;
        a.q = q_.get() + g.first_row * q_dim;
        a.block_tables = d_tables + g.first_row * max_blocks;
        a.context_lens = fast_ctx + g.first_row;
        a.batch = static_cast<int32_t>(g.num_rows);
        a.num_q_heads = hq;
        a.max_blocks_per_seq = static_cast<int32_t>(max_blocks);
        a.max_context = g.max_context;
        a.layer = layer;
        a.dither_seed = dither_seed_;
        a.delta_loc = g.delta_loc;
        a.tier_b_form = g.tier_b_form;
        // The outlier bypass runs in the kernel's metered variant only (its cells are dropped
        // for rows without a gate: BuildCells reads the items with one).
        const bool meter = g.meter || outliers_ != nullptr;
        a.meter = meter;
        a.outlier_channels = LayerOutliers(layer).channels;
        a.num_splits = g.num_splits;
        // Overlap the kernel before (the q projection, the KV write or the previous group's merge):
        // since the step's input copy, the kernels have written q and each row's newest token
        // only. Not when a repair put its own context lengths in place, nor with staged blocks
        // (their encodes change the exact table the kernel reads).
        a.overlap_previous = fast_ctx == d_ctx && staged_ == nullptr;
        if (staged_ != nullptr) {
          a.exact_slot = exact_.slot.get();
          a.exact_kv = exact_.kv.get();
          a.num_layers = layers;
        }
        a.out = attn_.get() + g.first_row * q_dim;
        const int64_t cell0 = (int64_t{layer} * s + g.first_row) * hq;
        a.cert = meter ? cert_.get() + cell0 : nullptr;
        a.out_norm = meter ? out_norm_.get() + cell0 : nullptr;  // ‖õ‖ from the merge kernel
        a.out_bf16 = merge_stages_attention ? attn_bf_.get() + g.first_row * q_dim : nullptr;
        a.workspace = workspace_.get();
        a.workspace_bytes = workspace_.size();
        WITCERT_KERNEL_OK(MeteredDecodeCuda(layout_, pool_.layer(layer), a, stream_));
      }
      if (repair_step && !rstep.repair_rows.empty()) RETURN_IF_ERROR(RepairLayer(layer, rstep));
      RETURN_IF_ERROR(ProjectAttentionOutput(lw, n, merge_stages_attention));

      RETURN_IF_ERROR(ProjectGateUp(lw, x, n));
      RETURN_IF_ERROR(Gemm(act_.get(), n, ffn, lw.w_down.get(), hidden, x, hidden, 1.0f));
    }

    // Every layer's certificates and ‖õ‖ are final: they go to the host on the side stream while
    // the LM head runs (a fork and join of the captured graph too), not after it.
    if (any_meter) {
      WITCERT_CUDA_OK(cudaEventRecord(certs_written_, stream_));
      WITCERT_CUDA_OK(cudaStreamWaitEvent(cert_stream_, certs_written_, 0));
      WITCERT_CUDA_OK(cudaMemcpyAsync(cert_host_.get(), cert_.get(),
                                      cells * sizeof(meter::CertBound), cudaMemcpyDeviceToHost,
                                      cert_stream_));
      WITCERT_CUDA_OK(cudaMemcpyAsync(out_norm_host_.get(), out_norm_.get(), cells * 4,
                                      cudaMemcpyDeviceToHost, cert_stream_));
      // For the host, before the join's record; while capturing, as an event node of the graph
      // (the external flag is invalid outside a capture).
      cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
      WITCERT_CUDA_OK(cudaStreamIsCapturing(cert_stream_, &capturing));
      WITCERT_CUDA_OK(cudaEventRecordWithFlags(
          certs_on_host_, cert_stream_,
          capturing == cudaStreamCaptureStatusActive ? cudaEventRecordExternal : cudaEventRecordDefault));
      WITCERT_CUDA_OK(cudaEventRecord(certs_copied_, cert_stream_));
    }
    // Logits of the last row of each item that asks for them, in batch order.
    int64_t li = 0;
    for (size_t b = 0; b < batch.size(); ++b) {
      if (!batch[b].compute_logits) continue;
      const int64_t row = first_row[b] + static_cast<int64_t>(batch[b].tokens.size()) - 1;
      WITCERT_CUDA_OK(cudaMemcpyAsync(last_.get() + li * hidden, x + row * hidden, hidden * 4,
                                      cudaMemcpyDeviceToDevice, stream_));
      ++li;
    }
    if (m > 0) {
      RETURN_IF_ERROR(GemmFromF32(last_.get(), w.output_norm.get(), m, hidden, last_bf_.get(),
                                  w.output, vocab, logits_.get(), vocab, 0.0f));
      if (logits_to_host) {
        WITCERT_CUDA_OK(cudaMemcpyAsync(logits_host_.get(), logits_.get(), m * vocab * 4,
                                        cudaMemcpyDeviceToHost, stream_));
      }
    }
    if (any_meter) WITCERT_CUDA_OK(cudaStreamWaitEvent(stream_, certs_copied_, 0));  // the join
    return absl::OkStatus();
  };
  if (repair_ != nullptr) RETURN_IF_ERROR(PrepareRepairDevice());
  if (staged_ != nullptr) RETURN_IF_ERROR(PrepareStagedDevice());
  WITCERT_CUDA_OK(cudaEventRecord(step_begin_, stream_));
  bool replayed = false;
  if (graph_step) {
    // The key: every value baked into the captured launches that is not read from the inputs.
    std::string key = absl::StrCat(n, ",", s, ",", m, ",", max_blocks, ",", input_bytes, ",",
                                   any_meter, ",", logits_to_host, ",", staged_step.row_groups, ",",
                                   staged_step.slot_groups, ";");
    for (const DecodeGroup& g : groups) {
      absl::StrAppend(&key, g.first_row, ",", g.num_rows, ",", g.meter, ",", g.delta_loc, ",", static_cast<int>(g.tier_b_form), ",",
                      g.num_splits, ",", g.max_context, ";");
    }
    for (size_t b = 0; b < batch.size(); ++b) {
      if (batch[b].compute_logits) absl::StrAppend(&key, first_row[b], ",");
    }
    const void* buffers[] = {x_.get(), xn_.get(), qkv_.get(), q_.get(), k_.get(), v_.get(),
                             attn_.get(), attn_bf_.get(), gate_up_.get(), act_.get(), last_.get(),
                             last_bf_.get(), logits_.get(), cert_.get(), out_norm_.get(),
                             workspace_.get(), inputs_.get(), inputs_host_.get(),
                             logits_host_.get(), cert_host_.get(), out_norm_host_.get(),
                             exact_.kv.get(),
                             outliers_ != nullptr ? outliers_->rows.get() : nullptr};
    for (const void* ptr : buffers) {
      absl::StrAppend(&key, "@", reinterpret_cast<uintptr_t>(ptr));
    }
    auto it = graphs_.find(key);
    if (it == graphs_.end()) {
      if (graphs_.size() >= 64) DropGraphs();  // bounded; shapes recur, so recapture is rare
      WITCERT_CUDA_OK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
      const absl::Status st = enqueue();
      cudaGraph_t graph = nullptr;
      const cudaError_t end = cudaStreamEndCapture(stream_, &graph);
      cudaGraphExec_t exec = nullptr;
      const cudaError_t inst = st.ok() && end == cudaSuccess
                                   ? cudaGraphInstantiate(&exec, graph, 0)
                                   : cudaErrorStreamCaptureInvalidated;
      if (graph != nullptr) cudaGraphDestroy(graph);
      if (inst != cudaSuccess) {
        // Capture failed (an error inside the step, or a call capture does not allow): clear
        // it, stop capturing for this backend, and run the step directly, which reports a
        // real error if there is one.
        (void)cudaGetLastError();
        cuda_graphs_ = false;
        ++graph_failures_;
      } else {
        it = graphs_.emplace(std::move(key), exec).first;
        ++graphs_captured_;
      }
    }
    if (it != graphs_.end()) {
      WITCERT_CUDA_OK(cudaGraphLaunch(it->second, stream_));
      replayed = true;
    }
  }
  if (!replayed) RETURN_IF_ERROR(enqueue());
  if (repair_step) SnapshotRepairStats();
  // Sampling after the step's (graph) work, on the same stream: it consumes the logits the
  // host copy above has already taken. Rows without a request run greedy and are ignored. Its
  // inputs are packed while the step runs and copied beside it.
  if (any_device_sample) RETURN_IF_ERROR(SampleOnDevice(row_samples));
  WITCERT_CUDA_OK(cudaEventRecord(step_end_, stream_));
  // Cells in the CPU backend's order: per layer, per token, per head. Outside repair steps they
  // need only the certificates, on the host once certs_on_host_ has fired, so they are built
  // while the LM head and the sampling still run.
  if (!repair_step) {
    if (any_meter) WITCERT_CUDA_OK(cudaEventSynchronize(certs_on_host_));
    BuildCells(batch, first_row, s, rstep, /*repair_step=*/false, result);
  }
  WITCERT_CUDA_OK(cudaStreamSynchronize(stream_));
  if (staged_ != nullptr) staged_->blocks->EndStep();  // the step's encodes are done: retired stages are free
  NoteOutliersChosen();
  if (repair_step) BuildCells(batch, first_row, s, rstep, /*repair_step=*/true, result);
  float gpu_ms = 0.0f;
  last_step_gpu_ms_ = cudaEventElapsedTime(&gpu_ms, step_begin_, step_end_) == cudaSuccess ? gpu_ms : 0.0;
  if (logits_to_host) {
    result->logits.assign(logits_host_.get(), logits_host_.get() + m * vocab);
  } else {
    result->logits.clear();
  }
  result->sampled.clear();
  if (any_device_sample) {
    result->sampled.assign(sampled_host_.get(), sampled_host_.get() + m);
    for (int64_t r = 0; r < m; ++r) {
      if (row_samples[r] == nullptr) result->sampled[r] = -1;
    }
  }

  return absl::OkStatus();
}

}  // namespace witcert
