// One sequence capture (docs/sequences.md): every launch and memory operation the
// window's owner thread enqueues between the window's opening and its end, with the
// state of every tracked region before the first and after the last.
//
// open(): with the owner's context current and every other thread held at its driver-API
// entry (the quiescing rule, as for one dispatch): drain, snapshot the pre-state of every
// live region into $KERNCAP_OUT/capture.partial-<pid>/.
// add_launch() (at each launch's entry): the kernel (its cubin, attributes, module
// globals: snapshotted at the first launch of their module, after a drain), the launch
// configuration, the parameters and the stream. Memory operations and stream/event
// calls go to log() directly; add_h2d() also stores the host bytes as blobs.
// close(): drain, snapshot every region, global, host region and array again, check
// every launch's parameters against what the capture holds (the closure check), write
// sequence.json and the manifest through the one writer (manifest_writer.hpp: what one
// dispatch records, with the first launch's kernel, so readers of one dispatch can open
// it), rename to `capture`. Failures throw (IoError for the disk); the caller
// then calls abort(), which removes the partial directory.
#pragma once
#include <cuda.h>
#include <cupti.h>

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "array_capture.hpp"
#include "array_tracker.hpp"
#include "blob_store.hpp"
#include "config.hpp"
#include "fsutil.hpp"
#include "func_cache.hpp"
#include "job_identity.hpp"
#include "json_writer.hpp"
#include "launch_record.hpp"
#include "manifest_writer.hpp"
#include "memory_tracker.hpp"
#include "module_registry.hpp"
#include "sequence_window.hpp"
#include "snapshot.hpp"

namespace kc {

class SequenceCapture {
 public:
  // `selection_json`: what opened the window (sequence.json "selection"), already serialized.
  SequenceCapture(const Config& cfg, MemoryTracker& mem, ModuleRegistry& modules, std::string selection_json);
  ~SequenceCapture();
  SequenceCapture(const SequenceCapture&) = delete;
  SequenceCapture& operator=(const SequenceCapture&) = delete;

  void open();
  bool is_open() const { return opened_; }
  CUcontext context() const { return ctx_; }
  int device() const { return int(device_); }

  // Whether a launch of this handle needs its cubin recovered first (entry points).
  bool knows(const FuncInfo* fi) const { return kernel_ids_.count(fi) > 0; }
  // At a launch's entry, inside the window. Returns the launch's index.
  size_t add_launch(const LaunchDesc& d, const FuncInfo& fi, const std::string& nvtx_path, bool per_thread);
  // A host-to-device copy: `host` is read now (the copy reads it when the call returns or
  // runs; kerncap keeps what the app handed over).
  void add_h2d(const char* api, uint64_t dst, const void* host, uint64_t bytes, int stream);
  // The stream index of a handle (its flags asked once).
  int stream_of(CUstream s, bool per_thread);
  SequenceLog& log() { return log_; }
  // An enqueueing call of the owner inside the window other than a launch (its entry):
  // copies, fills, event records and waits, synchronizations are recorded; anything else
  // makes the sequence unreplayable (log().refusal()) or is noted as not replayed.
  void on_call(CUpti_CallbackId cbid, const void* params, const char* name);
  bool on_copy(CUpti_CallbackId cbid, const void* params, const char* name);
  bool on_fill(CUpti_CallbackId cbid, const void* params, const char* name);
  void on_order(CUpti_CallbackId cbid, const void* params, const char* name);
  void add_warning(const std::string& w) { warnings_.push_back(w); }
  void set_job(const JobIdentity& j) { job_ = j; }
  void set_interception(std::string path) { interception_ = std::move(path); }
  // The process's CUDA arrays and texture/surface objects: those live when the window
  // opens are snapshotted before and after it, and recreated in replay (as for one dispatch).
  void set_arrays(const ArrayTracker* tracker) { array_tracker_ = tracker; }
  // Graph windows: the executable graph's launch and its nodes (sequence.json "graph").
  void set_graph_json(std::string json) { graph_json_ = std::move(json); }

  std::string close();
  void abort();

