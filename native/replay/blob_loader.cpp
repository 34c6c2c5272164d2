#include "blob_loader.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <exception>
#include <mutex>
#include <thread>

#include "resources.hpp"
#include "xxh64.hpp"

namespace kc::replay {
namespace {

class File {
 public:
  explicit File(const std::string& path) : fd_(::open(path.c_str(), O_RDONLY | O_CLOEXEC)) {}
  ~File() {
    if (fd_ >= 0) ::close(fd_);
  }
  File(const File&) = delete;
  File& operator=(const File&) = delete;
  int fd() const { return fd_; }

 private:
  int fd_;
};

// Reads the whole blob into `dst` (capacity >= job.length) and verifies it.
void read_blob(const std::string& path, const BlobJob& job, unsigned char* dst) {
  const std::string where = "payload " + path + " (" + job.use + ")";
  File f(path);
  if (f.fd() < 0) {
    if (errno == ENOENT) throw Error("capture", where + " is missing");
    throw Error("capture", where + " cannot be opened: " + std::strerror(errno));
  }
  struct stat st {};
  if (::fstat(f.fd(), &st) != 0) throw Error("capture", where + ": fstat failed: " + std::strerror(errno));
  if (static_cast<unsigned long long>(st.st_size) != job.length) {
    throw Error("capture", where + " holds " + std::to_string(st.st_size) + " bytes, expected " +
                               std::to_string(job.length) + " (truncated?)");
  }
  size_t done = 0;
  while (done < job.length) {
    ssize_t n = ::read(f.fd(), dst + done, job.length - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw Error("capture", where + ": read failed: " + std::strerror(errno));
    if (n == 0) throw Error("capture", where + " ended after " + std::to_string(done) + " bytes (truncated?)");
    done += static_cast<size_t>(n);
  }
  if (xxh64_hex(xxh64(dst, job.length)) != job.hash)
    throw Error("capture", where + " does not match its hash (corrupt)");
}

struct Shared {
  Shared(const std::string& dir, const std::vector<BlobJob>& j, size_t staging)
      : blob_dir(dir), jobs(j), staging_size(staging) {}
  const std::string& blob_dir;
  const std::vector<BlobJob>& jobs;
  size_t staging_size;
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  std::mutex mu;
  std::exception_ptr error;
};

// Calls cuStreamSynchronize when leaving the worker, so that no copy still reads a
// staging buffer when it is freed (declared after the buffers: destroyed first).
struct DrainOnExit {
  CUstream s;
  ~DrainOnExit() {
    release_quietly([&] { KC_CU(cuStreamSynchronize)(s); });
  }
};

void worker(CUcontext ctx, Shared& sh) {
  try {
    KC_CHECK(cuCtxSetCurrent, (ctx), "the replay context (blob reader thread)");
    Stream stream("a blob upload stream");
    PinnedBuffer staging[2] = {PinnedBuffer(sh.staging_size, "blob staging"),
                               PinnedBuffer(sh.staging_size, "blob staging")};
    Event done[2];
    bool in_flight[2] = {false, false};
    DrainOnExit drain{stream.get()};
    for (unsigned k = 0; !sh.failed.load(); ++k) {
      size_t i = sh.next.fetch_add(1);
      if (i >= sh.jobs.size()) break;
      const BlobJob& job = sh.jobs[i];
      const unsigned slot = k % 2;
      if (in_flight[slot]) KC_CHECK(cuEventSynchronize, (done[slot].get()), "a blob upload");
      read_blob(sh.blob_dir + "/" + job.hash + ".bin", job, staging[slot].data());
      for (CUdeviceptr dst : job.targets)
        KC_CHECK(cuMemcpyHtoDAsync, (dst, staging[slot].data(), job.length, stream.get()), job.use);
      KC_CHECK(cuEventRecord, (done[slot].get(), stream.get()), job.use);
      in_flight[slot] = true;
    }
    KC_CHECK(cuStreamSynchronize, (stream.get()), "blob uploads");
  } catch (...) {
    std::lock_guard<std::mutex> lock(sh.mu);
    if (!sh.error) sh.error = std::current_exception();
    sh.failed = true;
  }
}

}  // namespace

void load_blobs(CUcontext ctx, const std::string& blob_dir, const std::vector<BlobJob>& jobs, int threads) {
  if (jobs.empty()) return;
  size_t largest = 0;
  for (const BlobJob& j : jobs) largest = std::max(largest, j.length);
  Shared sh(blob_dir, jobs, largest);
  const int n = std::max(1, std::min<int>(threads, static_cast<int>(jobs.size())));
  std::vector<std::thread> pool;
  pool.reserve(n);
  try {
    for (int t = 0; t < n; ++t) pool.emplace_back(worker, ctx, std::ref(sh));
  } catch (...) {  // could not start a thread: stop the others before unwinding
    sh.failed = true;
    for (std::thread& t : pool) t.join();
    throw;
  }
  for (std::thread& t : pool) t.join();
  if (sh.error) std::rethrow_exception(sh.error);
}

}  // namespace kc::replay
