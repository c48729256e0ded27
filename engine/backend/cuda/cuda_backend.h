// The CUDA backend: the transformer forward pass on one GPU behind the Backend interface,
// computing what CpuBackend computes (engine/backend/cpu) with bf16 weights.
//
// Per layer: RMSNorm → one fused QKV GEMM (cuBLAS, bf16 in, fp32 accumulate and out; the
// batch-1 O projection uses kernels/cuda/ops/gemv_bf16_cuda.h, measured faster there) →
// bias → RoPE → the quantize-on-write KV kernel (codes + witnesses into the paged GPU
// pool, kernels/cuda/paged_kv_cuda.h) → attention → O GEMM accumulated into the residual
// (beta = 1) → RMSNorm → fused gate|up GEMM → SwiGLU → down GEMM into the residual.
// Attention: a prompt chunk at position 0 attends over its own fresh K/V (exact attention on
// tensor cores, no cells, like the CPU backend). Every other row reads the quantized pool and,
// when the item's gate policy is not off, returns a per-(row, head) certificate that becomes
// its CellRecord: a later prompt chunk through the chunked-prefill kernel
// (kernels/cuda/metered_prefill_cuda.h: every scheme but fp32 at d = 128,
// unless the item repairs: only the decode kernel reads promoted blocks), every other such row as one query
// of the fused metered decode kernel (kernels/cuda/metered_decode_cuda.h). Rows of all
// sequences run as one batch; rows reading stored KV go first (decode rows, then later
// chunks) so the decode kernel reads and writes one contiguous range.
//
// KV memory (why a host KvCache): the engine drives the cache through KvCache& (AddSequence,
// Reserve, FreeSequence, block counts). The backend keeps such a cache with host_storage =
// false for the block accounting only and reads each sequence's physical block ids from it
// (KvCache::BlockIds); the codes, scales and witnesses live in the GPU pool with the same
// block ids. Gate: off, observe and repair. Repair (engine/backend/cuda/cuda_gate_repair.cc,
// the CPU gate's semantics): the exact K/V of repair-mode rows are written through to a
// pinned-host backing store on a second stream; after each layer's attention a device check
// flags uncertified cells; their blocks are ranked by risk on the device, paged into a device
// exact-block cache and the rows re-run through the exact-aware decode kernel, within the
// per-(row, layer) page-in budget. Promoted blocks stay exact for later steps. Audit sampling
// is not done on the GPU (cells are never audited).
// Group-encoded keys (kivi2, engine/backend/cuda/cuda_staged_blocks.cc): a block's keys are encoded
// once it is full; until then its rows live exact in a device exact table the decode kernel
// reads (StagedBlocks), as the CPU cache stages them. The gate's exact-block cache shares that
// table (ExactTable).
// Outlier channels (engine/kv/outlier_channels.h; cuda_staged_blocks.cc): every block is staged
// until the first block fills; at that step, layer by layer, its exact rows go to the host, which
// chooses the channels as the CPU cache does (OutlierChannels, the same code), and the tables go
// to the device before the layer's rows are written again with them. Staged blocks that fill are
// taken out of the exact table and encoded through the write path. The decode kernel's bypass
// variant (the first kernel) runs meter on whatever the gate asks: it is its only variant.
// Supported KV: K and V of one GPU scheme (kernels/cuda/kv_scheme_cuda.h), head_dim 64 or 128,
// Hq/Hkv ≤ 8.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/status/statusor.h"
#include "engine/backend/backend.h"
#include "engine/backend/cuda/cuda_util.h"
#include "engine/backend/cuda/device_weights.h"
#include "engine/backend/cuda/gate_repair_state.h"
#include "engine/backend/cuda/staged_blocks.h"
#include "engine/kv/outlier_channels.h"
#include "engine/model/model.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cuda/ops/gemv_bf16_cuda.h"
#include "kernels/cuda/ops/sampling_cuda.h"
#include "kernels/cuda/paged_kv_cuda.h"
#include "kernels/meter/cert_math.h"

