#include "tilefuse/runtime/DiskCache.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <stdexcept>
#include <vector>

namespace tilefuse::runtime {
namespace {

constexpr char kMagic[] = "TFC1";
// A kernel entry: this tag, the byte lengths of the spec and the PTX (8 bytes each),
// then the spec's JSON, the PTX and the image.
constexpr char kKernelMagic[] = "TFK1";

// FNV-1a 64: detects truncation and bit rot; keys come from the caller's hash.
uint64_t checksum(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

bool validKey(const std::string& k) {
  if (k.empty() || k.size() > 128) return false;
  for (char c : k)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-' && c != '.') return false;
  return true;
}

}  // namespace

std::string defaultCacheDir() {
  if (const char* d = std::getenv("TILEFUSE_CACHE_DIR"); d && *d) return d;
  const char* home = std::getenv("HOME");
  return std::string(home ? home : "/tmp") + "/.cache/tilefuse";
}

uint64_t defaultCacheMaxBytes() {
  const char* v = std::getenv("TILEFUSE_CACHE_MAX_BYTES");
  if (!v || !*v) return uint64_t(1) << 30;
  std::string s(v);
  size_t digits = 0;
  while (digits < s.size() && std::isdigit(static_cast<unsigned char>(s[digits]))) ++digits;
  int shift = -1;
  if (digits == s.size())
    shift = 0;
  else if (digits + 1 == s.size())
    shift = s[digits] == 'K' ? 10 : s[digits] == 'M' ? 20 : s[digits] == 'G' ? 30 : -1;
  // At most 18 digits: the count itself fits in 64 bits; the suffix must not carry it out.
  uint64_t n = digits == 0 || digits > 18 || shift < 0 ? 0 : std::stoull(s.substr(0, digits));
  if (digits == 0 || digits > 18 || shift < 0 || n > (UINT64_MAX >> shift))
    throw std::invalid_argument("TILEFUSE_CACHE_MAX_BYTES='" + s +
                                "' is not a byte count (an integer, optionally followed by K, M or G)");
  return n << shift;
}

std::string DiskCache::path(const std::string& key) const {
  if (!validKey(key)) throw std::invalid_argument("invalid cache key '" + key + "'");
  return dir_ + "/" + key.substr(0, 2) + "/" + key;
}

namespace {
// The bytes of the regular file at `p`, or nothing. Opened without blocking and checked
// before reading: an entry replaced by a FIFO or a device must be a miss, not a hang.
std::optional<std::string> readRegular(const std::string& p) {
  int fd = ::open(p.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  struct stat st {};
  std::string all;
  bool ok = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
  if (ok) {
    all.resize(static_cast<size_t>(st.st_size));
    size_t got = 0;
    while (got < all.size()) {
      ssize_t n = ::read(fd, all.data() + got, all.size() - got);
      if (n <= 0) break;
      got += static_cast<size_t>(n);
    }
    ok = got == all.size();
  }
  ::close(fd);
  if (!ok) return std::nullopt;
  return all;
}
}  // namespace

std::optional<std::string> DiskCache::get(const std::string& key) const {
  std::string p = path(key);
  std::optional<std::string> file = readRegular(p);
  if (!file) return std::nullopt;
  ::utimensat(AT_FDCWD, p.c_str(), nullptr, 0);  // recently used (a read-only cache stays as is)
  std::string& all = *file;
  const size_t header = 4 + 8 + 8;
  if (all.size() < header || all.compare(0, 4, kMagic) != 0) return std::nullopt;
  uint64_t size, sum;
  std::memcpy(&size, all.data() + 4, 8);
  std::memcpy(&sum, all.data() + 12, 8);
  std::string data = all.substr(header);
  if (data.size() != size || checksum(data) != sum) return std::nullopt;
  return data;
}

void DiskCache::put(const std::string& key, const std::string& data) const {
  std::string final = path(key);
  std::filesystem::create_directories(std::filesystem::path(final).parent_path());
  // Unique across processes (pid), threads and calls (the counter), and runs (the seed).
  static const uint64_t seed = std::random_device{}();
  static std::atomic<uint64_t> counter{0};
  std::string tmp = final + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(seed) + "." +
                    std::to_string(counter.fetch_add(1));
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw std::runtime_error("cannot write the kernel cache at " + tmp);
    uint64_t size = data.size(), sum = checksum(data);
    out.write(kMagic, 4);
    out.write(reinterpret_cast<const char*>(&size), 8);
    out.write(reinterpret_cast<const char*>(&sum), 8);
    out.write(data.data(), static_cast<std::streamsize>(data.size()));
    if (!out.flush()) throw std::runtime_error("cannot write the kernel cache at " + tmp);
  }
  std::filesystem::rename(tmp, final);  // atomic on POSIX within one filesystem
  evict(final);
}

void DiskCache::evict(const std::string& keep) const {
  if (maxBytes_ == 0) return;  // unbounded
  namespace fs = std::filesystem;
  struct File {
    fs::path path;
    uint64_t bytes;
    fs::file_time_type used;
  };
  std::vector<File> files;
  uint64_t total = 0;
  const auto staleTemp = fs::file_time_type::clock::now() - std::chrono::hours(1);
  std::error_code ec;
  fs::recursive_directory_iterator it(dir_, fs::directory_options::skip_permission_denied, ec), end;
  for (; !ec && it != end; it.increment(ec)) {
    std::error_code fe;
    if (!it->is_regular_file(fe) || fe) continue;  // directories, FIFOs, links: not entries
    uint64_t bytes = it->file_size(fe);
    fs::file_time_type used = it->last_write_time(fe);
    if (fe) continue;  // removed meanwhile
    std::string name = it->path().filename().string();
    if (name.find(".tmp") != std::string::npos) {
      // Another writer's file in flight is left alone; a killed writer's is removed.
      if (used < staleTemp)
        fs::remove(it->path(), fe);
      else
        total += bytes;
      continue;
    }
    total += bytes;
    if (it->path() != fs::path(keep)) files.push_back({it->path(), bytes, used});
  }
  if (total <= maxBytes_) return;
  const uint64_t target = maxBytes_ / 10 * 9;
  std::sort(files.begin(), files.end(), [](const File& a, const File& b) { return a.used < b.used; });
  for (const File& f : files) {
    if (total <= target) break;
    std::error_code fe;
    if (fs::remove(f.path, fe) || !fs::exists(f.path, fe)) total -= f.bytes;  // gone either way
  }
}

std::optional<CachedKernel> DiskCache::getKernel(const std::string& key) const {
  std::optional<std::string> data = get(key);
  const size_t header = 4 + 8 + 8;
  if (!data || data->size() < header || data->compare(0, 4, kKernelMagic) != 0) return std::nullopt;
  uint64_t specBytes, ptxBytes;
  std::memcpy(&specBytes, data->data() + 4, 8);
  std::memcpy(&ptxBytes, data->data() + 12, 8);
  if (specBytes > data->size() - header || ptxBytes > data->size() - header - specBytes) return std::nullopt;
  CachedKernel k;
  try {
    k.spec = launchSpecFromJson(std::string_view(*data).substr(header, specBytes));
  } catch (const std::exception&) {  // a payload that passed the checksum but does not parse
    return std::nullopt;
  }
  k.ptx = data->substr(header + specBytes, ptxBytes);
  k.image = data->substr(header + specBytes + ptxBytes);
  return k;
}

void DiskCache::putKernel(const std::string& key, const CachedKernel& k) const {
  std::string spec = toJson(k.spec);
  uint64_t specBytes = spec.size(), ptxBytes = k.ptx.size();
  std::string data(kKernelMagic, 4);
  data.append(reinterpret_cast<const char*>(&specBytes), 8);
  data.append(reinterpret_cast<const char*>(&ptxBytes), 8);
  put(key, data + spec + k.ptx + k.image);
}

}  // namespace tilefuse::runtime
