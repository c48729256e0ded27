#include "engine/common/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace witcert {

absl::StatusOr<FileBytes> FileBytes::Map(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    return absl::Status(absl::ErrnoToStatusCode(err),
                        absl::StrCat(path, ": cannot open: ", std::strerror(err)));
  }
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a regular file"));
  }
  FileBytes bytes;
  bytes.size_ = static_cast<size_t>(st.st_size);
  if (bytes.size_ > 0) {
    void* m = mmap(nullptr, bytes.size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      return absl::Status(absl::ErrnoToStatusCode(err),
                          absl::StrCat(path, ": mmap failed: ", std::strerror(err)));
    }
    bytes.mapping_ = m;
  }
  ::close(fd);  // the mapping keeps the file alive
  return bytes;
}

FileBytes FileBytes::Copy(std::string_view bytes) {
  FileBytes copy;
  copy.owned_.assign(bytes.data(), bytes.size());
  copy.size_ = bytes.size();
  return copy;
}

FileBytes::FileBytes(FileBytes&& other) noexcept
    : mapping_(std::exchange(other.mapping_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      owned_(std::move(other.owned_)) {}

FileBytes& FileBytes::operator=(FileBytes&& other) noexcept {
  if (this != &other) {
    if (mapping_ != nullptr) munmap(mapping_, size_);
    mapping_ = std::exchange(other.mapping_, nullptr);
    size_ = std::exchange(other.size_, 0);
    owned_ = std::move(other.owned_);
  }
  return *this;
}

FileBytes::~FileBytes() {
  if (mapping_ != nullptr) munmap(mapping_, size_);
}

const uint8_t* FileBytes::data() const {
  return static_cast<const uint8_t*>(mapping_ != nullptr ? mapping_ : static_cast<const void*>(owned_.data()));
}

}  // namespace witcert
