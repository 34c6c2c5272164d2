// File-system helpers for the capture writer: atomic writes (temp + rename) that
// report errno with the path, a byte budget that simulates ENOSPC
// (KERNCAP_FAULT_ENOSPC_AFTER), and recursive removal of an aborted capture.
#pragma once
#include <atomic>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace kc {

// A failed write/rename/mkdir; `err` is the errno value.
class IoError : public std::runtime_error {
 public:
  IoError(const std::string& what_failed, const std::string& path, int err);
  std::string path;
  int err;
};

// Counts bytes written; once `limit` is exceeded every write fails with ENOSPC.
// limit < 0: no limit (the default).
struct WriteBudget {
  std::atomic<int64_t> written{0};
  int64_t limit = -1;
  // Throws IoError(ENOSPC) when `n` more bytes would exceed the limit.
  void charge(size_t n, const std::string& path);
};

// Writes `size` bytes to `path` atomically: `path`.tmp.<pid> then rename.
// Throws IoError naming the file on any failure (the temp file is removed).
void write_file_atomic(const std::string& path, const void* data, size_t size, WriteBudget* budget = nullptr);
inline void write_file_atomic(const std::string& path, const std::string& s, WriteBudget* budget = nullptr) {
  write_file_atomic(path, s.data(), s.size(), budget);
}
// Reads exactly `size` bytes of `path` into `out`; throws IoError naming the file.
void read_file_exact(const std::string& path, void* out, size_t size);
// mkdir -p for one level (the parent must exist); EEXIST is fine.
void make_dir(const std::string& path);
// rm -rf; best effort (used to drop an aborted capture).
void remove_tree(const std::string& path);
// Joins with a single '/'.
std::string path_join(const std::string& a, const std::string& b);

}  // namespace kc
