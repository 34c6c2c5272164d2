// The driver calls that change what memory a capture holds, declared once each:
// X(call, params struct, handler). A new memory kind is a line here and its handler in
// memory_kinds.cpp (void handler(State&, CUpti_CallbackId, const params*, CUcontext)),
// called at the call's successful exit; its call must also be watched (watched_list.hpp).
// The module loads whose cubins kerncap keeps are the same kind of list: X(call,
// params struct, member holding the handle, registry pairing).
#pragma once

#define KC_MEMORY_CALLS(X)                                                              \
  X(cuMemAlloc_v2, cuMemAlloc_v2_params, device_alloc)                                  \
  X(cuMemAllocPitch_v2, cuMemAllocPitch_v2_params, pitched_alloc)                       \
  X(cuMemAllocManaged, cuMemAllocManaged_params, managed_alloc)                         \
  X(cuMemAllocAsync, cuMemAllocAsync_params, async_alloc)                               \
  X(cuMemAllocAsync_ptsz, cuMemAllocAsync_ptsz_params, async_alloc)                     \
  X(cuMemAllocFromPoolAsync, cuMemAllocFromPoolAsync_params, pool_alloc)                \
  X(cuMemAllocFromPoolAsync_ptsz, cuMemAllocFromPoolAsync_ptsz_params, pool_alloc)      \
  X(cuMemFree_v2, cuMemFree_v2_params, device_free)                                     \
  X(cuMemFreeAsync, cuMemFreeAsync_params, async_free)                                  \
  X(cuMemFreeAsync_ptsz, cuMemFreeAsync_ptsz_params, async_free)                        \
  X(cuMemAddressReserve, cuMemAddressReserve_params, address_reserve)                   \
  X(cuMemAddressFree, cuMemAddressFree_params, address_free)                            \
  X(cuMemMap, cuMemMap_params, vmm_map)                                                 \
  X(cuMemUnmap, cuMemUnmap_params, vmm_unmap)                                           \
  X(cuMemHostAlloc, cuMemHostAlloc_params, host_alloc)                                  \
  X(cuMemAllocHost_v2, cuMemAllocHost_v2_params, host_alloc)                            \
  X(cuMemHostRegister_v2, cuMemHostRegister_v2_params, host_register)                   \
  X(cuMemFreeHost, cuMemFreeHost_params, host_free)                                     \
  X(cuMemHostUnregister, cuMemHostUnregister_params, host_free)

#define KC_MODULE_LOADS(X)                                                              \
  X(cuModuleLoad, cuModuleLoad_params, module, pair_module)                             \
  X(cuModuleLoadData, cuModuleLoadData_params, module, pair_module)                     \
  X(cuModuleLoadDataEx, cuModuleLoadDataEx_params, module, pair_module)                 \
  X(cuModuleLoadFatBinary, cuModuleLoadFatBinary_params, module, pair_module)           \
  X(cuLibraryLoadData, cuLibraryLoadData_params, library, pair_library)                 \
  X(cuLibraryLoadFromFile, cuLibraryLoadFromFile_params, library, pair_library)
