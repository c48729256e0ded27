#include "engine/common/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace witcert {

absl::StatusOr<FileMapping> MapFileReadOnly(const std::string& path) {
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
  FileMapping mapping;
  mapping.size = static_cast<size_t>(st.st_size);
  if (mapping.size > 0) {
    void* m = mmap(nullptr, mapping.size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      return absl::Status(absl::ErrnoToStatusCode(err),
                          absl::StrCat(path, ": mmap failed: ", std::strerror(err)));
    }
    mapping.data = m;
  }
  ::close(fd);  // the mapping keeps the file alive
  return mapping;
}

}  // namespace witcert
