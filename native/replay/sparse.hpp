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
  size_t chunk() const { return chunk_; }
  CUdeviceptr view() const { return view_; }            // the chunk, read-write, at a private address
  // Zeroes the chunk again (read-write fallback: what a stray write left).
  void clear(CUstream stream);
  std::string note() const;

 private:
  void release() noexcept;
  size_t chunk_ = 0;
  CUmemGenericAllocationHandle handle_ = 0;
  CUdeviceptr view_ = 0;  // private reservation holding the chunk once, read-write
  bool view_mapped_ = false;
  std::vector<std::pair<CUdeviceptr, size_t>> mapped_;  // alias mappings
  unsigned long long bytes_ = 0;
  bool read_only_ = true;
  std::string refused_;  // why read-only access was refused
};

}  // namespace kc::replay
