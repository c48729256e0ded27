// The fp8 tensor-core decode's lane mappings (kernels/cuda/tc8_layout.h), checked on the CPU:
// the K pass reads every channel of a row once and where the query's B fragments expect it, the
// V pass's token columns are the m16n8k16 A columns its byte pairing builds, and the swizzle keeps
// both passes' shared-memory loads free of bank conflicts. A wrong constant in any of them fails
// here before a device sees it.
#include <array>
#include <set>

#include "gtest/gtest.h"
#include "kernels/cuda/tc8_layout.h"

namespace witcert::cuda_kv {
namespace {

constexpr int kRowBytes = 128;  // one token's fp8 codes at d = 128

int Bank(int byte_address) { return (byte_address / 4) % 32; }

// Byte offset of chunk c of stage token t, as the loader stores it.
int ChunkAddress(int t, int c) { return t * kRowBytes + ((c ^ Tc8Swizzle(t % 8)) << 4); }

TEST(Tc8Layout, SwizzleIsAPermutationOfTheChunks) {
  std::set<int> seen;
  for (int t = 0; t < 8; ++t) seen.insert(Tc8Swizzle(t));
  EXPECT_EQ(seen.size(), 8u);
  for (int t = 0; t < 8; ++t) EXPECT_LT(Tc8Swizzle(t), 8);
}

TEST(Tc8Layout, KeyPassReadsEveryChannelOnceFromItsOwnChunk) {
  std::array<int, 128> hits{};
  for (int ks = 0; ks < 8; ++ks) {
    for (int tig = 0; tig < 4; ++tig) {
      for (int j = 0; j < 4; ++j) {
        const int c = Tc8KeyChannel(ks, tig, j);
        ASSERT_GE(c, 0);
        ASSERT_LT(c, 128);
        ++hits[c];
        // Lane tig's 16-byte load of chunk tig (k-steps 0-3) or tig + 4 (4-7), word ks % 4, byte j.
        EXPECT_EQ(c / 16, tig + 4 * (ks / 4));
        EXPECT_EQ(c % 16, 4 * (ks % 4) + j);
      }
    }
  }
  for (int c = 0; c < 128; ++c) EXPECT_EQ(hits[c], 1) << c;
}

// Each quarter-warp's 16-byte loads (lanes 8q..8q+7: rows gid = 2q, 2q + 1, tig 0..3) must cover
// eight distinct 4-bank groups, for both chunks a lane loads and both rows (gid, gid + 8).
TEST(Tc8Layout, KeyPassLoadsAreFreeOfBankConflicts) {
  for (int half = 0; half < 2; ++half) {
    for (int c4 = 0; c4 < 2; ++c4) {
      for (int q = 0; q < 4; ++q) {
        std::set<int> groups;
        for (int lane = 8 * q; lane < 8 * q + 8; ++lane) {
          const int gid = lane / 4, tig = lane % 4;
          groups.insert(ChunkAddress(gid + 8 * half, tig + 4 * c4) / 16 % 8);
        }
        EXPECT_EQ(groups.size(), 8u) << "half " << half << " chunk set " << c4 << " quarter " << q;
      }
    }
  }
}

TEST(Tc8Layout, WeightColumnsAreTheValueFragmentsColumns) {
  for (int ks = 0; ks < 4; ++ks) {
    std::set<int> cols;
    for (int r = 0; r < 16; ++r) {
      const int col = Tc8WeightColumn(16 * ks + r);
      EXPECT_EQ(col / 16, ks);
      cols.insert(col);
    }
    EXPECT_EQ(cols.size(), 16u);
  }
  // Lane tig pairs tokens (tig, tig + 4) into a0 / a1 (columns 2tig, 2tig + 1) and (tig + 8,
  // tig + 12) into a2 / a3 (columns 2tig + 8, 2tig + 9).
  for (int tig = 0; tig < 4; ++tig) {
    EXPECT_EQ(Tc8WeightColumn(tig), 2 * tig);
    EXPECT_EQ(Tc8WeightColumn(tig + 4), 2 * tig + 1);
    EXPECT_EQ(Tc8WeightColumn(tig + 8), 2 * tig + 8);
    EXPECT_EQ(Tc8WeightColumn(tig + 12), 2 * tig + 9);
  }
}

// The V pass's 2-byte loads: lane (gid, tig) of warp w reads channels 16w + 2gid, +1 of token
// 16ks + tig + 4j. Distinct words of one load instruction must sit in distinct banks (lanes that
// share a word are a broadcast).
TEST(Tc8Layout, ValuePassLoadsAreFreeOfBankConflicts) {
  for (int w = 0; w < 8; ++w) {
    for (int ks = 0; ks < 4; ++ks) {
      for (int j = 0; j < 4; ++j) {
        std::set<int> words, banks;
        for (int lane = 0; lane < 32; ++lane) {
          const int gid = lane / 4, tig = lane % 4, t = 16 * ks + tig + 4 * j;
          const int address = ChunkAddress(t, w) + 2 * gid;
          if (words.insert(address / 4).second) banks.insert(Bank(address));
        }
        EXPECT_EQ(words.size(), banks.size()) << "warp " << w << " k-step " << ks << " j " << j;
      }
    }
  }
}

}  // namespace
}  // namespace witcert::cuda_kv
