// Reads content-addressed chunk payloads (docs/capture-format.md) into device memory.
//
// A few reader threads each own two pinned staging buffers and a stream: read a blob
// file, verify its size and XXH64, then copy it asynchronously to every device
// destination that holds those bytes while the next blob is read into the other buffer.
#pragma once
#include <cuda.h>

#include <string>
#include <vector>

namespace kc::replay {

struct BlobJob {
  std::string hash;                  // 16 lower-case hex digits = the file name
  size_t length = 0;                 // expected bytes
  std::vector<CUdeviceptr> targets;  // device addresses to fill with the blob
  std::string use;                   // "region 3 pre-state chunk 5", for errors
};

// Throws Error("capture", ...) naming the blob file and its use when a payload is
// missing, has the wrong size or does not match its hash.
void load_blobs(CUcontext ctx, const std::string& blob_dir, const std::vector<BlobJob>& jobs, int threads);

}  // namespace kc::replay
