// The never-written zeros of a huge, mostly empty region (a JAX BFC arena, a vLLM-style
// KV cache: 100+ GiB reserved, a few hundred MiB ever holding data), backed without
// spending device memory on them (docs/replay.md, "Sparse regions").
//
// One physical chunk of zeros is mapped at every chunk-sized piece of those ranges
// (virtual aliasing; measured on the H200: 100 GiB with a 64 MiB chunk, 1,600 mappings,
// 0.05 s), read-only, so that a write there faults and is named instead of changing
// every alias at once. The captured kernel never changed those bytes; a variant that
// writes there writes outside what the captured kernel wrote. Where the driver refuses
// read-only access the ranges are mapped read-write and checked after every run
// instead (dirty() counts the bytes of the chunk no longer zero).
//
// cuMemMap maps a physical allocation whole: mapping the first 60 MiB of a 64 MiB chunk
// fails with CUDA_ERROR_NOT_SUPPORTED (seen on the H200, driver 580.159). So a range's
// tail shorter than the chunk is backed by a second chunk of one granule, mapped once per
// granule there.
#pragma once
#include <cuda.h>

#include <string>
#include <utility>
#include <vector>

#include "resources.hpp"

namespace kc::replay {

class ZeroBacking {
 public:
  // Maps `ranges` (granularity-aligned, inside reserved spans) to one zero chunk of
  // `chunk` bytes (a multiple of the granularity). Throws CudaError naming the range.
  ZeroBacking(CUdevice dev, size_t granularity, size_t chunk,
              const std::vector<std::pair<unsigned long long, unsigned long long>>& ranges);
  ~ZeroBacking();
  ZeroBacking(const ZeroBacking&) = delete;
  ZeroBacking& operator=(const ZeroBacking&) = delete;

  bool read_only() const { return read_only_; }
  unsigned long long bytes() const { return bytes_; }   // backed by the alias
  size_t mappings() const { return mapped_.size(); }
  size_t chunk() const { return big_.size; }
  CUdeviceptr view() const { return big_.view; }        // the chunk, read-write, at a private address
  // The granule-sized chunk behind range tails (0 when no tail needed one).
  CUdeviceptr small_view() const { return small_.view; }
  size_t small_chunk() const { return small_.size; }
  // Zeroes the chunks again (read-write fallback: what a stray write left).
  void clear(CUstream stream);
  std::string note() const;

 private:
  // One physical chunk of zeros and its private read-write view.
  struct Chunk {
    size_t size = 0;
    CUmemGenericAllocationHandle handle = 0;
    CUdeviceptr view = 0;
    bool view_mapped = false;
  };
  void make(Chunk& c, size_t size);
  void release() noexcept;
  CUdevice dev_ = 0;
  size_t granularity_ = 0;
  Chunk big_, small_;
  std::vector<std::pair<CUdeviceptr, size_t>> mapped_;  // alias mappings
  unsigned long long bytes_ = 0;
  bool read_only_ = true;
  std::string refused_;  // why read-only access was refused
};

}  // namespace kc::replay
