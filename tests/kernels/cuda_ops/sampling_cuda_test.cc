// The GPU sampler (kernels/cuda/ops/sampling_cuda.h) against a double-precision CPU
// evaluation of the same distribution (penalties → temperature → top-k → min-p → top-p).
//
// Why the counts can be checked exactly: the kernel maps u to a token by inverse CDF in
// token-id order. Feeding N stratified uniforms u_j = (j + ½)/N, the number of draws that
// land on token i is the number of grid points in an interval of length p_i: within ±1 of
// N·p_i (the kernel's fixed-point weights move p_i by < 2^-40). A token outside the kept set
// must never be drawn. Every call runs both ways, with the argmax scratch (the row's maximum from
// a first launch over chunks) and without (the row's CTA scans it), and expects the same tokens.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cuda/ops/sampling_cuda.h"
#include "tests/kernels/cuda_ops/ops_test_util.h"

namespace witcert {
namespace {

using testing::Dev;

struct Penalty {
  int32_t token, count;
};

// SampleRowsCuda on rows [n, vocab] both ways (file comment), each on its own copy of the rows
// (the kernel overwrites them); expects the same tokens and returns them.
std::vector<int32_t> Sample(const std::vector<float>& rows, int64_t n, int64_t vocab,
                            const std::vector<SampleRowParams>& params, const int32_t* dtok = nullptr,
                            const int32_t* dcnt = nullptr) {
  Dev<SampleRowParams> dp(params);
  std::vector<int32_t> got[2];
  for (int chunked = 0; chunked < 2; ++chunked) {
    Dev<float> drows(rows);
    Dev<SampleArgmaxPartial> scratch(static_cast<size_t>(SampleArgmaxScratchEntries(n, vocab)));
    Dev<int32_t> out(static_cast<size_t>(n), 0xff);
    const CudaStatus st = SampleRowsCuda(drows.get(), n, vocab, dp.get(), dtok, dcnt, out.get(), 0,
                                         chunked ? scratch.get() : nullptr);
    EXPECT_TRUE(st.ok) << st.message;
    got[chunked] = out.Get();
  }
  EXPECT_EQ(got[1], got[0]) << "the chunked argmax changed a token";
  return got[0];
}

// The kept distribution [vocab] in double; all zeros but one 1 for greedy.
std::vector<double> Expected(std::vector<float> l, const SampleRowParams& p, const std::vector<Penalty>& pen) {
  const int64_t v = static_cast<int64_t>(l.size());
  for (const Penalty& e : pen) l[e.token] -= p.presence_penalty + p.frequency_penalty * static_cast<float>(e.count);
  std::vector<double> w(v, 0.0);
  const int64_t best = std::max_element(l.begin(), l.end()) - l.begin();
  if (p.temperature <= 0.0f) {
    w[best] = 1.0;
    return w;
  }
  std::vector<int64_t> order(v);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return l[a] > l[b]; });
  const int64_t k = p.top_k > 0 && p.top_k < v ? p.top_k : v;
  for (int64_t r = 0; r < k; ++r) {
    const int64_t i = order[r];
    const double x = std::exp((static_cast<double>(l[i]) - l[best]) / p.temperature);
    w[i] = x < p.min_p ? 0.0 : x;
  }
  if (p.top_p < 1.0f) {
    double total = 0.0;
    for (double x : w) total += x;
    double acc = 0.0;
    bool done = false;
    for (int64_t r = 0; r < v; ++r) {
      const int64_t i = order[r];
      if (done) {
        w[i] = 0.0;
      } else {
        acc += w[i];
        done = acc >= p.top_p * total;
      }
    }
  }
  double total = 0.0;
  for (double x : w) total += x;
  for (double& x : w) x /= total;
  return w;
}

// Draws the row `n` times with stratified uniforms and checks the counts (file comment).
void CheckDistribution(const std::vector<float>& logits, SampleRowParams p, const std::vector<Penalty>& pen,
                       int32_t n, const char* what) {
  SCOPED_TRACE(what);
  const int64_t vocab = static_cast<int64_t>(logits.size());
  std::vector<float> rows(static_cast<size_t>(n) * vocab);
  std::vector<SampleRowParams> params(n, p);
  std::vector<int32_t> tok, cnt;
  for (const Penalty& e : pen) {
    tok.push_back(e.token);
    cnt.push_back(e.count);
  }
  for (int32_t j = 0; j < n; ++j) {
    std::copy(logits.begin(), logits.end(), rows.begin() + static_cast<int64_t>(j) * vocab);
    params[j].uniform = (j + 0.5) / n;
    params[j].penalty_offset = 0;
    params[j].penalty_count = static_cast<int32_t>(pen.size());
  }
  Dev<int32_t> dtok(tok.empty() ? std::vector<int32_t>{0} : tok), dcnt(cnt.empty() ? std::vector<int32_t>{0} : cnt);
  const std::vector<int32_t> got = Sample(rows, n, vocab, params, dtok.get(), dcnt.get());
  const std::vector<double> want = Expected(logits, p, pen);
  std::vector<int64_t> count(vocab, 0);
  for (int32_t t : got) {
    ASSERT_GE(t, 0);
    ASSERT_LT(t, vocab);
    ++count[t];
  }
  int64_t kept = 0;
  for (int64_t i = 0; i < vocab; ++i) {
    if (want[i] == 0.0) {
      EXPECT_EQ(count[i], 0) << "token " << i << " is outside the kept set";
    } else {
      ++kept;
      EXPECT_NEAR(static_cast<double>(count[i]), n * want[i], 1.0 + 1e-6 * n) << "token " << i;
    }
  }
  EXPECT_GT(kept, 0);
}

