// kerncap's CUPTI injection library (libkerncap_inject.so).
//
// Loaded into every CUDA process of an unmodified app through CUDA_INJECTION64_PATH;
// the driver calls InitializeInjection() from cuInit. Configuration comes from the
// environment (config.hpp). profile mode aggregates kernel activity records
// (profiler.cpp); capture mode follows allocations and modules through driver-API
// and resource callbacks and captures one dispatch (capture_session.cpp), or several
// (a set: --buckets / a dispatch list). Selection by NVTX range, rank/pid and device:
// docs/selection.md. See docs/interposer.md for the design, the cubin selection and
// the quiescing rule.

#include "inject_state.hpp"

#define KC_EXPORT extern "C" __attribute__((visibility("default")))

namespace kc {
namespace inject {

// Autotuner benchmarking depth (kerncap_benchmark_enter/exit). Outside State: the
// Python hook may call in before the driver has initialized the injection.
std::atomic<int> g_benchmark{0};

// libkerncap_entry.so's Gate (entry_abi.hpp), when it is preloaded with this ABI.
kc_entry::Gate* find_gate() {
  using GateFn = kc_entry::Gate* (*)(int);
  auto gate = reinterpret_cast<GateFn>(dlsym(RTLD_DEFAULT, "kerncap_entry_gate"));
  return gate ? gate(kc_entry::kAbi) : nullptr;
}

// Never destroyed: other threads may be inside a callback while the process exits.
State* g = nullptr;
// Set in a fork child (pthread_atfork): CUDA is unusable there and the parent reports.
std::atomic<bool> g_forked{false};
void on_fork_child() {
  g_forked.store(true, std::memory_order_relaxed);
  if (State* s = g; s && s->gate) s->gate->on.store(false, std::memory_order_relaxed);  // the full path ignores it
}

// s.armed, and the fast path's copy. Raised first there, lowered last: a launch that
// reads the copy lowered reads s.armed lowered too, so no capture can miss its flag.
void set_armed(State& s, bool on) {
  if (on && s.gate) s.gate->armed.store(true, std::memory_order_release);
  s.armed.store(on, std::memory_order_release);
  if (!on && s.gate) s.gate->armed.store(false, std::memory_order_release);
}

// Each thread's ThreadState: in libkerncap_entry.so's per-thread block when that library
// is preloaded (its static TLS: the launch fast path gets it by pointer, and nothing
// here pays __tls_get_addr for it), else in this library's own TLS. Chosen once, when
// this library is loaded, before any callback can run.
thread_local ThreadState tl_own;  // zero-initialised, trivial: no guard, no destructor
using ThreadBlockFn = void* (*)();
ThreadBlockFn g_thread_block = nullptr;

__attribute__((constructor)) void find_thread_block() {
  using SizeFn = size_t (*)();
  auto size = reinterpret_cast<SizeFn>(dlsym(RTLD_DEFAULT, "kerncap_entry_thread_block_size"));
  auto block = reinterpret_cast<ThreadBlockFn>(dlsym(RTLD_DEFAULT, "kerncap_entry_thread_block"));
  if (size && block && size() >= sizeof(ThreadState)) g_thread_block = block;
}

ThreadState& this_thread() {
  return g_thread_block ? *static_cast<ThreadState*>(g_thread_block()) : tl_own;
}

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
  if (s.cfg.mode == Mode::Profile && !s.sampled) {
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
    c.launches = s.launches.load() + s.slots.launches();
    const auto per_thread = s.slots.kernel_counts();
    c.kernels_seen = s.funcs.launch_counts(200, &per_thread);
    c.target_matches = s.target_matches.load();
    c.refused_kernels = s.funcs.refused_names(&per_thread);
  }
  return c;
}

bool selection_requested(const Config& c) {
  return c.want_rank >= 0 || c.want_pid >= 0 || c.want_device >= 0 || !c.nvtx.empty();
}

// proc-<pid>.json's "job" section: who this process is in a multi-process job.
std::string job_json(const JobIdentity& j, bool selected, const std::string& why_not) {
  JsonWriter w;
  w.begin_object().field("rank", j.rank).field("rank_var", j.rank_var).field("world_size", j.world_size);
  w.field("local_rank", j.local_rank).field("selected", selected).field("why_not", why_not).end_object();
  return w.str();
}

// What the selection filtered out of this process's launches of the target.
std::string selection_json(State& s) {
  JsonWriter w;
  w.begin_object().field("device", s.cfg.want_device).field("off_device", s.off_device.load());
  w.key("target_devices").begin_array();
  const uint64_t mask = s.target_devices.load();
  for (int d = 0; d < 64; ++d)
    if (mask & (uint64_t(1) << d)) w.value(d);
  w.end_array().end_object();
  return w.str();
}

// How driver calls reached kerncap, as proc-<pid>.json and the manifest's provenance say it.
const char* interception_name(const State& s) { return s.entry_points ? "entry points" : "cupti"; }

// proc-<pid>.json's "interception": how driver calls reached kerncap.
std::string interception_json(const State& s) {
  static auto handed = reinterpret_cast<uint64_t (*)()>(dlsym(RTLD_DEFAULT, "kerncap_entry_handed"));
  JsonWriter w;
  w.begin_object().field("path", interception_name(s));
  w.field("entry_points_preloaded", handed != nullptr);
  if (handed) w.field("wrappers_handed", handed());
  if (s.cfg.bench_passthrough) w.field("bench_passthrough", true);  // counts may miss bypassed calls
  if (s.entry_points) w.field("images_seen", uint64_t(s.images.size()));
  if (s.entry_points) w.field("launch_fast_path", s.launch_fast_path);
  // With the fast path: launches that took the full one (the target's, a handle's first
  // on a thread); the others were counted by the fast path.
  if (s.launch_fast_path) w.field("full_path_launches", s.full_path_launches.load() + s.slots.full_path_launches());
  w.end_object();
  return w.str();
}

void write_proc(State& s) {
  if (s.cfg.out_dir.empty()) return;
  Guard guard;
  if (s.cfg.mode == Mode::Capture) s.report.set_section("interception", interception_json(s));
  if (s.cfg.mode == Mode::Capture) s.report.set_section("arrays", s.arrays.report_json());
  if (s.nvtx) s.report.set_section("nvtx", s.nvtx->report_json(s.nvtx_inside.load(), s.nvtx_outside.load()));
  if (selection_requested(s.cfg)) s.report.set_section("selection", selection_json(s));
  if (s.seq_trigger) s.report.set_section("sequence", sequence_report(s));
  if (s.cfg.mode == Mode::Capture) {
    // Launches of the target that ran (or were recorded) but are not dispatches: the
    // engine names them instead of saying the kernel never ran (docs/selection.md).
    JsonWriter w;
    w.begin_object().field("autotuner", s.xla.skipped()).field("recorded_into_graphs", s.recorded_into_graphs.load());
    w.end_object();
    s.report.set_section("not_counted", w.str());
  }
  s.report.write(s.cfg.out_dir, counters(s));
}

// buckets-<pid>.json: the set kernel's launch signatures, counts, times, captures.
void write_buckets(State& s, bool final_report) {
  if (!s.buckets || s.cfg.mode != Mode::Capture) return;
  Guard guard;
  JsonWriter w;
  std::string kernel;
  {
    std::lock_guard<std::mutex> lock(s.set_mu);
    kernel = s.set_kernel;
  }
  w.begin_object().field("pid", int(getpid())).field("kernel", kernel).field("final", final_report);
  w.field("dispatches_counted", s.target_matches.load()).key("buckets").raw(s.buckets->to_json()).end_object();
  try {
    write_file_atomic(path_join(s.cfg.out_dir, "buckets-" + std::to_string(getpid()) + ".json"), w.str());
  } catch (const std::exception& e) {
    s.report.add_error("disk", std::string("buckets report not written: ") + e.what());
  }
}

// Which cubins the module registry keeps: those holding the target, or every one for a
// sequence (any kernel of its window needs its cubin).
const KernelMatcher* registry_matcher(const State& s) { return s.keep_all ? s.keep_all.get() : s.matcher.get(); }

// This thread's slot (thread_slots.hpp), claimed on its first launch or enqueue.
ThreadSlot* my_slot(State& s, ThreadState& t) {
  if (!t.slot && !t.slot_tried) {
    t.slot_tried = true;
    t.slot = s.slots.claim();
    if (t.slot) t.fast_table = &t.slot->launches_by_handle;
    t.fast_slot = t.slot;  // the wrappers' fast path reads both (this thread only)
  }
  return t.slot;
}

// The quiescing rule's reader side (quiesce.hpp): only the outermost enqueueing call of
// a thread raises its flag (a thread without a slot, out of memory, uses a shared count).
void quiesce_enter(State& s, ThreadState& t) {
  // A sequence's owner holds the others; its own calls are the window's work.
  if (t.seq_owner && t.shared_depth == 0) return;
  if (!s.armed.load(std::memory_order_acquire) || t.shared_depth++ != 0) return;
  if (ThreadSlot* slot = my_slot(s, t)) s.quiesce.enter(*slot);
  else s.quiesce.enter_shared();
}

void quiesce_exit(State& s, ThreadState& t) {
  if (t.shared_depth <= 0 || --t.shared_depth != 0) return;
  if (t.slot) s.quiesce.exit(*t.slot);
  else s.quiesce.exit_shared();
}

CUresult result_of(const CUpti_CallbackData* cb) {
  return cb->functionReturnValue ? *static_cast<const CUresult*>(cb->functionReturnValue) : CUDA_ERROR_UNKNOWN;
}

std::string lock_path(const State& s) { return path_join(s.cfg.out_dir, "capture.lock"); }

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

// Fibonacci hashing: handles a few bytes apart (one module's functions) land in
// different slots, where `>> 4` put neighbours together and two alternating kernels
// missed on every launch.
inline size_t func_slot_index(CUfunction f) {
  static_assert(kFuncSlots == 8, "the hash takes 3 bits");
  return size_t((uint64_t(reinterpret_cast<uintptr_t>(f)) * 0x9E3779B97F4A7C15ull) >> 61);
}

// The handle's FuncInfo, from this thread's direct-mapped cache; `count` (if asked) gets
// this thread's launch counter of the kernel (null: count on the FuncInfo's shared one).
// This thread's cache entry for `f` (resolving it on a miss).
FuncSlot& func_slot(State& s, ThreadState& t, CUfunction f) {
  const uint64_t epoch = s.funcs.epoch();
  if (t.func_epoch != epoch) {
    for (FuncSlot& e : t.funcs) e.key = nullptr;
    t.func_epoch = epoch;
  }
  FuncSlot& e = t.funcs[func_slot_index(f)];
  if (__builtin_expect(e.key != f, 0)) {
    FuncInfo* fi;
    {
      Guard guard;
      fi = s.funcs.get(f, s.matcher.get());
    }
    ThreadSlot* mine = my_slot(s, t);
    e = FuncSlot{f, fi, mine ? mine->counter_for(fi) : nullptr, !fi->matched && !fi->xla_helper, fi->is_kernel};
  }
  return e;
}

FuncInfo* func_info(State& s, ThreadState& t, CUfunction f, ThreadSlot::Kernel** count) {
  FuncSlot& e = func_slot(s, t, f);
  if (count) *count = e.count;
  return e.info;
}

// One launch of `fi` by this thread, counted in its own slot (no shared cache line).
// Returns this thread's launch number of the kernel (1-based; the process's when the
// thread has no entry for it).
uint64_t count_launch(State& s, ThreadState& t, FuncInfo& fi, ThreadSlot::Kernel* per_thread) {
  if (t.slot) ThreadSlot::bump(t.slot->launches);
  else s.launches.fetch_add(1, std::memory_order_relaxed);
  if (!per_thread) return fi.launches.fetch_add(1, std::memory_order_relaxed) + 1;
  ThreadSlot::bump(per_thread->count);
  return per_thread->count.load(std::memory_order_relaxed);
}

// The device ordinal of the launching thread's current context (cached per thread
// and context: one driver call per context switch).
int current_device(ThreadState& t, CUcontext ctx) {
  if (ctx && ctx == t.dev_ctx) return t.dev_ordinal;
  CUdevice dev = -1;
  {
    Guard guard;
    if (KC_CU(cuCtxGetDevice)(&dev) != CUDA_SUCCESS) dev = -1;
  }
  t.dev_ctx = ctx;
  t.dev_ordinal = int(dev);
  return t.dev_ordinal;
}

// --nvtx / --device for one launch (or graph launch) of the target on this thread.
// Cost only when asked for: a null pointer and a negative number otherwise.
bool selected_launch(State& s, ThreadState& t, CUcontext ctx) {
  if (s.nvtx && s.nvtx->has_pattern()) {
    if (!s.nvtx->matches()) {
      s.nvtx_outside.fetch_add(1, std::memory_order_relaxed);
      return false;
    }
    s.nvtx_inside.fetch_add(1, std::memory_order_relaxed);
  }
  if (s.cfg.want_device >= 0) {
    if (!ctx) {
      Guard guard;
      KC_CU(cuCtxGetCurrent)(&ctx);
    }
    const int dev = current_device(t, ctx);
    if (dev >= 0 && dev < 64) s.target_devices.fetch_or(uint64_t(1) << dev, std::memory_order_relaxed);
    if (dev != s.cfg.want_device) {
      s.off_device.fetch_add(1, std::memory_order_relaxed);
      return false;
    }
  }
  return true;
}

// A set holds one kernel: the first matching kernel launched in the selection; other
// kernels the pattern matches are named in the report and skipped.
bool set_kernel_ok(State& s, const FuncInfo& fi) {
  std::lock_guard<std::mutex> lock(s.set_mu);
  if (s.set_kernel.empty()) s.set_kernel = fi.name;
  if (s.set_kernel == fi.name) return true;
  s.report.add_error("set_other_kernel", "the pattern also matches " + fi.demangled + "; a set holds one kernel (" +
                                             demangle(s.set_kernel) + "): pass a narrower pattern or --match exact");
  return false;
}

// A dispatch of the target in a set: its bucket, the tag that brings its activity
// record's time to the bucket, and whether it is one to capture.
bool set_wants(State& s, const FuncInfo& fi, uint64_t index, uint32_t bucket) {
  if (!set_kernel_ok(s, fi)) return false;
  if (!s.cfg.buckets) return s.cfg.wants_dispatch(index);
  return !s.buckets->captured(bucket) && !s.buckets->failed(bucket);
}

bool set_launch(State& s, const LaunchDesc& d, const FuncInfo& fi, const CUpti_CallbackData* cb, uint64_t index) {
  bool is_new = false;
  uint32_t bucket;
  {
    Guard guard;
    bucket = s.buckets->classify(fi, d, &is_new);
  }
  if (is_new) s.buckets->set_first_dispatch(bucket, index);
  LaunchTag tag;
  tag.bucket = bucket;
  s.attribution->tag(cb->correlationId, std::move(tag));
  return set_wants(s, fi, index, bucket) && start_capture(s, d, fi, cb, index, bucket);
}

// Sequences (KERNCAP_SEQUENCE): defined with the graph code below.

void launch_enter(State& s, ThreadState& t, CUpti_CallbackId cbid, const CUpti_CallbackData* cb) {
  LaunchDesc d;
  if (!decode_launch(cbid, cb->functionParams, d)) return;
  if (s.launch_fast_path) {  // per thread, like the launch counts (no shared line)
    if (ThreadSlot* slot = my_slot(s, t)) ThreadSlot::bump(slot->full_path_launches);
    else s.full_path_launches.fetch_add(1, std::memory_order_relaxed);
  }
  FuncSlot& e = func_slot(s, t, d.f);
  FuncInfo* fi = e.info;
  count_launch(s, t, *fi, e.count);
  if (s.launch_fast_path && e.plain && t.slot) {
    // From the next launch on, the fast path takes this kernel on this thread. The table
    // is valid for the epoch func_slot checked (a module unloaded since: forgotten then).
    if (t.slot->launch_epoch != t.func_epoch) t.slot->forget_launch_handles(t.func_epoch);
    t.slot->add_launch(d.f, fi);
  }
  if (__builtin_expect(s.bench_skip == Config::BenchSkip::Launch, 0)) return;

  // Most launches are not the target and no sequence is asked for: nothing below
  // applies to them (and the FuncInfo's cache line is not touched).
  if (!e.plain || s.sequence) {
    if (fi->xla_helper) s.xla.on_helper(XlaAutotune::now_ns());
    if (s.seq_trigger && sequence_launch_enter(s, t, d, *fi, cb)) {
      // recorded in the open window: it runs as the app launched it
    } else if (fi->matched && s.armed.load(std::memory_order_acquire) && g_benchmark.load(std::memory_order_acquire) == 0 &&
               !(s.xla.seen() && s.xla.skip_target(XlaAutotune::now_ns()))) {
      std::string why;
      // Only processes that ever began a stream capture pay for asking the driver.
      if (s.active_captures.load(std::memory_order_acquire) > 0 && stream_is_capturing(d, why)) {
        // Recorded into a graph, not run: the kernel node is counted when a launch of the
        // instantiated graph runs it (graph_launch_enter).
        s.recorded_into_graphs.fetch_add(1, std::memory_order_relaxed);
      } else if (selected_launch(s, t, cb->context)) {
        const uint64_t index = s.target_matches.fetch_add(1, std::memory_order_acq_rel);
        if (s.seq_trigger) {
          if (index == s.cfg.dispatch && s.cfg.seq_mode == SeqMode::Run) start_sequence_run(s, t, d, *fi, cb);
        } else if (s.cfg.set ? set_launch(s, d, *fi, cb, index)
                             : index == s.cfg.dispatch && start_capture(s, d, *fi, cb, index, UINT32_MAX)) {
          return;
        }
      }
    }
  }
  t.in_launch = true;
  t.f = d.f;
  t.is_kernel = e.is_kernel;
  t.n_lazy = 0;
  if (__builtin_expect(s.bench_skip != Config::BenchSkip::Quiesce, 1)) quiesce_enter(s, t);
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
  if (t.seq_owner) sequence_launch_exit(s, t, cb);
  quiesce_exit(s, t);
  if (!t.in_launch) return;
  t.in_launch = false;
  // More than kLazyIds modules in one launch: those are not paired by handle, and the
  // capture selects the cubin by symbol and attributes instead (docs/interposer.md).
  if (t.n_lazy > 0) pair_lazy_modules(s, t);
}

// ---------------------------------------------------------------------------------
// Entry-point interception (libkerncap_entry.so): what CUPTI's resource callbacks gave

// A load call's exit: remember what the handle was loaded from.
void record_image(State& s, CUpti_CallbackId cbid, const CUpti_CallbackData* cb) {
  const void* p = cb->functionParams;
  auto path = [](const char* f) {
    ModuleImage im;
    im.path = f ? f : "";
    return im;
  };
  switch (cbid) {
    case CUPTI_DRIVER_TRACE_CBID_cuModuleLoad: {
      auto* a = static_cast<const cuModuleLoad_params*>(p);
      return s.images.add_module(*a->module, path(a->fname));
    }
    case CUPTI_DRIVER_TRACE_CBID_cuModuleLoadData: {
      auto* a = static_cast<const cuModuleLoadData_params*>(p);
      return s.images.add_module(*a->module, image_of(a->image));
    }
    case CUPTI_DRIVER_TRACE_CBID_cuModuleLoadDataEx: {
      auto* a = static_cast<const cuModuleLoadDataEx_params*>(p);
      ModuleImage im = image_of(a->image);
      keep_jit_options(im, a->numOptions, a->options, a->optionValues);
      return s.images.add_module(*a->module, std::move(im));
    }
    case CUPTI_DRIVER_TRACE_CBID_cuModuleLoadFatBinary: {
      auto* a = static_cast<const cuModuleLoadFatBinary_params*>(p);
      return s.images.add_module(*a->module, image_of(a->fatCubin));
    }
    case CUPTI_DRIVER_TRACE_CBID_cuLibraryLoadData: {
      auto* a = static_cast<const cuLibraryLoadData_params*>(p);
      return s.images.add_library(*a->library, image_of(a->code));
    }
    case CUPTI_DRIVER_TRACE_CBID_cuLibraryLoadFromFile: {
      auto* a = static_cast<const cuLibraryLoadFromFile_params*>(p);
      return s.images.add_library(*a->library, path(a->fileName));
    }
    default:
      return;
  }
}

// An unload: forget the handle's image and any cubin recovered for it (the handle may
// come back for other code).
void forget_image(State& s, CUpti_CallbackId cbid, const CUpti_CallbackData* cb) {
  std::vector<uint32_t> ids;
  if (cbid == CUPTI_DRIVER_TRACE_CBID_cuModuleUnload) {
    CUmodule m = static_cast<const cuModuleUnload_params*>(cb->functionParams)->hmod;
    s.images.forget_module(m);
    ids = s.modules.ids_for_module(m);
  } else if (cbid == CUPTI_DRIVER_TRACE_CBID_cuLibraryUnload) {
    CUlibrary l = static_cast<const cuLibraryUnload_params*>(cb->functionParams)->library;
    s.images.forget_library(l);
    ids = s.modules.ids_for_library(l);
  }
  for (uint32_t id : ids) s.modules.on_module_unloading(id);
}

// Context teardown and explicit kernel nodes: CUPTI's CONTEXT_DESTROY_STARTING and
// GRAPHNODE_CREATED, seen from the calls that cause them.
void entry_only_call(State& s, CUpti_CallbackId cbid, const CUpti_CallbackData* cb, bool enter) {
  const void* p = cb->functionParams;
  switch (cbid) {
    case CUPTI_DRIVER_TRACE_CBID_cuCtxDestroy_v2:
      if (enter) s.mem.drop_context(static_cast<const cuCtxDestroy_v2_params*>(p)->ctx);
      if (enter) s.arrays.drop_context(static_cast<const cuCtxDestroy_v2_params*>(p)->ctx);
      break;
    case CUPTI_DRIVER_TRACE_CBID_cuDevicePrimaryCtxReset_v2:
    case CUPTI_DRIVER_TRACE_CBID_cuDevicePrimaryCtxRelease_v2: {
      // The primary context goes when reset, or released for the last time.
      const CUdevice dev = static_cast<const cuDevicePrimaryCtxReset_v2_params*>(p)->dev;  // same layout
      ThreadState& tl = this_thread();
      if (enter) {
        tl.primary_ctx = nullptr;
        Guard guard;
        CUcontext cur = nullptr;
        CUdevice cur_dev = -1;
        if (KC_CU(cuCtxGetCurrent)(&cur) == CUDA_SUCCESS && cur && KC_CU(cuCtxGetDevice)(&cur_dev) == CUDA_SUCCESS &&
            cur_dev == dev)
          tl.primary_ctx = cur;
        return;
      }
      if (!tl.primary_ctx || result_of(cb) != CUDA_SUCCESS) return;
      unsigned flags = 0;
      int active = 1;
      {
        Guard guard;
        if (cbid == CUPTI_DRIVER_TRACE_CBID_cuDevicePrimaryCtxRelease_v2 &&
            KC_CU(cuDevicePrimaryCtxGetState)(dev, &flags, &active) != CUDA_SUCCESS)
          active = 1;
      }
      if (cbid == CUPTI_DRIVER_TRACE_CBID_cuDevicePrimaryCtxReset_v2 || !active) {
        s.mem.drop_context(tl.primary_ctx);
        s.arrays.drop_context(tl.primary_ctx);
      }
      tl.primary_ctx = nullptr;
      break;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuGraphAddKernelNode_v2: {
      auto* a = static_cast<const cuGraphAddKernelNode_v2_params*>(p);
      if (enter || result_of(cb) != CUDA_SUCCESS || !a->nodeParams || !s.armed.load(std::memory_order_acquire)) return;
      CUfunction f = a->nodeParams->func ? a->nodeParams->func : reinterpret_cast<CUfunction>(a->nodeParams->kern);
      if (f) s.graphs.on_kernel_node_added(a->hGraph, s.funcs.get(f, s.matcher.get()));
      break;
    }
    default:
      break;
  }
}

// The module callback of the short subscription made at the capture.
void CUPTIAPI on_late_module(void*, CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const void* data) {
  State* s = g;
  if (!s || domain != CUPTI_CB_DOMAIN_RESOURCE || cbid != CUPTI_CBID_RESOURCE_MODULE_LOADED) return;
  auto* md = static_cast<const CUpti_ModuleResourceData*>(static_cast<const CUpti_ResourceData*>(data)->resourceDescriptor);
  if (!md) return;
  ModuleCollector::note_loaded(md->moduleId);
  if (const KernelMatcher* m = registry_matcher(*s); m && md->pCubin && md->cubinSize)
    s->modules.on_module_loaded(md->moduleId, md->pCubin, md->cubinSize, *m);
}

// Entry points: the target's cubin, which no CUPTI callback reported while the app ran.
// Its image is loaded once more under a CUPTI subscription made now; the module
// callback hands over the cubin the driver picks, exactly as it did for the app's load
// (facts §24), and it is paired with the app's handle for the cubin selection. No error
// also when no image was seen: the cubin selection then says no cubin was seen.
Recovered recover_cubin(State& s, CUfunction launched, const FuncInfo& fi) {
  Guard guard;
  CUlibrary lib = nullptr;
  CUmodule mod = nullptr;
  CUfunction fn = launched;
  if (fi.is_kernel) {
    CUkernel k = reinterpret_cast<CUkernel>(launched);
    if (KC_CU(cuKernelGetLibrary)(&lib, k) != CUDA_SUCCESS) lib = nullptr;
    if (KC_CU(cuKernelGetFunction)(&fn, k) != CUDA_SUCCESS) fn = nullptr;
  }
  if (fn && KC_CU(cuFuncGetModule)(&mod, fn) != CUDA_SUCCESS) mod = nullptr;
  if ((mod && !s.modules.ids_for_module(mod).empty()) || (lib && !s.modules.ids_for_library(lib).empty()))
    return {};  // recovered by an earlier capture
  ModuleImage image;
  bool found = s.images.find(mod, lib, image);
  if (!found && mod) {
    // A function of a library's module (cuLibraryGetKernel + cuKernelGetFunction).
    for (auto& [l, im] : s.images.libraries()) {
      CUmodule lm = nullptr;
      if (KC_CU(cuLibraryGetModule)(&lm, l) == CUDA_SUCCESS && lm == mod) {
        lib = l;
        image = im;
        found = true;
        break;
      }
    }
  }
  if (!found || (!image.data() && image.path.empty())) return {};
  Recovered out;
  if (!image.unmatched.empty())
    out.warning = "the kernel's module was JIT-compiled with options kerncap cannot replay (CUjit_option " +
                  image.unmatched + "); its cubin was reloaded without them";
  CUpti_SubscriberHandle sub = nullptr;
  CUptiResult r = cuptiSubscribe(&sub, on_late_module, nullptr);
  struct Unsubscribe {  // also when a driver lookup below throws
    CUpti_SubscriberHandle& sub;
    ~Unsubscribe() {
      if (sub) cuptiUnsubscribe(sub);
    }
  } unsubscribe{sub};
  if (r != CUPTI_SUCCESS) {
    sub = nullptr;
    out.error = cupti_error(r, "cuptiSubscribe");
    if (r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED)
      out.error += ": another CUPTI client (PyTorch profiler, Nsight Systems/Compute, a tracing tool) is attached to "
                   "this process; kerncap needs CUPTI for a moment to read the kernel's cubin. Run without the other "
                   "tool.";
    return out;
  }
  std::string& why = out.error;
  r = cuptiEnableCallback(1, sub, CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_MODULE_LOADED);
  CUmodule again = nullptr;
  std::vector<uint32_t> ids;
  if (r != CUPTI_SUCCESS) {
    why = cupti_error(r, "cuptiEnableCallback(MODULE_LOADED)");
  } else {
    ModuleCollector loaded;
    CUresult cr = !image.path.empty() ? KC_CU(cuModuleLoad)(&again, image.path.c_str())
                  : image.jit_options.empty()
                      ? KC_CU(cuModuleLoadData)(&again, image.data())
                      : KC_CU(cuModuleLoadDataEx)(&again, image.data(), unsigned(image.jit_options.size()),
                                                  image.jit_options.data(), image.jit_values.data());
    if (cr == CUDA_SUCCESS) {
      // Lazy loading defers the code until a function is used: force it in.
      CUfunction f = nullptr;
      if (KC_CU(cuModuleGetFunction)(&f, again, fi.name.c_str()) == CUDA_SUCCESS) KC_CU(cuFuncLoad)(f);
    } else {
      why = "reloading the kernel's module image failed: " + cu_error_string(cr);
    }
    ids = loaded.ids();
  }
  cuptiUnsubscribe(sub);
  sub = nullptr;
  if (again) KC_CU(cuModuleUnload)(again);
  if (mod) s.modules.pair_module(mod, ids);
  if (lib) s.modules.pair_library(lib, ids);
  return out;
}

// ---------------------------------------------------------------------------------
// Apply mode (`kerncap apply`, apply_mode.hpp, docs/apply.md)

// The cubin sha256 of a launched function's module, found as a capture finds it.
std::string launched_cubin_sha(State& s, CUfunction f, const FuncInfo& fi, std::string& why) {
  const Recovered rec = recover_cubin(s, f, fi);
  if (!rec.error.empty()) {
    why = rec.error;
    return {};
  }
  CUfunction fn = f;
  CUlibrary lib = nullptr;
  CUmodule mod = nullptr;
  if (fi.is_kernel) {
    CUkernel k = reinterpret_cast<CUkernel>(f);
    if (KC_CU(cuKernelGetLibrary)(&lib, k) != CUDA_SUCCESS) lib = nullptr;
    if (KC_CU(cuKernelGetFunction)(&fn, k) != CUDA_SUCCESS) fn = nullptr;
  }
  if (fn && KC_CU(cuFuncGetModule)(&mod, fn) != CUDA_SUCCESS) mod = nullptr;
  std::vector<uint32_t> ids = mod ? s.modules.ids_for_module(mod) : std::vector<uint32_t>();
  if (ids.empty() && lib) ids = s.modules.ids_for_library(lib);
  DriverFuncAttrs attrs;
  if (fn) {
    KC_CU(cuFuncGetAttribute)(&attrs.num_regs, CU_FUNC_ATTRIBUTE_NUM_REGS, fn);
    KC_CU(cuFuncGetAttribute)(&attrs.local_size_bytes, CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, fn);
  }
  const CubinChoice c = s.modules.choose(fi.name, ids, attrs);
  if (!c.cubin) {
    why = "no cubin holding " + fi.name + " was seen (its module image was not recorded)";
    return {};
  }
  if (c.selection == "ambiguous") {
    why = std::to_string(c.candidates) + " cubins hold " + fi.name + " and none is known to be the launched one's";
    return {};
  }
  return c.cubin->sha256;
}

void apply_call(State& s, ThreadState& t, CUpti_CallbackId cbid, const CUpti_CallbackData* cb, uint16_t roles,
                bool enter) {
  if (roles & kLaunch) {
    if (!enter) {
      if (t.in_launch) {
        t.in_launch = false;
        Guard guard;
        s.applier->launch_exit(cb->correlationId, result_of(cb));
      }
      return;
    }
    LaunchDesc d;
    if (!decode_launch(cbid, cb->functionParams, d)) return;
    FuncInfo* fi = func_info(s, t, d.f);
    if (!fi || !fi->matched || g_benchmark.load(std::memory_order_acquire) != 0) return;
    std::string why;
    if (s.active_captures.load(std::memory_order_acquire) > 0 && stream_is_capturing(d, why)) {
      s.applier->recorded_into_graph();  // runs at the graph's launches, as recorded: not substituted
      return;
    }
    Guard guard;
    t.in_launch = true;
    s.applier->launch_enter(cbid, const_cast<void*>(cb->functionParams), d, fi->is_kernel, cb->correlationId,
                            [&](std::string& w) { return launched_cubin_sha(s, d.f, *fi, w); });
    return;
  }
  if (roles & kCaptureBegin) {
    if (enter) s.active_captures.fetch_add(1, std::memory_order_acq_rel);
    else if (result_of(cb) != CUDA_SUCCESS) s.active_captures.fetch_sub(1, std::memory_order_acq_rel);
    return;
  }
  if ((roles & kCaptureEnd) && !enter) s.active_captures.fetch_sub(1, std::memory_order_acq_rel);
  if (enter || result_of(cb) != CUDA_SUCCESS) return;
  if (roles & kModuleLoad) {
    record_image(s, cbid, cb);  // what the launched function's cubin is identified from
  } else if (roles & kModuleUnload) {
    s.funcs.clear();
    forget_image(s, cbid, cb);
    s.applier->forget_handles();
  }
}

// A successful watched call's exit: what it changed in memory, modules, arrays, graphs.
void track_exit(State& s, CUpti_CallbackId cbid, const CUpti_CallbackData* cb, uint16_t roles) {
  if (roles & kModuleUnload) {
    s.funcs.clear();  // handles of the unloaded code may be reused for other kernels
    if (s.entry_points) forget_image(s, cbid, cb);
  } else if (roles & (kAlloc | kHostMemory)) {
    track_memory(s, cbid, cb);
  } else if (roles & kArray) {
    s.arrays.on_call(cbid, cb->functionParams, cb->context);
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

void on_driver(State& s, ThreadState& t, CUpti_CallbackId cbid, const CUpti_CallbackData* cb) {
  const uint16_t roles = call_roles(cbid);
  const bool enter = cb->callbackSite == CUPTI_API_ENTER;
  if (__builtin_expect(s.bench_skip == Config::BenchSkip::Callback, 0) && (roles & kLaunch)) return;
  if (s.mode == Mode::Apply) {
    apply_call(s, t, cbid, cb, roles, enter);
    return;
  }
  if (s.mode == Mode::Profile) {
    if (s.sampled) sampled_call(s, t, cbid, cb, roles, enter);
    else if (enter && (roles & (kLaunch | kGraphLaunch))) profile_tag(s, t, cbid, cb, roles);
    return;
  }
  if (roles & kLaunch) {
    if (enter) launch_enter(s, t, cbid, cb);
    else launch_exit(s, t, cb);
    return;
  }
  if (roles & kCaptureBegin) {
    if (enter && t.seq_owner) sequence_call(s, t, cbid, cb, roles, enter);
    // Counted before the capture can begin: from here until its end every target
    // launch asks the driver whether its stream is capturing (stream_is_capturing).
    if (enter) s.active_captures.fetch_add(1, std::memory_order_acq_rel);
    else if (result_of(cb) != CUDA_SUCCESS) s.active_captures.fetch_sub(1, std::memory_order_acq_rel);
    return;
  }
  if (roles & kModuleLoad) {
    if (s.entry_points) {
      if (!enter && result_of(cb) == CUDA_SUCCESS) record_image(s, cbid, cb);
    } else if (enter) {
      tl_load_collector.emplace();
    } else if (tl_load_collector) {
      if (result_of(cb) == CUDA_SUCCESS) pair_loaded(s, cbid, cb);
      tl_load_collector.reset();
    }
    return;
  }
  if (roles & kEntryOnly) {
    entry_only_call(s, cbid, cb, enter);
    return;
  }
  const bool enqueue = roles & kEnqueue;
  if (roles & (kGraphInstantiate | kGraphUpdate)) t.in_graph_call = enter;
  if (s.seq_trigger && (roles & (kEnqueue | kSync | kCaptureBegin)) && !(roles & kGraphLaunch))
    sequence_call(s, t, cbid, cb, roles, enter);
  if (enter) {
    // Counting first: a capture starting here takes the quiesce lock exclusively.
    if (roles & kGraphLaunch) graph_launch_enter(s, t, cbid, cb);
    if (enqueue) quiesce_enter(s, t);
    return;
  }
  if (roles & kGraphLaunch) {
    graph_launch_exit(t);
    if (t.seq_graph && s.seq) {
      const CUresult r = result_of(cb);
      if (r != CUDA_SUCCESS) abort_sequence(s, t, "capture_failed", std::string(cb->functionName) + " of the "
                                                                        "sequence failed in the app: " + cu_error_string(r));
      else close_sequence(s, t);
    }
  }
  if (roles & kCaptureEnd) s.active_captures.fetch_sub(1, std::memory_order_acq_rel);
  if (result_of(cb) == CUDA_SUCCESS) track_exit(s, cbid, cb, roles);
  if (enqueue) quiesce_exit(s, t);  // after tracking: the capture sees a consistent region list
}

void on_resource(State& s, CUpti_CallbackId cbid, const CUpti_ResourceData* rd) {
  switch (cbid) {
    case CUPTI_CBID_RESOURCE_MODULE_LOADED: {
      auto* md = static_cast<const CUpti_ModuleResourceData*>(rd->resourceDescriptor);
      if (!md || loading_own_module()) return;  // kerncap's fingerprint kernel is not the app's code
      // A load call's collector (or the capture's) takes it first; else it was loaded
      // lazily by the launch in flight on this thread.
      ThreadState& tl = this_thread();
      if (!ModuleCollector::note_loaded(md->moduleId) && tl.in_launch && tl.n_lazy++ < kLazyIds)
        tl.lazy[tl.n_lazy - 1] = md->moduleId;
      if (const KernelMatcher* m = registry_matcher(s); m && md->pCubin && md->cubinSize)
        s.modules.on_module_loaded(md->moduleId, md->pCubin, md->cubinSize, *m);
      break;
    }
    case CUPTI_CBID_RESOURCE_MODULE_UNLOAD_STARTING: {
      auto* md = static_cast<const CUpti_ModuleResourceData*>(rd->resourceDescriptor);
      if (md) s.modules.on_module_unloading(md->moduleId);
      break;
    }
    case CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING:
      s.mem.drop_context(rd->context);
      s.arrays.drop_context(rd->context);
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
      ThreadState& t = this_thread();
      if (!t.guard) on_driver(*s, t, cbid, static_cast<const CUpti_CallbackData*>(data));
    } else if (domain == CUPTI_CB_DOMAIN_NVTX) {
      if (s->nvtx && s->seq_trigger) sequence_nvtx(*s, this_thread(), cbid, static_cast<const CUpti_NvtxData*>(data));
      else if (s->nvtx) s->nvtx->on_callback(cbid, static_cast<const CUpti_NvtxData*>(data));
    }
  } catch (const std::exception& e) {
    s->report.add_error("capture_failed", std::string("kerncap internal error in callback ") + std::to_string(cbid) +
                                              ": " + e.what());
  }
}

}  // namespace inject

// kerncap's own NVTX tool (entry points): the range calls, as CUPTI's NVTX domain gives them.
void nvtx_event(CUpti_CallbackId cbid, const CUpti_NvtxData* data) {
  inject::on_callback(nullptr, CUPTI_CB_DOMAIN_NVTX, cbid, data);
}

namespace inject {

// ---------------------------------------------------------------------------------
// Setup and teardown

// profile-<pid>.json's extra tables: per (NVTX path, kernel), per bucket, the NVTX report.
std::vector<std::pair<std::string, std::string>> profile_extras(State& s) {
  std::vector<std::pair<std::string, std::string>> extra;
  if (s.cfg.profile_by_nvtx && s.attribution) extra.emplace_back("nvtx_ranges", s.attribution->nvtx_json());
  if (s.buckets) extra.emplace_back("buckets", s.buckets->to_json());
  if (s.nvtx) extra.emplace_back("nvtx", s.nvtx->report_json(0, 0));
  if (s.attribution) extra.emplace_back("untagged_records", std::to_string(s.attribution->untagged()));
  return extra;
}

// Exit reports by mode. The sampled profile's and apply mode's end with the process's report.
void sampled_profile_exit(State& s) {
  Guard guard;
  s.sampled->sampler.drain(5.0);  // every pair still pending, read (a GPU that hangs gets 5 s)
  try {
    write_file_atomic(path_join(s.cfg.out_dir, "profile-" + std::to_string(getpid()) + ".json"),
                      s.sampled->to_json(int(getpid()), s.funcs, s.slots.kernel_counts()));
  } catch (const std::exception& e) {
    s.report.add_error("disk", std::string("profile not written: ") + e.what());
  }
  s.report.set_finalize_result("not used");  // no CUPTI in this process
  s.report.set_section("profile_timing", s.sampled->sampler.timing_json());  // held or not, how calibrated
  write_proc(s);
}

void apply_exit(State& s) {
  Guard guard;
  const std::string pid = std::to_string(getpid());
  try {
    if (s.applier->config().profile) {
      profiler::flush_and_stop();
      write_file_atomic(path_join(s.cfg.out_dir, "profile-" + pid + ".json"), profiler::to_json(int(getpid())));
    }
    write_file_atomic(path_join(s.cfg.out_dir, "apply-" + pid + ".json"), s.applier->report_json(int(getpid())));
  } catch (const std::exception& e) {
    s.report.add_error("disk", std::string("apply report not written: ") + e.what());
  }
  write_proc(s);
}

// Profile mode: the profile, then CUPTI detached (or left to another client); true when
// the process's report was written already.
bool profile_exit(State& s) {
  Guard guard;
  profiler::flush_and_stop();
  try {
    write_file_atomic(path_join(s.cfg.out_dir, "profile-" + std::to_string(getpid()) + ".json"),
                      profiler::to_json(int(getpid()), profile_extras(s)));
  } catch (const std::exception& e) {
    s.report.add_error("disk", std::string("profile not written: ") + e.what());
  }
  s.active.store(false, std::memory_order_release);
  CUptiResult r = CUPTI_SUCCESS;
  if (s.subscriber) {
    r = cuptiUnsubscribe(s.subscriber);
  } else if ((r = cuptiSubscribe(&s.subscriber, on_callback, nullptr)) == CUPTI_SUCCESS) {
    r = cuptiUnsubscribe(s.subscriber);
  } else if (r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED) {
    // Another client subscribed while we held none: it may have taken the activity
    // buffers over. Say so (the engine shows it as a warning); leave CUPTI to it.
    s.report.set_finalize_result(
        "another CUPTI client (PyTorch profiler, Nsight Systems/Compute, a tracing tool) subscribed during the run, "
        "so the profile may miss kernels; CUPTI was left to it");
    write_proc(s);
    return true;
  }
  if (s.cfg.profile_tags()) {
    // Launch and NVTX callbacks were enabled: another thread may still be inside one,
    // and cuptiFinalize under a running callback is the race Kineto hit. Detach only.
    s.report.set_finalize_result(r == CUPTI_SUCCESS ? "unsubscribed" : cupti_error(r, "cuptiUnsubscribe"));
  } else {
    // Every record is in: detach CUPTI so the app's own teardown runs without it. No
    // callback is enabled in plain profile mode and activity is off, so nothing of
    // ours can be inside CUPTI now.
    if (r == CUPTI_SUCCESS) r = cuptiFinalize();
    s.report.set_finalize_result(r == CUPTI_SUCCESS ? "ok" : cupti_error(r, "cuptiFinalize"));
  }
  return false;
}

// Capture mode: a set's buckets, a sequence's window, a dispatch never reached.
void capture_exit(State& s) {
  if (s.buckets) {
    Guard guard;
    profiler::flush_and_stop();  // the set's time shares: every record of the run
    write_buckets(s, true);
  }
  if (s.seq_trigger) sequence_at_exit(s);
  if (s.armed.load() && !s.claimed.load()) {
    // The dispatch was never reached: say what the graphs holding the target did.
    std::string why;
    {
      Guard guard;
      why = s.graphs.unreached_summary();
    }
    const uint64_t recorded = s.recorded_into_graphs.load();
    if (recorded)
      why = std::to_string(recorded) + " launch(es) of the target were recorded into CUDA graphs by stream capture" +
            (why.empty() ? "" : "; " + why);
    if (!why.empty()) s.report.add_error("graph_unreached", why);
  }
}

void at_exit() {
  State* s = g;
  if (!s || g_forked.load()) return;  // a fork child: its parent reports
  // Once: kerncap_report_now (a process about to os._exit) runs it before libc would.
  static std::atomic<bool> reported{false};
  if (reported.exchange(true)) return;
  if (s->active && s->sampled) return sampled_profile_exit(*s);
  if (s->active && s->applier) return apply_exit(*s);
  if (s->active && s->cfg.mode == Mode::Profile && profile_exit(*s)) return;
  if (s->active && s->cfg.mode == Mode::Capture) capture_exit(*s);
  write_proc(*s);
}

// Capture through libkerncap_entry.so's wrappers when it is preloaded and the capture
// needs nothing only CUPTI gives; false: use CUPTI callbacks.
void entry_dispatch(CUpti_CallbackId cbid, const CUpti_CallbackData* cb) {
  on_callback(nullptr, CUPTI_CB_DOMAIN_DRIVER_API, cbid, cb);
}

// KERNCAP_BENCH_PASSTHROUGH=1: let kerncap_bench_passthrough (libkerncap_entry.so) switch
// the dispatcher off and on (claim_capture refuses every capture of such a process).
void allow_bench_switch() {
  using Allow = void (*)(void (*)(CUpti_CallbackId, const CUpti_CallbackData*));
  if (auto allow = reinterpret_cast<Allow>(dlsym(RTLD_DEFAULT, "kerncap_entry_allow_bench"))) allow(entry_dispatch);
}

bool attach_entry_points(State& s) {
  using Attach = int (*)(void (*)(CUpti_CallbackId, const CUpti_CallbackData*));
  auto attach = reinterpret_cast<Attach>(dlsym(RTLD_DEFAULT, "kerncap_entry_attach"));
  if (!attach || !s.cfg.entry_capable()) return false;
  s.entry_points = true;
  s.active = true;
  set_armed(s, true);
  if (attach(entry_dispatch) > 0) {
    // Capture mode reads a launch's context only for the target's launches (selected_launch)
    // and a sequence's (record_sequence_launch), and asks the driver there: every other
    // launch skips the wrapper's cuCtxGetCurrent.
    using Lazy = void (*)(int);
    if (auto lazy = reinterpret_cast<Lazy>(dlsym(RTLD_DEFAULT, "kerncap_entry_lazy_launch_context"))) lazy(1);
    // Plain launches through the wrappers' fast path (entry_abi.hpp), which reads this
    // library's per-thread state from the block it lives in; a sequence's launches all
    // take the full path, and so do the bench's decomposition rows.
    ThreadState& t = this_thread();
    s.launch_fast_path = s.gate && g_thread_block && !s.sequence && !s.subscriber &&
                         s.bench_skip == Config::BenchSkip::None &&
                         static_cast<void*>(static_cast<kc_entry::ThreadHot*>(&t)) == static_cast<void*>(&t);
    if (s.launch_fast_path) {
      s.gate->fence.store(!s.quiesce.asymmetric(), std::memory_order_relaxed);
      s.gate->on.store(true, std::memory_order_release);  // armed was raised above
    }
    if (s.cfg.bench_passthrough) allow_bench_switch();
    return true;
  }
  attach(nullptr);  // libcuda not loaded: cannot be (we are inside its cuInit); stay safe
  s.entry_points = false;
  s.active = false;
  set_armed(s, false);
  return false;
}

// Profile mode's default (KERNCAP_PROFILE_TIMING=sampled): the entry points count every
// launch and a sample is timed with events (sampled_profile.hpp). Without the entry
// points, or with --nvtx / --by-nvtx / --buckets (they tag CUPTI's activity records),
// profile mode reads CUPTI's records for every launch; proc-<pid>.json says which ran.
bool attach_sampled_profile(State& s) {
  if (!s.cfg.profile_sampled && !s.cfg.profile_tags()) {
    s.report.set_section("profile_timing", "{\"used\": \"exact\"}");
    return false;
  }
  using Attach = int (*)(void (*)(CUpti_CallbackId, const CUpti_CallbackData*));
  auto attach = reinterpret_cast<Attach>(dlsym(RTLD_DEFAULT, "kerncap_entry_attach"));
  const char* why = s.cfg.profile_tags() ? "--nvtx, --by-nvtx and --buckets need CUPTI's activity records"
                    : !attach            ? "libkerncap_entry.so is not preloaded"
                                         : nullptr;
  if (!why) {
    s.sampled = std::make_unique<SampledProfile>();
    s.entry_points = true;
    s.active = true;
    if (attach(entry_dispatch) > 0) {
      s.report.set_section("profile_timing", "{\"used\": \"sampled\"}");
      return true;
    }
    attach(nullptr);
    s.sampled.reset();
    s.entry_points = false;
    s.active = false;
    why = "libcuda was not loaded when kerncap attached";
  }
  JsonWriter w;
  w.begin_object().field("used", "exact").field("requested", s.cfg.profile_sampled ? "sampled" : "exact");
  w.field("why", why).end_object();
  s.report.set_section("profile_timing", w.str());
  return false;
}

// Apply mode: through the entry points only (only there can a launch's function be
// swapped); the kernel's GPU time from CUPTI's activity records when asked for.
void attach_apply(State& s) {
  std::string error;
  ApplyConfig cfg = ApplyConfig::from_env(error);
  using Attach = int (*)(void (*)(CUpti_CallbackId, const CUpti_CallbackData*));
  auto attach = reinterpret_cast<Attach>(dlsym(RTLD_DEFAULT, "kerncap_entry_attach"));
  if (error.empty() && !attach) error = "kerncap apply needs libkerncap_entry.so preloaded (LD_PRELOAD)";
  if (!error.empty()) {
    s.report.add_error("config", error);
    return;
  }
  if (cfg.profile) {
    const std::string err = profiler::start(nullptr);
    if (!err.empty()) {
      s.report.add_error("cupti_activity", err);
      return;  // the timing would be wrong: stay out of the way
    }
  }
  s.applier = std::make_unique<Applier>(std::move(cfg));
  if (s.cfg.bench_passthrough)  // bench/paired.py's apply row: mode 3 holds the redirect back
    s.applier->bench_hold(reinterpret_cast<int (*)()>(dlsym(RTLD_DEFAULT, "kerncap_entry_bench_apply_held")));
  s.entry_points = true;
  s.active = true;
  if (attach(entry_dispatch) <= 0) {
    attach(nullptr);
    s.active = false;
    s.report.add_error("config", "libcuda was not loaded when kerncap attached");
  } else if (s.cfg.bench_passthrough) {
    allow_bench_switch();
  }
}

bool enable(State& s, CUpti_CallbackDomain domain, CUpti_CallbackId cbid) {
  CUptiResult r = cuptiEnableCallback(1, s.subscriber, domain, cbid);
  if (r == CUPTI_SUCCESS) return true;
  s.report.add_error("capture_failed", cupti_error(r, "cuptiEnableCallback") + " for callback id " + std::to_string(cbid));
  return false;
}

// The request cannot be met in this job (a rank beyond the world size, --rank and
// --pid that disagree): ask the engine to stop the app now rather than at its end.
void request_stop(State& s, const std::string& why) {
  try {
    write_file_atomic(path_join(s.cfg.out_dir, "stop-request"), why + "\n");
  } catch (const std::exception& e) {
    s.report.add_error("disk", std::string("cannot write the stop request: ") + e.what());
  }
}

// Rank / pid selection, decided before anything is enabled. False: this process is
// not the one that captures and stays inert (its report says who it is).
bool select_this_process(State& s) {
  s.job = JobIdentity::from_env();
  if (s.cfg.mode != Mode::Capture) return true;
  const SelectionVerdict v = select_process(s.cfg, s.job);
  for (const auto& [kind, message] : v.errors) s.report.add_error(kind, message);
  s.report.set_section("job", job_json(s.job, v.selected, v.why_not));
  if (v.fatal) request_stop(s, v.errors.empty() ? v.why_not : v.errors.front().second);
  // With a selection, every process says at once who it is: processes of a job that is
  // stopped after the capture never reach their exit handlers.
  if (selection_requested(s.cfg)) write_proc(s);
  return v.selected;
}

// NVTX, buckets and record attribution: created only when asked for, so that a plain
// capture or profile pays nothing for them.
void create_selection(State& s) {
  const bool profile = s.cfg.mode == Mode::Profile;
  if (!s.cfg.nvtx.empty() || (profile && s.cfg.profile_by_nvtx))
    s.nvtx = std::make_unique<NvtxRanges>(s.cfg.nvtx, s.cfg.nvtx_regex);
  if ((profile && s.cfg.profile_buckets) || (!profile && s.cfg.set)) s.buckets = std::make_unique<LaunchBuckets>();
  if (!profile && s.cfg.sequence()) {
    s.seq_trigger = std::make_unique<SequenceTrigger>(s.cfg.dispatch, s.cfg.seq_count, !s.cfg.seq_until.empty());
    s.sequence = true;
    s.keep_all = std::make_unique<KernelMatcher>(std::string(), MatchMode::Substring);
    if (!s.cfg.seq_until.empty()) s.seq_until = std::make_unique<KernelMatcher>(s.cfg.seq_until, s.cfg.match);
  }
  if (profile ? s.cfg.profile_tags() : s.cfg.set)
    s.attribution = std::make_unique<LaunchAttribution>(s.nvtx.get(), s.buckets.get(), profile && s.cfg.profile_by_nvtx,
                                                        profile);
}

bool enable_launch_tags(State& s) {
  bool ok = true;
  for (size_t i = 0; i < kWatchedCallCount; ++i)
    if (kWatchedCalls[i].roles & (kLaunch | kGraphLaunch)) ok &= enable(s, CUPTI_CB_DOMAIN_DRIVER_API, kWatchedCalls[i].id);
  return ok;
}

bool enable_nvtx(State& s) {
  const CUptiResult r = cuptiEnableDomain(1, s.subscriber, CUPTI_CB_DOMAIN_NVTX);
  if (r == CUPTI_SUCCESS) return true;
  s.report.add_error("capture_failed", cupti_error(r, "cuptiEnableDomain(NVTX)"));
  return false;
}

// Profile mode through CUPTI: activity records (and, with tags, launch and NVTX callbacks).
void start_cupti_profile(State& s) {
  bool ok = true;
  if (s.cfg.profile_tags()) ok = enable_launch_tags(s) && (!s.nvtx || enable_nvtx(s));
  std::string err = ok ? profiler::start(s.attribution.get()) : std::string("launch callbacks not enabled");
  if (!err.empty()) {
    s.report.add_error("cupti_activity", err);
    cuptiUnsubscribe(s.subscriber);
    return;
  }
  if (!s.cfg.profile_tags()) {
    // Activity records need no subscriber, and a subscriber costs ~100 ns on every
    // driver call (docs/facts.md §6): subscribing only proved that no other CUPTI
    // client is here. at_exit checks again that none came during the run.
    cuptiUnsubscribe(s.subscriber);
    s.subscriber = nullptr;
  }
  s.active = true;
}

// Capture (and set) mode through CUPTI: every watched call, the resource events, NVTX.
void start_cupti_capture(State& s) {
  bool ok = true;
  for (size_t i = 0; i < kWatchedCallCount; ++i)
    if (!(kWatchedCalls[i].roles & kEntryOnly)) ok &= enable(s, CUPTI_CB_DOMAIN_DRIVER_API, kWatchedCalls[i].id);
  ok &= enable(s, CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_MODULE_LOADED);
  ok &= enable(s, CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_MODULE_UNLOAD_STARTING);
  ok &= enable(s, CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING);
  ok &= enable(s, CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED);
  if (s.nvtx) ok &= enable_nvtx(s);
  if (ok && s.cfg.set) {
    // A set's time shares: the target's activity records, attributed to their buckets.
    const std::string err = profiler::start(s.attribution.get());
    if (!err.empty()) {
      s.report.add_error("cupti_activity", err);
      ok = false;
    }
  }
  if (!ok) {
    cuptiUnsubscribe(s.subscriber);
    return;  // a partial view would capture wrong state: stay out of the way
  }
  s.active = true;
  set_armed(s, true);
}

void initialize() {
  g = new State;
  State& s = *g;
  pthread_atfork(nullptr, nullptr, on_fork_child);
  s.cfg = Config::from_env();
  s.mode = s.cfg.mode;
  s.bench_skip = s.cfg.bench_skip;
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
  try {
    if (s.cfg.error.empty()) create_selection(s);
  } catch (const std::exception& e) {
    s.cfg.error = e.what();
  }
  if (!s.cfg.error.empty()) {
    s.report.add_error("config", s.cfg.error);
    return;
  }
  if (!select_this_process(s)) return;  // another process of the job captures
  init_call_roles();
  if (s.cfg.mode == Mode::Apply) {
    attach_apply(s);
    return;
  }
  if (attach_entry_points(s)) return;  // no CUPTI until the capture (docs/interposer.md)
  if (s.cfg.mode == Mode::Profile && attach_sampled_profile(s)) return;  // no CUPTI at all
  CUptiResult r = cuptiSubscribe(&s.subscriber, on_callback, nullptr);
  if (r != CUPTI_SUCCESS) {
    std::string msg = cupti_error(r, "cuptiSubscribe");
    if (r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED)
      msg += ": another CUPTI client (PyTorch profiler, Nsight Systems/Compute, a tracing tool) is attached to "
             "this process; kerncap cannot observe it. Run without the other tool.";
    s.report.add_error("cupti_subscriber", msg);
    return;
  }
  if (s.cfg.mode == Mode::Profile) return start_cupti_profile(s);
  start_cupti_capture(s);
}

}  // namespace inject
}  // namespace kc

KC_EXPORT int InitializeInjection(void) {
  static std::atomic<bool> done{false};
  if (done.exchange(true)) return 1;
  kc::install_crash_reporter();
  try {
    kc::inject::initialize();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kerncap: injection failed: %s; the app runs without kerncap\n", e.what());
  }
  return 1;
}

// The exit report now, for a process that ends with _exit (kerncap's replay server: its
// teardown can hang after a sticky error), which skips the atexit handler that writes it.
KC_EXPORT void kerncap_report_now(void) { kc::inject::at_exit(); }

KC_EXPORT void kerncap_benchmark_enter(void) { kc::inject::g_benchmark.fetch_add(1, std::memory_order_acq_rel); }

KC_EXPORT void kerncap_benchmark_exit(void) {
  int v = kc::inject::g_benchmark.load(std::memory_order_acquire);
  while (v > 0 && !kc::inject::g_benchmark.compare_exchange_weak(v, v - 1, std::memory_order_acq_rel)) {
  }
}