 private:
  struct Module {
    CUmodule handle = nullptr;
    CUlibrary library = nullptr;
    std::shared_ptr<const KeptCubin> cubin;
    std::string selection;
    int candidates = 0;
    std::vector<std::pair<std::string, bool>> verified;
    std::vector<size_t> globals;  // indices into globals_
  };
  struct Kernel {
    const FuncInfo* fi = nullptr;
    CUfunction fn = nullptr;
    CUkernel kernel = nullptr;
    size_t module = 0;
    std::vector<std::pair<const char*, int>> attributes;
    KernelInfo info;
  };
  struct Launch {
    size_t kernel = 0;
    std::string api;
    unsigned grid[3] = {0, 0, 0}, block[3] = {0, 0, 0};
    unsigned shared_mem = 0;
    bool cooperative = false;
    std::vector<CUlaunchAttribute> attrs;
    ParamCapture params;
    int stream = 0;
    std::string nvtx;
    LaunchHandles handles;  // parameters holding a texture/surface object's handle
  };
  struct GlobalVar {
    CapturedGlobal global;
    ItemSnapshot pre, post;
  };
  struct HostState {
    HostItem item;
    std::optional<ItemSnapshot> pre, post;  // post absent: freed inside the window
  };
  struct RegionState {
    TrackedRegion region;
    std::optional<ItemSnapshot> pre, post;  // absent: allocated inside the window / freed inside it
  };

  void log_line(const std::string& line);
  size_t kernel_of(const LaunchDesc& d, const FuncInfo& fi);
  size_t module_of(CUmodule mod, CUlibrary lib, const FuncInfo& fi, const std::vector<std::pair<const char*, int>>& attrs);
  std::string sequence_json() const;
  std::string manifest_json(double total_s) const;  // through the one writer (manifest_writer.hpp)
  Provenance provenance(double total_s) const;
  void write_kernel(JsonWriter& w, const Kernel& k) const;
  void write_launch(JsonWriter& w, const Launch& l) const;
  void write_params(JsonWriter& w, const Launch& l) const;
  void snapshot_pre();                      // regions, host regions and arrays at the opening
  std::set<uint64_t> merge_regions();       // at close: the regions allocated inside the window join
  void snapshot_post(const std::set<uint64_t>& kept);
  void check_launch_handles(Launch& l, const Kernel& k, size_t index);
  void check_closure_of_launches();         // targets_ and closure_, at close

  const Config& cfg_;
  MemoryTracker& mem_;
  ModuleRegistry& registry_;
  std::string selection_json_;
  std::string partial_, final_;
  CUcontext ctx_ = nullptr;
  CUdevice device_ = 0;
  bool opened_ = false;

  std::vector<Module> modules_;
  std::map<std::pair<CUmodule, std::string>, size_t> module_ids_;
  std::vector<Kernel> kernels_;
  std::map<const FuncInfo*, size_t> kernel_ids_;
  std::vector<Launch> launches_;
  std::vector<GlobalVar> globals_;
  std::vector<RegionState> regions_;  // sorted by base once closed
  std::vector<TrackedRegion> open_regions_;  // as at the opening (the arrays' linear resources point into them)
  std::vector<HostState> hosts_;
  const ArrayTracker* array_tracker_ = nullptr;
  std::unique_ptr<ArrayCapture> arrays_;
  std::set<size_t> scanned_kernels_;  // kernels whose first launch was scanned for handle tables
  ClosureTargets targets_;
  ClosureCheck closure_;
  SequenceLog log_;
  std::optional<JobIdentity> job_;
  std::string interception_;
  std::string graph_json_;
  std::vector<std::string> warnings_;
  std::vector<std::string> log_lines_;

  WriteBudget budget_;
  std::unique_ptr<BlobStore> blobs_;
  std::unique_ptr<Snapshotter> snap_;
  std::chrono::steady_clock::time_point t_start_;
  double pre_s_ = 0, post_s_ = 0, window_s_ = 0;
  std::chrono::steady_clock::time_point t_open_;
  uint64_t payload_bytes_ = 0;
  uint64_t logical_bytes_ = 0, snapshotted_bytes_ = 0, unchanged_bytes_ = 0, zero_bytes_ = 0;
  std::string time_utc_;
};

}  // namespace kc
