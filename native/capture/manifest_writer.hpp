// The one writer of a capture's manifest.json (docs/capture-format.md), for one dispatch
// (capture_session.cpp) and for a sequence (sequence_capture.cpp: the top-level manifest,
// and each launch's parameters in sequence.json). Both hand it a ManifestView; whatever a
// single dispatch records (regions with their aliases, host regions with their contents,
// module globals, CUDA arrays and texture/surface objects, the closure check, the
// provenance) a sequence records the same way, so the engine reads one format.
//
// Pure: no driver call (what needs the driver is gathered by captured_state.hpp first),
// so tests/test_manifest_writer.py runs it on the CPU.
#pragma once
#include <cuda.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "closure_targets.hpp"
#include "config.hpp"
#include "job_identity.hpp"
#include "json_writer.hpp"
#include "launch_record.hpp"
#include "memory_tracker.hpp"
#include "snapshot.hpp"

namespace kc {

// A module global the capture snapshots. `module`: a sequence's module (sequence.json), -1 for one dispatch.
struct CapturedGlobal {
  std::string name, section;
  uint64_t address = 0, size = 0;
  long module = -1;
};

// A pinned or registered host allocation: snapshotted when the device can reach it.
struct HostItem {
  HostRegion region;
  uint64_t device_pointer = 0;  // 0: not mapped into the device's address space
  bool snapshot = false;
  std::string why_not;          // when not snapshotted
};

// A parameter word that points at nothing the capture holds (manifest "closure").
struct Unresolved {
  long launch = -1;  // a sequence's launch (sequence.json launches[]); -1 for one dispatch
  uint32_t param = 0;
  uint64_t at = 0, value = 0;
  std::string reason;
};

struct ClosureCheck {
  uint64_t words_checked = 0;
  std::vector<Unresolved> unresolved;
};

struct GpuIdentity {
  std::string name, uuid;
  int cc_major = 0, cc_minor = 0, driver_version = 0, ordinal = 0;
};

struct Provenance {
  std::vector<std::string> command;
  std::vector<std::pair<std::string, std::string>> env;  // kept variables, sorted
  std::string cwd, host, time_utc;
  int pid = 0;
  GpuIdentity gpu;
  uint64_t dispatch_index = 0;
  std::string interception;
  std::optional<JobIdentity> job;
  std::optional<uint32_t> bucket;
  std::string pattern, match_mode;
  double pre_s = 0, post_s = 0, total_s = 0;
  std::optional<double> window_s;  // a sequence's window
  uint64_t logical = 0, snapshotted = 0, unchanged = 0, zero = 0, stored = 0;
};

// The process's part of the provenance (command, cwd, kept environment, host, pid,
// match); the caller adds the GPU, the times and the byte counts.
Provenance process_provenance(const Config& cfg, const std::string& time_utc);

// One snapshotted item as the manifest lists it. `pre`/`post` may be null: a sequence's
// region allocated inside its window (pre: zeros) or freed inside it (post: its pre).
struct ItemStates {
  const ItemSnapshot* pre = nullptr;
  const ItemSnapshot* post = nullptr;
};

struct ManifestRegion {
  const TrackedRegion* region = nullptr;
  ItemStates states;
};
struct ManifestHost {
  const HostItem* item = nullptr;
  ItemStates states;  // both null when not snapshotted
};
struct ManifestGlobal {
  const CapturedGlobal* global = nullptr;
  ItemStates states;
};

// A parameter's texture/surface handle annotation ("handle"), by parameter index.
using HandleWriter = std::function<void(JsonWriter&, uint32_t)>;

struct ManifestView {
  Provenance provenance;
  std::function<void(JsonWriter&)> kernel;  // writes the "kernel" object's fields
  std::function<void(JsonWriter&)> launch;  // writes the "launch" object's fields
  const ParamCapture* params = nullptr;
  HandleWriter handle;
  const ClosureTargets* targets = nullptr;
  std::vector<ManifestRegion> regions;
  std::vector<ManifestHost> hosts;
  std::vector<ManifestGlobal> globals;
  std::function<void(JsonWriter&)> arrays;  // "arrays", "mipmapped_arrays", "texture_objects"
  const ClosureCheck* closure = nullptr;
  std::function<void(JsonWriter&)> extra;   // a sequence's "sequence" section
  std::vector<std::string> warnings;
};

std::string manifest_json(const ManifestView& v);

void write_provenance(JsonWriter& w, const Provenance& p);
// "params" and "param_buffer": values, the region/host pointers they hold (annotation
// only), and the handle of a texture/surface object.
void write_params(JsonWriter& w, const ParamCapture& pc, const ClosureTargets& targets, const HandleWriter& handle);
// The launch configuration fields a "launch" object (or a sequence's launch) starts with.
void write_launch_config(JsonWriter& w, const unsigned grid[3], const unsigned block[3], unsigned shared_mem,
                         const char* stream, bool cooperative, const std::vector<CUlaunchAttribute>& attrs,
                         const std::string& param_form);
void write_region(JsonWriter& w, size_t id, const ManifestRegion& r);
void write_host_region(JsonWriter& w, size_t id, const ManifestHost& h);
void write_global(JsonWriter& w, const ManifestGlobal& g);
void write_closure(JsonWriter& w, const ClosureCheck& c);

// What a parameter word can point at: regions (by their manifest index), globals, host
// regions the device can reach, and the handles of live texture/surface objects.
ClosureTargets closure_targets(const std::vector<const TrackedRegion*>& regions,
                               const std::vector<const CapturedGlobal*>& globals,
                               const std::vector<const HostItem*>& hosts, const std::vector<uint64_t>& handles);

// The closure check of one launch's parameters: every aligned 8-byte word that looks like
// an address and points at nothing in `targets` is added to `out`.
void check_closure(const ParamCapture& pc, const ClosureTargets& targets, const HostMappings& maps, long launch,
                   ClosureCheck& out);
// The warnings naming the first unresolved words (the rest counted).
void closure_warnings(const ClosureCheck& c, std::vector<std::string>& warnings);

}  // namespace kc
