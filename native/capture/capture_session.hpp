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
#include <memory>
#include <string>
#include <vector>

#include "blob_store.hpp"
#include "config.hpp"
#include "fsutil.hpp"
#include "json_writer.hpp"
#include "func_cache.hpp"
#include "launch_record.hpp"
#include "memory_tracker.hpp"
#include "module_registry.hpp"
#include "snapshot.hpp"

namespace kc {

class CaptureSession {
 public:
  CaptureSession(const Config& cfg, MemoryTracker& mem, ModuleRegistry& modules, const LaunchDesc& launch,
                 const FuncInfo& func, uint64_t dispatch_index);
  ~CaptureSession();

  void before_launch();
  // Returns the final capture directory.
  std::string after_launch(CUresult launch_result);
  void abort();
  const std::string& partial_dir() const { return partial_; }

 private:
  struct GlobalVar {
    std::string name, section;
    uint64_t address = 0, size = 0;
  };

  void log(const std::string& line);
  void resolve_function();
  void read_attributes();
  void choose_cubin();
  void find_globals();
  std::vector<SnapshotItem> snapshot_items() const;
  std::string manifest_json() const;
  void write_provenance(JsonWriter& w, double total_s) const;
  void write_kernel(JsonWriter& w) const;
  void write_launch(JsonWriter& w) const;
  void write_params(JsonWriter& w) const;
  void write_regions(JsonWriter& w) const;
  int region_of(uint64_t address) const;  // index into regions_, or -1
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
  std::vector<GlobalVar> globals_;
  std::vector<TrackedRegion> regions_;
  std::vector<HostRegion> host_regions_;
  std::vector<ItemSnapshot> pre_, post_;
  std::vector<std::string> warnings_;
  std::vector<std::string> log_;

  WriteBudget budget_;
  std::unique_ptr<BlobStore> blobs_;
  std::unique_ptr<Snapshotter> snap_;
  std::chrono::steady_clock::time_point t_start_;
  double pre_s_ = 0, post_s_ = 0;
  uint64_t logical_bytes_ = 0;
  uint64_t snapshotted_bytes_ = 0;
  std::string time_utc_;
};

}  // namespace kc
