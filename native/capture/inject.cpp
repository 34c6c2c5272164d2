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
#include "graph_model.hpp"
#include "launch_record.hpp"
#include "memory_tracker.hpp"
#include "module_registry.hpp"
#include "proc_report.hpp"
#include "profiler.hpp"
#include "quiesce.hpp"
#include "watched_calls.hpp"

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
  // Stream captures in progress: counted from cuStreamBeginCapture*'s entry to
  // cuStreamEndCapture's exit, so while it is 0 no stream can be capturing and no launch
  // needs to ask the driver (~150 ns a call, on every launch of the target otherwise).
  std::atomic<int> active_captures{0};
  std::atomic<uint64_t> recorded_into_graphs{0};  // target launches made into a capturing stream
  GraphRegistry graphs{funcs};
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
  // The graph launch in flight that was counted (its exit ends "launching now").
  ExecModel* graph_model;
  // Inside the app's cuGraphInstantiate*/cuGraphExecUpdate: the driver's own copies of
  // the graph's nodes are not graphs the app built.
  bool in_graph_call;
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
// This process's one capture attempt: true when it may capture (it created the
// run's capture.lock); false when it tried before or another process of the app captures.
bool claim_capture(State& s) {
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
  return true;
}

bool start_capture(State& s, const LaunchDesc& d, const FuncInfo& fi, const CUpti_CallbackData* cb, uint64_t index) {
  if (!claim_capture(s)) return false;
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

bool in_stream_capture(State& s, CUstream stream, bool per_thread) {
  if (s.active_captures.load(std::memory_order_acquire) <= 0) return false;
  LaunchDesc d;
  d.stream = stream;
  d.per_thread_default = per_thread;
  std::string why;
  return stream_is_capturing(d, why);
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
    if (s.active_captures.load(std::memory_order_acquire) > 0 && stream_is_capturing(d, why)) {
      // Recorded into a graph, not run: the kernel node is counted when a launch of the
      // instantiated graph runs it (graph_launch_enter).
      s.recorded_into_graphs.fetch_add(1, std::memory_order_relaxed);
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
    // Stream-ordered allocations made while the stream is being captured become the
    // graph's allocation nodes: their address lives as long as the graph ("graph").
    case CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync:
    case CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync_ptsz: {
      auto* a = static_cast<const cuMemAllocAsync_params*>(p);  // the _ptsz struct has the same layout
      const bool graph = in_stream_capture(s, a->hStream, cbid == CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync_ptsz);
      s.mem.on_alloc(*a->dptr, a->bytesize, "cuMemAllocAsync", graph ? "graph" : "async", ctx);
      break;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemAllocFromPoolAsync:
    case CUPTI_DRIVER_TRACE_CBID_cuMemAllocFromPoolAsync_ptsz: {
      auto* a = static_cast<const cuMemAllocFromPoolAsync_params*>(p);
      const bool graph =
          in_stream_capture(s, a->hStream, cbid == CUPTI_DRIVER_TRACE_CBID_cuMemAllocFromPoolAsync_ptsz);
      s.mem.on_alloc(*a->dptr, a->bytesize, "cuMemAllocFromPoolAsync", graph ? "graph" : "async", ctx);
      break;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemFree_v2:
      s.mem.on_free(static_cast<const cuMemFree_v2_params*>(p)->dptr);
      break;
    case CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync:
    case CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync_ptsz: {
      auto* a = static_cast<const cuMemFreeAsync_params*>(p);
      // A free recorded into a graph runs at the graph's launches: the region stays.
      if (!in_stream_capture(s, a->hStream, cbid == CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync_ptsz))
        s.mem.on_free(a->dptr);
      break;
    }
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

// ---------------------------------------------------------------------------------
// CUDA graphs (docs/graphs.md)

// Graph construction, instantiation and updates (API exit, successful calls, while armed).
void track_graph(State& s, CUpti_CallbackId cbid, const CUpti_CallbackData* cb, uint16_t roles) {
  const void* p = cb->functionParams;
  const KernelMatcher* matcher = s.matcher.get();
  Guard guard;
  if (roles & kCaptureEnd) {
    CUgraph* g = cbid == CUPTI_DRIVER_TRACE_CBID_cuStreamEndCapture
                     ? static_cast<const cuStreamEndCapture_params*>(p)->phGraph
                     : static_cast<const cuStreamEndCapture_ptsz_params*>(p)->phGraph;
    if (g && *g) s.graphs.on_capture_end(*g);
    return;
  }
  if (roles & kGraphInstantiate) {
    CUgraphExec* exec = nullptr;
    CUgraph g = nullptr;
    uint64_t flags = 0;
    switch (cbid) {
      case CUPTI_DRIVER_TRACE_CBID_cuGraphInstantiate: {
        auto* q = static_cast<const cuGraphInstantiate_params*>(p);
        exec = q->phGraphExec, g = q->hGraph;
        break;
      }
      case CUPTI_DRIVER_TRACE_CBID_cuGraphInstantiate_v2: {
        auto* q = static_cast<const cuGraphInstantiate_v2_params*>(p);
        exec = q->phGraphExec, g = q->hGraph;
        break;
      }
      case CUPTI_DRIVER_TRACE_CBID_cuGraphInstantiateWithFlags: {
        auto* q = static_cast<const cuGraphInstantiateWithFlags_params*>(p);
        exec = q->phGraphExec, g = q->hGraph, flags = q->flags;
        break;
      }
      default: {  // cuGraphInstantiateWithParams(_ptsz): same layout
        auto* q = static_cast<const cuGraphInstantiateWithParams_params*>(p);
        exec = q->phGraphExec, g = q->hGraph;
        if (q->instantiateParams) {
          if (q->instantiateParams->result_out != CUDA_GRAPH_INSTANTIATE_SUCCESS) return;
          flags = q->instantiateParams->flags;
        }
        break;
      }
    }
    if (!exec || !*exec || !g) return;
    const std::string refused = s.graphs.on_instantiate(*exec, g, flags, matcher);
    if (!refused.empty()) {
      // The dispatch count would be wrong from here on: stop, and say why.
      ExecModel* m = s.graphs.find(*exec);
      capture_failed(s, "graph_refused", "executable graph #" + std::to_string(m ? m->id : 0) + ": " + refused);
    }
    return;
  }
  if (roles & kGraphUpdate) {
    switch (cbid) {
      case CUPTI_DRIVER_TRACE_CBID_cuGraphExecKernelNodeSetParams_v2: {
        auto* q = static_cast<const cuGraphExecKernelNodeSetParams_v2_params*>(p);
        s.graphs.on_exec_kernel_params(q->hGraphExec, q->hNode, q->nodeParams, matcher);
        break;
      }
      case CUPTI_DRIVER_TRACE_CBID_cuGraphExecKernelNodeSetParams: {
        // The v1 struct is the v2 one without its last two fields.
        auto* q = static_cast<const cuGraphExecKernelNodeSetParams_params*>(p);
        if (!q->nodeParams) break;
        CUDA_KERNEL_NODE_PARAMS v2{};
        std::memcpy(&v2, q->nodeParams, sizeof(CUDA_KERNEL_NODE_PARAMS_v1));
        s.graphs.on_exec_kernel_params(q->hGraphExec, q->hNode, &v2, matcher);
        break;
      }
      case CUPTI_DRIVER_TRACE_CBID_cuGraphExecNodeSetParams: {
        auto* q = static_cast<const cuGraphExecNodeSetParams_params*>(p);
        s.graphs.on_exec_node_params(q->hGraphExec, q->hNode, q->nodeParams, matcher);
        break;
      }
      case CUPTI_DRIVER_TRACE_CBID_cuGraphExecMemcpyNodeSetParams: {
        auto* q = static_cast<const cuGraphExecMemcpyNodeSetParams_params*>(p);
        s.graphs.on_exec_memcpy_params(q->hGraphExec, q->hNode, q->copyParams);
        break;
      }
      case CUPTI_DRIVER_TRACE_CBID_cuGraphExecMemsetNodeSetParams: {
        auto* q = static_cast<const cuGraphExecMemsetNodeSetParams_params*>(p);
        s.graphs.on_exec_memset_params(q->hGraphExec, q->hNode, q->memsetParams);
        break;
      }
      case CUPTI_DRIVER_TRACE_CBID_cuGraphExecChildGraphNodeSetParams:
        s.graphs.on_exec_unfollowed_update(static_cast<const cuGraphExecChildGraphNodeSetParams_params*>(p)->hGraphExec,
                                           "cuGraphExecChildGraphNodeSetParams");
        break;
      case CUPTI_DRIVER_TRACE_CBID_cuGraphExecBatchMemOpNodeSetParams:
        s.graphs.on_exec_unfollowed_update(static_cast<const cuGraphExecBatchMemOpNodeSetParams_params*>(p)->hGraphExec,
                                           "cuGraphExecBatchMemOpNodeSetParams");
        break;
      case CUPTI_DRIVER_TRACE_CBID_cuGraphExecUpdate_v2: {
        auto* q = static_cast<const cuGraphExecUpdate_v2_params*>(p);
        s.graphs.on_exec_update(q->hGraphExec, q->hGraph, matcher);
        break;
      }
      case CUPTI_DRIVER_TRACE_CBID_cuGraphExecUpdate: {
        auto* q = static_cast<const cuGraphExecUpdate_params*>(p);
        s.graphs.on_exec_update(q->hGraphExec, q->hGraph, matcher);
        break;
      }
      case CUPTI_DRIVER_TRACE_CBID_cuGraphNodeSetEnabled: {
        auto* q = static_cast<const cuGraphNodeSetEnabled_params*>(p);
        s.graphs.on_node_enabled(q->hGraphExec, q->hNode, q->isEnabled != 0, matcher);
        break;
      }
      case CUPTI_DRIVER_TRACE_CBID_cuGraphExecDestroy:
        s.graphs.on_exec_destroy(static_cast<const cuGraphExecDestroy_params*>(p)->hGraphExec);
        break;
      default:
        break;
    }
    return;
  }
  if (roles & kGraphBuild) {
    switch (cbid) {
      case CUPTI_DRIVER_TRACE_CBID_cuGraphAddNode:
      case CUPTI_DRIVER_TRACE_CBID_cuGraphAddNode_v2: {
        // Same leading fields in both: the node, the graph, then (v2) edge data.
        CUgraphNodeParams* np;
        CUgraphNode* node;
        if (cbid == CUPTI_DRIVER_TRACE_CBID_cuGraphAddNode) {
          auto* q = static_cast<const cuGraphAddNode_params*>(p);
          np = q->nodeParams, node = q->phGraphNode;
        } else {
          auto* q = static_cast<const cuGraphAddNode_v2_params*>(p);
          np = q->nodeParams, node = q->phGraphNode;
        }
        if (np && node && np->type == CU_GRAPH_NODE_TYPE_CONDITIONAL && np->conditional.phGraph_out)
          s.graphs.on_conditional_bodies(*node, np->conditional.phGraph_out, np->conditional.size);
        break;
      }
      case CUPTI_DRIVER_TRACE_CBID_cuGraphAddMemAllocNode: {
        // Graph memory lives at a fixed address for the graph's lifetime and is mapped
        // while the graph's pool holds it: a region like any other, checked at capture.
        auto* q = static_cast<const cuGraphAddMemAllocNode_params*>(p);
        if (q->nodeParams && q->nodeParams->dptr)
          s.mem.on_alloc(q->nodeParams->dptr, q->nodeParams->bytesize, "cuGraphAddMemAllocNode", "graph", cb->context);
        break;
      }
      default:
        break;
    }
  }
}

// The launch as the kernel node in the model describes it (parameters in force).
LaunchDesc node_launch(CUgraphNode node, CUstream stream, bool per_thread, std::vector<CUlaunchAttribute>& attrs) {
  CUDA_KERNEL_NODE_PARAMS p{};
  KC_CHECK(cuGraphKernelNodeGetParams, (node, &p), "the target kernel node in kerncap's model");
  LaunchDesc d;
  d.api = "cuGraphLaunch";
  d.f = p.func ? p.func : reinterpret_cast<CUfunction>(p.kern);
  d.grid[0] = p.gridDimX, d.grid[1] = p.gridDimY, d.grid[2] = p.gridDimZ;
  d.block[0] = p.blockDimX, d.block[1] = p.blockDimY, d.block[2] = p.blockDimZ;
  d.shared_mem = p.sharedMemBytes;
  d.stream = stream;
  d.per_thread_default = per_thread;
  d.kernel_params = p.kernelParams;
  d.extra = p.extra;
  // Node attributes that change how the kernel runs; the rest stay at their defaults.
  const CUkernelNodeAttrID ids[] = {CU_LAUNCH_ATTRIBUTE_COOPERATIVE, CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION,
                                    CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE,
                                    CU_LAUNCH_ATTRIBUTE_PRIORITY, CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN,
                                    CU_LAUNCH_ATTRIBUTE_PREFERRED_CLUSTER_DIMENSION};
  for (CUkernelNodeAttrID id : ids) {
    CUkernelNodeAttrValue v;
    std::memset(&v, 0, sizeof v);
    if (KC_CU(cuGraphKernelNodeGetAttribute)(node, id, &v) != CUDA_SUCCESS) continue;
    static const CUkernelNodeAttrValue zero{};
    if (!std::memcmp(&v, &zero, sizeof v)) continue;
    if (id == CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION && v.clusterDim.x <= 1 && v.clusterDim.y <= 1 && v.clusterDim.z <= 1)
      continue;
    CUlaunchAttribute a;
    std::memset(&a, 0, sizeof a);
    a.id = id;
    a.value = v;
    attrs.push_back(a);
    if (id == CU_LAUNCH_ATTRIBUTE_COOPERATIVE && v.cooperative) d.cooperative = true;
  }
  d.attrs = attrs.empty() ? nullptr : attrs.data();
  d.num_attrs = unsigned(attrs.size());
  return d;
}

// Instantiates `g` (destroyed here), launches it on `stream` and waits. Returns the
// launch's result so a faulting target is reported as the target's failure.
CUresult run_graph_copy(CUgraph g, CUstream stream, const std::string& what) {
  CUgraphExec exec = nullptr;
  CUresult r = KC_CU(cuGraphInstantiateWithFlags)(&exec, g, 0);
  KC_CU(cuGraphDestroy)(g);
  check(r, "cuGraphInstantiateWithFlags", what);
  r = KC_CU(cuGraphLaunch)(exec, stream);
  if (r == CUDA_SUCCESS) r = KC_CU(cuStreamSynchronize)(stream);
  KC_CU(cuGraphExecDestroy)(exec);
  return r;
}

// The dispatch is a kernel node of this launch of an executable graph. Everything
// happens at cuGraphLaunch's entry, with every other thread held: kerncap runs a copy
// of the graph's nodes before the target (pre-state), then the target alone
// (post-state), from its model of the graph. Under keep-running the app's memory is
// then put back as it was, and the app's own launch runs the whole graph once.
void start_graph_capture(State& s, ExecModel& m, const NodeRef& target, uint64_t index, CUstream stream,
                         bool per_thread) {
  if (!claim_capture(s)) return;
  s.quiesce.lock();
  Guard guard;
  std::vector<CUlaunchAttribute> attrs;
  std::string dir;
  bool prefix_ran = false;
  std::unique_ptr<CaptureSession> session;
  CUstream own = nullptr;
  CUevent neutral = nullptr;
  try {
    LaunchDesc desc = node_launch(model_node(m, target), stream, per_thread, attrs);
    session = std::make_unique<CaptureSession>(s.cfg, s.mem, s.modules, desc, *target.func, index);
    GraphOrigin origin;
    origin.exec_id = m.id;
    origin.exec_launch = m.launches - 1;
    origin.node_index = linear_index(m, target);
    origin.nodes = m.total_nodes;
    origin.targets = m.targets.size();
    for (size_t i = 0; i < m.targets.size(); ++i)
      if (m.targets[i].path == target.path) origin.target_index = i;
    origin.path = target.path;
    origin.built_by = m.built_by;
    origin.updates = m.updates;
    origin.instantiate_flags = m.instantiate_flags;
    KC_CHECK(cuStreamCreate, (&own, CU_STREAM_NON_BLOCKING), "kerncap's stream for the graph's nodes");
    KC_CHECK(cuEventCreate, (&neutral, CU_EVENT_DISABLE_TIMING), "kerncap's stand-in event");
    KC_CHECK(cuCtxSynchronize, (), "the target's context before the graph's nodes run");
    if (s.cfg.keep_running) session->snapshot_baseline();
    PrefixPlan plan;
    CUgraph prefix = build_prefix_graph(m, target, plan, neutral);
    if (!plan.refusals.empty()) {
      KC_CU(cuGraphDestroy)(prefix);
      std::string why;
      for (const std::string& r : plan.refusals) why += (why.empty() ? "" : "; ") + r;
      throw std::runtime_error("the state at the target node cannot be reproduced: " + why);
    }
    origin.prefix_nodes = plan.prefix_nodes;
    origin.skipped = plan.skipped;
    session->set_graph_origin(origin);
    prefix_ran = true;
    check(run_graph_copy(prefix, own, "the nodes before the target"), "cuGraphLaunch",
          "a copy of the nodes before " + target.func->demangled + " in its CUDA graph");
    session->before_launch();
    const CUresult r = run_graph_copy(build_target_graph(m, target), own, "the target node alone");
    dir = session->after_launch(r);
  } catch (const std::exception& e) {
    const bool io = dynamic_cast<const IoError*>(&e) != nullptr;
    bool restored = false;
    if (session) {
      restored = session->restore_after_failure();
      session->abort();
    }
    std::string msg = std::string("capture of ") + target.func->demangled + " (dispatch " + std::to_string(index) +
                      ", a node of CUDA graph #" + std::to_string(m.id) + ") failed: " + e.what();
    capture_failed(s, io ? "disk" : "capture_failed", msg);
    if (prefix_ran && !restored) {
      // kerncap ran part of the graph itself; without the baseline the app's memory
      // would hold those writes twice. Stop it rather than let it compute garbage.
      s.report.add_error("app_stopped", "kerncap stopped the app: it had run nodes of the graph before the "
                                        "failure and could not put the app's memory back");
      session.reset();
      if (own) KC_CU(cuStreamDestroy)(own);
      if (neutral) KC_CU(cuEventDestroy)(neutral);
      s.quiesce.unlock();
      write_proc(s);
      std::fflush(nullptr);
      ::_exit(3);
    }
  }
  session.reset();
  if (own) KC_CU(cuStreamDestroy)(own);
  if (neutral) KC_CU(cuEventDestroy)(neutral);
  s.armed.store(false, std::memory_order_release);
  s.quiesce.unlock();
  if (!dir.empty()) s.report.set_captured(dir);
  write_proc(s);
  if (!dir.empty() && !s.cfg.keep_running) {
    std::fflush(nullptr);
    ::_exit(0);
  }
}

void graph_launch_enter(State& s, ThreadState& t, CUpti_CallbackId cbid, const CUpti_CallbackData* cb) {
  auto* p = static_cast<const cuGraphLaunch_params*>(cb->functionParams);  // _ptsz: same layout
  const bool per_thread = cbid == CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch_ptsz;
  t.graph_model = nullptr;
  if (!s.armed.load(std::memory_order_acquire) || g_benchmark.load(std::memory_order_acquire) != 0) return;
  LaunchDesc d;
  d.stream = p->hStream;
  d.per_thread_default = per_thread;
  std::string why;
  if (s.active_captures.load(std::memory_order_acquire) > 0 && stream_is_capturing(d, why))
    return;  // becomes a child graph node of the graph being captured: counted when that runs
  std::string refusal;
  GraphLaunchView v;
  {
    Guard guard;
    v = s.graphs.on_launch_enter(p->hGraph, p->hStream, refusal);
  }
  if (!v.model) return;
  t.graph_model = v.model;
  if (!refusal.empty()) {
    capture_failed(s, "graph_refused", "executable graph #" + std::to_string(v.model->id) + ": " + refusal);
    write_proc(s);
    return;
  }
  if (!v.count) return;
  const uint64_t before = s.target_matches.fetch_add(v.count, std::memory_order_acq_rel);
  if (s.cfg.dispatch >= before && s.cfg.dispatch < before + v.count) {
    const NodeRef target = v.model->targets[size_t(s.cfg.dispatch - before)];
    start_graph_capture(s, *v.model, target, s.cfg.dispatch, p->hStream, per_thread);
  }
}

void graph_launch_exit(ThreadState& t) {
  if (!t.graph_model) return;
  t.graph_model->launching.fetch_sub(1, std::memory_order_acq_rel);
  t.graph_model = nullptr;
}

// A kernel node entered a graph (explicitly, or recorded by stream capture): remember
// graphs that hold the target, to say what happened when the dispatch is never reached.
void on_graph_node_created(State& s, const CUpti_GraphData* gd) {
  if (!gd || gd->nodeType != CU_GRAPH_NODE_TYPE_KERNEL || !s.armed.load(std::memory_order_acquire) || tl.guard ||
      tl.in_graph_call)
    return;
  Guard guard;
  CUDA_KERNEL_NODE_PARAMS p{};
  if (KC_CU(cuGraphKernelNodeGetParams)(gd->node, &p) != CUDA_SUCCESS) return;
  CUfunction f = p.func ? p.func : reinterpret_cast<CUfunction>(p.kern);
  if (f) s.graphs.on_kernel_node_added(gd->graph, s.funcs.get(f, s.matcher.get()));
}

// ---------------------------------------------------------------------------------
// Callback entry

void on_driver(State& s, ThreadState& t, CUpti_CallbackId cbid, const CUpti_CallbackData* cb) {
  const uint16_t roles = call_roles(cbid);
  const bool enter = cb->callbackSite == CUPTI_API_ENTER;
  if (roles & kLaunch) {
    if (enter) launch_enter(s, t, cbid, cb);
    else launch_exit(s, t, cb);
    return;
  }
  if (roles & kCaptureBegin) {
    // Counted before the capture can begin: from here until its end every target
    // launch asks the driver whether its stream is capturing (stream_is_capturing).
    if (enter) s.active_captures.fetch_add(1, std::memory_order_acq_rel);
    else if (result_of(cb) != CUDA_SUCCESS) s.active_captures.fetch_sub(1, std::memory_order_acq_rel);
    return;
  }
  if (roles & kModuleLoad) {
    if (enter) {
      tl_load_collector.emplace();
    } else if (tl_load_collector) {
      if (result_of(cb) == CUDA_SUCCESS) pair_loaded(s, cbid, cb);
      tl_load_collector.reset();
    }
    return;
  }
  const bool enqueue = roles & kEnqueue;
  if (roles & (kGraphInstantiate | kGraphUpdate)) t.in_graph_call = enter;
  if (enter) {
    // Counting first: a capture starting here takes the quiesce lock exclusively.
    if (roles & kGraphLaunch) graph_launch_enter(s, t, cbid, cb);
    if (enqueue) quiesce_enter(s, t);
    return;
  }
  if (roles & kGraphLaunch) graph_launch_exit(t);
  if (roles & kCaptureEnd) s.active_captures.fetch_sub(1, std::memory_order_acq_rel);
  if (result_of(cb) == CUDA_SUCCESS) {
    if (roles & kModuleUnload) {
      s.funcs.clear();  // handles of the unloaded code may be reused for other kernels
    } else if (roles & (kAlloc | kHostMemory)) {
      track_memory(s, cbid, cb);
    } else if ((roles & (kCaptureEnd | kGraphInstantiate | kGraphUpdate | kGraphBuild)) &&
               s.armed.load(std::memory_order_acquire)) {
      try {
        track_graph(s, cbid, cb, roles);
      } catch (const std::exception& e) {
        // A graph kerncap could not model must not be counted as if it held nothing.
        capture_failed(s, "graph_refused", std::string("kerncap could not follow a CUDA graph call (") +
                                               cb->functionName + "): " + e.what());
      }
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
    case CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED:
      on_graph_node_created(s, static_cast<const CUpti_GraphData*>(rd->resourceDescriptor));
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
  if (s->active && s->cfg.mode == Mode::Capture && s->armed.load() && !s->claimed.load()) {
    // The dispatch was never reached: say what the graphs holding the target did.
    std::string why;
    {
      Guard guard;
      why = s->graphs.unreached_summary();
    }
    const uint64_t recorded = s->recorded_into_graphs.load();
    if (recorded)
      why = std::to_string(recorded) + " launch(es) of the target were recorded into CUDA graphs by stream capture" +
            (why.empty() ? "" : "; " + why);
    if (!why.empty()) s->report.add_error("graph_unreached", why);
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
  init_call_roles();
  bool ok = true;
  for (size_t i = 0; i < kWatchedCallCount; ++i) ok &= enable(s, CUPTI_CB_DOMAIN_DRIVER_API, kWatchedCalls[i].id);
  ok &= enable(s, CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_MODULE_LOADED);
  ok &= enable(s, CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_MODULE_UNLOAD_STARTING);
  ok &= enable(s, CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING);
  ok &= enable(s, CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED);
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
