#include "engine/model/safetensors.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/common/mapped_file.h"
#include "absl/strings/str_join.h"
#include "engine/common/status.h"
#include "nlohmann/json.hpp"

namespace witcert {
namespace {

struct DtypeEntry {
  std::string_view name;
  SafetensorsDtype dtype;
  size_t size;
};

constexpr DtypeEntry kDtypes[] = {
    {"F32", SafetensorsDtype::kF32, 4},        {"F16", SafetensorsDtype::kF16, 2},
    {"BF16", SafetensorsDtype::kBF16, 2},      {"F64", SafetensorsDtype::kF64, 8},
    {"I64", SafetensorsDtype::kI64, 8},        {"I32", SafetensorsDtype::kI32, 4},
    {"I16", SafetensorsDtype::kI16, 2},        {"I8", SafetensorsDtype::kI8, 1},
    {"U64", SafetensorsDtype::kU64, 8},        {"U32", SafetensorsDtype::kU32, 4},
    {"U16", SafetensorsDtype::kU16, 2},        {"U8", SafetensorsDtype::kU8, 1},
    {"BOOL", SafetensorsDtype::kBool, 1},      {"F8_E4M3", SafetensorsDtype::kF8E4M3, 1},
    {"F8_E5M2", SafetensorsDtype::kF8E5M2, 1},
};

absl::string_view Av(std::string_view s) { return absl::string_view(s.data(), s.size()); }

// Headers larger than this are not a checkpoint (the format's own reference caps at 100 MB).
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;
// Element counts above 2^48 cannot be a tensor we could map; the bound keeps the size
// product far from uint64 overflow.
constexpr uint64_t kMaxElements = 1ull << 48;

absl::StatusOr<std::string> ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

std::string_view SafetensorsDtypeName(SafetensorsDtype dtype) {
  for (const DtypeEntry& e : kDtypes) {
    if (e.dtype == dtype) return e.name;
  }
  return "?";
}

size_t SafetensorsDtypeSize(SafetensorsDtype dtype) {
  for (const DtypeEntry& e : kDtypes) {
    if (e.dtype == dtype) return e.size;
  }
  return 0;
}

int64_t SafetensorsTensor::num_elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

absl::Status RequireFloat(const SafetensorsTensor& t) {
  if (t.dtype == SafetensorsDtype::kF32 || t.dtype == SafetensorsDtype::kF16 ||
      t.dtype == SafetensorsDtype::kBF16) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      t.path != nullptr ? *t.path : std::string("safetensors"), ": tensor '", t.name,
      "' has dtype ", Av(SafetensorsDtypeName(t.dtype)), "; supported: F32, F16, BF16"));
}

absl::StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(const std::string& path) {
  ASSIGN_OR_RETURN(FileBytes bytes, FileBytes::Map(path));
  return Load(path, std::move(bytes));
}

absl::StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::FromBytes(
    std::string_view bytes, std::string name) {
  return Load(std::move(name), FileBytes::Copy(bytes));
}

absl::StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Load(std::string path,
                                                                       FileBytes bytes) {
  std::unique_ptr<SafetensorsFile> file(new SafetensorsFile(std::move(path), std::move(bytes)));
  RETURN_IF_ERROR(file->Parse());
  return file;
}

