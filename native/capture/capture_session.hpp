// One capture: everything between the target launch's API entry and its exit.
//
// before_launch(): at the target's entry, with the context current and every other
// thread held at its driver-API entry: drain the GPU, pick the cubin, read the
// parameters and attributes, snapshot the pre-state of every live region and module
// global into $KERNCAP_OUT/capture.partial-<pid>/.
// after_launch(): at the target's exit: drain, snapshot the post-state, write the
// manifest (docs/capture-format.md) and rename the directory to `capture`.
// Both throw on failure (IoError for the disk, anything else for CUDA/logic); the
// caller then calls abort(), which removes the partial directory.
#pragma once
#include <cuda.h>

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "array_capture.hpp"
#include "array_tracker.hpp"
#include "blob_store.hpp"
#include "closure_targets.hpp"
#include "manifest_writer.hpp"
#include "config.hpp"
#include "fsutil.hpp"
#include "json_writer.hpp"
#include "func_cache.hpp"
#include "job_identity.hpp"
#include "launch_record.hpp"
#include "memory_tracker.hpp"
#include "module_registry.hpp"
#include "nvtx_ranges.hpp"
#include "snapshot.hpp"

namespace kc {

// Where a dispatch ran when it was a node of a launched CUDA graph (docs/graphs.md).
struct GraphOrigin {
  uint64_t exec_id = 0;       // kerncap's number of the executable graph (instantiation order)
  uint64_t exec_launch = 0;   // which launch of that executable graph (0-based)
  size_t node_index = 0;      // the node's place in the launch's linear order, all levels
  size_t nodes = 0;           // nodes in the executable graph, all levels
  size_t target_index = 0;    // among the matching kernel nodes of one launch
  size_t targets = 0;
  std::vector<int> path;      // node indices from the top level down (child graphs)
  std::string built_by;       // stream capture | graph API
  uint64_t updates = 0;       // updates of the executable graph mirrored since instantiation
  uint64_t instantiate_flags = 0;
  size_t prefix_nodes = 0;    // nodes run before the target to reach its pre-state
  std::map<std::string, size_t> skipped;  // node kinds in the prefix kerncap did not run
  std::map<std::string, size_t> edges;    // the graph's edges by kind (graph_model.hpp edge_kind), all levels
};

class CaptureSession {
 public:
  // `name`: the capture directory under KERNCAP_OUT ("capture"; "capture-<N>" when a
  // set captures several dispatches); `pool`: the blob pool the set's captures share.
  CaptureSession(const Config& cfg, MemoryTracker& mem, ModuleRegistry& modules, const LaunchDesc& launch,
                 const FuncInfo& func, uint64_t dispatch_index, const std::string& name = "capture",
                 const std::string& pool = std::string());
  ~CaptureSession();

  // The state before anything runs, kept to put the app's memory back afterwards
  // (graph captures under keep-running: kerncap replays part of the graph itself).
  void snapshot_baseline();
  void before_launch();
  // Returns the final capture directory. With a baseline, first writes back every
  // chunk that differs from it, so the app continues from the state it had.
  std::string after_launch(CUresult launch_result);
  // Puts the baseline back after a failure (best effort; false when it could not).
  bool restore_after_failure() noexcept;
  void set_graph_origin(GraphOrigin g) { graph_ = std::move(g); }
  // Where the launch ran (manifest provenance.job, launch.nvtx, provenance.bucket).
  void set_job(const JobIdentity& j) { job_ = j; }
  void set_nvtx(NvtxContext c) { nvtx_ = std::move(c); }
  void set_bucket(uint32_t id) { bucket_ = id; }
  // How driver calls reached kerncap ("entry points" or "cupti"), for the provenance.
  void set_interception(std::string path) { interception_ = std::move(path); }
  void add_warning(const std::string& w) { warnings_.push_back(w); }
  // The process's CUDA arrays and texture/surface objects: snapshotted, recreated in replay.
  void set_arrays(const ArrayTracker* tracker) { array_tracker_ = tracker; }
  // This capture's arrays and objects (null before the pre-state or without a tracker).
  const ArrayCapture* arrays() const { return arrays_.get(); }
  void abort();
  const std::string& partial_dir() const { return partial_; }

 private:
  void log(const std::string& line);
  void prepare();  // once: directories, function, cubin, globals, parameters, regions, snapshotter
  void restore_baseline(const std::vector<ItemSnapshot>& now);
  void drop_baseline_blobs();
  void resolve_function();
  void read_attributes();
  void choose_cubin();
  void find_globals();
  std::vector<SnapshotItem> snapshot_items() const;
  std::string manifest_json() const;      // through the one writer (manifest_writer.hpp)
  Provenance provenance(double total_s) const;
  void write_kernel(JsonWriter& w) const;
  void write_launch(JsonWriter& w) const;
  void write_graph(JsonWriter& w) const;
  void build_targets();                    // targets_ from regions, globals, host regions
  void find_unresolved();                  // closure_ and its warnings
  double seconds_since(std::chrono::steady_clock::time_point t) const;

  const Config& cfg_;
  MemoryTracker& mem_;
  ModuleRegistry& modules_;
  const FuncInfo& func_;
  uint64_t dispatch_index_;
  std::string partial_, final_;

  // What the launch looked like (copied at entry: the caller's arguments die at exit).
  LaunchDesc launch_;
  std::vector<CUlaunchAttribute> attrs_;
  ParamCapture params_;
  CUcontext ctx_ = nullptr;
  CUdevice device_ = 0;
  CUfunction fn_ = nullptr;  // a real CUfunction (from cuKernelGetFunction for CUkernel handles)
  CUkernel kernel_ = nullptr;
  CUmodule module_ = nullptr;
  CUlibrary library_ = nullptr;
  std::vector<std::pair<const char*, int>> attributes_;
  CubinChoice choice_;
  std::vector<CapturedGlobal> globals_;
  std::vector<TrackedRegion> regions_;
  std::vector<HostItem> host_regions_;
  ClosureTargets targets_;
  ClosureCheck closure_;
  std::vector<ItemSnapshot> base_, pre_, post_;
  bool prepared_ = false;
  std::optional<GraphOrigin> graph_;
  std::optional<JobIdentity> job_;
  std::optional<NvtxContext> nvtx_;
  std::optional<uint32_t> bucket_;
  std::string interception_;
  std::string pool_;
  uint64_t restored_bytes_ = 0;
  std::vector<std::string> warnings_;
  std::vector<std::string> log_;
  const ArrayTracker* array_tracker_ = nullptr;
  std::unique_ptr<ArrayCapture> arrays_;

  WriteBudget budget_;
  std::unique_ptr<BlobStore> blobs_;
  std::unique_ptr<Snapshotter> snap_;
  std::chrono::steady_clock::time_point t_start_;
  double pre_s_ = 0, post_s_ = 0;
  uint64_t logical_bytes_ = 0;
  uint64_t snapshotted_bytes_ = 0;
  uint64_t unchanged_bytes_ = 0;
  uint64_t zero_bytes_ = 0;
  std::string time_utc_;
};

}  // namespace kc