TEST(SampleRowsCudaTest, GreedyIsTheFirstMaximumAndSkipsNaN) {
  SKIP_WITHOUT_GPU();
  std::vector<float> l = {1.0f, 3.0f, NAN, 3.0f, -2.0f};
  SampleRowParams p;
  p.temperature = 0.0f;
  EXPECT_EQ(Sample(l, 1, 5, {p})[0], 1);
}

// Greedy over long rows (many elements per thread, the last stride partial) with NaNs and tied
// maxima at random places, in one thread or in different ones: the first maximum wins.
TEST(SampleRowsCudaTest, GreedyLongRowsFirstOfTiedMaxima) {
  SKIP_WITHOUT_GPU();
  for (int64_t vocab : {int64_t{7}, int64_t{1025}, int64_t{50001}, int64_t{128256}}) {
    for (uint32_t seed = 1; seed <= 6; ++seed) {
      std::vector<float> l = testing::RandomFloats(vocab, seed, -8.0f, 8.0f);
      std::mt19937_64 rng(uint64_t{seed} * 7919);
      for (int k = 0; k < 5; ++k) l[rng() % vocab] = NAN;
      const int ties = 1 + static_cast<int>(rng() % 4);  // the maximum at 1–4 random places
      for (int k = 0; k < ties; ++k) l[rng() % vocab] = 9.0f;
      int64_t want = -1;
      for (int64_t j = 0; j < vocab; ++j) {
        if (l[j] == l[j] && (want < 0 || l[j] > l[want])) want = j;
      }
      SampleRowParams p;
      p.temperature = 0.0f;
      EXPECT_EQ(Sample(l, 1, vocab, {p})[0], want) << "vocab " << vocab << " seed " << seed;
    }
  }
}

// The chunked argmax's edges: a first chunk all NaN, the maximum tied across a chunk boundary
// (the earlier one wins), a row all NaN (token 0), rows of different lengths in chunks.
TEST(SampleRowsCudaTest, GreedyChunkEdges) {
  SKIP_WITHOUT_GPU();
  const int64_t vocab = 3 * 4096 + 17;
  std::vector<float> row = testing::RandomFloats(vocab, 3, -4.0f, 4.0f);
  for (int64_t j = 0; j < 4096; ++j) row[j] = NAN;
  row[2 * 4096 - 1] = row[2 * 4096] = 5.0f;  // last of chunk 1, first of chunk 2
  row[vocab - 1] = 5.0f;
  std::vector<float> rows = row;
  rows.insert(rows.end(), vocab, NAN);
  SampleRowParams p;
  p.temperature = 0.0f;
  const std::vector<int32_t> got = Sample(rows, 2, vocab, {p, p});
  EXPECT_EQ(got[0], 2 * 4096 - 1);
  EXPECT_EQ(got[1], 0);
}

TEST(SampleRowsCudaTest, DistributionMatchesTheFilteredSoftmax) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(5);
  std::normal_distribution<float> g(0.0f, 2.0f);
  std::vector<float> logits(1000);
  for (float& x : logits) x = g(rng);
  auto make = [](float t, int32_t k, float top_p, float min_p) {
    SampleRowParams p;
    p.temperature = t;
    p.top_k = k;
    p.top_p = top_p;
    p.min_p = min_p;
    return p;
  };
  CheckDistribution(logits, make(0.8f, 0, 1.0f, 0.0f), {}, 4000, "temperature");
  CheckDistribution(logits, make(1.0f, 40, 1.0f, 0.0f), {}, 4000, "top-k");
  CheckDistribution(logits, make(0.7f, 0, 0.9f, 0.0f), {}, 4000, "top-p");
  CheckDistribution(logits, make(1.3f, 100, 0.8f, 0.02f), {}, 4000, "top-k + min-p + top-p");
  CheckDistribution(logits, make(0.0f, 0, 1.0f, 0.0f), {}, 64, "greedy");
  SampleRowParams pen = make(1.0f, 0, 0.95f, 0.0f);
  pen.presence_penalty = 0.5f;
  pen.frequency_penalty = 0.3f;
  const int64_t top = std::max_element(logits.begin(), logits.end()) - logits.begin();
  CheckDistribution(logits, pen, {{static_cast<int32_t>(top), 3}, {7, 1}, {999, 2}}, 4000, "penalties");
}

// A Llama-3-sized vocabulary, rows with different settings in one launch.
TEST(SampleRowsCudaTest, LargeVocabularyMixedRows) {
  SKIP_WITHOUT_GPU();
  const int64_t vocab = 128256;
  std::vector<float> logits = testing::RandomFloats(vocab, 17, -8.0f, 8.0f);
  logits[4242] = 30.0f;  // a confident row: top-p 0.5 keeps just this token
  std::vector<float> rows;
  std::vector<SampleRowParams> params(4);
  for (int r = 0; r < 4; ++r) rows.insert(rows.end(), logits.begin(), logits.end());
  params[0].temperature = 0.0f;
  params[1].top_p = 0.5f;
  params[1].uniform = 0.999;
  params[2].top_k = 1;
  params[2].uniform = 0.3;
  params[3].temperature = 1.0f;
  params[3].uniform = 0.5;
  const std::vector<int32_t> got = Sample(rows, 4, vocab, params);
  EXPECT_EQ(got[0], 4242);
  EXPECT_EQ(got[1], 4242);
  EXPECT_EQ(got[2], 4242);
  // Full softmax at T = 1: e^30 dwarfs 128k tokens of at most e^8, so 4242 holds > 99.9% of
  // the mass and the middle of the CDF is on it.
  EXPECT_EQ(got[3], 4242);
  EXPECT_FALSE(SampleRowsCuda(nullptr, 1, 10, nullptr, nullptr, nullptr, nullptr, 0).ok);
}

}  // namespace
}  // namespace witcert