namespace witcert {

class CudaBackend : public Backend {
 public:
  struct Options {
    int32_t device = 0;  // CUDA device ordinal
    std::function<void(const std::string&)> progress;  // load progress lines (may be empty)
    // Replay decode-only steps from captured CUDA graphs (see Forward). Off: every kernel
    // is launched from the host each step.
    bool cuda_graphs = true;
  };
  // `model` must outlive the backend (its config is referenced). FailedPrecondition when no
  // CUDA device is usable; Unimplemented for KV options the GPU path does not support.
  static absl::StatusOr<std::unique_ptr<CudaBackend>> Create(const Model& model,
                                                             const KvCacheOptions& kv_options,
                                                             Options options);
  static absl::StatusOr<std::unique_ptr<CudaBackend>> Create(const Model& model,
                                                             const KvCacheOptions& kv_options) {
    return Create(model, kv_options, Options{});
  }
  // True when the CUDA runtime sees at least one device.
  static bool DeviceAvailable();

  ~CudaBackend() override;
  absl::Status Forward(absl::Span<const ForwardItem> batch, ForwardResult* result) override;
  const ModelConfig& config() const override { return config_; }
  KvCache& kv_cache() override { return *kv_; }
  const char* name() const override { return "cuda"; }
  bool SamplesOnDevice() const override { return true; }
  // A 2048-token chunk of an 8B model takes ~0.1 s here (bench_prefill_gpu: 0.425 s for the four
  // chunks of an 8k prompt); larger chunks also mean fewer passes over the stored KV per prompt.
  int32_t DefaultBatchedTokens() const override { return 2048; }
  int64_t weight_bytes() const { return weights_.bytes; }
  // Benchmarks: writes pseudo-random K/V (uniform, unit scale, seeded) for positions
  // [0, num_tokens) of `seq` in every layer through the write-path kernel, without running the
  // model, so decode at a long context can be timed without a long prefill. The positions must
  // be reserved. write_through: also store the exact rows in the gate's host backing store, as
  // a repair-mode prefill would (so repair can page them in).
  [[nodiscard]] absl::Status FillKvSynthetic(SeqId seq, int64_t num_tokens, uint32_t seed,
                                             bool write_through = false);
  cudaStream_t stream() const { return stream_; }
  // Benchmarks: switch graph replay on or off (drops the captured graphs).
  void set_cuda_graphs(bool on);
  int64_t graphs_captured() const { return graphs_captured_; }
  int64_t graph_failures() const { return graph_failures_; }  // captures that fell back
  // Benchmarks: the stream time of the last Forward's GPU work, from before its input copy to
  // after its sampling (ms; 0 before the first or if the timing failed). The rest of the step's
  // wall time is host work.
  double last_step_gpu_ms() const { return last_step_gpu_ms_; }
  // The outlier channels (null when the bypass is off; a layer's are set once chosen(layer)).
  const OutlierChannels* outlier_channels() const { return outliers_ != nullptr ? outliers_->channels.get() : nullptr; }

  // The gate's repair mode on this backend (zeros until the first repair-mode item).
  struct RepairStats {
    int64_t pageins = 0;           // units paged into the exact cache
    int64_t rounds = 0;            // rank → page-in → re-run rounds
    int64_t unrepairable = 0;      // picks skipped: the block had no exact copy
    int64_t cache_evictions = 0;   // exact-cache units evicted for space
    int64_t store_entries_used = 0, store_evicted = 0, store_refused = 0;
    int64_t store_capacity_bytes = 0, store_used_bytes = 0;  // pinned host store
    // Host wall time inside RepairLayer, by phase (each ends at a stream sync): the exact
    // pre-pass and the first check; ranking; page-in, re-run and re-check.
    double check_s = 0, rank_s = 0, rerun_s = 0;
  };
  RepairStats repair_stats() const;
  // KvCache's counters with the gate's (promotions, backing store) from the repair state
  // (a snapshot taken after each repair step: safe from the metrics thread).
  KvCacheStats KvStats() override;

