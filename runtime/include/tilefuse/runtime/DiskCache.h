// A content-addressed on-disk cache of compiled kernels. Entries are written to
// a temporary file and renamed into place, so concurrent writers and killed
// processes never leave a partial entry; each entry carries a checksum, and a
// corrupted entry reads as missing (and is then rebuilt by the caller).
// The cache is bounded: after each put, the least recently used entries (by mtime, which
// a hit refreshes) are deleted until the directory holds at most 90% of max bytes.
#pragma once

#include <cstdint>
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

// $TILEFUSE_CACHE_MAX_BYTES (an integer, optionally followed by K, M or G for powers of
// 1024; 0: unbounded), else 1 GiB. Throws std::invalid_argument naming a malformed value.
uint64_t defaultCacheMaxBytes();

class DiskCache {
 public:
  explicit DiskCache(std::string dir = defaultCacheDir(), uint64_t maxBytes = defaultCacheMaxBytes())
      : dir_(std::move(dir)), maxBytes_(maxBytes) {}
  std::optional<std::string> get(const std::string& key) const;
  void put(const std::string& key, const std::string& data) const;
  // An entry putKernel wrote; nullopt when missing, corrupted or of an older format.
  std::optional<CachedKernel> getKernel(const std::string& key) const;
  void putKernel(const std::string& key, const CachedKernel& k) const;
  const std::string& dir() const { return dir_; }
  uint64_t maxBytes() const { return maxBytes_; }
  // Deletes least recently used files (entries, autotune decisions, temporaries older than
  // an hour) until the directory holds at most 90% of maxBytes; never `keep`. Concurrent
  // evictions are safe: a file another process removed first is skipped.
  void evict(const std::string& keep = "") const;

 private:
  std::string path(const std::string& key) const;
  std::string dir_;
  uint64_t maxBytes_;
};

}  // namespace tilefuse::runtime
