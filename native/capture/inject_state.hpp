// The injection library's shared state (libkerncap_inject.so, inject.cpp): the process's
// State, each thread's ThreadState, and every function of the capture modes, declared
// once for the files that hold them: inject.cpp (entry and dispatch), single_capture.cpp,
// memory_kinds.cpp, graph_tracking.cpp, sequence_mode.cpp, sampled_profile_mode.cpp.
// Internal to the library: nothing here is exported (the symbols are hidden).
#pragma once
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

namespace kc {
namespace inject {

// Autotuner benchmarking depth (kerncap_benchmark_enter/exit). Outside State: the
// Python hook may call in before the driver has initialized the injection.
extern std::atomic<int> g_benchmark;

// libkerncap_entry.so's Gate (entry_abi.hpp), when it is preloaded with this ABI.
kc_entry::Gate* find_gate();

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
extern State* g;
// Set in a fork child (pthread_atfork): CUDA is unusable there and the parent reports.
extern std::atomic<bool> g_forked;

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

ThreadState& this_thread();

// Set while kerncap itself calls the driver, so its own calls are not treated as the app's.
struct Guard {
  ThreadState& t;
  bool prev;
  Guard() : t(this_thread()), prev(t.guard) { t.guard = true; }
  ~Guard() { t.guard = prev; }
};

extern thread_local std::optional<ModuleCollector> tl_load_collector;  // inside cuModuleLoad*/cuLibraryLoad*

struct Recovered {
  std::string error;    // non-empty: the capture cannot go on
  std::string warning;  // for the manifest
};

// ---------------------------------------------------------------------------------
// Every function of the modes (defined in the files above).
void on_fork_child();
void set_armed(State& s, bool on);
ThreadState& this_thread();
std::string cupti_error(CUptiResult r, const char* call);
ProcCounters counters(State& s);
bool selection_requested(const Config& c);
std::string job_json(const JobIdentity& j, bool selected, const std::string& why_not);
std::string selection_json(State& s);
const char* interception_name(const State& s);
std::string interception_json(const State& s);
void write_proc(State& s);
void write_buckets(State& s, bool final_report);
const KernelMatcher* registry_matcher(const State& s);
ThreadSlot* my_slot(State& s, ThreadState& t);
void quiesce_enter(State& s, ThreadState& t);
void quiesce_exit(State& s, ThreadState& t);
CUresult result_of(const CUpti_CallbackData* cb);
std::string lock_path(const State& s);
void capture_failed(State& s, const char* kind, const std::string& message);
bool claim_capture(State& s);
std::string capture_name(const State& s, uint64_t index);
std::string blob_pool(const State& s);
void capture_over(State& s, const std::string& dir, uint64_t index, uint32_t bucket);
void describe_launch(State& s, CaptureSession& session, uint32_t bucket);
void capture_attempt_failed(State& s, const char* kind, const std::string& message, uint64_t index, uint32_t bucket);
std::string disk_message(const State& s, const IoError& e);
bool hold_other_threads(State& s, ThreadState& t, const std::string& what, uint64_t index, uint32_t bucket);
bool start_capture(State& s, const LaunchDesc& d, const FuncInfo& fi, const CUpti_CallbackData* cb, uint64_t index, uint32_t bucket);
void finish_capture(State& s, const CUpti_CallbackData* cb);
bool stream_is_capturing(const LaunchDesc& d, std::string& why);
bool in_stream_capture(State& s, CUstream stream, bool per_thread);
FuncSlot& func_slot(State& s, ThreadState& t, CUfunction f);
FuncInfo* func_info(State& s, ThreadState& t, CUfunction f, ThreadSlot::Kernel** count = nullptr);
uint64_t count_launch(State& s, ThreadState& t, FuncInfo& fi, ThreadSlot::Kernel* per_thread);
int current_device(ThreadState& t, CUcontext ctx);
bool selected_launch(State& s, ThreadState& t, CUcontext ctx = nullptr);
bool set_kernel_ok(State& s, const FuncInfo& fi);
bool set_wants(State& s, const FuncInfo& fi, uint64_t index, uint32_t bucket);
bool set_launch(State& s, const LaunchDesc& d, const FuncInfo& fi, const CUpti_CallbackData* cb, uint64_t index);
void launch_enter(State& s, ThreadState& t, CUpti_CallbackId cbid, const CUpti_CallbackData* cb);
void pair_lazy_modules(State& s, ThreadState& t);
void launch_exit(State& s, ThreadState& t, const CUpti_CallbackData* cb);
void track_memory(State& s, CUpti_CallbackId cbid, const CUpti_CallbackData* cb);
void pair_loaded(State& s, CUpti_CallbackId cbid, const CUpti_CallbackData* cb);
bool instantiate_args(CUpti_CallbackId cbid, const void* p, CUgraphExec*& exec, CUgraph& g, uint64_t& flags);
void track_graph(State& s, CUpti_CallbackId cbid, const CUpti_CallbackData* cb, uint16_t roles);
LaunchDesc node_launch(CUgraphNode node, CUstream stream, bool per_thread, std::vector<CUlaunchAttribute>& attrs);
CUresult run_graph_copy(CUgraph g, CUstream stream, const std::string& what);
void start_graph_capture(State& s, ExecModel& m, const NodeRef& target, uint64_t index, CUstream stream, bool per_thread, uint32_t bucket);
void refuse_graph_buckets(State& s, ExecModel* m, const std::vector<CUgraphNode>& extra, const std::string& why, bool launched);
void set_graph_launch(State& s, ExecModel& m, uint64_t before, size_t count, const CUpti_CallbackData* cb, CUstream stream, bool per_thread);
void graph_launch_enter(State& s, ThreadState& t, CUpti_CallbackId cbid, const CUpti_CallbackData* cb);
void graph_launch_exit(ThreadState& t);
uint64_t seq_thread(State& s, ThreadState& t);
std::string sequence_selection(const State& s);
std::string sequence_report(State& s);
bool until_matches(State& s, const FuncInfo& fi);
std::string sequence_what(const State& s);
bool open_sequence(State& s, ThreadState& t);
void abort_sequence(State& s, ThreadState& t, const char* kind, const std::string& message);
void close_sequence(State& s, ThreadState& t);
bool record_sequence_launch(State& s, ThreadState& t, const LaunchDesc& d, FuncInfo& fi, const CUpti_CallbackData* cb);
bool sequence_launch_enter(State& s, ThreadState& t, const LaunchDesc& d, FuncInfo& fi, const CUpti_CallbackData* cb);
bool start_sequence_run(State& s, ThreadState& t, const LaunchDesc& d, FuncInfo& fi, const CUpti_CallbackData* cb);
void sequence_launch_exit(State& s, ThreadState& t, const CUpti_CallbackData* cb);
void start_sequence_graph(State& s, ThreadState& t, ExecModel& m, CUstream stream, bool per_thread);
void sequence_call(State& s, ThreadState& t, CUpti_CallbackId cbid, const CUpti_CallbackData* cb, uint16_t roles, bool enter);
void sequence_nvtx(State& s, ThreadState& t, CUpti_CallbackId cbid, const CUpti_NvtxData* d);
void sequence_at_exit(State& s);
CUstream launch_stream(CUstream stream, bool per_thread);
bool time_launch(State& s, ThreadState& t, ThreadSlot::Kernel* k, uint64_t n, double* weight);
bool load_function(FuncInfo& fi, CUfunction f);
uint64_t launches_so_far(State& s);
uint64_t exits_so_far(State& s);
bool others_inside(State& s, uint64_t entries);
void count_exit(State& s, ThreadState& t);
void sampled_exit(State& s, ThreadState& t, const CUpti_CallbackData* cb, std::atomic<bool>* ready);
void sampled_launch(State& s, ThreadState& t, CUpti_CallbackId cbid, const CUpti_CallbackData* cb, bool enter);
ProfGraph* graph_record(State& s, ThreadState& t, CUgraphExec exec, ThreadSlot::Kernel** count);
void sampled_graph_launch(State& s, ThreadState& t, CUpti_CallbackId cbid, const CUpti_CallbackData* cb, bool enter);
void sampled_context_call(State& s, ThreadState& t, CUpti_CallbackId cbid, const CUpti_CallbackData* cb, bool enter);
void sampled_call(State& s, ThreadState& t, CUpti_CallbackId cbid, const CUpti_CallbackData* cb, uint16_t roles, bool enter);
void on_graph_node_created(State& s, const CUpti_GraphData* gd);
void profile_tag(State& s, ThreadState& t, CUpti_CallbackId cbid, const CUpti_CallbackData* cb, uint16_t roles);
void record_image(State& s, CUpti_CallbackId cbid, const CUpti_CallbackData* cb);
void forget_image(State& s, CUpti_CallbackId cbid, const CUpti_CallbackData* cb);
void entry_only_call(State& s, CUpti_CallbackId cbid, const CUpti_CallbackData* cb, bool enter);
void CUPTIAPI on_late_module(void*, CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const void* data);
Recovered recover_cubin(State& s, CUfunction launched, const FuncInfo& fi);
std::string launched_cubin_sha(State& s, CUfunction f, const FuncInfo& fi, std::string& why);
void apply_call(State& s, ThreadState& t, CUpti_CallbackId cbid, const CUpti_CallbackData* cb, uint16_t roles, bool enter);
void on_driver(State& s, ThreadState& t, CUpti_CallbackId cbid, const CUpti_CallbackData* cb);
void on_resource(State& s, CUpti_CallbackId cbid, const CUpti_ResourceData* rd);
void CUPTIAPI on_callback(void*, CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const void* data);
std::vector<std::pair<std::string, std::string>> profile_extras(State& s);
void at_exit();
void entry_dispatch(CUpti_CallbackId cbid, const CUpti_CallbackData* cb);
void allow_bench_switch();
bool attach_entry_points(State& s);
bool attach_sampled_profile(State& s);
void attach_apply(State& s);
bool enable(State& s, CUpti_CallbackDomain domain, CUpti_CallbackId cbid);
void request_stop(State& s, const std::string& why);
bool select_this_process(State& s);
void create_selection(State& s);
bool enable_launch_tags(State& s);
bool enable_nvtx(State& s);
void initialize();

}  // namespace inject
}  // namespace kc
