// FileBytes (engine/common/mapped_file.h): a mapped file's bytes are the file's, errors name the
// path and say what went wrong, and a move hands the bytes over (the mapping is unmapped once).
#include "engine/common/mapped_file.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>

#include "gtest/gtest.h"

namespace witcert {
namespace {

std::string TempPath(const std::string& name) {
  return (std::filesystem::temp_directory_path() / (name + "." + std::to_string(::getpid()))).string();
}

std::string View(const FileBytes& b) { return std::string(reinterpret_cast<const char*>(b.data()), b.size()); }

TEST(FileBytes, MapReadsTheFilesBytes) {
  const std::string path = TempPath("witcert_mapped_file_test");
  std::string contents(10000, '\0');
  for (size_t i = 0; i < contents.size(); ++i) contents[i] = static_cast<char>(i * 31 + 7);
  std::ofstream(path, std::ios::binary) << contents;
  absl::StatusOr<FileBytes> bytes = FileBytes::Map(path);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  EXPECT_EQ(View(*bytes), contents);
  std::remove(path.c_str());  // the mapping keeps the bytes readable
  EXPECT_EQ(View(*bytes), contents);
}

TEST(FileBytes, MapOfAnEmptyFileHasNoBytes) {
  const std::string path = TempPath("witcert_mapped_file_empty");
  std::ofstream(path, std::ios::binary).flush();
  absl::StatusOr<FileBytes> bytes = FileBytes::Map(path);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  EXPECT_EQ(bytes->size(), 0u);
  std::remove(path.c_str());
}

TEST(FileBytes, MapErrorsNameThePath) {
  const std::string missing = TempPath("witcert_mapped_file_missing");
  absl::StatusOr<FileBytes> none = FileBytes::Map(missing);
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(none.status().message().find(missing), std::string::npos) << none.status();
  const std::string dir = std::filesystem::temp_directory_path().string();
  absl::StatusOr<FileBytes> directory = FileBytes::Map(dir);
  ASSERT_FALSE(directory.ok());
  EXPECT_EQ(directory.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(directory.status().message().find("not a regular file"), std::string::npos) << directory.status();
}

TEST(FileBytes, MovesHandTheBytesOver) {
  const std::string path = TempPath("witcert_mapped_file_move");
  std::ofstream(path, std::ios::binary) << "mapped bytes";
  absl::StatusOr<FileBytes> mapped = FileBytes::Map(path);
  ASSERT_TRUE(mapped.ok()) << mapped.status();
  std::remove(path.c_str());
  FileBytes a = std::move(*mapped);
  EXPECT_EQ(mapped->size(), 0u);
  EXPECT_EQ(View(a), "mapped bytes");
  // A short copy lives in the string's own storage: its address moves with it.
  FileBytes b = FileBytes::Copy("copied");
  FileBytes c = std::move(b);
  EXPECT_EQ(b.size(), 0u);
  EXPECT_EQ(View(c), "copied");
  // Assignment over a mapping releases it and takes the other's bytes.
  a = std::move(c);
  EXPECT_EQ(View(a), "copied");
  a = FileBytes::Copy(std::string(5000, 'x'));
  EXPECT_EQ(View(a), std::string(5000, 'x'));
}

}  // namespace
}  // namespace witcert
