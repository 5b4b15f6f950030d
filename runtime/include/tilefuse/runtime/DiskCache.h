// A content-addressed on-disk cache of compiled kernels. Entries are written to
// a temporary file and renamed into place, so concurrent writers and killed
// processes never leave a partial entry; each entry carries a checksum, and a
// corrupted entry reads as missing (and is then rebuilt by the caller).
#pragma once

#include <optional>
#include <string>

#include "tilefuse/runtime/LaunchSpec.h"

namespace tilefuse::runtime {

// A compiled kernel as one cache entry: its launch spec (stored as JSON), PTX and image.
struct CachedKernel {
  LaunchSpec spec;
  std::string ptx;
  std::string image;  // a cubin, or PTX text for the driver to JIT-compile
};

// $TILEFUSE_CACHE_DIR, else ~/.cache/tilefuse.
std::string defaultCacheDir();

class DiskCache {
 public:
  explicit DiskCache(std::string dir = defaultCacheDir()) : dir_(std::move(dir)) {}
  std::optional<std::string> get(const std::string& key) const;
  void put(const std::string& key, const std::string& data) const;
  // An entry putKernel wrote; nullopt when missing, corrupted or of an older format.
  std::optional<CachedKernel> getKernel(const std::string& key) const;
  void putKernel(const std::string& key, const CachedKernel& k) const;
  const std::string& dir() const { return dir_; }

 private:
  std::string path(const std::string& key) const;
  std::string dir_;
};

}  // namespace tilefuse::runtime
