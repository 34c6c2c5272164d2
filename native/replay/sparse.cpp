#include "sparse.hpp"

#include <algorithm>

namespace kc::replay {

void ZeroBacking::make(Chunk& c, size_t size) {
  CUmemAllocationProp prop = {};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = dev_;
  CUmemAccessDesc rw = {};
  rw.location = prop.location;
  rw.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  const std::string what = "the zero chunk of sparse regions (" + format_bytes(size) + ")";
  c.size = size;
  KC_CHECK(cuMemCreate, (&c.handle, size, &prop, 0), what);
  // Physical memory is not zeroed by the driver: map it once read-write, here (after
  // the spans were reserved: anywhere is fine), and clear it.
  KC_CHECK(cuMemAddressReserve, (&c.view, size, granularity_, 0, 0), what);
  KC_CHECK(cuMemMap, (c.view, size, 0, c.handle, 0), what);
  c.view_mapped = true;
  KC_CHECK(cuMemSetAccess, (c.view, size, &rw, 1), what);
  KC_CHECK(cuMemsetD8, (c.view, 0, size), what);
  KC_CHECK(cuCtxSynchronize, (), what);
}

ZeroBacking::ZeroBacking(CUdevice dev, size_t granularity, size_t chunk,
                         const std::vector<std::pair<unsigned long long, unsigned long long>>& ranges)
    : dev_(dev), granularity_(granularity) {
  if (!granularity || chunk % granularity)
    throw Error("input", "zero chunk of " + format_bytes(chunk) + " is not a multiple of the allocation granularity " +
                             format_bytes(granularity));
  CUmemAccessDesc rw = {};
  rw.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  rw.location.id = dev;
  rw.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  try {
    make(big_, chunk);
    for (const auto& [base, size] : ranges) {
      if (size % granularity)
        throw Error("input", "zero-backed pages " + describe_range(base, size) + " are not a whole number of " +
                                 format_bytes(granularity) + " granules");
      for (unsigned long long at = base; at < base + size;) {
        // Whole chunks first; a tail shorter than the chunk takes the granule chunk, once
        // per granule (the driver maps an allocation only whole).
        const bool whole = base + size - at >= chunk;
        if (!whole && !small_.handle) make(small_, granularity);
        const Chunk& c = whole ? big_ : small_;
        KC_CHECK(cuMemMap, (CUdeviceptr(at), c.size, 0, c.handle, 0), "zero-backed pages " + describe_range(at, c.size));
        mapped_.emplace_back(CUdeviceptr(at), c.size);
        at += c.size;
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
  for (const Chunk* c : {&big_, &small_})
    if (c->view_mapped)
      KC_CHECK(cuMemsetD8Async, (c->view, 0, c->size, stream), "clearing the zero chunk of sparse regions");
}

std::string ZeroBacking::note() const {
  std::string n = format_bytes(bytes_) + " of never-written zeros backed by one " + format_bytes(big_.size) +
                  " chunk" + (small_.handle ? " (and one " + format_bytes(small_.size) + " chunk for tails)" : "") +
                  " mapped " + std::to_string(mapped_.size()) + " times";
  if (read_only_) return n + ", read-only: a write there faults";
  return n + ", read-write (the driver refused read-only access: " + refused_ +
         "): the chunk is checked after every run";
}

void ZeroBacking::release() noexcept {
  for (const auto& [at, n] : mapped_) release_quietly([&] { KC_CU(cuMemUnmap)(at, n); });
  mapped_.clear();
  for (Chunk* c : {&big_, &small_}) {
    if (c->view_mapped) release_quietly([&] { KC_CU(cuMemUnmap)(c->view, c->size); });
    c->view_mapped = false;
    if (c->view) release_quietly([&] { KC_CU(cuMemAddressFree)(c->view, c->size); });
    c->view = 0;
    if (c->handle) release_quietly([&] { KC_CU(cuMemRelease)(c->handle); });
    c->handle = 0;
  }
}

ZeroBacking::~ZeroBacking() { release(); }

}  // namespace kc::replay