 private:
  // A run of decode rows sharing one decode-kernel launch (same meter flag and δ_loc).
  struct DecodeGroup {
    int64_t first_row = 0, num_rows = 0;
    int64_t max_context = 0;
    int32_t num_splits = 0;
    bool meter = false;
    double delta_loc = 0.0;
    meter::TierBForm tier_b_form = meter::TierBForm::kPerToken;  // GatePolicy::tier_b_form of the group's items
  };
  // Repair-mode state of one Forward (cuda_gate_repair.cc). Rows are decode rows [0, S).
  struct RepairStep {
    int64_t s = 0, max_blocks = 0;
    const int32_t* host_tables = nullptr;  // [S, max_blocks] physical ids (pinned inputs)
    const int32_t* host_ctx = nullptr;     // [S] context lengths
    const int32_t* dev_tables = nullptr;   // the same on the device
    const int32_t* dev_ctx = nullptr;
    const float* dev_tv_threshold = nullptr;  // [S], NaN: not a repair row
    const float* dev_v_threshold = nullptr;   // [S]
    std::vector<SeqId> row_seq;            // [S]
    std::vector<double> row_delta;         // [S] δ_loc
    std::vector<int32_t> row_budget;       // [S] page-in budget per layer (0: not repair)
    std::vector<int32_t> repair_rows;      // rows of repair items, ascending
    std::vector<int32_t> budget;           // [S] left in the current layer
    std::vector<int32_t> exact_rows;       // this layer's rows with cached exact units
    struct Cell {
      float tv_before = 0.0f, v_before = 0.0f;
      int32_t pageins = 0;
      bool flagged = false;  // tv_before / v_before hold the first check's values
    };
    std::vector<Cell> cells;               // [L, S, Hq]
  };
  // This step's group encodes (staged schemes): device lists in the packed inputs and the
  // counts each layer launches with.
  struct StagedStep {
    const int32_t* row_blocks = nullptr;  // [row_groups] blocks filled by this step's rows alone
    const int32_t* first_rows = nullptr;  // [row_groups] their first row
    const int32_t* slot_blocks = nullptr; // [slot_groups] staged blocks this step fills (−1 padded)
    const int32_t* slot_first_pos = nullptr;  // [slot_groups] their first position
    int32_t row_groups = 0, slot_groups = 0;
    // The outlier bypass's choice, made this step (host): from the block the step fills first,
    // read from rows choose_row.. of the step (≥ 0) or from its stage.
    int32_t choose_block = -1, choose_row = -1;
  };
  // Staged schemes: plans one item's writes (StagedBlocks::PlanWrites) into `encodes`.
  // `blocks`: the item's physical blocks; `row`: its first row; `mode`: the step's
  // (StagingModeNow(), shared by its items).
  absl::Status PlanStagedItem(const ForwardItem& item, const std::vector<int32_t>& blocks, int64_t row,
                              StagedBlocks::StepEncodes* encodes, StagedBlocks::StagingMode* mode);
  // kivi2 stages every block until it fills; the outlier bypass until its channels are chosen.
  StagedBlocks::StagingMode StagingModeNow() const;
  // Whether the planned step chooses the outlier channels (their first block fills in it), and
  // then the choice's source in `step` (PackStagedStep, FillKvSynthetic).
  bool ChoosesOutliers(const StagedBlocks::StepEncodes& encodes) const {
    return outliers_ != nullptr && !outliers_->chosen && encodes.first_filled_block >= 0;
  }
  void PlanOutlierChoice(const StagedBlocks::StepEncodes& encodes, StagedStep* step) const {
    if (!ChoosesOutliers(encodes)) return;
    step->choose_block = encodes.first_filled_block;
    step->choose_row = encodes.first_filled_row;
  }
  // The step's group lists in the packed inputs: `host` and `dev` the same int32 region,
  // [row blocks n | first rows n | slot blocks s | slot first positions s] (StagedInputInts(n, s)
  // of them); the counts each layer launches with (a graph step launches s slot groups, padded
  // with −1, while any block is staged) and the outlier choice.
  static int64_t StagedInputInts(int64_t n, int64_t s) { return 2 * n + 2 * s; }
  absl::StatusOr<StagedStep> PackStagedStep(const StagedBlocks::StepEncodes& encodes, int32_t* host,
                                            const int32_t* dev, int64_t n, int64_t s, bool graph_step,
                                            bool any_staged) const;
  // Before the step's work: grows the exact table to the stages in use and applies the table
  // updates (outside any captured graph).
  absl::Status PrepareStagedDevice();
  // One layer, after its K/V rows exist and the ordinary write: rows of staged blocks into the
  // exact table (unless `rows_in_table`: a repair step's UpdateCachedExactRowsCuda already wrote
  // every listed unit), the outlier choice if the step makes it (then the n rows written again
  // with the chosen tables), then the step's group encodes.
  absl::Status WriteStagedLayer(int32_t layer, const float* k_rows, const float* v_rows,
                                const int64_t* d_slots, const int64_t* d_pos, int64_t n,
                                const StagedStep& step, bool rows_in_table);
  // The outlier bypass: chooses `layer`'s channels from step.choose_block's exact rows (host,
  // after a stream sync) and uploads its tables.
  absl::Status ChooseOutlierChannels(int32_t layer, const float* k_rows, const float* v_rows,
                                     const StagedStep& step);
  // The layer's outlier tables on the device (null when the bypass is off; before the choice, a
  // placeholder that writes codes the decode kernel never reads: the blocks are staged).
  OutlierTables LayerOutliers(int32_t layer) const;
  // After a step that chose: outliers_->chosen once every layer has (a step that failed midway
  // leaves the other layers to the next step that fills a block).
  void NoteOutliersChosen();
  class BlockEvents;  // KvBlockObserver → the repair and staging bookkeeping
  // result->cells: one vector per item of `batch`, the step's cells (per layer, token, head) for
  // items with a gate policy past their prompt, from the certificates on the host (cert_host_,
  // out_norm_host_; with the repair step's first checks and page-ins).
  void BuildCells(absl::Span<const ForwardItem> batch, const std::vector<int64_t>& first_row, int64_t s,
                  const RepairStep& rstep, bool repair_step, ForwardResult* result);
  CudaBackend(const ModelConfig& config, std::unique_ptr<KvCache> kv);
  // Creates the pinned store, the device cache and its table, the copy stream (first use).
  absl::Status EnsureRepairState();
  // Device work queued before the step: pending table updates (frees since the last step)
  // and the wait for the previous step's write-through.
  absl::Status PrepareRepairDevice();
  // Before layer `layer`'s attention in a step with repair rows: finds the rows whose sequence
  // has exact units cached for the layer (step.exact_rows) and returns the context lengths the
  // fast kernels get, 0 for those rows (they are skipped: the exact-aware kernel runs them).
  absl::StatusOr<const int32_t*> BeginRepairLayer(int32_t layer, RepairStep& step);
  // After layer `layer`'s attention in a step with repair rows: rows with cached exact units
  // re-run exact, then check / rank / page in / re-run rounds (host syncs on stream_).
  absl::Status RepairLayer(int32_t layer, RepairStep& step);
  // Rows `rows` (decode-row indices) of layer `layer` through the exact-aware kernel; their
  // outputs, certificates and ‖õ‖ replace the layer's.
  absl::Status RunExactRows(int32_t layer, const std::vector<int32_t>& rows, RepairStep& step);
  // The layer's flagged cells (device check, one sync), sorted; copies the layer's
  // certificates and ‖õ‖ to the host too.
  absl::Status CheckLayer(int32_t layer, RepairStep& step, std::vector<int32_t>* flagged);
  // Stages `bytes` for the device in this sync interval's upload arena; returns the device
  // address (valid for kernels queued after it on stream_, until the next ResetUploads).
  absl::StatusOr<void*> Upload(const void* data, size_t bytes);
  absl::Status Init(const Model& model, const KvCacheOptions& kv_options, const Options& options);
  // input_bytes: the packed inputs of the step (see Forward).
  absl::Status GrowScratch(int64_t rows, int64_t decode_rows, int64_t logit_rows, int64_t max_blocks,
                           size_t input_bytes, bool repair);
  void DropGraphs();
  // Samples the logits rows (logits order) that have a request, into sampled_host_ (valid after
  // stream_ syncs). Called once the step's work is queued: the rows' parameters and penalty lists
  // are packed while the step runs and copied on sample_stream_, beside the step instead of
  // between its last kernel and the sampling, which runs on stream_ behind those copies.
  absl::Status SampleOnDevice(const std::vector<const SampleRequest*>& rows);
  // The projections (cuda_projections.cc).
  // y = W · bf16(x) from fp32 rows x [n, cols], RMS-normalized first when norm_weight is set:
  // one fused GEMV at batch 1 (GemvBf16FromF32Cuda, the same bits), else RmsNormCuda or
  // FloatToBf16Cuda into `staged` [n, cols] and Gemm. prefetch_rows: the GEMV's
  // (GemvLaunch::prefetch_rows).
  absl::Status GemmFromF32(const float* x, const float* norm_weight, int64_t n, int64_t cols,
                           uint16_t* staged, const uint16_t* w, int64_t rows, float* y, int64_t ldy,
                           float beta, bool prefetch_rows = false);
  // The KV write of this step's n tokens of `layer`, from the k and v rows ProjectQkv writes.
  KvWriteArgs TokenWrite(const float* k_rows, const float* v_rows, const int64_t* d_slots,
                         const int64_t* d_pos, int64_t n, int32_t layer) const;
  // The attention block's input: q [n, q_dim], k and v rows [n, kv_dim] (k_rows, v_rows: the
  // rows `write` reads), q and k rotated at write.positions, from the residual x [n, hidden]:
  // RMSNorm, the QKV projection (+ bias), RoPE. At batch 1 a GEMV whose epilogue rotates and
  // splits (GemvBf16RopeSplitCuda, the same bits), in two launches around the KV write: this one
  // computes k and v and returns true, and the caller then writes the pool and calls
  // ProjectQueries, which overlaps the write. Otherwise the GEMM, then one kernel that rotates,
  // splits and writes the pool (RopeSplitWriteKvCuda), and false.
  absl::StatusOr<bool> ProjectQkv(const DeviceLayerWeights& lw, const float* x, int64_t n,
                                  const KvWriteArgs& write, float* k_rows, float* v_rows);
  absl::Status ProjectQueries(const DeviceLayerWeights& lw, const float* x, const int64_t* d_pos);
  // θ, and the model's RoPE scaling as rope_factors_ on the device.
  cuda_ops::RopeFreq RopeFrequencies() const;
  GemvRopeSplitOut RopeSplitTargets(const DeviceLayerWeights& lw, const int64_t* d_pos,
                                    float* k_rows, float* v_rows) const;
  // act_ [n, ffn] bf16 = SwiGLU of the FFN's gate|up projection of RMSNorm(x): one GEMV with
  // SwiGLU in its epilogue at batch 1 (GemvBf16SwiGluCuda, the same bits).
  absl::Status ProjectGateUp(const DeviceLayerWeights& lw, const float* x, int64_t n);
  // x_ += W_o · attn: from the fp32 attention rows attn_ [n, q_dim] (GemmFromF32), or, when
  // `staged`, from their bf16 copy attn_bf_ that the split merge wrote (MergeStagesAttention).
  absl::Status ProjectAttentionOutput(const DeviceLayerWeights& lw, int64_t n, bool staged);
  // Whether the split merge writes attn_bf_ this step: at n > 1, where the O projection runs
  // cuBLAS on bf16 rows, in steps of decode rows only (no prompt rows, no repair re-runs after
  // the merge). Saves the staging kernel, one launch a layer.
  bool MergeStagesAttention(int64_t n, bool decode_only, bool repair_step) const;
  // y [n, rows] (ld ldy) = x [n, cols] bf16 · W [rows, cols]ᵀ bf16 + beta · y.
  absl::Status Gemm(const uint16_t* x, int64_t n, int64_t cols, const uint16_t* w, int64_t rows,
                    float* y, int64_t ldy, float beta);

