// kerncap's CUPTI injection library (libkerncap_inject.so).
//
// Loaded into every CUDA process of an unmodified app through CUDA_INJECTION64_PATH;
// the driver calls InitializeInjection() from cuInit. Configuration comes from the
// environment (config.hpp). profile mode aggregates kernel activity records
// (profiler.cpp); capture mode follows allocations and modules through driver-API
// and resource callbacks and captures one dispatch (capture_session.cpp). See
// docs/interposer.md for the design, the cubin selection and the quiescing rule.
#include <cupti.h>
#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>

#include "capture_session.hpp"
#include "config.hpp"
#include "crash_report.hpp"
#include "driver.hpp"
#include "func_cache.hpp"
#include "launch_record.hpp"
#include "memory_tracker.hpp"
#include "module_registry.hpp"
#include "proc_report.hpp"
#include "profiler.hpp"
#include "quiesce.hpp"

#define KC_EXPORT extern "C" __attribute__((visibility("default")))

namespace kc {
namespace {

// Autotuner benchmarking depth (kerncap_benchmark_enter/exit). Outside State: the
// Python hook may call in before the driver has initialized the injection.
std::atomic<int> g_benchmark{0};

struct State {
  Config cfg;
  std::unique_ptr<KernelMatcher> matcher;
  std::atomic<bool> active{false};  // subscribed and configured: callbacks do work
  CUpti_SubscriberHandle subscriber = nullptr;
  ProcReport report;
  FuncCache funcs;
  MemoryTracker mem;
  ModuleRegistry modules;
  QuiesceLock quiesce;
  std::atomic<bool> armed{false};    // capture mode, target not reached yet: quiesce and count
  std::atomic<bool> claimed{false};  // this process started its (only) capture attempt
  std::atomic<uint64_t> launches{0};
  std::atomic<uint64_t> target_matches{0};
  std::atomic<bool> stream_captures_seen{false};  // some thread began a stream capture
};

// Never destroyed: other threads may be inside a callback while the process exits.
State* g = nullptr;
// Set in a fork child (pthread_atfork): CUDA is unusable there and the parent reports.
std::atomic<bool> g_forked{false};
void on_fork_child() { g_forked.store(true, std::memory_order_relaxed); }

// Everything a callback keeps per thread, in one trivially constructible object: the
// hot path (every launch of the app) pays one TLS lookup and no TLS init guard. A
// PyTorch launch costs the app ~6 us of CPU; every 100 ns here is ~1.6% of its loop.
constexpr int kLazyIds = 8;      // modules lazily loaded by one launch (more: pairing falls back)
constexpr int kFuncSlots = 8;    // recently launched handles, direct-mapped
struct ThreadState {
  bool guard;         // kerncap itself is calling the driver: not the app's calls
  int shared_depth;   // quiesce lock held shared by this thread
  // The launch in flight (between its API entry and exit).
  bool in_launch;
  bool is_kernel;
  CUfunction f;
  int n_lazy;
  uint32_t lazy[kLazyIds];
  // The capture in flight.
  CaptureSession* session;
  uint32_t correlation;
  // Handle -> FuncInfo for this thread's recent launches, valid while epoch matches.
  uint64_t func_epoch;
  CUfunction func_key[kFuncSlots];
  FuncInfo* func_info[kFuncSlots];
};
thread_local ThreadState tl;  // zero-initialised, trivial: no guard, no destructor

// Set while kerncap itself calls the driver, so its own calls are not treated as the app's.
struct Guard {
  bool prev;
  Guard() : prev(tl.guard) { tl.guard = true; }
  ~Guard() { tl.guard = prev; }
};

thread_local std::optional<ModuleCollector> tl_load_collector; // inside cuModuleLoad*/cuLibraryLoad*

// ---------------------------------------------------------------------------------
// Which driver calls are watched, and why.

// Calls that enqueue GPU work or change the set of live allocations: held shared on
// the quiesce lock while armed, so no thread changes memory between pre and post.
const CUpti_CallbackId kEnqueueCalls[] = {
    CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel, CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchHostFunc, CUPTI_DRIVER_TRACE_CBID_cuLaunchHostFunc_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch, CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuEventRecord, CUPTI_DRIVER_TRACE_CBID_cuEventRecord_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuEventRecordWithFlags, CUPTI_DRIVER_TRACE_CBID_cuEventRecordWithFlags_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuStreamWaitEvent, CUPTI_DRIVER_TRACE_CBID_cuStreamWaitEvent_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuStreamWaitValue32_v2, CUPTI_DRIVER_TRACE_CBID_cuStreamWaitValue32_v2_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuStreamWaitValue64_v2, CUPTI_DRIVER_TRACE_CBID_cuStreamWaitValue64_v2_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuStreamWriteValue32_v2, CUPTI_DRIVER_TRACE_CBID_cuStreamWriteValue32_v2_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuStreamWriteValue64_v2, CUPTI_DRIVER_TRACE_CBID_cuStreamWriteValue64_v2_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuStreamBatchMemOp_v2, CUPTI_DRIVER_TRACE_CBID_cuStreamBatchMemOp_v2_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuMemPrefetchAsync_v2, CUPTI_DRIVER_TRACE_CBID_cuMemPrefetchAsync_v2_ptsz,
    // copies
    CUPTI_DRIVER_TRACE_CBID_cuMemcpy, CUPTI_DRIVER_TRACE_CBID_cuMemcpy_ptds,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpyAsync, CUPTI_DRIVER_TRACE_CBID_cuMemcpyAsync_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpyPeer, CUPTI_DRIVER_TRACE_CBID_cuMemcpyPeer_ptds,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpyPeerAsync, CUPTI_DRIVER_TRACE_CBID_cuMemcpyPeerAsync_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoD_v2, CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoD_v2_ptds,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoH_v2, CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoH_v2_ptds,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoD_v2, CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoD_v2_ptds,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoA_v2, CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoA_v2_ptds,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpyAtoD_v2, CUPTI_DRIVER_TRACE_CBID_cuMemcpyAtoD_v2_ptds,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoA_v2, CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoA_v2_ptds,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpyAtoH_v2, CUPTI_DRIVER_TRACE_CBID_cuMemcpyAtoH_v2_ptds,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpyAtoA_v2, CUPTI_DRIVER_TRACE_CBID_cuMemcpyAtoA_v2_ptds,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpy2D_v2, CUPTI_DRIVER_TRACE_CBID_cuMemcpy2D_v2_ptds,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpy2DUnaligned_v2, CUPTI_DRIVER_TRACE_CBID_cuMemcpy2DUnaligned_v2_ptds,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpy3D_v2, CUPTI_DRIVER_TRACE_CBID_cuMemcpy3D_v2_ptds,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpy3DPeer, CUPTI_DRIVER_TRACE_CBID_cuMemcpy3DPeer_ptds,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoDAsync_v2, CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoDAsync_v2_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoHAsync_v2, CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoHAsync_v2_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoDAsync_v2, CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoDAsync_v2_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoAAsync_v2, CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoAAsync_v2_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpyAtoHAsync_v2, CUPTI_DRIVER_TRACE_CBID_cuMemcpyAtoHAsync_v2_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpy2DAsync_v2, CUPTI_DRIVER_TRACE_CBID_cuMemcpy2DAsync_v2_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpy3DAsync_v2, CUPTI_DRIVER_TRACE_CBID_cuMemcpy3DAsync_v2_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpy3DPeerAsync, CUPTI_DRIVER_TRACE_CBID_cuMemcpy3DPeerAsync_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpyBatchAsync_v2, CUPTI_DRIVER_TRACE_CBID_cuMemcpyBatchAsync_v2_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpy3DBatchAsync_v2, CUPTI_DRIVER_TRACE_CBID_cuMemcpy3DBatchAsync_v2_ptsz,
    // fills
    CUPTI_DRIVER_TRACE_CBID_cuMemsetD8_v2, CUPTI_DRIVER_TRACE_CBID_cuMemsetD8_v2_ptds,
    CUPTI_DRIVER_TRACE_CBID_cuMemsetD16_v2, CUPTI_DRIVER_TRACE_CBID_cuMemsetD16_v2_ptds,
    CUPTI_DRIVER_TRACE_CBID_cuMemsetD32_v2, CUPTI_DRIVER_TRACE_CBID_cuMemsetD32_v2_ptds,
    CUPTI_DRIVER_TRACE_CBID_cuMemsetD2D8_v2, CUPTI_DRIVER_TRACE_CBID_cuMemsetD2D8_v2_ptds,
    CUPTI_DRIVER_TRACE_CBID_cuMemsetD2D16_v2, CUPTI_DRIVER_TRACE_CBID_cuMemsetD2D16_v2_ptds,
    CUPTI_DRIVER_TRACE_CBID_cuMemsetD2D32_v2, CUPTI_DRIVER_TRACE_CBID_cuMemsetD2D32_v2_ptds,
    CUPTI_DRIVER_TRACE_CBID_cuMemsetD8Async, CUPTI_DRIVER_TRACE_CBID_cuMemsetD8Async_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuMemsetD16Async, CUPTI_DRIVER_TRACE_CBID_cuMemsetD16Async_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuMemsetD32Async, CUPTI_DRIVER_TRACE_CBID_cuMemsetD32Async_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuMemsetD2D8Async, CUPTI_DRIVER_TRACE_CBID_cuMemsetD2D8Async_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuMemsetD2D16Async, CUPTI_DRIVER_TRACE_CBID_cuMemsetD2D16Async_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuMemsetD2D32Async, CUPTI_DRIVER_TRACE_CBID_cuMemsetD2D32Async_ptsz,
    // allocations (also tracked)
    CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2, CUPTI_DRIVER_TRACE_CBID_cuMemAllocPitch_v2,
    CUPTI_DRIVER_TRACE_CBID_cuMemAllocManaged, CUPTI_DRIVER_TRACE_CBID_cuMemFree_v2,
    CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync, CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuMemAllocFromPoolAsync, CUPTI_DRIVER_TRACE_CBID_cuMemAllocFromPoolAsync_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync, CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuMemAddressReserve, CUPTI_DRIVER_TRACE_CBID_cuMemAddressFree,
    CUPTI_DRIVER_TRACE_CBID_cuMemMap, CUPTI_DRIVER_TRACE_CBID_cuMemUnmap,
};

// Tracked but not enqueueing: host allocations (recorded, never snapshotted).
const CUpti_CallbackId kHostMemoryCalls[] = {
    CUPTI_DRIVER_TRACE_CBID_cuMemHostAlloc,       CUPTI_DRIVER_TRACE_CBID_cuMemAllocHost_v2,
    CUPTI_DRIVER_TRACE_CBID_cuMemHostRegister_v2, CUPTI_DRIVER_TRACE_CBID_cuMemFreeHost,
    CUPTI_DRIVER_TRACE_CBID_cuMemHostUnregister,
};

// Module/library loads (paired with the cubins they load) and unloads.
const CUpti_CallbackId kModuleCalls[] = {
    CUPTI_DRIVER_TRACE_CBID_cuModuleLoad,        CUPTI_DRIVER_TRACE_CBID_cuModuleLoadData,
    CUPTI_DRIVER_TRACE_CBID_cuModuleLoadDataEx,  CUPTI_DRIVER_TRACE_CBID_cuModuleLoadFatBinary,
    CUPTI_DRIVER_TRACE_CBID_cuLibraryLoadData,   CUPTI_DRIVER_TRACE_CBID_cuLibraryLoadFromFile,
    CUPTI_DRIVER_TRACE_CBID_cuModuleUnload,      CUPTI_DRIVER_TRACE_CBID_cuLibraryUnload,
};

// Kernel nodes added to graphs: launches kerncap will never see.
const CUpti_CallbackId kGraphCalls[] = {
    CUPTI_DRIVER_TRACE_CBID_cuGraphAddKernelNode, CUPTI_DRIVER_TRACE_CBID_cuGraphAddKernelNode_v2,
    CUPTI_DRIVER_TRACE_CBID_cuGraphAddNode,       CUPTI_DRIVER_TRACE_CBID_cuGraphAddNode_v2,
    CUPTI_DRIVER_TRACE_CBID_cuGraphKernelNodeSetParams_v2,
    CUPTI_DRIVER_TRACE_CBID_cuGraphExecKernelNodeSetParams_v2,
};

// Stream captures beginning: launches into a capturing stream must not be counted,
// and asking the driver per launch costs ~150 ns, so only processes that ever begin a
// capture ask (launch_enter).
const CUpti_CallbackId kStreamCaptureCalls[] = {
    CUPTI_DRIVER_TRACE_CBID_cuStreamBeginCapture,         CUPTI_DRIVER_TRACE_CBID_cuStreamBeginCapture_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuStreamBeginCapture_v2,      CUPTI_DRIVER_TRACE_CBID_cuStreamBeginCapture_v2_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuStreamBeginCaptureToGraph,  CUPTI_DRIVER_TRACE_CBID_cuStreamBeginCaptureToGraph_ptsz,
};

bool is_stream_capture_begin(CUpti_CallbackId cbid) {
  return std::find(std::begin(kStreamCaptureCalls), std::end(kStreamCaptureCalls), cbid) != std::end(kStreamCaptureCalls);
}

bool g_is_enqueue[CUPTI_DRIVER_TRACE_CBID_SIZE];

// ---------------------------------------------------------------------------------

std::string cupti_error(CUptiResult r, const char* call) {
  const char* msg = nullptr;
  cuptiGetResultString(r, &msg);
  return std::string(call) + " failed: " + (msg ? msg : "unknown CUPTI error") + " (" + std::to_string(int(r)) + ")";
}

ProcCounters counters(State& s) {
  ProcCounters c;
  c.mode = mode_name(s.cfg.mode);
  if (s.cfg.mode == Mode::Profile) {
    for (const KernelStats& k : profiler::stats()) {
      c.launches += k.calls;
      const std::string d = demangle(k.name);
      c.kernels_seen.emplace_back(d, k.calls);
      if (s.matcher && s.matcher->matches(k.name, d)) c.target_matches += k.calls;
    }
    std::sort(c.kernels_seen.begin(), c.kernels_seen.end(),
              [](const auto& a, const auto& b) { return a.second != b.second ? a.second > b.second : a.first < b.first; });
    if (c.kernels_seen.size() > 200) c.kernels_seen.resize(200);
  } else {
    c.launches = s.launches.load();
    c.kernels_seen = s.funcs.launch_counts(200);
    c.target_matches = s.target_matches.load();
  }
  return c;
}

void write_proc(State& s) {
  if (s.cfg.out_dir.empty()) return;
  Guard guard;
  s.report.write(s.cfg.out_dir, counters(s));
}

void quiesce_enter(State& s, ThreadState& t) {
  if (s.armed.load(std::memory_order_acquire) && t.shared_depth++ == 0) s.quiesce.lock_shared();
}

void quiesce_exit(State& s, ThreadState& t) {
  if (t.shared_depth > 0 && --t.shared_depth == 0) s.quiesce.unlock_shared();
}

CUresult result_of(const CUpti_CallbackData* cb) {
  return cb->functionReturnValue ? *static_cast<const CUresult*>(cb->functionReturnValue) : CUDA_ERROR_UNKNOWN;
}

std::string lock_path(const State& s) { return path_join(s.cfg.out_dir, "capture.lock"); }

// ---------------------------------------------------------------------------------
// Capture start / finish

void capture_failed(State& s, const char* kind, const std::string& message) {
  s.armed.store(false, std::memory_order_release);
  s.report.add_error(kind, message);
  ::unlink(lock_path(s).c_str());
}

// At the selected dispatch's API entry. True: the capture started, this thread now
// holds the quiesce lock exclusively until the launch's exit.
bool start_capture(State& s, const LaunchDesc& d, const FuncInfo& fi, const CUpti_CallbackData* cb, uint64_t index) {
  if (s.claimed.exchange(true)) return false;
  int fd = ::open(lock_path(s).c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644);
  if (fd < 0) {
    const int err = errno;
    s.armed.store(false, std::memory_order_release);
    if (err != EEXIST)  // EEXIST: another process of the app captures; not an error
      s.report.add_error("disk", "cannot create " + lock_path(s) + ": " + std::strerror(err));
    return false;
  }
  const std::string pid = std::to_string(getpid()) + "\n";
  if (::write(fd, pid.data(), pid.size()) < 0) { /* the lock is the file's existence; its content is a courtesy */ }
  ::close(fd);

  s.quiesce.lock();  // waits until no other thread is inside an enqueueing call
  auto session = std::make_unique<CaptureSession>(s.cfg, s.mem, s.modules, d, fi, index);
  try {
    Guard guard;
    session->before_launch();
  } catch (const IoError& e) {
    { Guard guard; session->abort(); session.reset(); }
    capture_failed(s, "disk", std::string("capture aborted, partial capture removed: ") + e.what() +
                                  ". Free space in " + s.cfg.out_dir + " or write the capture elsewhere.");
    s.quiesce.unlock();
    write_proc(s);
    return false;
  } catch (const std::exception& e) {
    { Guard guard; session->abort(); session.reset(); }
    capture_failed(s, "capture_failed", "capture of " + fi.demangled + " (dispatch " + std::to_string(index) +
                                            ") failed before the launch: " + e.what());
    s.quiesce.unlock();
    write_proc(s);
    return false;
  }
  tl.session = session.release();
  tl.correlation = cb->correlationId;
  return true;
}

void finish_capture(State& s, const CUpti_CallbackData* cb) {
  std::unique_ptr<CaptureSession> session(tl.session);
  tl.session = nullptr;
  tl.correlation = 0;
  std::string dir;
  try {
    Guard guard;
    dir = session->after_launch(result_of(cb));
  } catch (const IoError& e) {
    Guard guard;
    session->abort();
    capture_failed(s, "disk", std::string("capture aborted, partial capture removed: ") + e.what() +
                                  ". Free space in " + s.cfg.out_dir + " or write the capture elsewhere.");
  } catch (const std::exception& e) {
    Guard guard;
    session->abort();
    capture_failed(s, "capture_failed", std::string("capture failed after the launch: ") + e.what());
  }
  {
    Guard guard;
    session.reset();  // frees the pinned ring and the snapshot stream
  }
  s.armed.store(false, std::memory_order_release);
  s.quiesce.unlock();
  if (!dir.empty()) s.report.set_captured(dir);
  write_proc(s);
  if (!dir.empty() && !s.cfg.keep_running) {
    std::fflush(nullptr);
    ::_exit(0);
  }
}

// ---------------------------------------------------------------------------------
// Launches

bool stream_is_capturing(const LaunchDesc& d, std::string& why) {
  CUstream st = d.stream;
  if (!st && d.per_thread_default) st = CU_STREAM_PER_THREAD;
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  CUresult r;
  {
    Guard guard;
    r = KC_CU(cuStreamIsCapturing)(st, &status);
  }
  if (r == CUDA_ERROR_STREAM_CAPTURE_IMPLICIT) {
    why = "the legacy default stream joins a capture in progress on another stream";
    return true;
  }
  if (r == CUDA_SUCCESS && status != CU_STREAM_CAPTURE_STATUS_NONE) {
    why = status == CU_STREAM_CAPTURE_STATUS_ACTIVE ? "its stream is being captured into a CUDA graph"
                                                    : "its stream's graph capture was invalidated";
    return true;
  }
  return false;
}

FuncInfo* func_info(State& s, ThreadState& t, CUfunction f) {
  const uint64_t epoch = s.funcs.epoch();
  if (t.func_epoch != epoch) {
    std::fill(std::begin(t.func_key), std::end(t.func_key), nullptr);
    t.func_epoch = epoch;
  }
  const size_t slot = (reinterpret_cast<uintptr_t>(f) >> 4) % kFuncSlots;
  if (t.func_key[slot] == f) return t.func_info[slot];
  FuncInfo* fi;
  {
    Guard guard;
    fi = s.funcs.get(f, s.matcher.get());
  }
  t.func_key[slot] = f;
  t.func_info[slot] = fi;
  return fi;
}

void launch_enter(State& s, ThreadState& t, CUpti_CallbackId cbid, const CUpti_CallbackData* cb) {
  LaunchDesc d;
  if (!decode_launch(cbid, cb->functionParams, d)) return;
  s.launches.fetch_add(1, std::memory_order_relaxed);
  FuncInfo* fi = func_info(s, t, d.f);
  fi->launches.fetch_add(1, std::memory_order_relaxed);

  if (fi->matched && s.armed.load(std::memory_order_acquire) && g_benchmark.load(std::memory_order_acquire) == 0) {
    std::string why;
    // Only processes that ever began a stream capture pay for asking the driver.
    if (s.stream_captures_seen.load(std::memory_order_acquire) && stream_is_capturing(d, why)) {
      // Refused, never counted: a captured launch runs later, inside a graph kerncap cannot see.
      s.report.add_error("stream_capture",
                         fi->demangled + " was launched while " + why +
                             "; such launches only run when the graph is replayed, where kerncap cannot capture "
                             "them, so they are not counted. Disable CUDA graphs for this run (e.g. torch.compile "
                             "without mode='reduce-overhead', or cuda graphs off in your framework).");
    } else {
      const uint64_t index = s.target_matches.fetch_add(1, std::memory_order_acq_rel);
      if (index == s.cfg.dispatch && start_capture(s, d, *fi, cb, index)) return;
    }
  }
  t.in_launch = true;
  t.f = d.f;
  t.is_kernel = fi->is_kernel;
  t.n_lazy = 0;
  quiesce_enter(s, t);
}

// Pairs modules that were lazily loaded during this launch with the launched
// function's module, so a later capture of that kernel finds its cubin by handle.
void pair_lazy_modules(State& s, ThreadState& t) {
  const std::vector<uint32_t> ids(t.lazy, t.lazy + std::min(t.n_lazy, kLazyIds));
  if (!s.modules.any_kept(ids)) return;
  Guard guard;
  CUfunction fn = t.f;
  if (t.is_kernel) {
    CUkernel k = reinterpret_cast<CUkernel>(t.f);
    CUlibrary lib = nullptr;
    if (KC_CU(cuKernelGetLibrary)(&lib, k) == CUDA_SUCCESS) s.modules.pair_library(lib, ids);
    if (KC_CU(cuKernelGetFunction)(&fn, k) != CUDA_SUCCESS) return;
  }
  CUmodule mod = nullptr;
  if (KC_CU(cuFuncGetModule)(&mod, fn) == CUDA_SUCCESS) s.modules.pair_module(mod, ids);
}

void launch_exit(State& s, ThreadState& t, const CUpti_CallbackData* cb) {
  if (t.session && t.correlation == cb->correlationId) {
    finish_capture(s, cb);
    return;
  }
  quiesce_exit(s, t);
  if (!t.in_launch) return;
  t.in_launch = false;
  // More than kLazyIds modules in one launch: those are not paired by handle, and the
  // capture selects the cubin by symbol and attributes instead (docs/interposer.md).
  if (t.n_lazy > 0) pair_lazy_modules(s, t);
}

// ---------------------------------------------------------------------------------
// Allocations, modules, graphs (API exit, successful calls only)

void track_memory(State& s, CUpti_CallbackId cbid, const CUpti_CallbackData* cb) {
  const void* p = cb->functionParams;
  CUcontext ctx = cb->context;
  switch (cbid) {
    case CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2: {
      auto* a = static_cast<const cuMemAlloc_v2_params*>(p);
      s.mem.on_alloc(*a->dptr, a->bytesize, "cuMemAlloc_v2", "device", ctx);
      break;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemAllocPitch_v2: {
      auto* a = static_cast<const cuMemAllocPitch_v2_params*>(p);
      s.mem.on_alloc(*a->dptr, uint64_t(*a->pPitch) * a->Height, "cuMemAllocPitch_v2", "device", ctx);
      break;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemAllocManaged: {
      auto* a = static_cast<const cuMemAllocManaged_params*>(p);
      s.mem.on_alloc(*a->dptr, a->bytesize, "cuMemAllocManaged", "managed", ctx);
      break;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync:
    case CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync_ptsz: {
      auto* a = static_cast<const cuMemAllocAsync_params*>(p);  // the _ptsz struct has the same layout
      s.mem.on_alloc(*a->dptr, a->bytesize, "cuMemAllocAsync", "async", ctx);
      break;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemAllocFromPoolAsync:
    case CUPTI_DRIVER_TRACE_CBID_cuMemAllocFromPoolAsync_ptsz: {
      auto* a = static_cast<const cuMemAllocFromPoolAsync_params*>(p);
      s.mem.on_alloc(*a->dptr, a->bytesize, "cuMemAllocFromPoolAsync", "async", ctx);
      break;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemFree_v2:
      s.mem.on_free(static_cast<const cuMemFree_v2_params*>(p)->dptr);
      break;
    case CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync:
    case CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync_ptsz:
      s.mem.on_free(static_cast<const cuMemFreeAsync_params*>(p)->dptr);
      break;
    case CUPTI_DRIVER_TRACE_CBID_cuMemAddressReserve: {
      auto* a = static_cast<const cuMemAddressReserve_params*>(p);
      s.mem.on_reserve(*a->ptr, a->size);
      break;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemAddressFree:
      s.mem.on_address_free(static_cast<const cuMemAddressFree_params*>(p)->ptr);
      break;
    case CUPTI_DRIVER_TRACE_CBID_cuMemMap: {
      auto* a = static_cast<const cuMemMap_params*>(p);
      s.mem.on_map(a->ptr, a->size);
      break;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemUnmap: {
      auto* a = static_cast<const cuMemUnmap_params*>(p);
      s.mem.on_unmap(a->ptr, a->size);
      break;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemHostAlloc: {
      auto* a = static_cast<const cuMemHostAlloc_params*>(p);
      s.mem.on_host_alloc(reinterpret_cast<uint64_t>(*a->pp), a->bytesize, "cuMemHostAlloc");
      break;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemAllocHost_v2: {
      auto* a = static_cast<const cuMemAllocHost_v2_params*>(p);
      s.mem.on_host_alloc(reinterpret_cast<uint64_t>(*a->pp), a->bytesize, "cuMemAllocHost_v2");
      break;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemHostRegister_v2: {
      auto* a = static_cast<const cuMemHostRegister_v2_params*>(p);
      s.mem.on_host_alloc(reinterpret_cast<uint64_t>(a->p), a->bytesize, "cuMemHostRegister_v2");
      break;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemFreeHost:
      s.mem.on_host_free(reinterpret_cast<uint64_t>(static_cast<const cuMemFreeHost_params*>(p)->p));
      break;
    case CUPTI_DRIVER_TRACE_CBID_cuMemHostUnregister:
      s.mem.on_host_free(reinterpret_cast<uint64_t>(static_cast<const cuMemHostUnregister_params*>(p)->p));
      break;
    default:
      break;
  }
}

bool is_load_call(CUpti_CallbackId cbid) {
  switch (cbid) {
    case CUPTI_DRIVER_TRACE_CBID_cuModuleLoad:
    case CUPTI_DRIVER_TRACE_CBID_cuModuleLoadData:
    case CUPTI_DRIVER_TRACE_CBID_cuModuleLoadDataEx:
    case CUPTI_DRIVER_TRACE_CBID_cuModuleLoadFatBinary:
    case CUPTI_DRIVER_TRACE_CBID_cuLibraryLoadData:
    case CUPTI_DRIVER_TRACE_CBID_cuLibraryLoadFromFile:
      return true;
    default:
      return false;
  }
}

// On a load call's exit: pair the returned handle with the cubins it loaded.
void pair_loaded(State& s, CUpti_CallbackId cbid, const CUpti_CallbackData* cb) {
  const std::vector<uint32_t>& ids = tl_load_collector->ids();
  const void* p = cb->functionParams;
  switch (cbid) {
    case CUPTI_DRIVER_TRACE_CBID_cuModuleLoad:
      s.modules.pair_module(*static_cast<const cuModuleLoad_params*>(p)->module, ids);
      break;
    case CUPTI_DRIVER_TRACE_CBID_cuModuleLoadData:
      s.modules.pair_module(*static_cast<const cuModuleLoadData_params*>(p)->module, ids);
      break;
    case CUPTI_DRIVER_TRACE_CBID_cuModuleLoadDataEx:
      s.modules.pair_module(*static_cast<const cuModuleLoadDataEx_params*>(p)->module, ids);
      break;
    case CUPTI_DRIVER_TRACE_CBID_cuModuleLoadFatBinary:
      s.modules.pair_module(*static_cast<const cuModuleLoadFatBinary_params*>(p)->module, ids);
      break;
    case CUPTI_DRIVER_TRACE_CBID_cuLibraryLoadData:
      s.modules.pair_library(*static_cast<const cuLibraryLoadData_params*>(p)->library, ids);
      break;
    case CUPTI_DRIVER_TRACE_CBID_cuLibraryLoadFromFile:
      s.modules.pair_library(*static_cast<const cuLibraryLoadFromFile_params*>(p)->library, ids);
      break;
    default:
      break;
  }
}

void check_graph_node(State& s, CUpti_CallbackId cbid, const CUpti_CallbackData* cb) {
  const void* p = cb->functionParams;
  CUfunction f = nullptr;
  CUkernel k = nullptr;
  switch (cbid) {
    case CUPTI_DRIVER_TRACE_CBID_cuGraphAddKernelNode: {
      auto* np = static_cast<const cuGraphAddKernelNode_params*>(p)->nodeParams;
      if (np) f = np->func;
      break;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuGraphAddKernelNode_v2: {
      auto* np = static_cast<const cuGraphAddKernelNode_v2_params*>(p)->nodeParams;
      if (np) { f = np->func; k = np->kern; }
      break;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuGraphKernelNodeSetParams_v2: {
      auto* np = static_cast<const cuGraphKernelNodeSetParams_v2_params*>(p)->nodeParams;
      if (np) { f = np->func; k = np->kern; }
      break;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuGraphExecKernelNodeSetParams_v2: {
      auto* np = static_cast<const cuGraphExecKernelNodeSetParams_v2_params*>(p)->nodeParams;
      if (np) { f = np->func; k = np->kern; }
      break;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuGraphAddNode: {
      auto* np = static_cast<const cuGraphAddNode_params*>(p)->nodeParams;
      if (np && np->type == CU_GRAPH_NODE_TYPE_KERNEL) { f = np->kernel.func; k = np->kernel.kern; }
      break;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuGraphAddNode_v2: {
      auto* np = static_cast<const cuGraphAddNode_v2_params*>(p)->nodeParams;
      if (np && np->type == CU_GRAPH_NODE_TYPE_KERNEL) { f = np->kernel.func; k = np->kernel.kern; }
      break;
    }
    default:
      return;
  }
  if (!f) f = reinterpret_cast<CUfunction>(k);
  if (!f) return;
  FuncInfo* fi;
  {
    Guard guard;
    fi = s.funcs.get(f, s.matcher.get());
  }
  if (fi->matched)
    s.report.add_error("graph_node", fi->demangled + " was added to a CUDA graph (" + cb->functionName +
                                         "); its launches inside the graph are invisible to kerncap. Run without "
                                         "CUDA graphs to capture it.");
}

// ---------------------------------------------------------------------------------
// Callback entry

void on_driver(State& s, ThreadState& t, CUpti_CallbackId cbid, const CUpti_CallbackData* cb) {
  const bool enter = cb->callbackSite == CUPTI_API_ENTER;
  if (is_launch_cbid(cbid)) {
    if (enter) launch_enter(s, t, cbid, cb);
    else launch_exit(s, t, cb);
    return;
  }
  if (is_stream_capture_begin(cbid)) {
    // Set before the capture can begin: from here on every target launch asks the
    // driver whether its stream is capturing (stream_is_capturing).
    if (enter) s.stream_captures_seen.store(true, std::memory_order_release);
    return;
  }
  if (is_load_call(cbid)) {
    if (enter) {
      tl_load_collector.emplace();
    } else if (tl_load_collector) {
      if (result_of(cb) == CUDA_SUCCESS) pair_loaded(s, cbid, cb);
      tl_load_collector.reset();
    }
    return;
  }
  const bool enqueue = cbid < CUPTI_DRIVER_TRACE_CBID_SIZE && g_is_enqueue[cbid];
  if (enter) {
    if (enqueue) quiesce_enter(s, t);
    return;
  }
  if (result_of(cb) == CUDA_SUCCESS) {
    if (cbid == CUPTI_DRIVER_TRACE_CBID_cuModuleUnload || cbid == CUPTI_DRIVER_TRACE_CBID_cuLibraryUnload) {
      s.funcs.clear();  // handles of the unloaded code may be reused for other kernels
    } else {
      track_memory(s, cbid, cb);
      check_graph_node(s, cbid, cb);
    }
  }
  if (enqueue) quiesce_exit(s, t);  // after tracking: the capture sees a consistent region list
}

void on_resource(State& s, CUpti_CallbackId cbid, const CUpti_ResourceData* rd) {
  switch (cbid) {
    case CUPTI_CBID_RESOURCE_MODULE_LOADED: {
      auto* md = static_cast<const CUpti_ModuleResourceData*>(rd->resourceDescriptor);
      if (!md) return;
      // A load call's collector (or the capture's) takes it first; else it was loaded
      // lazily by the launch in flight on this thread.
      if (!ModuleCollector::note_loaded(md->moduleId) && tl.in_launch && tl.n_lazy++ < kLazyIds)
        tl.lazy[tl.n_lazy - 1] = md->moduleId;
      if (s.matcher && md->pCubin && md->cubinSize)
        s.modules.on_module_loaded(md->moduleId, md->pCubin, md->cubinSize, *s.matcher);
      break;
    }
    case CUPTI_CBID_RESOURCE_MODULE_UNLOAD_STARTING: {
      auto* md = static_cast<const CUpti_ModuleResourceData*>(rd->resourceDescriptor);
      if (md) s.modules.on_module_unloading(md->moduleId);
      break;
    }
    case CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING:
      s.mem.drop_context(rd->context);
      break;
    default:
      break;
  }
}

void CUPTIAPI on_callback(void*, CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const void* data) {
  State* s = g;
  if (!s || !s->active.load(std::memory_order_acquire) || g_forked.load(std::memory_order_relaxed)) return;
  try {
    if (domain == CUPTI_CB_DOMAIN_RESOURCE) {
      on_resource(*s, cbid, static_cast<const CUpti_ResourceData*>(data));
    } else if (domain == CUPTI_CB_DOMAIN_DRIVER_API) {
      ThreadState& t = tl;
      if (!t.guard) on_driver(*s, t, cbid, static_cast<const CUpti_CallbackData*>(data));
    }
  } catch (const std::exception& e) {
    s->report.add_error("capture_failed", std::string("kerncap internal error in callback ") + std::to_string(cbid) +
                                              ": " + e.what());
  }
}

// ---------------------------------------------------------------------------------
// Setup and teardown

void at_exit() {
  State* s = g;
  if (!s || g_forked.load()) return;  // a fork child: its parent reports
  if (s->active && s->cfg.mode == Mode::Profile) {
    Guard guard;
    profiler::flush_and_stop();
    try {
      write_file_atomic(path_join(s->cfg.out_dir, "profile-" + std::to_string(getpid()) + ".json"),
                        profiler::to_json(int(getpid())));
    } catch (const std::exception& e) {
      s->report.add_error("disk", std::string("profile not written: ") + e.what());
    }
    // Every record is in: detach CUPTI so the app's own teardown runs without it. No
    // callback is enabled in profile mode and activity is off, so nothing of ours
    // can be inside CUPTI now.
    s->active.store(false, std::memory_order_release);
    CUptiResult r = cuptiUnsubscribe(s->subscriber);
    if (r == CUPTI_SUCCESS) r = cuptiFinalize();
    s->report.set_finalize_result(r == CUPTI_SUCCESS ? "ok" : cupti_error(r, "cuptiFinalize"));
  }
  write_proc(*s);
}

bool enable(State& s, CUpti_CallbackDomain domain, CUpti_CallbackId cbid) {
  CUptiResult r = cuptiEnableCallback(1, s.subscriber, domain, cbid);
  if (r == CUPTI_SUCCESS) return true;
  s.report.add_error("capture_failed", cupti_error(r, "cuptiEnableCallback") + " for callback id " + std::to_string(cbid));
  return false;
}

void initialize() {
  g = new State;
  State& s = *g;
  pthread_atfork(nullptr, nullptr, on_fork_child);
  s.cfg = Config::from_env();
  if (s.cfg.out_dir.empty()) {
    if (!s.cfg.error.empty()) std::fprintf(stderr, "kerncap: %s; the interposer stays inactive\n", s.cfg.error.c_str());
    return;  // nowhere to report: stay inert
  }
  std::atexit(at_exit);
  if (!s.cfg.kernel.empty()) {
    try {
      s.matcher = std::make_unique<KernelMatcher>(s.cfg.kernel, s.cfg.match);
    } catch (const std::exception& e) {
      s.cfg.error = e.what();
    }
  }
  if (!s.cfg.error.empty()) {
    s.report.add_error("config", s.cfg.error);
    return;
  }
  CUptiResult r = cuptiSubscribe(&s.subscriber, on_callback, nullptr);
  if (r != CUPTI_SUCCESS) {
    std::string msg = cupti_error(r, "cuptiSubscribe");
    if (r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED)
      msg += ": another CUPTI client (PyTorch profiler, Nsight Systems/Compute, a tracing tool) is attached to "
             "this process; kerncap cannot observe it. Run without the other tool.";
    s.report.add_error("cupti_subscriber", msg);
    return;
  }
  if (s.cfg.mode == Mode::Profile) {
    std::string err = profiler::start();
    if (!err.empty()) {
      s.report.add_error("cupti_activity", err);
      return;
    }
    s.active = true;
    return;
  }
  for (CUpti_CallbackId id : kEnqueueCalls) g_is_enqueue[id] = true;
  bool ok = true;
  for (CUpti_CallbackId id : kEnqueueCalls) ok &= enable(s, CUPTI_CB_DOMAIN_DRIVER_API, id);
  for (CUpti_CallbackId id : kHostMemoryCalls) ok &= enable(s, CUPTI_CB_DOMAIN_DRIVER_API, id);
  for (CUpti_CallbackId id : kModuleCalls) ok &= enable(s, CUPTI_CB_DOMAIN_DRIVER_API, id);
  for (CUpti_CallbackId id : kGraphCalls) ok &= enable(s, CUPTI_CB_DOMAIN_DRIVER_API, id);
  for (CUpti_CallbackId id : kStreamCaptureCalls) ok &= enable(s, CUPTI_CB_DOMAIN_DRIVER_API, id);
  ok &= enable(s, CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_MODULE_LOADED);
  ok &= enable(s, CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_MODULE_UNLOAD_STARTING);
  ok &= enable(s, CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING);
  if (!ok) {
    cuptiUnsubscribe(s.subscriber);
    return;  // a partial view would capture wrong state: stay out of the way
  }
  s.active = true;
  s.armed.store(true, std::memory_order_release);
}

}  // namespace
}  // namespace kc

KC_EXPORT int InitializeInjection(void) {
  static std::atomic<bool> done{false};
  if (done.exchange(true)) return 1;
  kc::install_crash_reporter();
  try {
    kc::initialize();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kerncap: injection failed: %s; the app runs without kerncap\n", e.what());
  }
  return 1;
}

KC_EXPORT void kerncap_benchmark_enter(void) { kc::g_benchmark.fetch_add(1, std::memory_order_acq_rel); }

KC_EXPORT void kerncap_benchmark_exit(void) {
  int v = kc::g_benchmark.load(std::memory_order_acquire);
  while (v > 0 && !kc::g_benchmark.compare_exchange_weak(v, v - 1, std::memory_order_acq_rel)) {
  }
}
