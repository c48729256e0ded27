// safetensors reader: round trip against an independent writer, every corruption class
// gives an error naming the file (and tensor), and folder discovery (single file, index,
// bare shards).
#include "engine/model/safetensors.h"

#include <cstring>
#include <string>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "tests/engine/model/safetensors_writer.h"

namespace witcert {
namespace {

using testing::AssembleSafetensors;
using testing::SafetensorsWriter;
using testing::TempFolder;
using testing::WriteFile;

std::string Bytes(size_t n, int seed) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>(i * 37 + seed);
  return s;
}

SafetensorsWriter ThreeTensors() {
  SafetensorsWriter w;
  w.Add({"a.weight", "F32", {2, 3}, Bytes(24, 1)});
  w.Add({"b.weight", "F16", {4}, Bytes(8, 2)});
  w.Add({"c.weight", "BF16", {3, 1, 2}, Bytes(12, 3)});
  w.Add({"position_ids", "I64", {1, 2}, Bytes(16, 4)});
  w.SetMetadata("format", "pt");
  return w;
}

TEST(SafetensorsTest, RoundTripFromFile) {
  TempFolder dir("st_roundtrip");
  const SafetensorsWriter w = ThreeTensors();
  WriteFile(dir.path() / "x.safetensors", w.Build());
  auto f = SafetensorsFile::Open((dir.path() / "x.safetensors").string());
  ASSERT_TRUE(f.ok()) << f.status();
  ASSERT_EQ((*f)->tensors().size(), 4u);
  EXPECT_EQ((*f)->metadata().at("format"), "pt");
  for (const auto& expected : w.tensors()) {
    const SafetensorsTensor* t = (*f)->Find(expected.name);
    ASSERT_NE(t, nullptr) << expected.name;
    EXPECT_EQ(SafetensorsDtypeName(t->dtype), expected.dtype);
    EXPECT_EQ(t->shape, std::vector<int64_t>(expected.shape.begin(), expected.shape.end()));
    ASSERT_EQ(t->size_bytes, expected.data.size());
    EXPECT_EQ(std::memcmp(t->data, expected.data.data(), expected.data.size()), 0);
  }
  EXPECT_TRUE(RequireFloat(*(*f)->Find("c.weight")).ok());
  const absl::Status s = RequireFloat(*(*f)->Find("position_ids"));
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE(absl::StrContains(s.message(), "position_ids")) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "I64")) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "x.safetensors")) << s;
  EXPECT_EQ((*f)->Find("missing"), nullptr);
}

TEST(SafetensorsTest, MissingFileIsNotFound) {
  auto f = SafetensorsFile::Open("/nonexistent/dir/model.safetensors");
  EXPECT_TRUE(absl::IsNotFound(f.status())) << f.status();
}

struct Corruption {
  const char* what;
  std::string image;
  const char* must_mention;  // besides the file name
};

std::vector<Corruption> Corruptions() {
  const std::string good_data = Bytes(24, 1);
  const auto one = [&](const std::string& entry, const std::string& data) {
    return AssembleSafetensors("{\"t\":" + entry + "}", data);
  };
  std::string huge_len = AssembleSafetensors("{}", "");
  huge_len[0] = '\xff';
  huge_len[3] = '\x01';
  return {
      {"too short", std::string("\x08\x00\x00", 3), "too short"},
      {"header length beyond file", huge_len, "header length"},
      {"header not JSON", AssembleSafetensors("{not json", ""), "JSON"},
      {"header not an object", AssembleSafetensors("[1, 2]", ""), "JSON object"},
      {"missing dtype", one(R"({"shape":[2,3],"data_offsets":[0,24]})", good_data), "'t'"},
      {"unknown dtype", one(R"({"dtype":"Q4","shape":[2,3],"data_offsets":[0,24]})", good_data),
       "Q4"},
      {"negative dim", one(R"({"dtype":"F32","shape":[-2,3],"data_offsets":[0,24]})", good_data),
       "'t'"},
      {"fractional dim", one(R"({"dtype":"F32","shape":[2.5,3],"data_offsets":[0,24]})",
                             good_data), "'t'"},
      {"offsets not a pair", one(R"({"dtype":"F32","shape":[2,3],"data_offsets":[0]})", good_data),
       "data_offsets"},
      {"offsets beyond data",
       one(R"({"dtype":"F32","shape":[2,3],"data_offsets":[8,32]})", good_data), "outside"},
      {"begin after end", one(R"({"dtype":"F32","shape":[0],"data_offsets":[8,4]})", good_data),
       "outside"},
      {"size mismatch", one(R"({"dtype":"F32","shape":[2,2],"data_offsets":[0,24]})", good_data),
       "needs 16"},
      {"shape overflow",
       one(R"({"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,24]})",
           good_data), "too many"},
      {"overlap", AssembleSafetensors(R"({"u":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},)"
                                      R"("v":{"dtype":"F32","shape":[4],"data_offsets":[8,24]}})",
                                      good_data), "overlap"},
      {"metadata not strings",
       AssembleSafetensors(R"({"__metadata__":{"n":1}})", ""), "__metadata__"},
  };
}