  const ModelConfig config_;
  std::unique_ptr<KvCache> kv_;  // block accounting only (host_storage = false)
  PagedKvLayout layout_;
  PagedKvPoolCuda pool_;
  uint64_t dither_seed_ = 0;
  DeviceWeights weights_;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  int32_t device_ = 0;
  // CUDA graphs of decode-only steps, keyed by everything the enqueued work depends on
  // besides the packed inputs (shapes, row groups, split counts, buffer addresses).
  bool cuda_graphs_ = true;
  DeviceArray<uint8_t> cublas_workspace_;  // fixed, so cuBLAS never allocates while capturing
  absl::flat_hash_map<std::string, cudaGraphExec_t> graphs_;
  int64_t graphs_captured_ = 0, graph_failures_ = 0;
  cudaEvent_t step_begin_ = nullptr, step_end_ = nullptr;  // last_step_gpu_ms
  // The certificates' copy to the host, on a stream of its own beside the LM head: forked after
  // the last layer, joined before the step's sampling.
  cudaStream_t cert_stream_ = nullptr;
  cudaEvent_t certs_written_ = nullptr, certs_copied_ = nullptr;
  cudaEvent_t certs_on_host_ = nullptr;  // the step's certificates have reached the host
  cudaStream_t sample_stream_ = nullptr;  // SampleOnDevice's copies
  cudaEvent_t sampling_staged_ = nullptr;
  double last_step_gpu_ms_ = 0;
  // Host threads that turn a step's certificates into CellRecords (a 2048-row prompt chunk of
  // an 8B model is 2M cells).
  std::unique_ptr<ThreadPool> cell_pool_;

