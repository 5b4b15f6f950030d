// A content-addressed on-disk cache of compiled kernels. Entries are written to
// a temporary file and renamed into place, so concurrent writers and killed
// processes never leave a partial entry; each entry carries a checksum, and a
// corrupted entry reads as missing (and is then rebuilt by the caller).
#pragma once

#include <optional>
#include <string>

namespace tilefuse::runtime {

// $TILEFUSE_CACHE_DIR, else ~/.cache/tilefuse.
std::string defaultCacheDir();

class DiskCache {
 public:
  explicit DiskCache(std::string dir = defaultCacheDir()) : dir_(std::move(dir)) {}
  std::optional<std::string> get(const std::string& key) const;
  void put(const std::string& key, const std::string& data) const;
  const std::string& dir() const { return dir_; }

 private:
  std::string path(const std::string& key) const;
  std::string dir_;
};

}  // namespace tilefuse::runtime
