// GgufFile: round trips of every value type and tensor layout through an independent
// writer, and rejection (with a status naming the culprit, never a crash) of truncated and
// corrupted images.
#include "engine/model/gguf.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <string>

#include "absl/status/status.h"
#include "tests/engine/model/gguf_writer.h"

namespace witcert {
namespace {

using testing::GgufLayout;
using testing::GgufWriter;
using testing::PatchPod;

std::string Msg(const absl::Status& s) { return std::string(s.message()); }

// A small valid image exercising every scalar type, arrays and four tensor types.
GgufWriter SampleWriter(uint32_t version) {
  GgufWriter w(version);
  w.AddScalar<uint8_t>("t.u8", testing::kGgufU8, 200);
  w.AddScalar<int8_t>("t.i8", testing::kGgufI8, -5);
  w.AddScalar<uint16_t>("t.u16", testing::kGgufU16, 60000);
  w.AddScalar<int16_t>("t.i16", testing::kGgufI16, -30000);
  w.AddScalar<uint32_t>("t.u32", testing::kGgufU32, 4000000000u);
  w.AddScalar<int32_t>("t.i32", testing::kGgufI32, -2000000000);
  w.AddScalar<float>("t.f32", testing::kGgufF32, 1.5f);
  w.AddScalar<uint8_t>("t.bool", testing::kGgufBool, 1);
  w.AddString("t.str", "h\xc3\xa9llo");
  w.AddScalar<uint64_t>("t.u64", testing::kGgufU64, (uint64_t{1} << 63) + 5);
  w.AddScalar<int64_t>("t.i64", testing::kGgufI64, -(int64_t{1} << 40));
  w.AddScalar<double>("t.f64", testing::kGgufF64, 3.25);
  w.AddArray<int32_t>("t.arr_i32", testing::kGgufI32, {-1, 0, 7});
  w.AddArray<float>("t.arr_f32", testing::kGgufF32, {0.5f, -2.0f});
  w.AddArray<uint8_t>("t.arr_bool", testing::kGgufBool, {1, 0});
  w.AddStringArray("t.arr_str", {"a", "", "xyz"});
  // Array of two arrays of u16: [[1, 2], [3]].
  std::string nested;
  testing::AppendPod<uint32_t>(&nested, testing::kGgufArray);
  testing::AppendPod<uint64_t>(&nested, 2);
  for (const std::vector<uint16_t>& inner : {std::vector<uint16_t>{1, 2}, {3}}) {
    testing::AppendPod<uint32_t>(&nested, testing::kGgufU16);
    testing::AppendPod<uint64_t>(&nested, inner.size());
    for (uint16_t v : inner) testing::AppendPod<uint16_t>(&nested, v);
  }
  w.AddRaw("t.nested", testing::kGgufArray, nested);
  w.AddTensor("f32", 0, {4, 3});
  w.AddTensor("f16", 1, {8});
  w.AddTensor("q4_1", 3, {64, 2});
  w.AddTensor("q8_0", 8, {32, 3, 1, 2});
  return w;
}

class GgufVersionTest : public ::testing::TestWithParam<uint32_t> {};

TEST_P(GgufVersionTest, RoundTripsEveryValueType) {
  auto f = GgufFile::FromBytes(SampleWriter(GetParam()).Build());
  ASSERT_TRUE(f.ok()) << f.status();
  const GgufFile& g = **f;
  EXPECT_EQ(g.version(), GetParam());
  EXPECT_EQ(g.metadata_keys().size(), 17u);
  EXPECT_EQ(*g.GetInt("t.u8"), 200);
  EXPECT_EQ(*g.GetInt("t.i8"), -5);
  EXPECT_EQ(*g.GetInt("t.u16"), 60000);
  EXPECT_EQ(*g.GetInt("t.i16"), -30000);
  EXPECT_EQ(*g.GetInt("t.u32"), 4000000000LL);
  EXPECT_EQ(*g.GetInt("t.i32"), -2000000000);
  EXPECT_EQ(*g.GetInt("t.i64"), -(int64_t{1} << 40));
  // 2^63 + 5 is a valid u64 that does not fit the int64 getter.
  EXPECT_EQ(g.GetInt("t.u64").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(std::get<uint64_t>(g.Find("t.u64")->scalar), (uint64_t{1} << 63) + 5);
  EXPECT_EQ(*g.GetFloat("t.f32"), 1.5);
  EXPECT_EQ(*g.GetFloat("t.f64"), 3.25);
  EXPECT_EQ(*g.GetFloat("t.i16"), -30000.0);  // any numeric type reads as float
  EXPECT_TRUE(*g.GetBool("t.bool"));
  EXPECT_EQ(*g.GetString("t.str"), "h\xc3\xa9llo");
  EXPECT_EQ(g.Find("t.str")->type, GgufValueType::kString);
  EXPECT_EQ(g.Find("t.f64")->type, GgufValueType::kFloat64);

  auto i32 = g.GetNumberArray("t.arr_i32");
  ASSERT_TRUE(i32.ok());
  EXPECT_EQ(std::vector<double>(i32->begin(), i32->end()), (std::vector<double>{-1, 0, 7}));
  EXPECT_EQ(g.Find("t.arr_i32")->array_type, GgufValueType::kInt32);
  auto f32 = g.GetNumberArray("t.arr_f32");
  EXPECT_EQ(std::vector<double>(f32->begin(), f32->end()), (std::vector<double>{0.5, -2.0}));
  auto b = g.GetNumberArray("t.arr_bool");
  EXPECT_EQ(std::vector<double>(b->begin(), b->end()), (std::vector<double>{1, 0}));
  auto s = g.GetStringArray("t.arr_str");
  ASSERT_TRUE(s.ok());
  ASSERT_EQ(s->size(), 3u);
  EXPECT_EQ((*s)[0], "a");
  EXPECT_EQ((*s)[1], "");
  EXPECT_EQ((*s)[2], "xyz");
  const GgufValue* nested = g.Find("t.nested");
  ASSERT_NE(nested, nullptr);
  EXPECT_EQ(nested->type, GgufValueType::kArray);
  EXPECT_EQ(nested->array_type, GgufValueType::kArray);

  // Typed getters: absent → NotFound, wrong type → InvalidArgument.
  EXPECT_EQ(g.GetInt("nope").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(g.GetString("t.u8").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(g.GetInt("t.str").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(g.GetInt("t.f32").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(g.GetBool("t.u8").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(g.GetFloat("t.str").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(g.GetStringArray("t.arr_i32").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(g.GetNumberArray("t.arr_str").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(g.GetNumberArray("t.nested").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_P(GgufVersionTest, TensorTableAndData) {
  GgufWriter w = SampleWriter(GetParam());
  GgufLayout layout;
  const std::string image = w.Build(&layout);
  auto f = GgufFile::FromBytes(image);
  ASSERT_TRUE(f.ok()) << f.status();
  const auto& ts = (*f)->tensors();
  ASSERT_EQ(ts.size(), 4u);
  // Sizes from the GGUF block geometry: F32 4 B/elem, F16 2 B/elem, Q4_1 20 B per 32,
  // Q8_0 34 B per 32.
  struct Want {
    const char* name;
    GgmlType type;
    std::vector<int64_t> shape;
    uint64_t bytes;
  };
  const Want want[] = {{"f32", GgmlType::kF32, {4, 3}, 48},
                       {"f16", GgmlType::kF16, {8}, 16},
                       {"q4_1", GgmlType::kQ4_1, {64, 2}, 80},
                       {"q8_0", GgmlType::kQ8_0, {32, 3, 1, 2}, 204}};
  const auto* base = reinterpret_cast<const uint8_t*>(image.data());
  for (size_t i = 0; i < 4; ++i) {
    SCOPED_TRACE(want[i].name);
    const GgufTensorInfo* t = (*f)->FindTensor(want[i].name);
    ASSERT_EQ(t, &ts[i]);
    EXPECT_EQ(t->type, want[i].type);
    EXPECT_EQ(t->shape, want[i].shape);
    EXPECT_EQ(t->size_bytes, want[i].bytes);
    EXPECT_EQ(t->offset % 32, 0u);
    int64_t n = 1;
    for (int64_t d : want[i].shape) n *= d;
    EXPECT_EQ(t->num_elements(), n);
    // The view's bytes equal what the writer put at data_start + offset.
    const size_t at = layout.data_start + t->offset;
    ASSERT_LE(at + t->size_bytes, image.size());
    EXPECT_EQ(0, std::memcmp(t->data, base + at, t->size_bytes));
    std::string expect(t->size_bytes, '\0');
    for (size_t k = 0; k < expect.size(); ++k) expect[k] = static_cast<char>(k * 131 + 7);
    EXPECT_EQ(std::string(reinterpret_cast<const char*>(t->data), t->size_bytes), expect);
  }
  EXPECT_EQ((*f)->FindTensor("absent"), nullptr);
}

INSTANTIATE_TEST_SUITE_P(V2AndV3, GgufVersionTest, ::testing::Values(2u, 3u));

TEST(GgufFileTest, CustomAlignment) {
  GgufWriter w;
  w.SetAlignment(64);
  w.AddTensor("a", 0, {3});
  w.AddTensor("b", 0, {5});
  GgufLayout layout;
  const std::string image = w.Build(&layout);
  auto f = GgufFile::FromBytes(image);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(layout.data_start % 64, 0u);
  EXPECT_EQ((*f)->FindTensor("b")->offset, 64u);
  EXPECT_EQ((*f)->FindTensor("b")->data - (*f)->FindTensor("a")->data, 64);
}

TEST(GgufFileTest, RejectsBadAlignment) {
  for (uint32_t a : {0u, 48u, 3u}) {
    GgufWriter w2;
    w2.AddU32("general.alignment", a);
    auto f = GgufFile::FromBytes(w2.Build());
    ASSERT_FALSE(f.ok()) << a;
    EXPECT_EQ(f.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(Msg(f.status()).find("general.alignment"), std::string::npos);
  }
  GgufWriter w;
  w.AddString("general.alignment", "32");
  EXPECT_EQ(GgufFile::FromBytes(w.Build()).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(GgufFileTest, OpenMapsTheSameBytes) {
  const std::string image = SampleWriter(3).Build();
  const std::string path = ::testing::TempDir() + "/gguf_open_test.gguf";
  std::ofstream(path, std::ios::binary).write(image.data(), image.size());
  auto f = GgufFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ((*f)->path(), path);
  EXPECT_EQ(*(*f)->GetString("t.str"), "h\xc3\xa9llo");
  ASSERT_EQ((*f)->tensors().size(), 4u);
  EXPECT_EQ((*f)->FindTensor("q4_1")->size_bytes, 80u);
  std::remove(path.c_str());

  auto missing = GgufFile::Open(path);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(Msg(missing.status()).find(path), std::string::npos);

  std::ofstream(path, std::ios::binary).close();  // empty file
  auto empty = GgufFile::Open(path);
  EXPECT_EQ(empty.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(Msg(empty.status()).find(path), std::string::npos);
  std::remove(path.c_str());
}

// Every proper prefix of a valid image must be rejected (the last byte belongs to tensor
// data, so no prefix is itself valid), with DataLoss and without touching bytes past it.
// FromBytes copies the prefix into an exactly sized buffer, so an ASan build catches any
// overread.
TEST(GgufFileTest, EveryTruncationIsAnError) {
  for (uint32_t version : {2u, 3u}) {
    const std::string image = SampleWriter(version).Build();
    ASSERT_TRUE(GgufFile::FromBytes(image).ok());
    for (size_t n = 0; n < image.size(); ++n) {
      auto f = GgufFile::FromBytes(std::string_view(image.data(), n));
      ASSERT_FALSE(f.ok()) << "prefix of " << n << " bytes parsed";
      ASSERT_EQ(f.status().code(), absl::StatusCode::kDataLoss) << n << ": " << f.status();
    }
  }
}

TEST(GgufFileTest, RejectsForeignHeaders) {
  std::string image = SampleWriter(3).Build();
  std::string bad_magic = image;
  bad_magic[0] = 'X';
  auto f = GgufFile::FromBytes(bad_magic);
  EXPECT_EQ(f.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(Msg(f.status()).find("not a GGUF file"), std::string::npos);

  for (uint32_t version : {1u, 0u, 4u, 0x03000000u}) {
    std::string v = image;
    PatchPod<uint32_t>(&v, GgufLayout::kVersionAt, version);
    auto g = GgufFile::FromBytes(v);
    EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument) << version;
    EXPECT_NE(Msg(g.status()).find("version"), std::string::npos) << g.status();
  }
  std::string v1 = image;
  PatchPod<uint32_t>(&v1, GgufLayout::kVersionAt, 1);
  EXPECT_NE(Msg(GgufFile::FromBytes(v1).status()).find("version 1"), std::string::npos);
  std::string be = image;
  PatchPod<uint32_t>(&be, GgufLayout::kVersionAt, 0x03000000u);
  EXPECT_NE(Msg(GgufFile::FromBytes(be).status()).find("big-endian"), std::string::npos);
}

// Offset of a tensor info's fields, from the writer's layout.
size_t TensorFieldAt(const GgufLayout& l, size_t tensor, size_t name_len, size_t n_dims,
                     int field /*0 n_dims, 1 first dim, 2 type, 3 offset*/) {
  const size_t ndims_at = l.tensor_info_at[tensor] + 8 + name_len;
  switch (field) {
    case 0:
      return ndims_at;
    case 1:
      return ndims_at + 4;
    case 2:
      return ndims_at + 4 + 8 * n_dims;
    default:
      return ndims_at + 4 + 8 * n_dims + 4;
  }
}

struct Corruption {
  std::string name;
  absl::StatusCode code;
  std::vector<std::string> message_has;
  std::string image;
};

std::vector<Corruption> Corruptions() {
  GgufLayout l;
  const GgufWriter base = SampleWriter(3);
  const std::string image = base.Build(&l);
  std::vector<Corruption> out;
  auto patched = [&](auto patch) {
    std::string c = image;
    patch(&c);
    return c;
  };
  using C = absl::StatusCode;
  constexpr uint64_t kHuge = uint64_t{1} << 62;
  out.push_back({"tensor count",
                 C::kDataLoss,
                 {"tensor count", "byte offset 8"},
                 patched([&](std::string* c) { PatchPod<uint64_t>(c, 8, kHuge); })});
  out.push_back(
      {"kv count", C::kDataLoss, {"metadata count", "byte offset 16"}, patched([&](std::string* c) {
         PatchPod<uint64_t>(c, 16, kHuge);
       })});
  // kv 0 is "t.u8": key length.
  out.push_back({"key length",
                 C::kDataLoss,
                 {"metadata key #0", "byte offset 24"},
                 patched([&](std::string* c) { PatchPod<uint64_t>(c, l.kv_at[0], kHuge); })});
  // kv 8 is "t.str": value string length.
  out.push_back(
      {"string length", C::kDataLoss, {"t.str", "byte offset"}, patched([&](std::string* c) {
         PatchPod<uint64_t>(c, l.kv_value_at[8], ~0ull);
       })});
  // kv 12 is "t.arr_i32": count (after the u32 element type); ~0 would overflow count*4.
  out.push_back(
      {"array count", C::kDataLoss, {"t.arr_i32", "byte offset"}, patched([&](std::string* c) {
         PatchPod<uint64_t>(c, l.kv_value_at[12] + 4, ~0ull);
       })});
  out.push_back({"array count / 4", C::kDataLoss, {"t.arr_i32"}, patched([&](std::string* c) {
                   PatchPod<uint64_t>(c, l.kv_value_at[12] + 4, (~0ull / 4) + 1);
                 })});
  out.push_back({"string array count", C::kDataLoss, {"t.arr_str"}, patched([&](std::string* c) {
                   PatchPod<uint64_t>(c, l.kv_value_at[15] + 4, kHuge);
                 })});
  out.push_back({"array element type",
                 C::kDataLoss,
                 {"t.arr_i32", "element type 77"},
                 patched([&](std::string* c) { PatchPod<uint32_t>(c, l.kv_value_at[12], 77); })});
  out.push_back(
      {"value type",
       C::kDataLoss,
       {"t.u8", "value type 13", "byte offset"},
       patched([&](std::string* c) { PatchPod<uint32_t>(c, l.kv_value_at[0] - 4, 13); })});
  // Tensor 0 "f32" [4, 3]; tensor 3 "q8_0" [32, 3, 1, 2].
  out.push_back(
      {"n_dims 0", C::kDataLoss, {"'f32'", "n_dims 0", "byte offset"}, patched([&](std::string* c) {
         PatchPod<uint32_t>(c, TensorFieldAt(l, 0, 3, 2, 0), 0);
       })});
  out.push_back({"n_dims 5", C::kDataLoss, {"'f32'", "n_dims 5"}, patched([&](std::string* c) {
                   PatchPod<uint32_t>(c, TensorFieldAt(l, 0, 3, 2, 0), 5);
                 })});
  out.push_back({"dim 0", C::kDataLoss, {"'f32'", "dimension 0 = 0"}, patched([&](std::string* c) {
                   PatchPod<uint64_t>(c, TensorFieldAt(l, 0, 3, 2, 1), 0);
                 })});
  out.push_back(
      {"dims overflow", C::kDataLoss, {"'q8_0'", "overflow"}, patched([&](std::string* c) {
         const size_t d = TensorFieldAt(l, 3, 4, 4, 1);
         PatchPod<uint64_t>(c, d, uint64_t{1} << 40);
         PatchPod<uint64_t>(c, d + 8, uint64_t{1} << 30);
       })});
  out.push_back(
      {"ggml type",
       C::kInvalidArgument,
       {"'f32'", "ggml type 99", "byte offset"},
       patched([&](std::string* c) { PatchPod<uint32_t>(c, TensorFieldAt(l, 0, 3, 2, 2), 99); })});
  out.push_back(
      {"block multiple", C::kDataLoss, {"'q4_1'", "block size 32"}, patched([&](std::string* c) {
         PatchPod<uint64_t>(c, TensorFieldAt(l, 2, 4, 2, 1), 48);
       })});
  out.push_back(
      {"misaligned offset", C::kDataLoss, {"'f16'", "alignment"}, patched([&](std::string* c) {
         PatchPod<uint64_t>(c, TensorFieldAt(l, 1, 3, 1, 3), 36);
       })});
  out.push_back(
      {"offset past end", C::kDataLoss, {"'f16'", "past the end"}, patched([&](std::string* c) {
         PatchPod<uint64_t>(c, TensorFieldAt(l, 1, 3, 1, 3), 1 << 20);
       })});
  out.push_back({"offset overflow", C::kDataLoss, {"'f16'"}, patched([&](std::string* c) {
                   PatchPod<uint64_t>(c, TensorFieldAt(l, 1, 3, 1, 3), ~uint64_t{31});
                 })});
  out.push_back({"dim makes data too big",
                 C::kDataLoss,
                 {"'q8_0'", "past the end"},
                 patched([&](std::string* c) {
                   PatchPod<uint64_t>(c, TensorFieldAt(l, 3, 4, 4, 1) + 8, 1000);
                 })});
  {
    GgufWriter w = SampleWriter(3);
    w.AddU32("t.u8", 1);
    out.push_back({"duplicate key", C::kDataLoss, {"duplicate metadata key 't.u8'"}, w.Build()});
  }
  {
    GgufWriter w = SampleWriter(3);
    w.AddTensor("f16", 0, {2});
    out.push_back({"duplicate tensor", C::kDataLoss, {"duplicate tensor name 'f16'"}, w.Build()});
  }
  {
    // Arrays nested 20 deep.
    std::string p;
    for (int i = 0; i < 20; ++i) {
      testing::AppendPod<uint32_t>(&p, testing::kGgufArray);
      testing::AppendPod<uint64_t>(&p, 1);
    }
    testing::AppendPod<uint32_t>(&p, testing::kGgufU8);
    testing::AppendPod<uint64_t>(&p, 0);
    GgufWriter w;
    w.AddRaw("deep", testing::kGgufArray, p);
    out.push_back({"nesting", C::kDataLoss, {"'deep'", "nests"}, w.Build()});
  }
  return out;
}

TEST(GgufFileTest, CorruptionsNameTheCulprit) {
  for (const Corruption& c : Corruptions()) {
    SCOPED_TRACE(c.name);
    auto f = GgufFile::FromBytes(c.image);
    ASSERT_FALSE(f.ok());
    EXPECT_EQ(f.status().code(), c.code) << f.status();
    EXPECT_NE(Msg(f.status()).find("<memory>"), std::string::npos) << f.status();
    for (const std::string& part : c.message_has) {
      EXPECT_NE(Msg(f.status()).find(part), std::string::npos)
          << "'" << part << "' not in: " << f.status();
    }
  }
}

TEST(GgufFileTest, NestedArraysWithinLimitParse) {
  std::string p;
  for (int i = 0; i < 5; ++i) {
    testing::AppendPod<uint32_t>(&p, testing::kGgufArray);
    testing::AppendPod<uint64_t>(&p, 1);
  }
  testing::AppendPod<uint32_t>(&p, testing::kGgufString);
  testing::AppendPod<uint64_t>(&p, 1);
  testing::AppendGgufString(&p, "leaf");
  GgufWriter w;
  w.AddRaw("nest5", testing::kGgufArray, p);
  w.AddU32("after", 9);  // parsing resumes at the right byte after the skipped arrays
  auto f = GgufFile::FromBytes(w.Build());
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(*(*f)->GetInt("after"), 9);
}

TEST(GgufFileTest, EmptyFileWithoutTensorsIsValid) {
  GgufWriter w(2);
  auto f = GgufFile::FromBytes(w.Build());
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_TRUE((*f)->tensors().empty());
  EXPECT_TRUE((*f)->metadata_keys().empty());
}

}  // namespace
}  // namespace witcert