const SafetensorsTensor* SafetensorsFile::Find(std::string_view name) const {
  auto it = index_.find(absl::string_view(name.data(), name.size()));
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

absl::Status SafetensorsFile::Parse() {
  const uint8_t* base = bytes_.data();
  const size_t size = bytes_.size();
  if (size < 8) {
    return absl::DataLossError(
        absl::StrCat(path_, ": ", size, " bytes is too short for a safetensors header length"));
  }
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | base[i];  // little-endian
  if (header_len > size - 8 || header_len > kMaxHeaderBytes) {
    return absl::DataLossError(absl::StrCat(path_, ": header length ", header_len,
                                            " exceeds the file (", size - 8,
                                            " bytes after the length field)"));
  }
  const char* header = reinterpret_cast<const char*>(base + 8);
  nlohmann::json j = nlohmann::json::parse(header, header + header_len, nullptr,
                                           /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path_, ": header is not a JSON object (", header_len, " bytes)"));
  }
  const uint8_t* data = base + 8 + header_len;
  const uint64_t data_size = size - 8 - header_len;

  struct Span {
    uint64_t begin, end;
    size_t tensor;
  };
  std::vector<Span> spans;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& name = it.key();
    const nlohmann::json& v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object()) {
        return absl::InvalidArgumentError(absl::StrCat(path_, ": __metadata__ is not an object"));
      }
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string()) {
          return absl::InvalidArgumentError(
              absl::StrCat(path_, ": __metadata__ value '", m.key(), "' is not a string"));
        }
        metadata_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    const std::string where = absl::StrCat(path_, ": tensor '", name, "'");
    if (!v.is_object() || !v.contains("dtype") || !v.contains("shape") ||
        !v.contains("data_offsets")) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, " needs an object with dtype, shape and data_offsets"));
    }
    SafetensorsTensor t;
    t.name = name;
    t.path = &path_;
    const nlohmann::json& dtype = v["dtype"];
    const DtypeEntry* entry = nullptr;
    if (dtype.is_string()) {
      const std::string s = dtype.get<std::string>();
      for (const DtypeEntry& e : kDtypes) {
        if (e.name == s) entry = &e;
      }
    }
    if (entry == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(where, " has unknown dtype ", dtype.dump()));
    }
    t.dtype = entry->dtype;
    const nlohmann::json& shape = v["shape"];
    if (!shape.is_array()) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": shape is not an array"));
    }
    uint64_t elements = 1;
    for (const nlohmann::json& d : shape) {
      if (!d.is_number_unsigned()) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ": shape ", shape.dump(), " has a non-natural dimension"));
      }
      const uint64_t dim = d.get<uint64_t>();
      if (dim != 0 && elements > kMaxElements / dim) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ": shape ", shape.dump(), " has too many elements"));
      }
      elements *= dim;
      t.shape.push_back(static_cast<int64_t>(dim));
    }
    const nlohmann::json& offsets = v["data_offsets"];
    if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
        !offsets[1].is_number_unsigned()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": data_offsets ", offsets.dump(), " is not [begin, end]"));
    }
    const uint64_t begin = offsets[0].get<uint64_t>(), end = offsets[1].get<uint64_t>();
    if (begin > end || end > data_size) {
      return absl::DataLossError(absl::StrCat(where, ": data_offsets [", begin, ", ", end,
                                              "] fall outside the data section of ", data_size,
                                              " bytes"));
    }
    const uint64_t expected = elements * entry->size;
    if (end - begin != expected) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": holds ", end - begin, " bytes but shape ", shape.dump(), " of ",
          Av(entry->name), " needs ", expected));
    }
    t.data = data + begin;
    t.size_bytes = expected;
    spans.push_back({begin, end, tensors_.size()});
    index_[name] = tensors_.size();
    tensors_.push_back(std::move(t));
  }
  std::sort(spans.begin(), spans.end(),
            [](const Span& a, const Span& b) { return a.begin < b.begin; });
  for (size_t i = 1; i < spans.size(); ++i) {
    if (spans[i].begin < spans[i - 1].end) {
      return absl::InvalidArgumentError(absl::StrCat(
          path_, ": tensors '", tensors_[spans[i - 1].tensor].name, "' and '",
          tensors_[spans[i].tensor].name, "' overlap in the data section"));
    }
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------

const SafetensorsTensor* SafetensorsSet::Find(std::string_view name) const {
  auto it = by_name_.find(absl::string_view(name.data(), name.size()));
  return it == by_name_.end() ? nullptr : it->second;
}

absl::Status SafetensorsSet::AddFile(std::unique_ptr<SafetensorsFile> file) {
  for (const SafetensorsTensor& t : file->tensors()) {
    auto [it, inserted] = by_name_.try_emplace(t.name, &t);
    if (!inserted) {
      return absl::InvalidArgumentError(absl::StrCat("tensor '", t.name, "' is in both ",
                                                     *it->second->path, " and ", file->path()));
    }
  }
  files_.push_back(std::move(file));
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<SafetensorsSet>> SafetensorsSet::OpenFolder(
    const std::string& folder) {
  namespace fs = std::filesystem;
  auto set = std::make_unique<SafetensorsSet>();
  set->folder_ = folder;
  const fs::path dir(folder);
  const fs::path index_path = dir / "model.safetensors.index.json";
  std::error_code ec;
  if (fs::exists(index_path, ec)) {
    ASSIGN_OR_RETURN(std::string text, ReadWholeFile(index_path.string()));
    nlohmann::json index = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (index.is_discarded() || !index.is_object() || !index.contains("weight_map") ||
        !index["weight_map"].is_object()) {
      return absl::InvalidArgumentError(
          absl::StrCat(index_path.string(), ": not JSON with a \"weight_map\" object"));
    }
    std::vector<std::string> shards;
    for (auto it = index["weight_map"].begin(); it != index["weight_map"].end(); ++it) {
      if (!it.value().is_string()) {
        return absl::InvalidArgumentError(absl::StrCat(
            index_path.string(), ": weight_map entry '", it.key(), "' is not a file name"));
      }
      const std::string shard = it.value().get<std::string>();
      if (shard.empty() || shard.front() == '/' || shard.find("..") != std::string::npos) {
        return absl::InvalidArgumentError(absl::StrCat(
            index_path.string(), ": weight_map names shard '", shard, "' outside the folder"));
      }
      if (std::find(shards.begin(), shards.end(), shard) == shards.end()) shards.push_back(shard);
    }
    for (const std::string& shard : shards) {
      ASSIGN_OR_RETURN(auto file, SafetensorsFile::Open((dir / shard).string()));
      RETURN_IF_ERROR(set->AddFile(std::move(file)));
    }
    for (auto it = index["weight_map"].begin(); it != index["weight_map"].end(); ++it) {
      const SafetensorsTensor* t = set->Find(it.key());
      const std::string shard = (dir / it.value().get<std::string>()).string();
      if (t == nullptr || *t->path != shard) {
        return absl::InvalidArgumentError(absl::StrCat(index_path.string(), ": tensor '",
                                                       it.key(), "' is mapped to ", shard,
                                                       " which does not hold it"));
      }
    }
    return set;
  }
  const fs::path single = dir / "model.safetensors";
  if (fs::exists(single, ec)) {
    ASSIGN_OR_RETURN(auto file, SafetensorsFile::Open(single.string()));
    RETURN_IF_ERROR(set->AddFile(std::move(file)));
    return set;
  }
  std::vector<std::string> paths;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->path().extension() == ".safetensors") paths.push_back(it->path().string());
  }
  if (ec) {
    return absl::NotFoundError(absl::StrCat(folder, ": cannot list: ", ec.message()));
  }
  if (paths.empty()) {
    return absl::NotFoundError(absl::StrCat(
        folder, ": no model.safetensors.index.json, model.safetensors or *.safetensors"));
  }
  std::sort(paths.begin(), paths.end());
  for (const std::string& p : paths) {
    ASSIGN_OR_RETURN(auto file, SafetensorsFile::Open(p));
    RETURN_IF_ERROR(set->AddFile(std::move(file)));
  }
  return set;
}

}  // namespace witcert
