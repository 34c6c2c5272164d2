#include "sparse.hpp"

#include <algorithm>

namespace kc::replay {

ZeroBacking::ZeroBacking(CUdevice dev, size_t granularity, size_t chunk,
                         const std::vector<std::pair<unsigned long long, unsigned long long>>& ranges)
    : chunk_(chunk) {
  if (!granularity || chunk % granularity)
    throw Error("input", "zero chunk of " + format_bytes(chunk) + " is not a multiple of the allocation granularity " +
                             format_bytes(granularity));
  CUmemAllocationProp prop = {};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = dev;
  CUmemAccessDesc rw = {};
  rw.location = prop.location;
  rw.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  const std::string what = "the zero chunk of sparse regions (" + format_bytes(chunk) + ")";
  try {
    KC_CHECK(cuMemCreate, (&handle_, chunk, &prop, 0), what);
    // Physical memory is not zeroed by the driver: map it once read-write, here (after
    // the spans were reserved: anywhere is fine), and clear it.
    KC_CHECK(cuMemAddressReserve, (&view_, chunk, granularity, 0, 0), what);
    KC_CHECK(cuMemMap, (view_, chunk, 0, handle_, 0), what);
    view_mapped_ = true;
    KC_CHECK(cuMemSetAccess, (view_, chunk, &rw, 1), what);
    KC_CHECK(cuMemsetD8, (view_, 0, chunk), what);
    KC_CHECK(cuCtxSynchronize, (), what);
    for (const auto& [base, size] : ranges) {
      for (unsigned long long at = base; at < base + size;) {
        const size_t n = size_t(std::min<unsigned long long>(chunk, base + size - at));
        KC_CHECK(cuMemMap, (CUdeviceptr(at), n, 0, handle_, 0), "zero-backed pages " + describe_range(at, n));
        mapped_.emplace_back(CUdeviceptr(at), n);
        at += n;
      }
      bytes_ += size;
    }
    CUmemAccessDesc ro = rw;
    ro.flags = CU_MEM_ACCESS_FLAGS_PROT_READ;
    // One call per contiguous range, whatever the number of mappings in it.
    for (const auto& [base, size] : ranges) {
      const CUresult r = KC_CU(cuMemSetAccess)(CUdeviceptr(base), size, &ro, 1);
      if (r == CUDA_SUCCESS) continue;
      refused_ = cu_error_string(r);
      read_only_ = false;
      break;
    }
    if (!read_only_)  // one mode for every range
      for (const auto& [base, size] : ranges)
        KC_CHECK(cuMemSetAccess, (CUdeviceptr(base), size, &rw, 1), "zero-backed pages " + describe_range(base, size));
  } catch (...) {
    release();
    throw;
  }
}

void ZeroBacking::clear(CUstream stream) {
  KC_CHECK(cuMemsetD8Async, (view_, 0, chunk_, stream), "clearing the zero chunk of sparse regions");
}

std::string ZeroBacking::note() const {
  std::string n = format_bytes(bytes_) + " of never-written zeros backed by one " + format_bytes(chunk_) +
                  " chunk mapped " + std::to_string(mapped_.size()) + " times";
  if (read_only_) return n + ", read-only: a write there faults";
  return n + ", read-write (the driver refused read-only access: " + refused_ +
         "): the chunk is checked after every run";
}

void ZeroBacking::release() noexcept {
  for (const auto& [at, n] : mapped_) release_quietly([&] { KC_CU(cuMemUnmap)(at, n); });
  mapped_.clear();
  if (view_mapped_) release_quietly([&] { KC_CU(cuMemUnmap)(view_, chunk_); });
  view_mapped_ = false;
  if (view_) release_quietly([&] { KC_CU(cuMemAddressFree)(view_, chunk_); });
  view_ = 0;
  if (handle_) release_quietly([&] { KC_CU(cuMemRelease)(handle_); });
  handle_ = 0;
}

ZeroBacking::~ZeroBacking() { release(); }

}  // namespace kc::replay
