// The driver calls kerncap watches, as one X-macro list: X(name, prototype, roles).
// `name` is the exported entry point (and CUPTI's callback id / params struct suffix);
// `prototype` names a declaration with its signature (the base call for the _ptsz /
// _ptds variants; kc_v1_* for the old versions cuda.h no longer declares by that name).
// The CUPTI path (watched_calls.cpp) and the entry-point path (entry_hooks.cpp) both
// expand it, so a call is watched the same way on both.
#pragma once
#include <cuda.h>

// Old versions whose names cuda.h now maps to newer prototypes (generated_cuda_meta.h
// gives their parameters). Declared only for decltype; never defined or called by name.
extern "C" {
CUresult kc_v1_cuGraphAddNode(CUgraphNode*, CUgraph, const CUgraphNode*, size_t, CUgraphNodeParams*);
CUresult kc_v1_cuGraphExecKernelNodeSetParams(CUgraphExec, CUgraphNode, const CUDA_KERNEL_NODE_PARAMS_v1*);
CUresult kc_v1_cuGraphExecUpdate(CUgraphExec, CUgraph, CUgraphNode*, CUgraphExecUpdateResult*);
CUresult kc_v1_cuGraphInstantiate(CUgraphExec*, CUgraph, CUgraphNode*, char*, size_t);
CUresult kc_v1_cuStreamBeginCapture(CUstream);
}
// cuCtxSynchronize takes no argument, so CUPTI declares no params struct for it.
struct cuCtxSynchronize_params {};

