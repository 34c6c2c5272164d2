#include "blob_store.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "xxh64.hpp"

namespace kc {

bool all_zero(const unsigned char* p, size_t n) {
  size_t i = 0;
  // Head up to 8-byte alignment, then 64 bytes per step with one branch, then the tail.
  while (i < n && (reinterpret_cast<uintptr_t>(p + i) & 7)) if (p[i++]) return false;
  for (; i + 64 <= n; i += 64) {
    uint64_t w[8];
    std::memcpy(w, p + i, 64);
    if ((w[0] | w[1] | w[2] | w[3] | w[4] | w[5] | w[6] | w[7]) != 0) return false;
  }
  for (; i < n; ++i)
    if (p[i]) return false;
  return true;
}

bool BlobStore::put(const unsigned char* data, size_t n, uint64_t* hash) {
  if (all_zero(data, n)) return false;
  const uint64_t h = xxh64(data, n);
  *hash = h;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!known_.insert(h).second) return true;  // stored already (or being stored by another worker)
  }
  write(path_join(dir_, xxh64_hex(h) + ".bin"), data, n, h);
  stored_ += n;
  return true;
}

bool BlobStore::adopt(uint64_t h) {
  const std::string path = path_join(dir_, xxh64_hex(h) + ".bin");
  if (::access(path.c_str(), F_OK) == 0) {
    std::lock_guard<std::mutex> lock(mu_);
    known_.insert(h);
    return true;
  }
  if (pool_.empty()) return false;
  const std::string pooled = path_join(pool_, xxh64_hex(h) + ".bin");
  if (::link(pooled.c_str(), path.c_str()) != 0 && errno != EEXIST) return false;
  std::lock_guard<std::mutex> lock(mu_);
  known_.insert(h);
  return true;
}

void BlobStore::write(const std::string& path, const unsigned char* data, size_t n, uint64_t h) {
  if (!pool_.empty()) {
    const std::string pooled = path_join(pool_, xxh64_hex(h) + ".bin");
    if (::link(pooled.c_str(), path.c_str()) == 0 || errno == EEXIST) return;  // an earlier capture wrote it
    if (errno == ENOENT) {
      write_file_atomic(pooled, data, n, budget_);  // concurrent writers of one blob: same bytes, rename wins
      if (::link(pooled.c_str(), path.c_str()) == 0 || errno == EEXIST) return;
    }
    // No hard links here (another file system, a quota): a plain copy is still correct.
  }
  write_file_atomic(path, data, n, budget_);
}

}  // namespace kc