TEST(SafetensorsTest, EveryCorruptionClassIsAClearError) {
  for (const Corruption& c : Corruptions()) {
    auto f = SafetensorsFile::FromBytes(c.image, "bad.safetensors");
    ASSERT_FALSE(f.ok()) << c.what;
    const std::string m(f.status().message());
    EXPECT_TRUE(absl::StrContains(m, "bad.safetensors")) << c.what << ": " << m;
    EXPECT_TRUE(absl::StrContains(m, c.must_mention)) << c.what << ": " << m;
    EXPECT_TRUE(absl::IsInvalidArgument(f.status()) || absl::IsDataLoss(f.status()))
        << c.what << ": " << f.status();
  }
}

TEST(SafetensorsTest, EveryTruncationOfAValidFileFails) {
  const std::string image = ThreeTensors().Build();
  for (size_t n = 0; n < image.size(); ++n) {
    auto f = SafetensorsFile::FromBytes(image.substr(0, n), "cut.safetensors");
    EXPECT_FALSE(f.ok()) << "truncated to " << n << " of " << image.size();
  }
  EXPECT_TRUE(SafetensorsFile::FromBytes(image, "whole").ok());
}

TEST(SafetensorsSetTest, SingleFile) {
  TempFolder dir("st_single");
  WriteFile(dir.path() / "model.safetensors", ThreeTensors().Build());
  WriteFile(dir.path() / "stray.safetensors", "garbage");  // ignored: model.safetensors wins
  auto set = SafetensorsSet::OpenFolder(dir.str());
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_EQ((*set)->num_tensors(), 4u);
  EXPECT_NE((*set)->Find("b.weight"), nullptr);
}

TEST(SafetensorsSetTest, ShardsThroughIndex) {
  TempFolder dir("st_index");
  SafetensorsWriter a, b;
  a.Add({"x", "F32", {2}, Bytes(8, 1)});
  b.Add({"y", "BF16", {2}, Bytes(4, 2)});
  b.Add({"z", "F16", {1}, Bytes(2, 3)});
  WriteFile(dir.path() / "m-1.safetensors", a.Build());
  WriteFile(dir.path() / "m-2.safetensors", b.Build());
  WriteFile(dir.path() / "unrelated.safetensors", "garbage");  // not in the index: not read
  WriteFile(dir.path() / "model.safetensors.index.json",
            R"({"metadata":{},"weight_map":{"x":"m-1.safetensors","y":"m-2.safetensors",)"
            R"("z":"m-2.safetensors"}})");
  auto set = SafetensorsSet::OpenFolder(dir.str());
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_EQ((*set)->files().size(), 2u);
  ASSERT_NE((*set)->Find("y"), nullptr);
  EXPECT_TRUE(absl::StrContains(*(*set)->Find("y")->path, "m-2.safetensors"));

  // The index maps a tensor to a shard that does not hold it.
  WriteFile(dir.path() / "model.safetensors.index.json",
            R"({"weight_map":{"x":"m-2.safetensors","y":"m-2.safetensors"}})");
  auto wrong = SafetensorsSet::OpenFolder(dir.str());
  ASSERT_FALSE(wrong.ok());
  EXPECT_TRUE(absl::StrContains(wrong.status().message(), "'x'")) << wrong.status();

  // The index names a shard that does not exist.
  WriteFile(dir.path() / "model.safetensors.index.json",
            R"({"weight_map":{"x":"m-9.safetensors"}})");
  auto missing = SafetensorsSet::OpenFolder(dir.str());
  ASSERT_FALSE(missing.ok());
  EXPECT_TRUE(absl::StrContains(missing.status().message(), "m-9.safetensors"));

  // The index escapes the folder.
  WriteFile(dir.path() / "model.safetensors.index.json",
            R"({"weight_map":{"x":"../m-1.safetensors"}})");
  EXPECT_FALSE(SafetensorsSet::OpenFolder(dir.str()).ok());

  WriteFile(dir.path() / "model.safetensors.index.json", R"({"weights":{}})");
  auto bad = SafetensorsSet::OpenFolder(dir.str());
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(absl::StrContains(bad.status().message(), "weight_map"));
}

TEST(SafetensorsSetTest, BareShardsAndDuplicates) {
  TempFolder dir("st_bare");
  SafetensorsWriter a, b;
  a.Add({"x", "F32", {2}, Bytes(8, 1)});
  b.Add({"y", "F32", {2}, Bytes(8, 2)});
  WriteFile(dir.path() / "a.safetensors", a.Build());
  WriteFile(dir.path() / "b.safetensors", b.Build());
  auto set = SafetensorsSet::OpenFolder(dir.str());
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_NE((*set)->Find("x"), nullptr);
  EXPECT_NE((*set)->Find("y"), nullptr);

  WriteFile(dir.path() / "c.safetensors", a.Build());  // "x" again
  auto dup = SafetensorsSet::OpenFolder(dir.str());
  ASSERT_FALSE(dup.ok());
  EXPECT_TRUE(absl::StrContains(dup.status().message(), "'x'")) << dup.status();
}

TEST(SafetensorsSetTest, EmptyFolderIsNotFound) {
  TempFolder dir("st_empty");
  auto set = SafetensorsSet::OpenFolder(dir.str());
  EXPECT_TRUE(absl::IsNotFound(set.status())) << set.status();
}

}  // namespace
}  // namespace witcert