#define KC_WATCHED_CALLS(X) \
  /* Calls that enqueue GPU work or change the set of live allocations: held shared on */ \
  /* the quiesce lock while armed, so no thread changes memory between pre and post. */ \
  X(cuLaunchKernel, cuLaunchKernel, kEnqueue | kLaunch) X(cuLaunchKernel_ptsz, cuLaunchKernel, kEnqueue | kLaunch) \
  X(cuLaunchKernelEx, cuLaunchKernelEx, kEnqueue | kLaunch) X(cuLaunchKernelEx_ptsz, cuLaunchKernelEx, kEnqueue | kLaunch) \
  X(cuLaunchCooperativeKernel, cuLaunchCooperativeKernel, kEnqueue | kLaunch) X(cuLaunchCooperativeKernel_ptsz, cuLaunchCooperativeKernel, kEnqueue | kLaunch) \
  X(cuLaunchHostFunc, cuLaunchHostFunc, kEnqueue) X(cuLaunchHostFunc_ptsz, cuLaunchHostFunc, kEnqueue) \
  X(cuGraphLaunch, cuGraphLaunch, kEnqueue | kGraphLaunch) X(cuGraphLaunch_ptsz, cuGraphLaunch, kEnqueue | kGraphLaunch) \
  X(cuEventRecord, cuEventRecord, kEnqueue) X(cuEventRecord_ptsz, cuEventRecord, kEnqueue) \
  X(cuEventRecordWithFlags, cuEventRecordWithFlags, kEnqueue) X(cuEventRecordWithFlags_ptsz, cuEventRecordWithFlags, kEnqueue) \
  X(cuStreamWaitEvent, cuStreamWaitEvent, kEnqueue) X(cuStreamWaitEvent_ptsz, cuStreamWaitEvent, kEnqueue) \
  X(cuStreamWaitValue32_v2, cuStreamWaitValue32_v2, kEnqueue) X(cuStreamWaitValue32_v2_ptsz, cuStreamWaitValue32_v2, kEnqueue) \
  X(cuStreamWaitValue64_v2, cuStreamWaitValue64_v2, kEnqueue) X(cuStreamWaitValue64_v2_ptsz, cuStreamWaitValue64_v2, kEnqueue) \
  X(cuStreamWriteValue32_v2, cuStreamWriteValue32_v2, kEnqueue) X(cuStreamWriteValue32_v2_ptsz, cuStreamWriteValue32_v2, kEnqueue) \
  X(cuStreamWriteValue64_v2, cuStreamWriteValue64_v2, kEnqueue) X(cuStreamWriteValue64_v2_ptsz, cuStreamWriteValue64_v2, kEnqueue) \
  X(cuStreamBatchMemOp_v2, cuStreamBatchMemOp_v2, kEnqueue) X(cuStreamBatchMemOp_v2_ptsz, cuStreamBatchMemOp_v2, kEnqueue) \
  X(cuMemPrefetchAsync_v2, cuMemPrefetchAsync_v2, kEnqueue) X(cuMemPrefetchAsync_v2_ptsz, cuMemPrefetchAsync_v2, kEnqueue) \
  /* copies */ \
  X(cuMemcpy, cuMemcpy, kEnqueue) X(cuMemcpy_ptds, cuMemcpy, kEnqueue) \
  X(cuMemcpyAsync, cuMemcpyAsync, kEnqueue) X(cuMemcpyAsync_ptsz, cuMemcpyAsync, kEnqueue) \
  X(cuMemcpyPeer, cuMemcpyPeer, kEnqueue) X(cuMemcpyPeer_ptds, cuMemcpyPeer, kEnqueue) \
  X(cuMemcpyPeerAsync, cuMemcpyPeerAsync, kEnqueue) X(cuMemcpyPeerAsync_ptsz, cuMemcpyPeerAsync, kEnqueue) \
  X(cuMemcpyHtoD_v2, cuMemcpyHtoD_v2, kEnqueue) X(cuMemcpyHtoD_v2_ptds, cuMemcpyHtoD_v2, kEnqueue) \
  X(cuMemcpyDtoH_v2, cuMemcpyDtoH_v2, kEnqueue) X(cuMemcpyDtoH_v2_ptds, cuMemcpyDtoH_v2, kEnqueue) \
  X(cuMemcpyDtoD_v2, cuMemcpyDtoD_v2, kEnqueue) X(cuMemcpyDtoD_v2_ptds, cuMemcpyDtoD_v2, kEnqueue) \
  X(cuMemcpyDtoA_v2, cuMemcpyDtoA_v2, kEnqueue) X(cuMemcpyDtoA_v2_ptds, cuMemcpyDtoA_v2, kEnqueue) \
  X(cuMemcpyAtoD_v2, cuMemcpyAtoD_v2, kEnqueue) X(cuMemcpyAtoD_v2_ptds, cuMemcpyAtoD_v2, kEnqueue) \
  X(cuMemcpyHtoA_v2, cuMemcpyHtoA_v2, kEnqueue) X(cuMemcpyHtoA_v2_ptds, cuMemcpyHtoA_v2, kEnqueue) \
  X(cuMemcpyAtoH_v2, cuMemcpyAtoH_v2, kEnqueue) X(cuMemcpyAtoH_v2_ptds, cuMemcpyAtoH_v2, kEnqueue) \
  X(cuMemcpyAtoA_v2, cuMemcpyAtoA_v2, kEnqueue) X(cuMemcpyAtoA_v2_ptds, cuMemcpyAtoA_v2, kEnqueue) \
  X(cuMemcpy2D_v2, cuMemcpy2D_v2, kEnqueue) X(cuMemcpy2D_v2_ptds, cuMemcpy2D_v2, kEnqueue) \
  X(cuMemcpy2DUnaligned_v2, cuMemcpy2DUnaligned_v2, kEnqueue) X(cuMemcpy2DUnaligned_v2_ptds, cuMemcpy2DUnaligned_v2, kEnqueue) \
  X(cuMemcpy3D_v2, cuMemcpy3D_v2, kEnqueue) X(cuMemcpy3D_v2_ptds, cuMemcpy3D_v2, kEnqueue) \
  X(cuMemcpy3DPeer, cuMemcpy3DPeer, kEnqueue) X(cuMemcpy3DPeer_ptds, cuMemcpy3DPeer, kEnqueue) \
  X(cuMemcpyHtoDAsync_v2, cuMemcpyHtoDAsync_v2, kEnqueue) X(cuMemcpyHtoDAsync_v2_ptsz, cuMemcpyHtoDAsync_v2, kEnqueue) \
  X(cuMemcpyDtoHAsync_v2, cuMemcpyDtoHAsync_v2, kEnqueue) X(cuMemcpyDtoHAsync_v2_ptsz, cuMemcpyDtoHAsync_v2, kEnqueue) \
  X(cuMemcpyDtoDAsync_v2, cuMemcpyDtoDAsync_v2, kEnqueue) X(cuMemcpyDtoDAsync_v2_ptsz, cuMemcpyDtoDAsync_v2, kEnqueue) \
  X(cuMemcpyHtoAAsync_v2, cuMemcpyHtoAAsync_v2, kEnqueue) X(cuMemcpyHtoAAsync_v2_ptsz, cuMemcpyHtoAAsync_v2, kEnqueue) \
  X(cuMemcpyAtoHAsync_v2, cuMemcpyAtoHAsync_v2, kEnqueue) X(cuMemcpyAtoHAsync_v2_ptsz, cuMemcpyAtoHAsync_v2, kEnqueue) \
  X(cuMemcpy2DAsync_v2, cuMemcpy2DAsync_v2, kEnqueue) X(cuMemcpy2DAsync_v2_ptsz, cuMemcpy2DAsync_v2, kEnqueue) \
  X(cuMemcpy3DAsync_v2, cuMemcpy3DAsync_v2, kEnqueue) X(cuMemcpy3DAsync_v2_ptsz, cuMemcpy3DAsync_v2, kEnqueue) \
  X(cuMemcpy3DPeerAsync, cuMemcpy3DPeerAsync, kEnqueue) X(cuMemcpy3DPeerAsync_ptsz, cuMemcpy3DPeerAsync, kEnqueue) \
  X(cuMemcpyBatchAsync_v2, cuMemcpyBatchAsync_v2, kEnqueue) X(cuMemcpyBatchAsync_v2_ptsz, cuMemcpyBatchAsync_v2, kEnqueue) \
  X(cuMemcpy3DBatchAsync_v2, cuMemcpy3DBatchAsync_v2, kEnqueue) X(cuMemcpy3DBatchAsync_v2_ptsz, cuMemcpy3DBatchAsync_v2, kEnqueue) \
  /* fills */ \
  X(cuMemsetD8_v2, cuMemsetD8_v2, kEnqueue) X(cuMemsetD8_v2_ptds, cuMemsetD8_v2, kEnqueue) \
  X(cuMemsetD16_v2, cuMemsetD16_v2, kEnqueue) X(cuMemsetD16_v2_ptds, cuMemsetD16_v2, kEnqueue) \
  X(cuMemsetD32_v2, cuMemsetD32_v2, kEnqueue) X(cuMemsetD32_v2_ptds, cuMemsetD32_v2, kEnqueue) \
  X(cuMemsetD2D8_v2, cuMemsetD2D8_v2, kEnqueue) X(cuMemsetD2D8_v2_ptds, cuMemsetD2D8_v2, kEnqueue) \
  X(cuMemsetD2D16_v2, cuMemsetD2D16_v2, kEnqueue) X(cuMemsetD2D16_v2_ptds, cuMemsetD2D16_v2, kEnqueue) \
  X(cuMemsetD2D32_v2, cuMemsetD2D32_v2, kEnqueue) X(cuMemsetD2D32_v2_ptds, cuMemsetD2D32_v2, kEnqueue) \
  X(cuMemsetD8Async, cuMemsetD8Async, kEnqueue) X(cuMemsetD8Async_ptsz, cuMemsetD8Async, kEnqueue) \
  X(cuMemsetD16Async, cuMemsetD16Async, kEnqueue) X(cuMemsetD16Async_ptsz, cuMemsetD16Async, kEnqueue) \
  X(cuMemsetD32Async, cuMemsetD32Async, kEnqueue) X(cuMemsetD32Async_ptsz, cuMemsetD32Async, kEnqueue) \
  X(cuMemsetD2D8Async, cuMemsetD2D8Async, kEnqueue) X(cuMemsetD2D8Async_ptsz, cuMemsetD2D8Async, kEnqueue) \
  X(cuMemsetD2D16Async, cuMemsetD2D16Async, kEnqueue) X(cuMemsetD2D16Async_ptsz, cuMemsetD2D16Async, kEnqueue) \
  X(cuMemsetD2D32Async, cuMemsetD2D32Async, kEnqueue) X(cuMemsetD2D32Async_ptsz, cuMemsetD2D32Async, kEnqueue) \
  /* allocations (also tracked) */ \
  X(cuMemAlloc_v2, cuMemAlloc_v2, kEnqueue | kAlloc) X(cuMemAllocPitch_v2, cuMemAllocPitch_v2, kEnqueue | kAlloc) \
  X(cuMemAllocManaged, cuMemAllocManaged, kEnqueue | kAlloc) X(cuMemFree_v2, cuMemFree_v2, kEnqueue | kAlloc) \
  X(cuMemAllocAsync, cuMemAllocAsync, kEnqueue | kAlloc) X(cuMemAllocAsync_ptsz, cuMemAllocAsync, kEnqueue | kAlloc) \
  X(cuMemAllocFromPoolAsync, cuMemAllocFromPoolAsync, kEnqueue | kAlloc) X(cuMemAllocFromPoolAsync_ptsz, cuMemAllocFromPoolAsync, kEnqueue | kAlloc) \
  X(cuMemFreeAsync, cuMemFreeAsync, kEnqueue | kAlloc) X(cuMemFreeAsync_ptsz, cuMemFreeAsync, kEnqueue | kAlloc) \
  X(cuMemAddressReserve, cuMemAddressReserve, kEnqueue | kAlloc) X(cuMemAddressFree, cuMemAddressFree, kEnqueue | kAlloc) \
  X(cuMemMap, cuMemMap, kEnqueue | kAlloc) X(cuMemUnmap, cuMemUnmap, kEnqueue | kAlloc) \
  /* Host allocations: snapshotted when the device can reach them (docs/capture-format.md). */ \
  X(cuMemHostAlloc, cuMemHostAlloc, kHostMemory) X(cuMemAllocHost_v2, cuMemAllocHost_v2, kHostMemory) \
  X(cuMemHostRegister_v2, cuMemHostRegister_v2, kHostMemory) X(cuMemFreeHost, cuMemFreeHost, kHostMemory) \
  X(cuMemHostUnregister, cuMemHostUnregister, kHostMemory) \
  /* CUDA arrays and texture/surface objects (array_tracker.hpp): snapshotted, recreated in replay. */ \
  X(cuArrayCreate_v2, cuArrayCreate_v2, kEnqueue | kArray) X(cuArray3DCreate_v2, cuArray3DCreate_v2, kEnqueue | kArray) \
  X(cuArrayDestroy, cuArrayDestroy, kEnqueue | kArray) \
  X(cuMipmappedArrayCreate, cuMipmappedArrayCreate, kEnqueue | kArray) \
  X(cuMipmappedArrayGetLevel, cuMipmappedArrayGetLevel, kArray) \
  X(cuMipmappedArrayDestroy, cuMipmappedArrayDestroy, kEnqueue | kArray) \
  X(cuTexObjectCreate, cuTexObjectCreate, kEnqueue | kArray) X(cuTexObjectDestroy, cuTexObjectDestroy, kEnqueue | kArray) \
  X(cuSurfObjectCreate, cuSurfObjectCreate, kEnqueue | kArray) X(cuSurfObjectDestroy, cuSurfObjectDestroy, kEnqueue | kArray) \
  /* Module/library loads (paired with the cubins they load) and unloads. */ \
  X(cuModuleLoad, cuModuleLoad, kModuleLoad) X(cuModuleLoadData, cuModuleLoadData, kModuleLoad) \
  X(cuModuleLoadDataEx, cuModuleLoadDataEx, kModuleLoad) X(cuModuleLoadFatBinary, cuModuleLoadFatBinary, kModuleLoad) \
  X(cuLibraryLoadData, cuLibraryLoadData, kModuleLoad) X(cuLibraryLoadFromFile, cuLibraryLoadFromFile, kModuleLoad) \
  X(cuModuleUnload, cuModuleUnload, kModuleUnload) X(cuLibraryUnload, cuLibraryUnload, kModuleUnload) \
  /* Stream captures: launches into a capturing stream run only when the graph does. */ \
  X(cuStreamBeginCapture, kc_v1_cuStreamBeginCapture, kCaptureBegin) X(cuStreamBeginCapture_ptsz, kc_v1_cuStreamBeginCapture, kCaptureBegin) \
  X(cuStreamBeginCapture_v2, cuStreamBeginCapture_v2, kCaptureBegin) X(cuStreamBeginCapture_v2_ptsz, cuStreamBeginCapture_v2, kCaptureBegin) \
  X(cuStreamBeginCaptureToGraph, cuStreamBeginCaptureToGraph, kCaptureBegin) X(cuStreamBeginCaptureToGraph_ptsz, cuStreamBeginCaptureToGraph, kCaptureBegin) \
  X(cuStreamEndCapture, cuStreamEndCapture, kCaptureEnd) X(cuStreamEndCapture_ptsz, cuStreamEndCapture, kCaptureEnd) \
  /* Executable graphs: instantiation, every later change (mirrored onto kerncap's */ \
  /* model of the graph, docs/graphs.md), and graph construction that matters. */ \
  X(cuGraphInstantiate, kc_v1_cuGraphInstantiate, kGraphInstantiate) X(cuGraphInstantiate_v2, kc_v1_cuGraphInstantiate, kGraphInstantiate) \
  X(cuGraphInstantiateWithFlags, cuGraphInstantiateWithFlags, kGraphInstantiate) X(cuGraphInstantiateWithParams, cuGraphInstantiateWithParams, kGraphInstantiate) \
  X(cuGraphInstantiateWithParams_ptsz, cuGraphInstantiateWithParams, kGraphInstantiate) \
  X(cuGraphExecKernelNodeSetParams, kc_v1_cuGraphExecKernelNodeSetParams, kGraphUpdate) X(cuGraphExecKernelNodeSetParams_v2, cuGraphExecKernelNodeSetParams_v2, kGraphUpdate) \
  X(cuGraphExecNodeSetParams, cuGraphExecNodeSetParams, kGraphUpdate) X(cuGraphExecMemcpyNodeSetParams, cuGraphExecMemcpyNodeSetParams, kGraphUpdate) \
  X(cuGraphExecMemsetNodeSetParams, cuGraphExecMemsetNodeSetParams, kGraphUpdate) X(cuGraphExecChildGraphNodeSetParams, cuGraphExecChildGraphNodeSetParams, kGraphUpdate) \
  X(cuGraphExecBatchMemOpNodeSetParams, cuGraphExecBatchMemOpNodeSetParams, kGraphUpdate) X(cuGraphExecUpdate, kc_v1_cuGraphExecUpdate, kGraphUpdate) \
  X(cuGraphExecUpdate_v2, cuGraphExecUpdate_v2, kGraphUpdate) X(cuGraphNodeSetEnabled, cuGraphNodeSetEnabled, kGraphUpdate) \
  X(cuGraphExecDestroy, cuGraphExecDestroy, kGraphUpdate) \
  X(cuGraphAddNode, kc_v1_cuGraphAddNode, kGraphBuild) X(cuGraphAddNode_v2, cuGraphAddNode_v2, kGraphBuild) \
  X(cuGraphAddMemAllocNode, cuGraphAddMemAllocNode, kGraphBuild) \
  /* Seen only through the entry points (CUPTI reports these as resource events). */ \
  X(cuCtxDestroy_v2, cuCtxDestroy_v2, kContextDestroy) \
  X(cuDevicePrimaryCtxRelease_v2, cuDevicePrimaryCtxRelease_v2, kContextDestroy) \
  X(cuDevicePrimaryCtxReset_v2, cuDevicePrimaryCtxReset_v2, kContextDestroy) \
  X(cuGraphAddKernelNode_v2, cuGraphAddKernelNode_v2, kKernelNodeAdd) \
  /* Host synchronizations: inside a sequence they order the work after them. */ \
  X(cuCtxSynchronize, cuCtxSynchronize, kSync) X(cuCtxSynchronize_v2, cuCtxSynchronize_v2, kSync) \
  X(cuStreamSynchronize, cuStreamSynchronize, kSync) X(cuStreamSynchronize_ptsz, cuStreamSynchronize, kSync) \
  X(cuEventSynchronize, cuEventSynchronize, kSync)
