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
#include <cupti.h>
#include <dlfcn.h>
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
#include <type_traits>
#include <unordered_map>

#include "capture_session.hpp"
#include "chunk_fingerprint.hpp"
#include "config.hpp"
#include "crash_report.hpp"
#include "driver.hpp"
#include "entry_abi.hpp"
#include "func_cache.hpp"
#include "graph_model.hpp"
#include "job_identity.hpp"
#include "json_writer.hpp"
#include "launch_attribution.hpp"
#include "launch_buckets.hpp"
#include "launch_record.hpp"
#include "apply_mode.hpp"
#include "array_tracker.hpp"
#include "memory_tracker.hpp"
#include "module_images.hpp"
#include "module_registry.hpp"
#include "nvtx_ranges.hpp"
#include "nvtx_tool.hpp"
#include "proc_report.hpp"
#include "profiler.hpp"
#include "quiesce.hpp"
#include "sampled_profile.hpp"
#include "sequence_capture.hpp"
#include "sequence_graph.hpp"
#include "thread_slots.hpp"
#include "watched_calls.hpp"
#include "xla_autotune.hpp"

#define KC_EXPORT extern "C" __attribute__((visibility("default")))

namespace kc {
namespace {

// Autotuner benchmarking depth (kerncap_benchmark_enter/exit). Outside State: the
// Python hook may call in before the driver has initialized the injection.
std::atomic<int> g_benchmark{0};

// libkerncap_entry.so's Gate (entry_abi.hpp), when it is preloaded with this ABI.
kc_entry::Gate* find_gate() {
  using GateFn = kc_entry::Gate* (*)(int);
  auto gate = reinterpret_cast<GateFn>(dlsym(RTLD_DEFAULT, "kerncap_entry_gate"));
  return gate ? gate(kc_entry::kAbi) : nullptr;
}

struct alignas(64) State {
  // What every launch of the full path reads, first and in one cache line (issue 31,
  // ThreadState's note): these flags, the function cache's epoch and the quiesce's
  // `pending` pointer (its first bytes).
  std::atomic<bool> active{false};  // subscribed and configured: callbacks do work
  std::atomic<bool> armed{false};    // capture mode, target not reached yet: quiesce and count
  bool sequence = false;             // seq_trigger is set (create_selection)
  Mode mode = Mode::Capture;                               // cfg.mode, copied at initialize()
  Config::BenchSkip bench_skip = Config::BenchSkip::None;  // cfg.bench_skip, copied there
  // The wrappers' launch fast path reads the epoch and `pending` from the Gate, so with
  // one both are the Gate's words; without, this object's own.
  kc_entry::Gate* gate = find_gate();
  std::atomic<uint64_t> func_epoch{1};
  Quiesce quiesce{gate ? &gate->pending : nullptr};
  FuncCache funcs{gate ? gate->epoch : func_epoch};
  Config cfg;
  std::unique_ptr<KernelMatcher> matcher;
  CUpti_SubscriberHandle subscriber = nullptr;
  // Driver calls reach the dispatcher from libkerncap_entry.so's wrappers, not CUPTI:
  // no CUPTI subscriber exists until the capture (docs/interposer.md).
  bool entry_points = false;
  bool launch_fast_path = false;  // plain launches skip the callbacks (the wrappers count them)
  std::atomic<uint64_t> full_path_launches{0};  // with it: those of threads without a slot
  ModuleImages images;  // entry points only: what each handle was loaded from
  ProcReport report;
  MemoryTracker mem;
  ArrayTracker arrays;  // CUDA arrays, texture and surface objects
  ModuleRegistry modules;
  ThreadSlots slots;  // per-thread quiesce flags and launch counters
  std::atomic<bool> claimed{false};  // this process tried to take the run's capture lock
  std::atomic<bool> owns_lock{false};  // ... and holds it: its (set's) captures land here
  JobIdentity job;
  // Selection and sets (docs/selection.md); null when not asked for.
  std::unique_ptr<NvtxRanges> nvtx;              // --nvtx, or profile --by-nvtx
  std::unique_ptr<LaunchBuckets> buckets;        // set captures, profile --buckets
  std::unique_ptr<LaunchAttribution> attribution;  // activity records -> their launch's tag
  std::unique_ptr<SampledProfile> sampled;  // profile mode through the entry points (no CUPTI)
  std::unique_ptr<Applier> applier;         // apply mode (`kerncap apply`, apply_mode.hpp)
  std::atomic<uint64_t> nvtx_inside{0}, nvtx_outside{0};  // target launches in / outside the NVTX selection
  std::atomic<uint64_t> off_device{0};           // target launches on another device than --device
  std::atomic<uint64_t> target_devices{0};       // bit d: the target launched on device d
  std::atomic<uint64_t> captures_done{0};
  std::mutex set_mu;
  std::string set_kernel;                        // a set holds one kernel: the first one matched
  std::atomic<uint64_t> launches{0};  // launches of threads without a slot (ThreadSlots::claim failed)
  std::atomic<uint64_t> launch_exits{0};  // their returns, in profile mode (the interleaving check)
  std::atomic<uint64_t> target_matches{0};
  // Stream captures in progress: counted from cuStreamBeginCapture*'s entry to
  // cuStreamEndCapture's exit, so while it is 0 no stream can be capturing and no launch
  // needs to ask the driver (~150 ns a call, on every launch of the target otherwise).
  std::atomic<int> active_captures{0};
  std::atomic<uint64_t> recorded_into_graphs{0};  // target launches made into a capturing stream
  GraphRegistry graphs{funcs};
  XlaAutotune xla;  // XLA's autotuner: its candidate runs of the target are not dispatches
  // Sequences (KERNCAP_SEQUENCE, sequence_capture.hpp): null unless asked for.
  std::unique_ptr<SequenceTrigger> seq_trigger;
  std::unique_ptr<SequenceCapture> seq;      // the open window, driven by its owner thread only
  std::unique_ptr<KernelMatcher> seq_until;  // run: the kernel whose launch ends the window
  std::unique_ptr<KernelMatcher> keep_all;   // the module registry keeps every kernel's cubin
  std::mutex seq_mu;                         // trigger transitions
  std::atomic<bool> seq_pending{false};      // nvtx: an instance began, waiting for its first GPU work
  std::atomic<uint64_t> seq_threads{0};      // numbering of threads for the trigger
  std::atomic<uint64_t> seq_until_seen{0};   // launches matching KERNCAP_SEQ_UNTIL in this process
  std::string seq_path;                      // nvtx: the path when the instance began
  std::mutex until_mu;
  std::unordered_map<const FuncInfo*, bool> until_cache;
};

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

// Everything a callback keeps per thread, in one trivially constructible object: the
// hot path (every launch of the app) pays one TLS lookup and no TLS init guard. A
// PyTorch launch costs the app ~6 us of CPU; every 100 ns here is ~1.6% of its loop.
constexpr int kLazyIds = 8;      // modules lazily loaded by one launch (more: pairing falls back)
constexpr int kFuncSlots = 8;    // recently launched handles, direct-mapped
// The armed path of a launch reads this: one cache line for the fields every launch
// touches (issue 31: on the H200 the dispatcher's cost is the lines it touches after
// the driver's launch has run, ~10-30 ns each, docs/facts.md §31).
struct FuncSlot {
  CUfunction key;
  FuncInfo* info;
  ThreadSlot::Kernel* count;  // this thread's count of that kernel (null: the shared one)
  bool plain;                 // never the target nor an XLA helper: launch_enter's short path
  bool is_kernel;
};
// It begins with what the wrappers' launch fast path reads (entry_abi.hpp ThreadHot:
// guard, shared_depth, the slot and its table).
struct ThreadState : kc_entry::ThreadHot {
  bool slot_tried;
  // The launch in flight (between its API entry and exit).
  bool in_launch;
  bool is_kernel;
  bool seq_owner;     // sequences: this thread owns the open window (below)
  int n_lazy;
  ThreadSlot* slot;   // this thread's quiesce flag and launch counters (claimed on first use)
  CUfunction f;
  CaptureSession* session;  // the capture in flight
  uint32_t correlation;
  uint64_t func_epoch;  // the function cache below is valid while this matches FuncCache::epoch
  uint32_t lazy[kLazyIds];
  alignas(32) FuncSlot funcs[kFuncSlots];  // handle -> FuncInfo of recent launches, direct-mapped
  // The capture in flight (session and correlation above).
  uint32_t bucket;         // its bucket (set captures)
  uint64_t index;          // its dispatch index
  // --device: the device of the context last launched on (resolved once per context).
  CUcontext dev_ctx;
  int dev_ordinal;
  // The graph launch in flight that was counted (its exit ends "launching now").
  ExecModel* graph_model;
  // Inside the app's cuGraphInstantiate*/cuGraphExecUpdate: the driver's own copies of
  // the graph's nodes are not graphs the app built.
  bool in_graph_call;
  // Entry points: the primary context a cuDevicePrimaryCtxRelease/Reset in flight may end.
  CUcontext primary_ctx;
  // Sequences: this thread's number, whether it owns the open window (its own calls are
  // then recorded, never held), and what ends the window at a call's exit.
  uint64_t seq_tid;
  bool seq_graph;          // the window is this thread's cuGraphLaunch in flight
  bool seq_close_pending;  // close at the exit of the launch with seq_close_corr
  uint32_t seq_close_corr;
  bool seq_in_call;        // a recorded memory or stream call in flight (its result is checked)
  // Sampled profile: the launch in flight, its timed pair (if any), the thread's random
  // state, and a small cache of executable graph -> record (valid while graph_epoch matches).
  FuncInfo* sampled_fi;
  ProfGraph* sampled_graph;
  LaunchSampler::Pending* pending;
  uint64_t sample_launches;    // launches_so_far() when the pending pair opened
  bool sample_others_inside;  // another thread was inside a launch call then
  uint64_t rng;
  uint64_t graph_epoch;
  CUgraphExec graph_key[4];
  ProfGraph* graph_rec[4];
  ThreadSlot::Kernel* graph_count[4];
};
static_assert(std::is_trivial<ThreadState>::value, "zero-initialised storage is a ThreadState");
static_assert(sizeof(ThreadState) <= kc_entry::kThreadBlock && alignof(ThreadState) <= 64,
              "ThreadState must fit libkerncap_entry.so's per-thread block (entry_abi.hpp)");

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

// Set while kerncap itself calls the driver, so its own calls are not treated as the app's.
struct Guard {
  ThreadState& t;
  bool prev;
  Guard() : t(this_thread()), prev(t.guard) { t.guard = true; }
  ~Guard() { t.guard = prev; }
};

thread_local std::optional<ModuleCollector> tl_load_collector; // inside cuModuleLoad*/cuLibraryLoad*

struct Recovered {
  std::string error;    // non-empty: the capture cannot go on
  std::string warning;  // for the manifest
};
Recovered recover_cubin(State& s, CUfunction launched, const FuncInfo& fi);

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

std::string sequence_report(State& s);  // with the sequence code below

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
// Capture start / finish

void capture_failed(State& s, const char* kind, const std::string& message) {
  s.report.add_error(kind, message);
  if (s.cfg.set) return;  // a set goes on with its other dispatches (the failure is named)
  set_armed(s, false);
  ::unlink(lock_path(s).c_str());
}

// At the selected dispatch's API entry. True: the capture started, this thread now
// holds the quiesce lock exclusively until the launch's exit.
// This process's one capture attempt: true when it may capture (it created the
// run's capture.lock); false when it tried before or another process of the app captures.
bool claim_capture(State& s) {
  if (s.cfg.bench_passthrough) {
    // A bench process may have run calls past the dispatcher (kerncap_bench_passthrough):
    // its counts and regions can miss some, so it never captures.
    if (!s.claimed.exchange(true))
      s.report.add_error("capture_failed", "KERNCAP_BENCH_PASSTHROUGH=1 is set: a process whose driver calls may "
                                           "bypass kerncap (a bench switch) takes no capture; unset it to capture");
    return false;
  }
  if (s.owns_lock.load(std::memory_order_acquire)) return true;  // a set's later captures
  if (s.claimed.exchange(true)) return false;
  int fd = ::open(lock_path(s).c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644);
  if (fd < 0) {
    const int err = errno;
    set_armed(s, false);
    if (err != EEXIST)  // EEXIST: another process of the app captures; not an error
      s.report.add_error("disk", "cannot create " + lock_path(s) + ": " + std::strerror(err));
    return false;
  }
  const std::string pid = std::to_string(getpid()) + "\n";
  if (::write(fd, pid.data(), pid.size()) < 0) { /* the lock is the file's existence; its content is a courtesy */ }
  ::close(fd);
  s.owns_lock.store(true, std::memory_order_release);
  return true;
}

// The capture directory of dispatch `index`: "capture", or "capture-<N>" in a set.
std::string capture_name(const State& s, uint64_t index) {
  return s.cfg.set ? "capture-" + std::to_string(index) : std::string("capture");
}

std::string blob_pool(const State& s) { return s.cfg.set ? path_join(s.cfg.out_dir, "blob-pool") : std::string(); }

// A capture ended (written or failed): what next. A single capture disarms, and unless
// --keep-running ends the process; a set re-arms for its next dispatch and ends only
// after its last (a bucket set never: it needs the whole run to see every bucket).
void capture_over(State& s, const std::string& dir, uint64_t index, uint32_t bucket) {
  bool more = false;
  if (s.cfg.set) {
    if (!dir.empty()) {
      s.captures_done.fetch_add(1, std::memory_order_relaxed);
      if (s.buckets && bucket != UINT32_MAX) s.buckets->mark_captured(bucket, index, dir);
    }
    more = s.cfg.buckets || index < s.cfg.last_dispatch();
  }
  set_armed(s, more);
  if (!dir.empty()) s.report.set_captured(dir);
  write_proc(s);
  write_buckets(s, false);
  const bool finished = s.cfg.set ? !more && s.captures_done.load() > 0 : !dir.empty();
  if (finished && !s.cfg.keep_running) {
    std::fflush(nullptr);
    ::_exit(0);
  }
}

void describe_launch(State& s, CaptureSession& session, uint32_t bucket) {
  session.set_job(s.job);
  session.set_interception(interception_name(s));
  session.set_arrays(&s.arrays);
  if (s.nvtx) session.set_nvtx(s.nvtx->context());
  if (bucket != UINT32_MAX) session.set_bucket(bucket);
  const std::string xla = s.xla.note(xla_loaded());
  if (!xla.empty()) session.add_warning(xla);
}

// A capture of dispatch `index` failed: say so; a set remembers it for the bucket (so
// it is named, not retried) and goes on.
void capture_attempt_failed(State& s, const char* kind, const std::string& message, uint64_t index, uint32_t bucket) {
  capture_failed(s, kind, message);
  if (!s.cfg.set) {
    write_proc(s);
    return;
  }
  if (s.buckets && bucket != UINT32_MAX) s.buckets->mark_failed(bucket, message);
  capture_over(s, std::string(), index, bucket);
}

std::string disk_message(const State& s, const IoError& e) {
  return std::string("capture aborted, partial capture removed: ") + e.what() + ". Free space in " + s.cfg.out_dir +
         " or write the capture elsewhere.";
}

// The capture's writer side; false (the failure reported) when the threads cannot be held.
bool hold_other_threads(State& s, ThreadState& t, const std::string& what, uint64_t index, uint32_t bucket) {
  const std::string why = s.quiesce.lock(s.slots, t.slot);
  if (why.empty()) return true;
  capture_attempt_failed(s, "capture_failed", "capture of " + what + " (dispatch " + std::to_string(index) +
                                                  ") failed before the launch: " + why,
                         index, bucket);
  return false;
}

bool start_capture(State& s, const LaunchDesc& d, const FuncInfo& fi, const CUpti_CallbackData* cb, uint64_t index,
                   uint32_t bucket) {
  if (!claim_capture(s)) return false;
  // Waits until no other thread is inside an enqueueing call; new ones wait for unlock.
  ThreadState& tl = this_thread();
  if (!hold_other_threads(s, tl, fi.demangled, index, bucket)) return false;
  Recovered recovered;
  if (s.entry_points) {
    try {
      recovered = recover_cubin(s, d.f, fi);
    } catch (const std::exception& e) {  // the other threads are held: never leave holding them
      recovered.error = std::string("reading the kernel's cubin failed: ") + e.what();
    }
    if (!recovered.error.empty()) {
      s.quiesce.unlock();
      const bool subscriber = recovered.error.rfind("cuptiSubscribe", 0) == 0;
      capture_attempt_failed(s, subscriber ? "cupti_subscriber" : "capture_failed",
                             "capture of " + fi.demangled + " (dispatch " + std::to_string(index) +
                                 ") failed before the launch: " + recovered.error,
                             index, bucket);
      return false;
    }
  }
  auto session =
      std::make_unique<CaptureSession>(s.cfg, s.mem, s.modules, d, fi, index, capture_name(s, index), blob_pool(s));
  describe_launch(s, *session, bucket);
  if (!recovered.warning.empty()) session->add_warning(recovered.warning);
  try {
    Guard guard;
    session->before_launch();
  } catch (const IoError& e) {
    { Guard guard; session->abort(); session.reset(); }
    s.quiesce.unlock();
    capture_attempt_failed(s, "disk", disk_message(s, e), index, bucket);
    return false;
  } catch (const std::exception& e) {
    { Guard guard; session->abort(); session.reset(); }
    s.quiesce.unlock();
    capture_attempt_failed(s, "capture_failed", "capture of " + fi.demangled + " (dispatch " + std::to_string(index) +
                                                    ") failed before the launch: " + e.what(),
                           index, bucket);
    return false;
  }
  tl.session = session.release();
  tl.correlation = cb->correlationId;
  tl.bucket = bucket;
  tl.index = index;
  return true;
}

void finish_capture(State& s, const CUpti_CallbackData* cb) {
  ThreadState& tl = this_thread();
  std::unique_ptr<CaptureSession> session(tl.session);
  const uint32_t bucket = tl.bucket;
  const uint64_t index = tl.index;
  tl.session = nullptr;
  tl.correlation = 0;
  std::string dir;
  const char* kind = nullptr;
  std::string message;
  try {
    Guard guard;
    dir = session->after_launch(result_of(cb));
  } catch (const IoError& e) {
    Guard guard;
    session->abort();
    kind = "disk";
    message = disk_message(s, e);
  } catch (const std::exception& e) {
    Guard guard;
    session->abort();
    kind = "capture_failed";
    message = "capture of dispatch " + std::to_string(index) + " failed after the launch: " + e.what();
  }
  {
    Guard guard;
    session.reset();  // frees the pinned ring and the snapshot stream
  }
  s.quiesce.unlock();
  if (kind) capture_attempt_failed(s, kind, message, index, bucket);
  else capture_over(s, dir, index, bucket);
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

FuncInfo* func_info(State& s, ThreadState& t, CUfunction f, ThreadSlot::Kernel** count = nullptr) {
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
bool selected_launch(State& s, ThreadState& t, CUcontext ctx = nullptr) {
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
bool sequence_launch_enter(State& s, ThreadState& t, const LaunchDesc& d, FuncInfo& fi, const CUpti_CallbackData* cb);
bool start_sequence_run(State& s, ThreadState& t, const LaunchDesc& d, FuncInfo& fi, const CUpti_CallbackData* cb);
void sequence_launch_exit(State& s, ThreadState& t, const CUpti_CallbackData* cb);

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
      s.mem.on_map(a->ptr, a->size, a->offset, static_cast<uint64_t>(a->handle));
      break;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemUnmap: {
      auto* a = static_cast<const cuMemUnmap_params*>(p);
      s.mem.on_unmap(a->ptr, a->size);
      break;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemHostAlloc: {
      auto* a = static_cast<const cuMemHostAlloc_params*>(p);
      s.mem.on_host_alloc(reinterpret_cast<uint64_t>(*a->pp), a->bytesize, "cuMemHostAlloc", a->Flags);
      break;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemAllocHost_v2: {
      auto* a = static_cast<const cuMemAllocHost_v2_params*>(p);
      s.mem.on_host_alloc(reinterpret_cast<uint64_t>(*a->pp), a->bytesize, "cuMemAllocHost_v2");
      break;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemHostRegister_v2: {
      auto* a = static_cast<const cuMemHostRegister_v2_params*>(p);
      s.mem.on_host_alloc(reinterpret_cast<uint64_t>(a->p), a->bytesize, "cuMemHostRegister_v2", a->Flags);
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

void refuse_graph_buckets(State& s, ExecModel* m, const std::vector<CUgraphNode>& extra, const std::string& why,
                          bool launched);

// The executable graph, the graph and the flags of a successful cuGraphInstantiate*
// call at its exit; false when the call says it made none.
bool instantiate_args(CUpti_CallbackId cbid, const void* p, CUgraphExec*& exec, CUgraph& g, uint64_t& flags) {
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
        if (q->instantiateParams->result_out != CUDA_GRAPH_INSTANTIATE_SUCCESS) return false;
        flags = q->instantiateParams->flags;
      }
      break;
    }
  }
  return exec && *exec && g;
}

// Graph construction, instantiation and updates (API exit, successful calls, while armed).
void track_graph(State& s, CUpti_CallbackId cbid, const CUpti_CallbackData* cb, uint16_t roles) {
  const void* p = cb->functionParams;
  const KernelMatcher* matcher = s.matcher.get();
  Guard guard;
  if (roles & kCaptureEnd) {
    CUgraph* g = cbid == CUPTI_DRIVER_TRACE_CBID_cuStreamEndCapture
                     ? static_cast<const cuStreamEndCapture_params*>(p)->phGraph
                     : static_cast<const cuStreamEndCapture_ptsz_params*>(p)->phGraph;
    if (g && *g) {
      s.graphs.on_capture_end(*g);
      if (s.entry_points) s.graphs.on_captured_graph(*g, matcher);
    }
    return;
  }
  if (roles & kGraphInstantiate) {
    CUgraphExec* exec = nullptr;
    CUgraph g = nullptr;
    uint64_t flags = 0;
    if (!instantiate_args(cbid, p, exec, g, flags)) return;
    const std::string refused = s.graphs.on_instantiate(*exec, g, flags, matcher);
    if (!refused.empty()) {
      // The dispatch count would be wrong from here on: stop, and say why (a set names
      // the buckets that ran only there and goes on with the others).
      ExecModel* m = s.graphs.find(*exec);
      const std::string why = "executable graph #" + std::to_string(m ? m->id : 0) + ": " + refused;
      if (s.cfg.set) refuse_graph_buckets(s, m, s.graphs.conditional_target_nodes(g, matcher), why, false);
      capture_failed(s, "graph_refused", why);
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
                         bool per_thread, uint32_t bucket) {
  if (!claim_capture(s)) return;
  if (!hold_other_threads(s, this_thread(), target.func->demangled, index, bucket)) return;
  Guard guard;
  std::vector<CUlaunchAttribute> attrs;
  std::string dir;
  const char* kind = nullptr;  // set when the capture failed
  std::string msg;
  bool prefix_ran = false;
  std::unique_ptr<CaptureSession> session;
  CUstream own = nullptr;
  CUevent neutral = nullptr;
  try {
    LaunchDesc desc = node_launch(model_node(m, target), stream, per_thread, attrs);
    Recovered recovered;
    if (s.entry_points) {
      recovered = recover_cubin(s, desc.f, *target.func);
      if (!recovered.error.empty()) throw std::runtime_error(recovered.error);
    }
    session = std::make_unique<CaptureSession>(s.cfg, s.mem, s.modules, desc, *target.func, index,
                                               capture_name(s, index), blob_pool(s));
    describe_launch(s, *session, bucket);
    if (!recovered.warning.empty()) session->add_warning(recovered.warning);
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
    origin.edges = edge_kinds(m);
    KC_CHECK(cuStreamCreate, (&own, CU_STREAM_NON_BLOCKING), "kerncap's stream for the graph's nodes");
    KC_CHECK(cuEventCreate, (&neutral, CU_EVENT_DISABLE_TIMING), "kerncap's stand-in event");
    KC_CHECK(cuCtxSynchronize, (), "the target's context before the graph's nodes run");
    // The app goes on after this capture (keep-running, or a set's next dispatch): keep
    // what its memory was, to put it back after kerncap ran part of the graph itself.
    if (s.cfg.keep_running || s.cfg.set) session->snapshot_baseline();
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
    kind = dynamic_cast<const IoError*>(&e) != nullptr ? "disk" : "capture_failed";
    bool restored = false;
    if (session) {
      restored = session->restore_after_failure();
      session->abort();
    }
    msg = std::string("capture of ") + target.func->demangled + " (dispatch " + std::to_string(index) +
          ", a node of CUDA graph #" + std::to_string(m.id) + ") failed: " + e.what();
    if (prefix_ran && !restored) {
      capture_failed(s, kind, msg);
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
  s.quiesce.unlock();
  if (kind) capture_attempt_failed(s, kind, msg, index, bucket);
  else capture_over(s, dir, index, bucket);
}

// The buckets of an executable graph's targets that kerncap cannot capture there
// (refused graph, or the target inside a conditional body): named with the reason.
// `launched`: at a launch of the graph (its nodes ran and count), else at instantiation.
void refuse_graph_buckets(State& s, ExecModel* m, const std::vector<CUgraphNode>& extra, const std::string& why,
                          bool launched) {
  if (!s.buckets) return;
  Guard guard;
  bool changed = false;
  std::vector<CUgraphNode> nodes = extra;
  if (m && m->top)
    for (const NodeRef& ref : m->targets) nodes.push_back(model_node(*m, ref));
  for (CUgraphNode n : nodes) {
    try {
      std::vector<CUlaunchAttribute> attrs;
      const LaunchDesc d = node_launch(n, nullptr, false, attrs);
      FuncInfo* fi = s.funcs.get(d.f, s.matcher.get());
      if (!fi->matched || !set_kernel_ok(s, *fi)) continue;
      changed |= s.buckets->mark_refused(s.buckets->classify(*fi, d, nullptr, launched), why);
    } catch (const std::exception& e) {
      s.report.add_error("graph_refused", std::string("a refused graph's kernel node could not be read: ") + e.what());
    }
  }
  if (changed) write_buckets(s, false);
}

// A launch of an executable graph holding `count` dispatches of a set's kernel.
void set_graph_launch(State& s, ExecModel& m, uint64_t before, size_t count, const CUpti_CallbackData* cb,
                      CUstream stream, bool per_thread) {
  std::vector<uint32_t> buckets(count, UINT32_MAX);
  try {
    Guard guard;
    for (size_t i = 0; i < count; ++i) {
      std::vector<CUlaunchAttribute> attrs;
      const LaunchDesc d = node_launch(model_node(m, m.targets[i]), stream, per_thread, attrs);
      bool is_new = false;
      buckets[i] = s.buckets->classify(*m.targets[i].func, d, &is_new);
      if (is_new) s.buckets->set_first_dispatch(buckets[i], before + i);
    }
  } catch (const std::exception& e) {
    s.report.add_error("capture_failed", "executable graph #" + std::to_string(m.id) +
                                             ": its kernel nodes could not be read: " + e.what());
    return;
  }
  LaunchTag tag;
  tag.graph = true;
  tag.candidates = buckets;
  s.attribution->tag(cb->correlationId, std::move(tag));
  for (size_t i = 0; i < count; ++i)
    if (s.armed.load(std::memory_order_acquire) && set_wants(s, *m.targets[i].func, before + i, buckets[i]))
      start_graph_capture(s, m, m.targets[i], before + i, stream, per_thread, buckets[i]);
}

void abort_sequence(State& s, ThreadState& t, const char* kind, const std::string& message);
void start_sequence_graph(State& s, ThreadState& t, ExecModel& m, CUstream stream, bool per_thread);

void graph_launch_enter(State& s, ThreadState& t, CUpti_CallbackId cbid, const CUpti_CallbackData* cb) {
  auto* p = static_cast<const cuGraphLaunch_params*>(cb->functionParams);  // _ptsz: same layout
  const bool per_thread = cbid == CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch_ptsz;
  t.graph_model = nullptr;
  if (t.seq_owner) {
    Guard guard;
    ExecModel* m = s.graphs.find(p->hGraph);
    abort_sequence(s, t, "capture_failed",
                   "the sequence's thread launched a CUDA graph (" +
                       (m ? "executable graph #" + std::to_string(m->id) : std::string("an executable graph")) +
                       ") inside the window; capture that graph launch on its own with --sequence graph");
  }
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
    const std::string why = "executable graph #" + std::to_string(v.model->id) + ": " + refusal;
    capture_failed(s, "graph_refused", why);
    if (s.cfg.set) refuse_graph_buckets(s, v.model, {}, why, true);  // the set goes on
    else write_proc(s);
    return;
  }
  // NVTX and device selection apply to the graph launch: its nodes run inside the
  // ranges open at cuGraphLaunch, on its context's device.
  if (!v.count || !selected_launch(s, t, cb->context)) return;
  const uint64_t before = s.target_matches.fetch_add(v.count, std::memory_order_acq_rel);
  if (s.seq_trigger) {
    if (s.cfg.seq_mode == SeqMode::Graph && s.cfg.dispatch >= before && s.cfg.dispatch < before + v.count)
      start_sequence_graph(s, t, *v.model, p->hStream, per_thread);
  } else if (s.cfg.set) {
    set_graph_launch(s, *v.model, before, v.count, cb, p->hStream, per_thread);
  } else if (s.cfg.dispatch >= before && s.cfg.dispatch < before + v.count) {
    const NodeRef target = v.model->targets[size_t(s.cfg.dispatch - before)];
    start_graph_capture(s, *v.model, target, s.cfg.dispatch, p->hStream, per_thread, UINT32_MAX);
  }
}

void graph_launch_exit(ThreadState& t) {
  if (!t.graph_model) return;
  t.graph_model->launching.fetch_sub(1, std::memory_order_acq_rel);
  t.graph_model = nullptr;
}

// ---------------------------------------------------------------------------------
// Sequences (KERNCAP_SEQUENCE, docs/sequences.md): one window of the owner thread's
// work captured as one reproducer. The window holds every other thread at its
// driver-API entry from its opening to its end, as one dispatch's capture does from the
// target's entry to its exit; the owner's own calls run and are recorded.

uint64_t seq_thread(State& s, ThreadState& t) {
  if (!t.seq_tid) t.seq_tid = s.seq_threads.fetch_add(1, std::memory_order_relaxed) + 1;
  return t.seq_tid;
}

// What the window was asked to be (sequence.json "selection").
std::string sequence_selection(const State& s) {
  JsonWriter w;
  w.begin_object().field("mode", seq_mode_name(s.cfg.seq_mode));
  if (!s.cfg.kernel.empty())
    w.field("kernel", s.cfg.kernel).field("match", match_mode_name(s.cfg.match)).field("dispatch", s.cfg.dispatch);
  if (!s.cfg.nvtx.empty()) w.field("nvtx", s.cfg.nvtx).field("nvtx_match", s.cfg.nvtx_regex ? "regex" : "substring");
  if (s.cfg.seq_mode == SeqMode::Nvtx) w.field("instance", s.cfg.dispatch).field("path", s.seq_path);
  if (s.cfg.seq_count) w.field("count", s.cfg.seq_count);
  if (!s.cfg.seq_until.empty()) w.field("until", s.cfg.seq_until);
  w.end_object();
  return w.str();
}

// proc-<pid>.json's "sequence": where this process's window stands.
std::string sequence_report(State& s) {
  JsonWriter w;
  std::lock_guard<std::mutex> lock(s.seq_mu);
  w.begin_object().field("mode", seq_mode_name(s.cfg.seq_mode)).field("state", seq_state_name(s.seq_trigger->state()));
  w.field("instances_seen", s.seq_trigger->instances_seen()).field("launches", s.seq_trigger->launches());
  w.field("until_seen", s.seq_until_seen.load()).field("path", s.seq_path).end_object();
  return w.str();
}

bool until_matches(State& s, const FuncInfo& fi) {
  if (!s.seq_until) return false;
  std::lock_guard<std::mutex> lock(s.until_mu);
  auto [it, fresh] = s.until_cache.try_emplace(&fi, false);
  if (fresh) it->second = s.seq_until->matches(fi.name, fi.demangled);
  return it->second;
}

std::string sequence_what(const State& s) {
  switch (s.cfg.seq_mode) {
    case SeqMode::Nvtx:
      return "the sequence of NVTX range instance " + std::to_string(s.cfg.dispatch) + " matching '" + s.cfg.nvtx + "'";
    case SeqMode::Graph:
      return "the sequence of the graph launch running dispatch " + std::to_string(s.cfg.dispatch) + " of '" +
             s.cfg.kernel + "'";
    default:
      return "the sequence from dispatch " + std::to_string(s.cfg.dispatch) + " of '" + s.cfg.kernel + "'";
  }
}

// Opens the window on this thread: claims the run's capture, holds the other threads,
// drains and takes the pre-state. False (the failure reported) when it cannot.
bool open_sequence(State& s, ThreadState& t) {
  const std::string what = sequence_what(s);
  auto fail = [&](const char* kind, const std::string& message) {
    {
      std::lock_guard<std::mutex> lock(s.seq_mu);
      s.seq_trigger->failed();
    }
    s.seq_pending.store(false, std::memory_order_release);
    if (!message.empty()) capture_attempt_failed(s, kind, message, s.cfg.dispatch, UINT32_MAX);
    return false;
  };
  if (!claim_capture(s)) return fail("", "");
  const std::string why = s.quiesce.lock(s.slots, my_slot(s, t));
  if (!why.empty()) return fail("capture_failed", what + " failed at its start: " + why);
  auto seq = std::make_unique<SequenceCapture>(s.cfg, s.mem, s.modules, sequence_selection(s));
  seq->set_job(s.job);
  seq->set_interception(interception_name(s));
  seq->set_arrays(&s.arrays);
  const char* kind = nullptr;
  std::string message;
  try {
    Guard guard;
    seq->open();
  } catch (const IoError& e) {
    kind = "disk";
    message = disk_message(s, e);
  } catch (const std::exception& e) {
    kind = "capture_failed";
    message = what + " failed at its start: " + e.what();
  }
  if (kind) {
    {
      Guard guard;
      seq->abort();
      seq.reset();
    }
    s.quiesce.unlock();
    return fail(kind, message);
  }
  s.seq = std::move(seq);
  {
    std::lock_guard<std::mutex> lock(s.seq_mu);
    s.seq_trigger->opened(seq_thread(s, t));
  }
  s.seq_pending.store(false, std::memory_order_release);
  t.seq_owner = true;
  return true;
}

// A failure inside the open window: the partial capture goes, the other threads go on.
void abort_sequence(State& s, ThreadState& t, const char* kind, const std::string& message) {
  if (!t.seq_owner) return;
  {
    Guard guard;
    if (s.seq) s.seq->abort();
    s.seq.reset();
  }
  t.seq_owner = t.seq_graph = t.seq_close_pending = t.seq_in_call = false;
  {
    std::lock_guard<std::mutex> lock(s.seq_mu);
    s.seq_trigger->failed();
  }
  s.quiesce.unlock();
  capture_attempt_failed(s, kind, sequence_what(s) + " failed: " + message, s.cfg.dispatch, UINT32_MAX);
}

void close_sequence(State& s, ThreadState& t) {
  const char* kind = nullptr;
  std::string message, dir;
  try {
    Guard guard;
    dir = s.seq->close();
  } catch (const IoError& e) {
    kind = "disk";
    message = disk_message(s, e);
  } catch (const std::exception& e) {
    kind = "capture_failed";
    message = e.what();
  }
  if (kind) return abort_sequence(s, t, kind, message);
  {
    Guard guard;
    s.seq.reset();
  }
  t.seq_owner = t.seq_graph = t.seq_close_pending = t.seq_in_call = false;
  {
    std::lock_guard<std::mutex> lock(s.seq_mu);
    s.seq_trigger->done();
  }
  s.quiesce.unlock();
  capture_over(s, dir, s.cfg.dispatch, UINT32_MAX);
}

// Records a launch of the owner; false when the window was given up.
bool record_sequence_launch(State& s, ThreadState& t, const LaunchDesc& d, FuncInfo& fi, const CUpti_CallbackData* cb) {
  const std::string at = "launch " + std::to_string(s.seq->log().launches()) + " of the sequence (" + fi.demangled + ")";
  std::string why;
  if (s.active_captures.load(std::memory_order_acquire) > 0 && stream_is_capturing(d, why)) {
    abort_sequence(s, t, "capture_failed", at + " is recorded into a CUDA graph by stream capture, not run: " + why);
    return false;
  }
  CUcontext ctx = cb->context;
  if (!ctx) {  // the entry points leave a launch's context to us (attach_entry_points)
    Guard guard;
    if (KC_CU(cuCtxGetCurrent)(&ctx) != CUDA_SUCCESS) ctx = nullptr;
  }
  if (ctx && ctx != s.seq->context()) {
    CUdevice dev = -1;
    {
      Guard guard;
      if (KC_CU(cuCtxGetDevice)(&dev) != CUDA_SUCCESS) dev = -1;
    }
    abort_sequence(s, t, "sequence_crosses",
                   "the sequence crosses CUDA contexts: " + at + " ran on device " + std::to_string(dev) +
                       (dev == s.seq->device() ? " in another context" : "") + ", the sequence began on device " +
                       std::to_string(s.seq->device()) + "; a sequence replays in one context of one GPU");
    return false;
  }
  try {
    Guard guard;
    if (s.entry_points && !s.seq->knows(&fi)) {
      const Recovered r = recover_cubin(s, d.f, fi);
      if (!r.error.empty()) throw std::runtime_error(r.error);
      if (!r.warning.empty()) s.seq->add_warning(r.warning);
    }
    s.seq->add_launch(d, fi, s.nvtx ? s.nvtx->context().path : std::string(), false);
  } catch (const IoError& e) {
    abort_sequence(s, t, "disk", disk_message(s, e));
    return false;
  } catch (const std::exception& e) {
    abort_sequence(s, t, "capture_failed", at + ": " + e.what());
    return false;
  }
  return true;
}

// A launch while a sequence may be in the works; true when it was recorded in the window.
bool sequence_launch_enter(State& s, ThreadState& t, const LaunchDesc& d, FuncInfo& fi, const CUpti_CallbackData* cb) {
  if (!t.seq_owner && s.seq_until && until_matches(s, fi)) s.seq_until_seen.fetch_add(1, std::memory_order_relaxed);
  if (!t.seq_owner && s.seq_pending.load(std::memory_order_acquire)) {
    bool mine;
    {
      std::lock_guard<std::mutex> lock(s.seq_mu);
      mine = s.seq_trigger->on_work(seq_thread(s, t));
    }
    if (mine && !open_sequence(s, t)) return false;
  }
  if (!t.seq_owner) return false;
  if (!record_sequence_launch(s, t, d, fi, cb)) return true;  // given up: the launch runs as the app's
  bool close;
  {
    std::lock_guard<std::mutex> lock(s.seq_mu);
    close = s.seq_trigger->on_launch(until_matches(s, fi));
  }
  if (close) {
    t.seq_close_pending = true;
    t.seq_close_corr = cb->correlationId;
  }
  return true;
}

// Dispatch N of the kernel: the run begins with this launch.
bool start_sequence_run(State& s, ThreadState& t, const LaunchDesc& d, FuncInfo& fi, const CUpti_CallbackData* cb) {
  if (t.seq_owner || !open_sequence(s, t)) return false;
  return sequence_launch_enter(s, t, d, fi, cb);
}

void sequence_launch_exit(State& s, ThreadState& t, const CUpti_CallbackData* cb) {
  if (!s.seq) return;
  const CUresult r = result_of(cb);
  if (r != CUDA_SUCCESS) {
    abort_sequence(s, t, "capture_failed", std::string(cb->functionName) + " inside the sequence failed in the app: " +
                                               cu_error_string(r));
    return;
  }
  if (t.seq_close_pending && t.seq_close_corr == cb->correlationId) close_sequence(s, t);
}

// The launch of an executable graph running dispatch N: its nodes are the window's
// steps, the app's own cuGraphLaunch runs them, the window closes at its exit.
void start_sequence_graph(State& s, ThreadState& t, ExecModel& m, CUstream stream, bool per_thread) {
  if (!open_sequence(s, t)) return;
  t.seq_graph = true;
  try {
    Guard guard;
    const int st = s.seq->stream_of(stream, per_thread);
    const GraphWalk walk = record_graph_launch(*s.seq, m, st, [&](CUgraphNode node) {
      std::vector<CUlaunchAttribute> attrs;
      const LaunchDesc d = node_launch(node, stream, per_thread, attrs);
      FuncInfo* fi = s.funcs.get(d.f, s.matcher.get());
      if (s.entry_points && !s.seq->knows(fi)) {
        const Recovered r = recover_cubin(s, d.f, *fi);
        if (!r.error.empty()) throw std::runtime_error(r.error);
        if (!r.warning.empty()) s.seq->add_warning(r.warning);
      }
      s.seq->add_launch(d, *fi, s.nvtx ? s.nvtx->context().path : std::string(), per_thread);
    });
    JsonWriter w;
    w.begin_object().field("exec_id", m.id).field("exec_launch", m.launches - 1).field("nodes", uint64_t(walk.nodes));
    w.field("built_by", m.built_by).field("updates", m.updates).field("instantiate_flags", m.instantiate_flags);
    w.field("order", "serial (kerncap's topological order of the graph)");
    w.key("skipped").begin_object();
    for (const auto& [k, n] : walk.skipped) w.field(k, uint64_t(n));
    w.end_object();
    w.key("edges").begin_object();
    for (const auto& [k, n] : edge_kinds(m)) w.field(k, uint64_t(n));
    w.end_object().end_object();
    s.seq->set_graph_json(w.str());
  } catch (const IoError& e) {
    abort_sequence(s, t, "disk", disk_message(s, e));
  } catch (const std::exception& e) {
    abort_sequence(s, t, "graph_refused", e.what());
  }
}

// An enqueueing or synchronizing call of the owner (not a launch): recorded at its
// entry; a pending window opens first (its first GPU work may be a copy).
void sequence_call(State& s, ThreadState& t, CUpti_CallbackId cbid, const CUpti_CallbackData* cb, uint16_t roles,
                   bool enter) {
  if (!enter) {
    if (!t.seq_in_call) return;
    t.seq_in_call = false;
    const CUresult r = result_of(cb);
    if (r != CUDA_SUCCESS && t.seq_owner)
      abort_sequence(s, t, "capture_failed", std::string(cb->functionName) + " inside the sequence failed in the app: " +
                                                 cu_error_string(r));
    return;
  }
  if (roles & (kAlloc | kArray | kHostMemory | kModuleLoad | kModuleUnload | kGraphInstantiate | kGraphUpdate |
               kGraphBuild | kCaptureEnd | kEntryOnly | kGraphLaunch))
    return;  // tracked as ever (allocations), or nothing the window replays
  if (!t.seq_owner && s.seq_pending.load(std::memory_order_acquire) && (roles & kEnqueue)) {
    bool mine;
    {
      std::lock_guard<std::mutex> lock(s.seq_mu);
      mine = s.seq_trigger->on_work(seq_thread(s, t));
    }
    if (mine) open_sequence(s, t);
  }
  if (!t.seq_owner || !s.seq) return;
  if (roles & kCaptureBegin) {
    abort_sequence(s, t, "capture_failed", std::string(cb->functionName) +
                                               ": a stream capture began inside the sequence (its work would not run)");
    return;
  }
  {
    Guard guard;
    try {
      s.seq->on_call(cbid, cb->functionParams, cb->functionName);
    } catch (const IoError& e) {
      abort_sequence(s, t, "disk", disk_message(s, e));
      return;
    } catch (const std::exception& e) {
      abort_sequence(s, t, "capture_failed", std::string(cb->functionName) + " inside the sequence: " + e.what());
      return;
    }
  }
  if (!s.seq->log().refusal().empty()) {  // before the call runs: the threads go on at once
    abort_sequence(s, t, "capture_failed", s.seq->log().refusal());
    return;
  }
  t.seq_in_call = true;
}

// nvtx: a range call of this thread; the window is pending from the instance's start and
// closes when the owner's path stops matching.
void sequence_nvtx(State& s, ThreadState& t, CUpti_CallbackId cbid, const CUpti_NvtxData* d) {
  const bool was = s.nvtx->matches();
  s.nvtx->on_callback(cbid, d);
  const bool now = s.nvtx->matches();
  if (was == now || s.cfg.seq_mode != SeqMode::Nvtx) return;
  bool close;
  SeqState before, after;
  {
    std::lock_guard<std::mutex> lock(s.seq_mu);
    before = s.seq_trigger->state();
    close = s.seq_trigger->on_range(seq_thread(s, t), was, now);
    after = s.seq_trigger->state();
  }
  if (before != SeqState::Pending && after == SeqState::Pending) {
    s.seq_path = s.nvtx->context().path;
    s.seq_pending.store(true, std::memory_order_release);
  }
  if (before == SeqState::Pending && after == SeqState::Failed) {
    s.seq_pending.store(false, std::memory_order_release);
    capture_failed(s, "sequence_empty",
                   "NVTX range instance " + std::to_string(s.cfg.dispatch) + " matching '" + s.cfg.nvtx + "' (" +
                       s.seq_path + ") enqueued no GPU work on its thread: nothing to capture; pick another instance "
                       "(--dispatch) or a range that holds kernels");
    write_proc(s);
  }
  if (close && t.seq_owner && s.seq) close_sequence(s, t);
}

// At the process's exit: a window that never opened or never closed, said so.
void sequence_at_exit(State& s) {
  SeqState st;
  uint64_t seen, launches;
  {
    std::lock_guard<std::mutex> lock(s.seq_mu);
    st = s.seq_trigger->state();
    seen = s.seq_trigger->instances_seen();
    launches = s.seq_trigger->launches();
  }
  if (st == SeqState::Open && s.seq) {
    std::string why;
    if (s.cfg.seq_mode == SeqMode::Nvtx)
      why = "NVTX range instance " + std::to_string(s.cfg.dispatch) + " matching '" + s.cfg.nvtx + "' (" + s.seq_path +
            ") opened but never closed before the process ended (" + std::to_string(launches) +
            " launch(es) recorded): its push has no pop on the thread that launched its work";
    else
      why = "the run from dispatch " + std::to_string(s.cfg.dispatch) + " of '" + s.cfg.kernel +
            "' never reached its end before the process ended: " + std::to_string(launches) + " launch(es) recorded" +
            (s.cfg.seq_count ? " of --count " + std::to_string(s.cfg.seq_count) : "") +
            (!s.cfg.seq_until.empty() ? "; no later launch of a kernel matching '" + s.cfg.seq_until + "' on its thread"
                                      : std::string());
    {
      Guard guard;
      s.seq->abort();
    }
    s.report.add_error("sequence_unclosed", why);
    ::unlink(lock_path(s).c_str());
    return;
  }
  if (st == SeqState::Waiting && s.cfg.seq_mode == SeqMode::Nvtx && !s.claimed.load())
    s.report.add_error("sequence_unopened", "no instance " + std::to_string(s.cfg.dispatch) +
                                                " of an NVTX range matching '" + s.cfg.nvtx + "' began (" +
                                                std::to_string(seen) + " instance(s) seen)");
}

// ---------------------------------------------------------------------------------
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
  if (result_of(cb) == CUDA_SUCCESS) {
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

}  // namespace

// kerncap's own NVTX tool (entry points): the range calls, as CUPTI's NVTX domain gives them.
void nvtx_event(CUpti_CallbackId cbid, const CUpti_NvtxData* data) {
  on_callback(nullptr, CUPTI_CB_DOMAIN_NVTX, cbid, data);
}

namespace {

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

void at_exit() {
  State* s = g;
  if (!s || g_forked.load()) return;  // a fork child: its parent reports
  // Once: kerncap_report_now (a process about to os._exit) runs it before libc would.
  static std::atomic<bool> reported{false};
  if (reported.exchange(true)) return;
  if (s->active && s->sampled) {
    Guard guard;
    s->sampled->sampler.drain(5.0);  // every pair still pending, read (a GPU that hangs gets 5 s)
    try {
      write_file_atomic(path_join(s->cfg.out_dir, "profile-" + std::to_string(getpid()) + ".json"),
                        s->sampled->to_json(int(getpid()), s->funcs, s->slots.kernel_counts()));
    } catch (const std::exception& e) {
      s->report.add_error("disk", std::string("profile not written: ") + e.what());
    }
    s->report.set_finalize_result("not used");  // no CUPTI in this process
    s->report.set_section("profile_timing", s->sampled->sampler.timing_json());  // held or not, how calibrated
    write_proc(*s);
    return;
  }
  if (s->active && s->applier) {
    Guard guard;
    const std::string pid = std::to_string(getpid());
    try {
      if (s->applier->config().profile) {
        profiler::flush_and_stop();
        write_file_atomic(path_join(s->cfg.out_dir, "profile-" + pid + ".json"), profiler::to_json(int(getpid())));
      }
      write_file_atomic(path_join(s->cfg.out_dir, "apply-" + pid + ".json"), s->applier->report_json(int(getpid())));
    } catch (const std::exception& e) {
      s->report.add_error("disk", std::string("apply report not written: ") + e.what());
    }
    write_proc(*s);
    return;
  }
  if (s->active && s->cfg.mode == Mode::Profile) {
    Guard guard;
    profiler::flush_and_stop();
    try {
      write_file_atomic(path_join(s->cfg.out_dir, "profile-" + std::to_string(getpid()) + ".json"),
                        profiler::to_json(int(getpid()), profile_extras(*s)));
    } catch (const std::exception& e) {
      s->report.add_error("disk", std::string("profile not written: ") + e.what());
    }
    s->active.store(false, std::memory_order_release);
    CUptiResult r = CUPTI_SUCCESS;
    if (s->subscriber) {
      r = cuptiUnsubscribe(s->subscriber);
    } else if ((r = cuptiSubscribe(&s->subscriber, on_callback, nullptr)) == CUPTI_SUCCESS) {
      r = cuptiUnsubscribe(s->subscriber);
    } else if (r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED) {
      // Another client subscribed while we held none: it may have taken the activity
      // buffers over. Say so (the engine shows it as a warning); leave CUPTI to it.
      s->report.set_finalize_result(
          "another CUPTI client (PyTorch profiler, Nsight Systems/Compute, a tracing tool) subscribed during the run, "
          "so the profile may miss kernels; CUPTI was left to it");
      write_proc(*s);
      return;
    }
    if (s->cfg.profile_tags()) {
      // Launch and NVTX callbacks were enabled: another thread may still be inside one,
      // and cuptiFinalize under a running callback is the race Kineto hit. Detach only.
      s->report.set_finalize_result(r == CUPTI_SUCCESS ? "unsubscribed" : cupti_error(r, "cuptiUnsubscribe"));
    } else {
      // Every record is in: detach CUPTI so the app's own teardown runs without it. No
      // callback is enabled in plain profile mode and activity is off, so nothing of
      // ours can be inside CUPTI now.
      if (r == CUPTI_SUCCESS) r = cuptiFinalize();
      s->report.set_finalize_result(r == CUPTI_SUCCESS ? "ok" : cupti_error(r, "cuptiFinalize"));
    }
  }
  if (s->active && s->cfg.mode == Mode::Capture && s->buckets) {
    Guard guard;
    profiler::flush_and_stop();  // the set's time shares: every record of the run
    write_buckets(*s, true);
  }
  if (s->active && s->cfg.mode == Mode::Capture && s->seq_trigger) sequence_at_exit(*s);
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
  s.entry_points = true;
  s.active = true;
  if (attach(entry_dispatch) <= 0) {
    attach(nullptr);
    s.active = false;
    s.report.add_error("config", "libcuda was not loaded when kerncap attached");
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
  if (s.cfg.mode == Mode::Profile) {
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
    return;
  }
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

// The exit report now, for a process that ends with _exit (kerncap's replay server: its
// teardown can hang after a sticky error), which skips the atexit handler that writes it.
KC_EXPORT void kerncap_report_now(void) { kc::at_exit(); }

KC_EXPORT void kerncap_benchmark_enter(void) { kc::g_benchmark.fetch_add(1, std::memory_order_acq_rel); }

KC_EXPORT void kerncap_benchmark_exit(void) {
  int v = kc::g_benchmark.load(std::memory_order_acquire);
  while (v > 0 && !kc::g_benchmark.compare_exchange_weak(v, v - 1, std::memory_order_acq_rel)) {
  }
}
