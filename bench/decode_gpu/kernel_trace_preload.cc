// A kernel timeline for any CUDA program, by LD_PRELOAD: every kernel's start and end on the GPU,
// graph replays included (CUPTI's concurrent-kernel activity, which keeps launches overlapping as
// they would untraced, programmatic dependent launches too). Nsight Systems does not run on the GPU
// machine; CUPTI does. Diagnostic tooling only: the engine never links it.
//
//   WITCERT_KERNEL_TRACE=/tmp/trace.csv LD_PRELOAD=libwitcert_kernel_trace.so bench_decode_gpu ...
//
// One CSV row per kernel: start_ns,end_ns,graph_id,graph_node_id,stream,grid,block,name.
// scripts/kernel_timeline.py turns it into each launch's busy time and its advance (how far it moved
// the replay's finish line).
#include <cupti.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>

namespace {

constexpr size_t kBufferBytes = size_t{16} << 20;

std::mutex g_mu;
FILE* g_out = nullptr;

void CUPTIAPI BufferRequested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = *buffer != nullptr ? kBufferBytes : 0;
  *max_records = 0;
}

void CUPTIAPI BufferCompleted(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  std::lock_guard<std::mutex> lock(g_mu);
  CUpti_Activity* record = nullptr;
  while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
    if (record->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL || g_out == nullptr) continue;
    const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
    std::fprintf(g_out, "%llu,%llu,%u,%llu,%u,%d,%d,\"%s\"\n", static_cast<unsigned long long>(k->start),
                 static_cast<unsigned long long>(k->end), k->graphId, static_cast<unsigned long long>(k->graphNodeId),
                 k->streamId, k->gridX * k->gridY * k->gridZ, k->blockX * k->blockY * k->blockZ,
                 k->name != nullptr ? k->name : "?");
  }
  std::free(buffer);
}

__attribute__((constructor)) void StartTrace() {
  const char* path = std::getenv("WITCERT_KERNEL_TRACE");
  if (path == nullptr) return;
  g_out = std::fopen(path, "w");
  if (g_out == nullptr) {
    std::fprintf(stderr, "kernel trace: cannot open %s\n", path);
    return;
  }
  std::fprintf(g_out, "start_ns,end_ns,graph_id,graph_node_id,stream,grid,block,name\n");
  if (cuptiActivityRegisterCallbacks(BufferRequested, BufferCompleted) != CUPTI_SUCCESS ||
      cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS) {
    std::fprintf(stderr, "kernel trace: CUPTI did not start\n");
  }
}

__attribute__((destructor)) void StopTrace() {
  if (g_out == nullptr) return;
  cuptiActivityFlushAll(1);
  std::lock_guard<std::mutex> lock(g_mu);
  std::fclose(g_out);
  g_out = nullptr;
}

}  // namespace
