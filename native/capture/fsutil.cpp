#include "fsutil.hpp"

#include <fcntl.h>
#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace kc {

IoError::IoError(const std::string& what_failed, const std::string& p, int e)
    : std::runtime_error(what_failed + " " + p + ": " + std::strerror(e)), path(p), err(e) {}

void WriteBudget::charge(size_t n, const std::string& path) {
  if (limit < 0) return;
  int64_t before = written.fetch_add(int64_t(n));
  if (before + int64_t(n) > limit) {
    throw IoError("write (KERNCAP_FAULT_ENOSPC_AFTER=" + std::to_string(limit) + " reached)", path, ENOSPC);
  }
}

void write_file_atomic(const std::string& path, const void* data, size_t size, WriteBudget* budget) {
  const std::string tmp = path + ".tmp." + std::to_string(getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw IoError("cannot create", tmp, errno);
  try {
    if (budget) budget->charge(size, path);
    const char* p = static_cast<const char*>(data);
    size_t left = size;
    while (left > 0) {
      ssize_t w = ::write(fd, p, left);
      if (w < 0) {
        if (errno == EINTR) continue;
        throw IoError("cannot write", tmp, errno);
      }
      p += w;
      left -= size_t(w);
    }
    if (::close(fd) != 0) {
      fd = -1;
      throw IoError("cannot close", tmp, errno);
    }
    fd = -1;
    if (::rename(tmp.c_str(), path.c_str()) != 0) throw IoError("cannot rename to " + path + " from", tmp, errno);
  } catch (...) {
    if (fd >= 0) ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
}

void make_dir(const std::string& path) {
  if (::mkdir(path.c_str(), 0755) != 0 && errno != EEXIST) throw IoError("cannot create directory", path, errno);
}

namespace {
int remove_entry(const char* p, const struct stat*, int, struct FTW*) {
  ::remove(p);
  return 0;
}
}  // namespace

void read_file_exact(const std::string& path, void* out, size_t size) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw IoError("cannot open", path, errno);
  size_t got = 0;
  while (got < size) {
    const ssize_t n = ::read(fd, static_cast<char*>(out) + got, size - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : EIO;
      ::close(fd);
      throw IoError("cannot read " + std::to_string(size) + " bytes from", path, err);
    }
    got += size_t(n);
  }
  ::close(fd);
}

void remove_tree(const std::string& path) {
  ::nftw(path.c_str(), remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

std::string path_join(const std::string& a, const std::string& b) {
  if (a.empty()) return b;
  return a.back() == '/' ? a + b : a + "/" + b;
}

}  // namespace kc