  // Device scratch, grown to the batch: N rows, S decode rows, M logit rows.
  DeviceArray<float> rope_factors_;  // [head_dim/2] RoPE scaling divisors (unscaled: unused)
  DeviceArray<float> x_;           // [N, hidden] residual stream
  DeviceArray<uint16_t> xn_;       // [N, hidden] bf16 normed
  DeviceArray<float> qkv_;         // [N, q_dim + 2·kv_dim]
  DeviceArray<float> q_, k_, v_;   // [N, q_dim], [N, kv_dim], [N, kv_dim]
  DeviceArray<float> attn_;        // [N, q_dim]
  DeviceArray<uint16_t> attn_bf_;  // [N, q_dim]
  DeviceArray<float> gate_up_;     // [N, 2·ffn]
  DeviceArray<uint16_t> act_;      // [N, ffn] bf16
  DeviceArray<float> last_;        // [M, hidden]
  DeviceArray<uint16_t> last_bf_;  // [M, hidden]
  DeviceArray<float> logits_;      // [M, vocab]
  DeviceArray<meter::CertBound> cert_;  // [L, S, Hq]
  DeviceArray<float> out_norm_;         // [L, S, Hq] ‖õ‖ of each decode output
  DeviceArray<uint8_t> workspace_;      // decode kernel split partials
  DeviceArray<uint8_t> inputs_;         // packed per-batch inputs (see Forward)
  PinnedArray<uint8_t> inputs_host_;
  PinnedArray<float> logits_host_;           // [M, vocab]
  PinnedArray<meter::CertBound> cert_host_;  // [L, S, Hq]
  PinnedArray<float> out_norm_host_;         // [L, S, Hq]
  // Device sampling: per-row parameters, penalty lists [tokens | counts], sampled ids [M].
  DeviceArray<SampleRowParams> sample_params_;
  PinnedArray<SampleRowParams> sample_params_host_;
  DeviceArray<int32_t> penalties_;
  PinnedArray<int32_t> penalties_host_;
  DeviceArray<int32_t> sampled_;
  PinnedArray<int32_t> sampled_host_;
  DeviceArray<SampleArgmaxPartial> argmax_scratch_;  // [SampleArgmaxScratchEntries(M, vocab)]

