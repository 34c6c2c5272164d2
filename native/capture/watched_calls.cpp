#include "watched_calls.hpp"

#include <array>

namespace kc {

#define W(name, roles) {CUPTI_DRIVER_TRACE_CBID_##name, roles}

const WatchedCall kWatchedCalls[] = {
    // Calls that enqueue GPU work or change the set of live allocations: held shared on
    // the quiesce lock while armed, so no thread changes memory between pre and post.
    W(cuLaunchKernel, kEnqueue | kLaunch), W(cuLaunchKernel_ptsz, kEnqueue | kLaunch),
    W(cuLaunchKernelEx, kEnqueue | kLaunch), W(cuLaunchKernelEx_ptsz, kEnqueue | kLaunch),
    W(cuLaunchCooperativeKernel, kEnqueue | kLaunch), W(cuLaunchCooperativeKernel_ptsz, kEnqueue | kLaunch),
    W(cuLaunchHostFunc, kEnqueue), W(cuLaunchHostFunc_ptsz, kEnqueue),
    W(cuGraphLaunch, kEnqueue | kGraphLaunch), W(cuGraphLaunch_ptsz, kEnqueue | kGraphLaunch),
    W(cuEventRecord, kEnqueue), W(cuEventRecord_ptsz, kEnqueue),
    W(cuEventRecordWithFlags, kEnqueue), W(cuEventRecordWithFlags_ptsz, kEnqueue),
    W(cuStreamWaitEvent, kEnqueue), W(cuStreamWaitEvent_ptsz, kEnqueue),
    W(cuStreamWaitValue32_v2, kEnqueue), W(cuStreamWaitValue32_v2_ptsz, kEnqueue),
    W(cuStreamWaitValue64_v2, kEnqueue), W(cuStreamWaitValue64_v2_ptsz, kEnqueue),
    W(cuStreamWriteValue32_v2, kEnqueue), W(cuStreamWriteValue32_v2_ptsz, kEnqueue),
    W(cuStreamWriteValue64_v2, kEnqueue), W(cuStreamWriteValue64_v2_ptsz, kEnqueue),
    W(cuStreamBatchMemOp_v2, kEnqueue), W(cuStreamBatchMemOp_v2_ptsz, kEnqueue),
    W(cuMemPrefetchAsync_v2, kEnqueue), W(cuMemPrefetchAsync_v2_ptsz, kEnqueue),
    // copies
    W(cuMemcpy, kEnqueue), W(cuMemcpy_ptds, kEnqueue),
    W(cuMemcpyAsync, kEnqueue), W(cuMemcpyAsync_ptsz, kEnqueue),
    W(cuMemcpyPeer, kEnqueue), W(cuMemcpyPeer_ptds, kEnqueue),
    W(cuMemcpyPeerAsync, kEnqueue), W(cuMemcpyPeerAsync_ptsz, kEnqueue),
    W(cuMemcpyHtoD_v2, kEnqueue), W(cuMemcpyHtoD_v2_ptds, kEnqueue),
    W(cuMemcpyDtoH_v2, kEnqueue), W(cuMemcpyDtoH_v2_ptds, kEnqueue),
    W(cuMemcpyDtoD_v2, kEnqueue), W(cuMemcpyDtoD_v2_ptds, kEnqueue),
    W(cuMemcpyDtoA_v2, kEnqueue), W(cuMemcpyDtoA_v2_ptds, kEnqueue),
    W(cuMemcpyAtoD_v2, kEnqueue), W(cuMemcpyAtoD_v2_ptds, kEnqueue),
    W(cuMemcpyHtoA_v2, kEnqueue), W(cuMemcpyHtoA_v2_ptds, kEnqueue),
    W(cuMemcpyAtoH_v2, kEnqueue), W(cuMemcpyAtoH_v2_ptds, kEnqueue),
    W(cuMemcpyAtoA_v2, kEnqueue), W(cuMemcpyAtoA_v2_ptds, kEnqueue),
    W(cuMemcpy2D_v2, kEnqueue), W(cuMemcpy2D_v2_ptds, kEnqueue),
    W(cuMemcpy2DUnaligned_v2, kEnqueue), W(cuMemcpy2DUnaligned_v2_ptds, kEnqueue),
    W(cuMemcpy3D_v2, kEnqueue), W(cuMemcpy3D_v2_ptds, kEnqueue),
    W(cuMemcpy3DPeer, kEnqueue), W(cuMemcpy3DPeer_ptds, kEnqueue),
    W(cuMemcpyHtoDAsync_v2, kEnqueue), W(cuMemcpyHtoDAsync_v2_ptsz, kEnqueue),
    W(cuMemcpyDtoHAsync_v2, kEnqueue), W(cuMemcpyDtoHAsync_v2_ptsz, kEnqueue),
    W(cuMemcpyDtoDAsync_v2, kEnqueue), W(cuMemcpyDtoDAsync_v2_ptsz, kEnqueue),
    W(cuMemcpyHtoAAsync_v2, kEnqueue), W(cuMemcpyHtoAAsync_v2_ptsz, kEnqueue),
    W(cuMemcpyAtoHAsync_v2, kEnqueue), W(cuMemcpyAtoHAsync_v2_ptsz, kEnqueue),
    W(cuMemcpy2DAsync_v2, kEnqueue), W(cuMemcpy2DAsync_v2_ptsz, kEnqueue),
    W(cuMemcpy3DAsync_v2, kEnqueue), W(cuMemcpy3DAsync_v2_ptsz, kEnqueue),
    W(cuMemcpy3DPeerAsync, kEnqueue), W(cuMemcpy3DPeerAsync_ptsz, kEnqueue),
    W(cuMemcpyBatchAsync_v2, kEnqueue), W(cuMemcpyBatchAsync_v2_ptsz, kEnqueue),
    W(cuMemcpy3DBatchAsync_v2, kEnqueue), W(cuMemcpy3DBatchAsync_v2_ptsz, kEnqueue),
    // fills
    W(cuMemsetD8_v2, kEnqueue), W(cuMemsetD8_v2_ptds, kEnqueue),
    W(cuMemsetD16_v2, kEnqueue), W(cuMemsetD16_v2_ptds, kEnqueue),
    W(cuMemsetD32_v2, kEnqueue), W(cuMemsetD32_v2_ptds, kEnqueue),
    W(cuMemsetD2D8_v2, kEnqueue), W(cuMemsetD2D8_v2_ptds, kEnqueue),
    W(cuMemsetD2D16_v2, kEnqueue), W(cuMemsetD2D16_v2_ptds, kEnqueue),
    W(cuMemsetD2D32_v2, kEnqueue), W(cuMemsetD2D32_v2_ptds, kEnqueue),
    W(cuMemsetD8Async, kEnqueue), W(cuMemsetD8Async_ptsz, kEnqueue),
    W(cuMemsetD16Async, kEnqueue), W(cuMemsetD16Async_ptsz, kEnqueue),
    W(cuMemsetD32Async, kEnqueue), W(cuMemsetD32Async_ptsz, kEnqueue),
    W(cuMemsetD2D8Async, kEnqueue), W(cuMemsetD2D8Async_ptsz, kEnqueue),
    W(cuMemsetD2D16Async, kEnqueue), W(cuMemsetD2D16Async_ptsz, kEnqueue),
    W(cuMemsetD2D32Async, kEnqueue), W(cuMemsetD2D32Async_ptsz, kEnqueue),
    // allocations (also tracked)
    W(cuMemAlloc_v2, kEnqueue | kAlloc), W(cuMemAllocPitch_v2, kEnqueue | kAlloc),
    W(cuMemAllocManaged, kEnqueue | kAlloc), W(cuMemFree_v2, kEnqueue | kAlloc),
    W(cuMemAllocAsync, kEnqueue | kAlloc), W(cuMemAllocAsync_ptsz, kEnqueue | kAlloc),
    W(cuMemAllocFromPoolAsync, kEnqueue | kAlloc), W(cuMemAllocFromPoolAsync_ptsz, kEnqueue | kAlloc),
    W(cuMemFreeAsync, kEnqueue | kAlloc), W(cuMemFreeAsync_ptsz, kEnqueue | kAlloc),
    W(cuMemAddressReserve, kEnqueue | kAlloc), W(cuMemAddressFree, kEnqueue | kAlloc),
    W(cuMemMap, kEnqueue | kAlloc), W(cuMemUnmap, kEnqueue | kAlloc),
    // Host allocations: recorded, never snapshotted.
    W(cuMemHostAlloc, kHostMemory), W(cuMemAllocHost_v2, kHostMemory),
    W(cuMemHostRegister_v2, kHostMemory), W(cuMemFreeHost, kHostMemory),
    W(cuMemHostUnregister, kHostMemory),
    // Module/library loads (paired with the cubins they load) and unloads.
    W(cuModuleLoad, kModuleLoad), W(cuModuleLoadData, kModuleLoad),
    W(cuModuleLoadDataEx, kModuleLoad), W(cuModuleLoadFatBinary, kModuleLoad),
    W(cuLibraryLoadData, kModuleLoad), W(cuLibraryLoadFromFile, kModuleLoad),
    W(cuModuleUnload, kModuleUnload), W(cuLibraryUnload, kModuleUnload),
    // Stream captures: launches into a capturing stream run only when the graph does.
    W(cuStreamBeginCapture, kCaptureBegin), W(cuStreamBeginCapture_ptsz, kCaptureBegin),
    W(cuStreamBeginCapture_v2, kCaptureBegin), W(cuStreamBeginCapture_v2_ptsz, kCaptureBegin),
    W(cuStreamBeginCaptureToGraph, kCaptureBegin), W(cuStreamBeginCaptureToGraph_ptsz, kCaptureBegin),
    W(cuStreamEndCapture, kCaptureEnd), W(cuStreamEndCapture_ptsz, kCaptureEnd),
    // Executable graphs: instantiation, every later change (mirrored onto kerncap's
    // model of the graph, docs/graphs.md), and graph construction that matters.
    W(cuGraphInstantiate, kGraphInstantiate), W(cuGraphInstantiate_v2, kGraphInstantiate),
    W(cuGraphInstantiateWithFlags, kGraphInstantiate), W(cuGraphInstantiateWithParams, kGraphInstantiate),
    W(cuGraphInstantiateWithParams_ptsz, kGraphInstantiate),
    W(cuGraphExecKernelNodeSetParams, kGraphUpdate), W(cuGraphExecKernelNodeSetParams_v2, kGraphUpdate),
    W(cuGraphExecNodeSetParams, kGraphUpdate), W(cuGraphExecMemcpyNodeSetParams, kGraphUpdate),
    W(cuGraphExecMemsetNodeSetParams, kGraphUpdate), W(cuGraphExecChildGraphNodeSetParams, kGraphUpdate),
    W(cuGraphExecBatchMemOpNodeSetParams, kGraphUpdate), W(cuGraphExecUpdate, kGraphUpdate),
    W(cuGraphExecUpdate_v2, kGraphUpdate), W(cuGraphNodeSetEnabled, kGraphUpdate),
    W(cuGraphExecDestroy, kGraphUpdate),
    W(cuGraphAddNode, kGraphBuild), W(cuGraphAddNode_v2, kGraphBuild),
    W(cuGraphAddMemAllocNode, kGraphBuild),
};

#undef W

const size_t kWatchedCallCount = sizeof(kWatchedCalls) / sizeof(kWatchedCalls[0]);

namespace {
std::array<uint16_t, CUPTI_DRIVER_TRACE_CBID_SIZE> g_roles{};
}

void init_call_roles() {
  for (const WatchedCall& c : kWatchedCalls)
    if (c.id < g_roles.size()) g_roles[c.id] |= c.roles;
}

uint16_t call_roles(CUpti_CallbackId cbid) { return cbid < g_roles.size() ? g_roles[cbid] : 0; }

}  // namespace kc
