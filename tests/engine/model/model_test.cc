// Model loading: config mapping per architecture, tensor binding and its errors, on tiny
// synthetic GGUF models; then the real SmolLM2 file when present.
#include "engine/model/model.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/status/status.h"
#include "engine/model/model_loader.h"
#include "tests/engine/model/gguf_writer.h"
#include "tests/engine/model/tiny_model.h"

namespace witcert {
namespace {

using testing::GgufWriter;
using testing::NormValue;
using testing::TinySpec;
using testing::TinyWriter;

std::string Msg(const absl::Status& s) { return std::string(s.message()); }

absl::StatusOr<std::unique_ptr<Model>> Load(const GgufWriter& w) {
  auto f = GgufFile::FromBytes(w.Build());
  if (!f.ok()) return f.status();
  return ModelLoader::FromGguf(std::move(*f));
}

void ExpectNormValues(const QuantMatrix& m, int64_t n) {
  ASSERT_EQ(m.type, GgmlType::kF32);
  ASSERT_EQ(m.rows, 1);
  ASSERT_EQ(m.cols, n);
  ASSERT_EQ(m.row_bytes, static_cast<size_t>(n) * 4);
  for (int64_t i = 0; i < n; ++i) {
    float v;
    std::memcpy(&v, m.data + 4 * i, 4);
    ASSERT_EQ(v, NormValue(i)) << i;  // exact: every value is representable in all 3 types
  }
}

TEST(ModelLoaderTest, TinyLlamaConfigAndBinding) {
  auto m = Load(TinyWriter({}));
  ASSERT_TRUE(m.ok()) << m.status();
  const ModelConfig& c = (*m)->config();
  EXPECT_EQ(c.architecture, "llama");
  EXPECT_EQ(c.name, "tiny");
  EXPECT_EQ(c.num_layers, 2);
  EXPECT_EQ(c.hidden_dim, 64);
  EXPECT_EQ(c.num_heads, 4);
  EXPECT_EQ(c.num_kv_heads, 2);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_EQ(c.ffn_dim, 96);
  EXPECT_EQ(c.vocab_size, 40);  // from tokenizer.ggml.tokens
  EXPECT_EQ(c.context_length, 256);
  EXPECT_EQ(c.rope_theta, 500000.0f);
  EXPECT_EQ(c.rms_norm_eps, 1e-6f);
  EXPECT_EQ(c.rope_pairing, RopePairing::kInterleaved);
  EXPECT_STREQ(RopePairingName(c.rope_pairing), "interleaved");
  EXPECT_FALSE(c.qkv_bias);
  EXPECT_TRUE(c.tied_embeddings);

  const Weights& w = (*m)->weights();
  const GgufFile& g = *(*m)->gguf();
  EXPECT_EQ(w.token_embd.type, GgmlType::kQ8_0);
  EXPECT_EQ(w.token_embd.rows, 40);
  EXPECT_EQ(w.token_embd.cols, 64);
  EXPECT_EQ(w.token_embd.row_bytes, 2u * 34);                             // two Q8_0 blocks
  EXPECT_EQ(w.token_embd.data, g.FindTensor("token_embd.weight")->data);  // no copy
  EXPECT_EQ(w.output.data, w.token_embd.data);
  ExpectNormValues(w.output_norm, 64);
  ASSERT_EQ(w.layers.size(), 2u);
  const LayerWeights& l = w.layers[1];
  EXPECT_EQ(l.wk.rows, 32);
  EXPECT_EQ(l.wk.cols, 64);
  EXPECT_EQ(l.wk.row_bytes, 2u * 20);  // two Q4_1 blocks
  EXPECT_EQ(l.wk.data, g.FindTensor("blk.1.attn_k.weight")->data);
  EXPECT_EQ(l.w_down.rows, 64);
  EXPECT_EQ(l.w_down.cols, 96);
  EXPECT_EQ(l.w_down.row_bytes, 3u * 20);
  EXPECT_EQ(l.wo.rows, 64);
  EXPECT_EQ(l.wo.cols, 64);
  EXPECT_EQ(l.w_gate.rows, 96);
  EXPECT_TRUE(l.bq.empty());
  ExpectNormValues(l.ffn_norm, 64);
}

TEST(ModelLoaderTest, Qwen2IsHalfSplitWithBiases) {
  TinySpec s;
  s.arch = "qwen2";
  auto m = Load(TinyWriter(s));
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ((*m)->config().rope_pairing, RopePairing::kHalfSplit);
  EXPECT_STREQ(RopePairingName(RopePairing::kHalfSplit), "half-split");
  EXPECT_TRUE((*m)->config().qkv_bias);
  for (const LayerWeights& l : (*m)->weights().layers) {
    ExpectNormValues(l.bq, 64);
    ExpectNormValues(l.bk, 32);
    ExpectNormValues(l.bv, 32);
  }
  // qwen2 without its biases is an error naming the first one missing.
  GgufWriter w = TinyWriter(s);
  ASSERT_TRUE(w.RemoveTensor("blk.0.attn_k.bias"));
  auto bad = Load(w);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(Msg(bad.status()).find("blk.0.attn_k.bias"), std::string::npos) << bad.status();
}

TEST(ModelLoaderTest, UntiedOutputAndDefaults) {
  TinySpec s;
  s.hidden = 256;  // Q6_K output needs 256-wide rows
  s.heads = 4;
  s.tied = false;
  s.write_kv_heads = false;  // head_count_kv defaults to head_count
  auto m = Load(TinyWriter(s));
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_FALSE((*m)->config().tied_embeddings);
  EXPECT_EQ((*m)->config().num_kv_heads, 4);
  EXPECT_EQ((*m)->weights().output.type, GgmlType::kQ6_K);
  EXPECT_EQ((*m)->weights().output.row_bytes, 210u);
  EXPECT_NE((*m)->weights().output.data, (*m)->weights().token_embd.data);
}

TEST(ModelLoaderTest, HalfPrecisionNormsAreWidened) {
  for (uint32_t type : {1u, 30u}) {
    TinySpec s;
    s.norm_type = type;
    auto m = Load(TinyWriter(s));
    ASSERT_TRUE(m.ok()) << m.status();
    SCOPED_TRACE(type);
    ExpectNormValues((*m)->weights().output_norm, 64);
    ExpectNormValues((*m)->weights().layers[0].attn_norm, 64);
  }
  TinySpec s;
  s.norm_type = 8;  // Q8_0 norm: hidden 64 is a block multiple but the type is not allowed
  auto m = Load(TinyWriter(s));
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(Msg(m.status()).find("output_norm.weight"), std::string::npos) << m.status();
  EXPECT_NE(Msg(m.status()).find("Q8_0"), std::string::npos) << m.status();
}

TEST(ModelLoaderTest, UnknownArchitecture) {
  TinySpec s;
  s.arch = "gpt2";
  auto m = Load(TinyWriter(s));
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(Msg(m.status()).find("unsupported architecture 'gpt2' (supported: llama, qwen2, qwen3)"),
            std::string::npos)
      << m.status();
  GgufWriter none;
  EXPECT_NE(Msg(Load(none).status()).find("general.architecture"), std::string::npos);
}

TEST(ModelLoaderTest, MissingTensorIsNamed) {
  GgufWriter w = TinyWriter({});
  ASSERT_TRUE(w.RemoveTensor("blk.1.ffn_up.weight"));
  auto m = Load(w);
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(Msg(m.status()).find("missing tensor 'blk.1.ffn_up.weight'"), std::string::npos)
      << m.status();
  EXPECT_NE(Msg(m.status()).find("[64, 96]"), std::string::npos) << m.status();
}

TEST(ModelLoaderTest, WrongShapeIsNamed) {
  GgufWriter w = TinyWriter({});
  ASSERT_TRUE(w.RemoveTensor("blk.0.attn_k.weight"));
  w.AddTensor("blk.0.attn_k.weight", 3, {64, 64});  // 4 KV heads' worth instead of 2
  auto m = Load(w);
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
  const std::string msg = Msg(m.status());
  EXPECT_NE(msg.find("blk.0.attn_k.weight"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[64, 64]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("expected [64, 32]"), std::string::npos) << msg;
}

TEST(ModelLoaderTest, UnsupportedMatrixTypeIsNamed) {
  TinySpec s;
  s.matrix_type = 9;  // Q8_1: known to GGUF, not supported by this build as a weight
  auto m = Load(TinyWriter(s));
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(Msg(m.status()).find("blk.0.attn_q.weight"), std::string::npos) << m.status();
  EXPECT_NE(Msg(m.status()).find("Q8_1"), std::string::npos) << m.status();
}

// The formats added after Q4_K / Q6_K (Q2_K, Q3_K and Q5_K: the main formats of the Q2_K,
// Q3_K_* and Q5_K_* files; Q5_0, Q5_1; IQ4_NL, IQ4_XS) load; their dequantization is checked
// against python-gguf's in kernels/cpu's dequant test, their dot kernels in the matmul test.
TEST(ModelLoaderTest, LaterWeightFormatsLoad) {
  for (auto [type, row_bytes] : {std::pair{GgmlType::kQ2_K, 84u}, std::pair{GgmlType::kQ3_K, 110u},
                                 std::pair{GgmlType::kQ5_K, 176u}, std::pair{GgmlType::kQ5_0, 8 * 22u},
                                 std::pair{GgmlType::kQ5_1, 8 * 24u}, std::pair{GgmlType::kIQ4_NL, 8 * 18u},
                                 std::pair{GgmlType::kIQ4_XS, 136u}}) {
    TinySpec s;
    s.hidden = 256;  // K-quant rows are whole 256-value super-blocks
    s.ffn = 256;
    s.matrix_type = static_cast<uint32_t>(type);
    auto m = Load(TinyWriter(s));
    ASSERT_TRUE(m.ok()) << m.status();
    const LayerWeights& l = (*m)->weights().layers[0];
    EXPECT_EQ(l.wq.type, type);
    EXPECT_EQ(l.w_down.type, type);
    EXPECT_EQ(l.wq.row_bytes, row_bytes);  // one 256-wide row
  }
}

// attention.key_length sets the head size (Mistral Nemo: 128, where 5120 / 32 heads would say
// 160); the projections must then have that many rows per head; a different value_length is
// refused.
TEST(ModelLoaderTest, KeyLengthSetsTheHeadSize) {
  TinySpec s;  // hidden 64, 4 heads: 16 per head from the ratio
  {
    GgufWriter w = TinyWriter(s);
    w.AddU32("llama.attention.key_length", 16);
    auto m = Load(w);
    ASSERT_TRUE(m.ok()) << m.status();
    EXPECT_EQ((*m)->config().head_dim, 16);
  }
  {
    GgufWriter w = TinyWriter(s);
    w.AddU32("llama.attention.key_length", 32);  // 4 × 32 = 128 q rows, but the file has 64
    auto m = Load(w);
    ASSERT_FALSE(m.ok());
    EXPECT_NE(Msg(m.status()).find("blk.0.attn_q.weight"), std::string::npos) << m.status();
    EXPECT_NE(Msg(m.status()).find("[64, 128]"), std::string::npos) << m.status();
  }
  {
    GgufWriter w = TinyWriter(s);
    w.AddU32("llama.attention.key_length", 16);
    w.AddU32("llama.attention.value_length", 8);
    auto m = Load(w);
    EXPECT_EQ(m.status().code(), absl::StatusCode::kUnimplemented) << m.status();
    EXPECT_NE(Msg(m.status()).find("value_length"), std::string::npos) << m.status();
  }
}

TEST(ModelLoaderTest, InconsistentConfigsAreRejected) {
  {
    TinySpec s;
    s.kv_heads = 3;  // 4 heads do not group over 3 KV heads
    auto m = Load(TinyWriter(s));
    EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(Msg(m.status()).find("multiple of the KV head count"), std::string::npos)
        << m.status();
  }
  {
    GgufWriter w = TinyWriter({});
    w.AddU32("llama.rope.dimension_count", 8);  // partial rotary
    auto m = Load(w);
    EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(Msg(m.status()).find("rope.dimension_count"), std::string::npos) << m.status();
  }
  {
    GgufWriter w;
    w.AddString("general.architecture", "llama");
    w.AddU32("llama.embedding_length", 64);
    auto m = Load(w);
    EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(Msg(m.status()).find("llama.block_count"), std::string::npos) << m.status();
  }
  {
    // A corrupt block_count must be refused before anything is sized by it.
    testing::GgufLayout layout;
    std::string image = TinyWriter({}).Build(&layout);
    // llama.block_count is the third KV (after architecture and name), a u32.
    testing::PatchPod<uint32_t>(&image, layout.kv_value_at[2], 2000000000u);
    auto f = GgufFile::FromBytes(image);
    ASSERT_TRUE(f.ok()) << f.status();
    auto m = ModelLoader::FromGguf(std::move(*f));
    EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(Msg(m.status()).find("block_count = 2000000000"), std::string::npos) << m.status();
  }
  {
    GgufWriter w;
    w.AddString("general.architecture", "qwen2");
    w.AddU32("qwen2.block_count", 1);
    w.AddU32("qwen2.embedding_length", 64);
    w.AddU32("qwen2.attention.head_count", 0);
    auto m = Load(w);
    EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(Msg(m.status()).find("qwen2.attention.head_count"), std::string::npos) << m.status();
  }
}

TEST(ModelLoaderTest, LoadGgufFromDisk) {
  const std::string image = TinyWriter({}).Build();
  const std::string path = ::testing::TempDir() + "/tiny_model.gguf";
  std::ofstream(path, std::ios::binary).write(image.data(), image.size());
  auto m = Model::LoadGguf(path);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ((*m)->config().num_layers, 2);
  EXPECT_EQ((*m)->gguf()->path(), path);
  std::remove(path.c_str());
  EXPECT_EQ(Model::LoadGguf(path).status().code(), absl::StatusCode::kNotFound);
}

// A file written by the reference Python `gguf` package (tests/fuzz/corpus, F32 weights):
// checks the reader against another implementation of the format, not just our writer.
TEST(ModelLoaderTest, ReadsReferenceWriterOutput) {
  auto m = Model::LoadGguf("tests/fuzz/corpus/tiny_llama.gguf");
  ASSERT_TRUE(m.ok()) << m.status();
  const ModelConfig& c = (*m)->config();
  EXPECT_EQ(c.num_layers, 1);
  EXPECT_EQ(c.hidden_dim, 32);
  EXPECT_EQ(c.num_heads, 2);
  EXPECT_EQ(c.num_kv_heads, 1);
  EXPECT_EQ(c.ffn_dim, 64);
  EXPECT_EQ(c.vocab_size, 6);  // from the token list: the file has no llama.vocab_size
  EXPECT_TRUE(c.tied_embeddings);
  EXPECT_EQ((*m)->weights().layers[0].wk.rows, 16);
  EXPECT_EQ((*m)->weights().layers[0].wk.type, GgmlType::kF32);
  EXPECT_EQ((*m)->weights().layers[0].wk.row_bytes, 32u * 4);
  EXPECT_EQ((*m)->gguf()->GetStringArray("tokenizer.ggml.merges")->size(), 1u);
}

// ---- The real model file ------------------------------------------------------------

std::string RealModelPath() {
  const char* env = std::getenv("WITCERT_MODEL");
  return env != nullptr ? env : "models/SmolLM2-135M-Instruct.Q4_1.gguf";
}

bool RealModelRequired() {
  const char* env = std::getenv("WITCERT_REQUIRE_MODEL");
  return env != nullptr && std::string(env) == "1";
}

#define SKIP_OR_FAIL_WITHOUT_MODEL(path)                                 \
  if (!std::ifstream(path).good()) {                                     \
    if (RealModelRequired()) FAIL() << "model file missing: " << (path); \
    GTEST_SKIP() << "model file not found: " << (path);                  \
  }

TEST(RealModelTest, SmolLm2ConfigAndTensors) {
  const std::string path = RealModelPath();
  SKIP_OR_FAIL_WITHOUT_MODEL(path);
  auto m = Model::LoadGguf(path);
  ASSERT_TRUE(m.ok()) << m.status();
  const ModelConfig& c = (*m)->config();
  EXPECT_EQ(c.architecture, "llama");
  EXPECT_EQ(c.num_layers, 30);
  EXPECT_EQ(c.hidden_dim, 576);
  EXPECT_EQ(c.num_heads, 9);
  EXPECT_EQ(c.num_kv_heads, 3);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.ffn_dim, 1536);
  EXPECT_EQ(c.vocab_size, 49152);
  EXPECT_EQ(c.context_length, 8192);
  EXPECT_EQ(c.rope_theta, 100000.0f);
  EXPECT_EQ(c.rms_norm_eps, 1e-5f);
  EXPECT_EQ(c.rope_pairing, RopePairing::kInterleaved);
  EXPECT_FALSE(c.qkv_bias);
  EXPECT_TRUE(c.tied_embeddings);

  const GgufFile& g = *(*m)->gguf();
  EXPECT_EQ(g.version(), 3u);
  EXPECT_EQ(g.tensors().size(), 272u);
  EXPECT_EQ(g.GetStringArray("tokenizer.ggml.tokens")->size(), 49152u);
  EXPECT_EQ(*g.GetString("tokenizer.ggml.model"), "gpt2");
  const Weights& w = (*m)->weights();
  EXPECT_EQ(w.token_embd.type, GgmlType::kQ8_0);
  EXPECT_EQ(w.output.data, w.token_embd.data);
  EXPECT_EQ(w.output_norm.type, GgmlType::kF32);
  ASSERT_EQ(w.layers.size(), 30u);
  for (const LayerWeights& l : w.layers) {
    for (const QuantMatrix* q : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) {
      EXPECT_EQ(q->type, GgmlType::kQ4_1);
    }
    EXPECT_EQ(l.attn_norm.type, GgmlType::kF32);
    EXPECT_EQ(l.ffn_norm.type, GgmlType::kF32);
    EXPECT_EQ(l.wk.rows, 192);
    EXPECT_EQ(l.w_down.cols, 1536);
  }
}

TEST(RealModelTest, CorruptedCopiesGiveClearErrors) {
  const std::string path = RealModelPath();
  SKIP_OR_FAIL_WITHOUT_MODEL(path);
  std::string head(1 << 20, '\0');  // the first 1 MB: header and most of the vocabulary
  std::ifstream in(path, std::ios::binary);
  in.read(head.data(), head.size());
  ASSERT_EQ(in.gcount(), static_cast<std::streamsize>(head.size()));

  auto truncated = GgufFile::FromBytes(head);
  EXPECT_EQ(truncated.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(Msg(truncated.status()).find("byte offset"), std::string::npos) << truncated.status();

  const std::string cut = ::testing::TempDir() + "/smollm_cut.gguf";
  std::ofstream(cut, std::ios::binary).write(head.data(), head.size());
  auto opened = Model::LoadGguf(cut);
  EXPECT_EQ(opened.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(Msg(opened.status()).find(cut), std::string::npos) << opened.status();
  std::remove(cut.c_str());

  std::string huge = head;
  testing::PatchPod<uint64_t>(&huge, testing::GgufLayout::kTensorCountAt, uint64_t{1} << 40);
  auto h = GgufFile::FromBytes(huge);
  EXPECT_EQ(h.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(Msg(h.status()).find("tensor count"), std::string::npos) << h.status();
}

}  // namespace
}  // namespace witcert