  // ---- the device exact table (gate_repair_cuda.h's layout) the decode kernels read ----
  // Slots [0, R) are the gate's exact-block cache (R = exact_cache_blocks_, once repair
  // starts), slots from R on the stages of staged blocks. Allocated by the first user.
  struct ExactTable {
    ExactUnitShape shape;       // a slot's rows (set in Init)
    DeviceArray<int32_t> slot;  // [num_blocks, L, Hkv] slot, −1: read from the pool
    DeviceArray<float> kv;      // [slots, 2, bs, d] exact rows
  };
  ExactTable exact_;
  // Allocates the slot table, all −1 (first user).
  absl::Status EnsureExactTable();
  // exact_.kv reallocated to `floats` floats, the old first `keep` floats copied to `offset` of the
  // new array (after a stream sync: queued kernels may read the old one).
  absl::Status ReallocExactRows(size_t floats, size_t keep, size_t offset);

  // ---- the outlier channel bypass (null unless layout_.outliers() > 0) ----
  struct OutlierState {
    std::unique_ptr<OutlierChannels> channels;  // host, chosen as the CPU cache chooses
    DeviceArray<int32_t> table;  // [L, Hkv, 2, m] channels, then [L, Hkv, 2, d] fill sources
    bool chosen = false;         // every layer's channels are fixed
    DeviceArray<float> rows;     // [2 (K, V), S·bs, Hkv·d] staged blocks taken out for their encode
    DeviceArray<int64_t> slot_pos;  // [2, S·bs] their slots, then positions
  };
  std::unique_ptr<OutlierState> outliers_;

