// The sampled profile (profile mode through the entry points, sampled_profile.hpp)
// and the profile's launch tags.
#include "inject_state.hpp"

namespace kc {
namespace inject {

// The sampled profile (profile mode through the entry points, sampled_profile.hpp)

CUstream launch_stream(CUstream stream, bool per_thread) {
  return !stream && per_thread ? CU_STREAM_PER_THREAD : stream;
}

// Whether to time this launch (the n-th of its kernel or graph on this thread, or in the
// process when `k` is null). Never while a stream capture runs anywhere in the process.
bool time_launch(State& s, ThreadState& t, ThreadSlot::Kernel* k, uint64_t n, double* weight) {
  if (s.active_captures.load(std::memory_order_acquire) > 0) return false;
  return k ? LaunchSampler::due(k->schedule, n, t.rng, weight) : LaunchSampler::due_shared(n, t.rng, weight);
}

// Loads a kernel's code now (lazy loading loads it at its first launch), so that its
// first launch can be timed behind a held stream. False: not loaded (not timed then).
bool load_function(FuncInfo& fi, CUfunction f) {
  Guard guard;
  try {
    CUfunction fn = f;
    if (fi.is_kernel && KC_CU(cuKernelGetFunction)(&fn, reinterpret_cast<CUkernel>(f)) != CUDA_SUCCESS) return false;
    if (KC_CU(cuFuncLoad)(fn) != CUDA_SUCCESS) return false;
  } catch (const std::exception&) {  // a driver without cuFuncLoad (before CUDA 12.4)
    return false;
  }
  fi.loaded.store(true, std::memory_order_relaxed);
  return true;
}

// Launches (eager and graph) of every thread so far: a timed pair's interleaving check.
uint64_t launches_so_far(State& s) { return s.launches.load(std::memory_order_relaxed) + s.slots.launches_and_graph_launches(); }
uint64_t exits_so_far(State& s) { return s.launch_exits.load(std::memory_order_relaxed) + s.slots.exits(); }

// Before a timed pair opens: whether another thread is inside a launch call now (entered
// and not returned: its enqueue may still come, inside the pair). Entries are read first,
// so a launch that returns between the two reads is not counted as inside.
bool others_inside(State& s, uint64_t entries) { return entries - exits_so_far(s) > 1; }  // 1: this launch

// A counted launch returned (after its pair, if any, was closed).
void count_exit(State& s, ThreadState& t) {
  if (ThreadSlot* mine = t.slot) ThreadSlot::bump(mine->exits);
  else s.launch_exits.fetch_add(1, std::memory_order_relaxed);
}

// A launch's exit: the end of its timed pair, if any; `ready` (the kernel's code is
// loaded, the graph uploaded) is set once a launch of it returned successfully.
void sampled_exit(State& s, ThreadState& t, const CUpti_CallbackData* cb, std::atomic<bool>* ready) {
  const bool ok = result_of(cb) == CUDA_SUCCESS;
  if (t.pending) {
    Guard guard;
    // Every launch (eager or graph) is counted at its entry and its return: another
    // thread's launch can be inside this pair only if one was in flight when it opened or
    // one entered while it was open (the sampler drops such a sample on a stream that
    // several threads time launches on).
    s.sampled->sampler.end(t.pending, ok, t.sample_others_inside || launches_so_far(s) != t.sample_launches);
    t.pending = nullptr;
  }
  if (ok && ready && !ready->load(std::memory_order_relaxed)) ready->store(true, std::memory_order_relaxed);
}

void sampled_launch(State& s, ThreadState& t, CUpti_CallbackId cbid, const CUpti_CallbackData* cb, bool enter) {
  if (!enter) {
    sampled_exit(s, t, cb, t.sampled_fi ? &t.sampled_fi->loaded : nullptr);
    if (t.sampled_fi) count_exit(s, t);  // its entry was counted
    t.sampled_fi = nullptr;
    return;
  }
  t.pending = nullptr;
  t.sampled_fi = nullptr;
  LaunchDesc d;
  if (!decode_launch(cbid, cb->functionParams, d)) return;
  std::string why;
  // Recorded into a graph, not run now: its kernel runs (and is timed) in the graph's launches.
  if (s.active_captures.load(std::memory_order_acquire) > 0 && stream_is_capturing(d, why)) return;
  ThreadSlot::Kernel* k = nullptr;
  FuncInfo* fi = func_info(s, t, d.f, &k);
  const uint64_t n = count_launch(s, t, *fi, k);
  t.sampled_fi = fi;
  double weight = 1.0;
  // A cooperative launch needs the whole GPU and may wait for the context: never behind
  // a held stream. Nor a kernel's first launch, which may load its module (and with it
  // wait for the context), unless kerncap loaded the module first.
  if (d.cooperative || !time_launch(s, t, k, n, &weight)) return;
  if (!fi->loaded.load(std::memory_order_relaxed) && !load_function(*fi, d.f)) return;
  Guard guard;
  t.sample_launches = launches_so_far(s);
  t.sample_others_inside = others_inside(s, t.sample_launches);
  t.pending = s.sampled->sampler.begin(cb->context, launch_stream(d.stream, d.per_thread_default), fi, weight,
                                      d.grid, d.block);
}

// The record of an executable graph and this thread's counter of it (a 4-entry cache).
ProfGraph* graph_record(State& s, ThreadState& t, CUgraphExec exec, ThreadSlot::Kernel** count) {
  const uint64_t epoch = s.sampled->epoch();
  if (t.graph_epoch != epoch) {
    std::fill(std::begin(t.graph_key), std::end(t.graph_key), nullptr);
    t.graph_epoch = epoch;
  }
  const size_t slot = size_t((uint64_t(reinterpret_cast<uintptr_t>(exec)) * 0x9E3779B97F4A7C15ull) >> 62);
  if (t.graph_key[slot] != exec) {
    t.graph_key[slot] = exec;
    t.graph_rec[slot] = s.sampled->graph(exec);
    ThreadSlot* mine = my_slot(s, t);
    t.graph_count[slot] = mine ? mine->counter_for(t.graph_rec[slot]) : nullptr;
  }
  *count = t.graph_count[slot];
  return t.graph_rec[slot];
}

void sampled_graph_launch(State& s, ThreadState& t, CUpti_CallbackId cbid, const CUpti_CallbackData* cb, bool enter) {
  if (!enter) {
    sampled_exit(s, t, cb, t.sampled_graph ? &t.sampled_graph->launched : nullptr);
    if (t.sampled_graph) count_exit(s, t);  // its entry was counted
    t.sampled_graph = nullptr;
    return;
  }
  t.pending = nullptr;
  auto* p = static_cast<const cuGraphLaunch_params*>(cb->functionParams);  // _ptsz: same layout
  ThreadSlot::Kernel* k = nullptr;
  ProfGraph* g = graph_record(s, t, p->hGraph, &k);
  if (ThreadSlot* mine = my_slot(s, t)) ThreadSlot::bump(mine->graph_launches);
  else s.launches.fetch_add(1, std::memory_order_relaxed);
  uint64_t n;
  if (k) {
    ThreadSlot::bump(k->count);
    n = k->count.load(std::memory_order_relaxed);
  } else {
    n = g->launches.fetch_add(1, std::memory_order_relaxed) + 1;
  }
  t.sampled_graph = g;
  double weight = 1.0;
  if (!time_launch(s, t, k, n, &weight)) return;
  const CUstream stream = launch_stream(p->hStream, cbid == CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch_ptsz);
  Guard guard;
  // A graph's first launch uploads it, which may wait: kerncap uploads it first, unheld.
  if (!g->launched.load(std::memory_order_relaxed)) {
    if (KC_CU(cuGraphUpload)(p->hGraph, stream) != CUDA_SUCCESS) return;
    g->launched.store(true, std::memory_order_relaxed);
  }
  static const unsigned none[3] = {0, 0, 0};
  t.sample_launches = launches_so_far(s);
  t.sample_others_inside = others_inside(s, t.sample_launches);
  t.pending = s.sampled->sampler.begin(cb->context, stream, g, weight, none, none);
}

// A context going away (cuCtxDestroy, the primary context's reset or last release):
// its timed pairs are read first, while their events still exist.
void sampled_context_call(State& s, ThreadState& t, CUpti_CallbackId cbid, const CUpti_CallbackData* cb, bool enter) {
  const void* p = cb->functionParams;
  Guard guard;
  switch (cbid) {
    case CUPTI_DRIVER_TRACE_CBID_cuCtxDestroy_v2:
      if (enter) s.sampled->sampler.drop_context(static_cast<const cuCtxDestroy_v2_params*>(p)->ctx, true);
      return;
    case CUPTI_DRIVER_TRACE_CBID_cuDevicePrimaryCtxReset_v2:
    case CUPTI_DRIVER_TRACE_CBID_cuDevicePrimaryCtxRelease_v2: {
      const CUdevice dev = static_cast<const cuDevicePrimaryCtxReset_v2_params*>(p)->dev;  // same layout
      if (enter) {
        t.primary_ctx = nullptr;
        CUcontext cur = nullptr;
        CUdevice cur_dev = -1;
        if (KC_CU(cuCtxGetCurrent)(&cur) == CUDA_SUCCESS && cur && KC_CU(cuCtxGetDevice)(&cur_dev) == CUDA_SUCCESS &&
            cur_dev == dev)
          t.primary_ctx = cur;
        if (t.primary_ctx) s.sampled->sampler.drop_context(t.primary_ctx, false);  // may be the last release
        return;
      }
      if (!t.primary_ctx || result_of(cb) != CUDA_SUCCESS) return;
      unsigned flags = 0;
      int active = 1;
      if (cbid == CUPTI_DRIVER_TRACE_CBID_cuDevicePrimaryCtxRelease_v2 &&
          KC_CU(cuDevicePrimaryCtxGetState)(dev, &flags, &active) != CUDA_SUCCESS)
        active = 1;
      if (cbid == CUPTI_DRIVER_TRACE_CBID_cuDevicePrimaryCtxReset_v2 || !active)
        s.sampled->sampler.drop_context(t.primary_ctx, true);  // gone: nothing to read, only forget
      t.primary_ctx = nullptr;
      return;
    }
    default:
      return;
  }
}

// Profile mode's dispatcher through the entry points: counting and timing, stream
// captures (nothing is timed while one runs), graphs' names, module unloads, contexts.
void sampled_call(State& s, ThreadState& t, CUpti_CallbackId cbid, const CUpti_CallbackData* cb, uint16_t roles,
                  bool enter) {
  if (roles & kLaunch) return sampled_launch(s, t, cbid, cb, enter);
  if (roles & kGraphLaunch) return sampled_graph_launch(s, t, cbid, cb, enter);
  if (roles & kCaptureBegin) {
    if (enter) s.active_captures.fetch_add(1, std::memory_order_acq_rel);
    else if (result_of(cb) != CUDA_SUCCESS) s.active_captures.fetch_sub(1, std::memory_order_acq_rel);
    return;
  }
  if (roles & kCaptureEnd) {
    if (!enter) s.active_captures.fetch_sub(1, std::memory_order_acq_rel);
    return;
  }
  if (roles & kEntryOnly) return sampled_context_call(s, t, cbid, cb, enter);
  if (enter || result_of(cb) != CUDA_SUCCESS) return;
  if (roles & kModuleUnload) {
    s.funcs.clear();  // handles of the unloaded code may be reused for other kernels
  } else if (roles & kGraphInstantiate) {
    CUgraphExec* exec = nullptr;
    CUgraph g = nullptr;
    uint64_t flags = 0;
    if (!instantiate_args(cbid, cb->functionParams, exec, g, flags)) return;
    Guard guard;
    s.sampled->instantiated(*exec, g, s.funcs);
  }
}

// A kernel node entered a graph (explicitly, or recorded by stream capture): remember
// graphs that hold the target, to say what happened when the dispatch is never reached.
void on_graph_node_created(State& s, const CUpti_GraphData* gd) {
  if (!gd || gd->nodeType != CU_GRAPH_NODE_TYPE_KERNEL || !s.armed.load(std::memory_order_acquire)) return;
  const ThreadState& tl = this_thread();
  if (tl.guard || tl.in_graph_call) return;
  Guard guard;
  CUDA_KERNEL_NODE_PARAMS p{};
  if (KC_CU(cuGraphKernelNodeGetParams)(gd->node, &p) != CUDA_SUCCESS) return;
  CUfunction f = p.func ? p.func : reinterpret_cast<CUfunction>(p.kern);
  if (f) s.graphs.on_kernel_node_added(gd->graph, s.funcs.get(f, s.matcher.get()));
}

// ---------------------------------------------------------------------------------
// Callback entry

// profile mode with --nvtx / --by-nvtx / --buckets: tag each launch for its activity
// record (launch_attribution.hpp). Only these callbacks are enabled in profile mode.
void profile_tag(State& s, ThreadState& t, CUpti_CallbackId cbid, const CUpti_CallbackData* cb, uint16_t roles) {
  LaunchTag tag;
  if (s.nvtx) {
    tag.in_range = s.nvtx->matches();
    tag.path = s.nvtx->path_id();
  }
  if (roles & kGraphLaunch) {
    tag.graph = true;  // its kernels' buckets come from their records' dimensions
  } else if (s.buckets) {
    LaunchDesc d;
    if (!decode_launch(cbid, cb->functionParams, d)) return;
    FuncInfo* fi = func_info(s, t, d.f);
    Guard guard;
    tag.bucket = s.buckets->classify(*fi, d);
  }
  s.attribution->tag(cb->correlationId, std::move(tag));
}

}  // namespace inject
}  // namespace kc
