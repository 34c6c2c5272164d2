// Memory kinds and module loads (memory_kinds.hpp): the driver calls that make or free
// memory kerncap snapshots, each with its handler, and the loads whose cubins it keeps.
// Called at a watched call's exit, for successful calls only.
#include "inject_state.hpp"
#include "memory_kinds.hpp"

namespace kc {
namespace inject {
namespace {

bool per_thread(CUpti_CallbackId cbid) {
  return cbid == CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync_ptsz ||
         cbid == CUPTI_DRIVER_TRACE_CBID_cuMemAllocFromPoolAsync_ptsz ||
         cbid == CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync_ptsz;
}

void device_alloc(State& s, CUpti_CallbackId, const cuMemAlloc_v2_params* a, CUcontext ctx) {
  s.mem.on_alloc(*a->dptr, a->bytesize, "cuMemAlloc_v2", "device", ctx);
}
void pitched_alloc(State& s, CUpti_CallbackId, const cuMemAllocPitch_v2_params* a, CUcontext ctx) {
  s.mem.on_alloc(*a->dptr, uint64_t(*a->pPitch) * a->Height, "cuMemAllocPitch_v2", "device", ctx);
}
void managed_alloc(State& s, CUpti_CallbackId, const cuMemAllocManaged_params* a, CUcontext ctx) {
  s.mem.on_alloc(*a->dptr, a->bytesize, "cuMemAllocManaged", "managed", ctx);
}
// Stream-ordered allocations made while the stream is being captured become the
// graph's allocation nodes: their address lives as long as the graph ("graph").
template <class P>
void async_alloc(State& s, CUpti_CallbackId cbid, const P* a, CUcontext ctx) {
  const bool graph = in_stream_capture(s, a->hStream, per_thread(cbid));
  s.mem.on_alloc(*a->dptr, a->bytesize, "cuMemAllocAsync", graph ? "graph" : "async", ctx);
}
template <class P>
void pool_alloc(State& s, CUpti_CallbackId cbid, const P* a, CUcontext ctx) {
  const bool graph = in_stream_capture(s, a->hStream, per_thread(cbid));
  s.mem.on_alloc(*a->dptr, a->bytesize, "cuMemAllocFromPoolAsync", graph ? "graph" : "async", ctx);
}
void device_free(State& s, CUpti_CallbackId, const cuMemFree_v2_params* a, CUcontext) { s.mem.on_free(a->dptr); }
// A free recorded into a graph runs at the graph's launches: the region stays.
template <class P>
void async_free(State& s, CUpti_CallbackId cbid, const P* a, CUcontext) {
  if (!in_stream_capture(s, a->hStream, per_thread(cbid))) s.mem.on_free(a->dptr);
}
void address_reserve(State& s, CUpti_CallbackId, const cuMemAddressReserve_params* a, CUcontext) {
  s.mem.on_reserve(*a->ptr, a->size);
}
void address_free(State& s, CUpti_CallbackId, const cuMemAddressFree_params* a, CUcontext) {
  s.mem.on_address_free(a->ptr);
}
void vmm_map(State& s, CUpti_CallbackId, const cuMemMap_params* a, CUcontext) {
  s.mem.on_map(a->ptr, a->size, a->offset, static_cast<uint64_t>(a->handle));
}
void vmm_unmap(State& s, CUpti_CallbackId, const cuMemUnmap_params* a, CUcontext) { s.mem.on_unmap(a->ptr, a->size); }
void host_alloc(State& s, CUpti_CallbackId, const cuMemHostAlloc_params* a, CUcontext) {
  s.mem.on_host_alloc(reinterpret_cast<uint64_t>(*a->pp), a->bytesize, "cuMemHostAlloc", a->Flags);
}
void host_alloc(State& s, CUpti_CallbackId, const cuMemAllocHost_v2_params* a, CUcontext) {
  s.mem.on_host_alloc(reinterpret_cast<uint64_t>(*a->pp), a->bytesize, "cuMemAllocHost_v2");
}
void host_register(State& s, CUpti_CallbackId, const cuMemHostRegister_v2_params* a, CUcontext) {
  s.mem.on_host_alloc(reinterpret_cast<uint64_t>(a->p), a->bytesize, "cuMemHostRegister_v2", a->Flags);
}
template <class P>
void host_free(State& s, CUpti_CallbackId, const P* a, CUcontext) {
  s.mem.on_host_free(reinterpret_cast<uint64_t>(a->p));
}

}  // namespace

void track_memory(State& s, CUpti_CallbackId cbid, const CUpti_CallbackData* cb) {
  const void* p = cb->functionParams;
  switch (cbid) {
#define KC_MEMORY_CASE(call, params, handler) \
  case CUPTI_DRIVER_TRACE_CBID_##call:        \
    handler(s, cbid, static_cast<const params*>(p), cb->context); \
    break;
    KC_MEMORY_CALLS(KC_MEMORY_CASE)
#undef KC_MEMORY_CASE
    default:
      break;
  }
}

// On a load call's exit: pair the returned handle with the cubins it loaded.
void pair_loaded(State& s, CUpti_CallbackId cbid, const CUpti_CallbackData* cb) {
  const std::vector<uint32_t>& ids = tl_load_collector->ids();
  const void* p = cb->functionParams;
  switch (cbid) {
#define KC_LOAD_CASE(call, params, member, pair)              \
  case CUPTI_DRIVER_TRACE_CBID_##call:                        \
    s.modules.pair(*static_cast<const params*>(p)->member, ids); \
    break;
    KC_MODULE_LOADS(KC_LOAD_CASE)
#undef KC_LOAD_CASE
    default:
      break;
  }
}

}  // namespace inject
}  // namespace kc