  // ---- staged blocks (null unless the scheme groups keys or outlier channels are on) ----
  struct StagedState {
    std::unique_ptr<StagedBlocks> blocks;
    std::vector<TableUpdate> pending;     // for the next step's start
    DeviceArray<TableUpdate> updates;
    PinnedArray<TableUpdate> updates_host;
  };
  std::unique_ptr<StagedState> staged_;

  // ---- gate repair (null until the first repair-mode item) ----
  struct RepairState {
    std::unique_ptr<ExactEntryTable> entries;  // physical block → host-store entry
    std::unique_ptr<ExactSlotCache> slots;     // unit → device cache slot (exact_ slots [0, R))
    float* host_store = nullptr;               // pinned + mapped [entries, L, Hkv, 2, bs, d]
    std::vector<TableUpdate> pending;          // table updates from block frees
    cudaStream_t copy_stream = nullptr;        // write-through
    std::vector<cudaEvent_t> kv_ready, written;  // [L]: slice ready (stream_), written (copy)
    bool write_pending = false;                // a write-through may still read the slices
    RepairStats stats;
    ~RepairState();
  };
  std::unique_ptr<RepairState> repair_;
  mutable absl::Mutex stats_mu_;
  RepairStats stats_snapshot_ ABSL_GUARDED_BY(stats_mu_);
  void SnapshotRepairStats();
  std::unique_ptr<BlockEvents> block_events_;
  int64_t backing_store_bytes_ = 0, exact_cache_blocks_ = 0;
  // Repair-step scratch: the upload arena, the check's outputs, the re-run rows' buffers.
  // Uploads of one sync interval go to fresh bytes (a chunk is never rewritten before the
  // stream has drained: ResetUploads() right after a sync).
  struct UploadChunk {
    PinnedArray<uint8_t> host;
    DeviceArray<uint8_t> dev;
    size_t capacity = 0;
  };
  std::vector<std::unique_ptr<UploadChunk>> upload_chunks_;
  size_t upload_chunk_ = 0, upload_used_ = 0;
  void ResetUploads() { upload_chunk_ = 0, upload_used_ = 0; }
  DeviceArray<int32_t> flagged_;           // [1 + S·Hq]: count, then cells
  PinnedArray<int32_t> flagged_host_;
  DeviceArray<float> sub_q_, sub_out_;     // [S, Hq·d]
  DeviceArray<int32_t> sub_tables_;        // [S, max_blocks]
  DeviceArray<int32_t> sub_ctx_;           // [S]
  DeviceArray<meter::CertBound> sub_cert_; // [S, Hq]
  DeviceArray<float> sub_norm_;            // [S, Hq]
  DeviceArray<float> risk_;                // [cells, max_blocks]
  PinnedArray<float> risk_host_;
};

// Block lifetimes from the engine's KvCache: a reallocated or freed block's exact copies belong
// to an old owner (cuda_gate_repair.cc). Runs on the engine thread between steps.
class CudaBackend::BlockEvents : public KvBlockObserver {
 public:
  explicit BlockEvents(CudaBackend* backend) : backend_(backend) {}
  void OnBlockAllocated(int32_t block, SeqId seq) override;
  void OnBlockFreed(int32_t block) override;

 private:
  CudaBackend* backend_;
};

}  // namespace witcert
