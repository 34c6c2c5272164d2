// `kerncap apply` (issue 46, docs/apply.md): the unmodified app runs with a variant cubin
// standing in for the captured kernel. KERNCAP_MODE=apply, through libkerncap_entry.so's
// wrappers only (a launch's function can be swapped there before the driver sees it).
//
// Every launch of the captured function (the same mangled name, in a module whose cubin's
// sha256 is the captured cubin's) is redirected to the same-named kernel of the variant
// module, loaded once per context; grid, block, shared memory, attributes and parameters
// stay the app's. Before each substituted launch the original module's globals are copied
// into the variant's same-named ones on the launch's stream, and after it those the kernel
// can write are copied back. Under --check each launch's output buffers and written globals
// are fingerprinted. What cannot be substituted is refused (the app's own launch runs,
// untouched) and named in apply-<pid>.json.
#pragma once
#include <cuda.h>
#include <cupti.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "launch_record.hpp"

namespace kc {

struct ApplyConfig {
  std::string out_dir;
  std::string kernel;                 // mangled name (KERNCAP_KERNEL, matched exactly)
  std::string variant;                // KERNCAP_APPLY_CUBIN; empty: the as-is run (nothing substituted)
  std::string sha256;                 // KERNCAP_APPLY_SHA256: the captured cubin's
  bool by_name = false;               // KERNCAP_APPLY_IDENTIFY=name: the name alone identifies the kernel
  std::vector<std::pair<std::string, uint64_t>> globals;  // KERNCAP_APPLY_GLOBALS=name:size,...
  // KERNCAP_APPLY_GLOBALS_BACK=name,...: of those, the ones the kernel can write (`__device__`):
  // copied back into the app's after each substituted launch, so the app reads what it wrote
  std::vector<std::string> globals_back;
  // KERNCAP_APPLY_CHECK_GLOBALS=name,...: module globals --check fingerprints after each
  // launch, as the app holds them (the kernel's outputs that no parameter points at)
  std::vector<std::string> check_globals;
  std::vector<uint64_t> dispatches;   // KERNCAP_APPLY_DISPATCH=N,M,...; empty: every launch
  bool check = false;                 // KERNCAP_APPLY_CHECK=1: fingerprint each launch's outputs
  bool outputs_given = false;
  // KERNCAP_APPLY_OUTPUTS=i,j@off: the parameters whose memory is compared; i@off: the buffer
  // named by the pointer at byte `off` of parameter i's buffer (an output reached through a table)
  struct Output {
    uint32_t param;
    int64_t via = -1;
  };
  std::vector<Output> outputs;
  int64_t dump_at = -1;               // KERNCAP_APPLY_DUMP_AT=N: that launch's outputs written to dump-N-p<i>.bin
  uint64_t check_max = 100000;        // KERNCAP_APPLY_CHECK_MAX: launches fingerprinted at most
  bool profile = false;               // KERNCAP_APPLY_PROFILE=1: CUPTI activity records (profile-<pid>.json)
  // Reads the environment; a malformed value is `error` (the interposer then stays out of the way).
  static ApplyConfig from_env(std::string& error);
};

// The cubin sha256 of a launched function's module; empty with `why` when unknown.
using CubinSha = std::function<std::string(std::string& why)>;

class Applier {
 public:
  explicit Applier(ApplyConfig cfg);
  const ApplyConfig& config() const { return cfg_; }
  // Bench processes only (KERNCAP_BENCH_PASSTHROUGH=1): while `held` returns non-zero a
  // selected launch is identified and counted but not redirected (bench/paired.py apply).
  void bench_hold(int (*held)()) { bench_held_ = held; }

  // A launch of a function named like the target, at its API entry, with kerncap's
  // reentrancy guard held. May replace the function in `params` (the launch call's
  // CUPTI parameter struct, which libkerncap_entry.so's wrapper then calls the driver with).
  void launch_enter(CUpti_CallbackId cbid, void* params, const LaunchDesc& d, bool is_kernel, uint32_t correlation,
                    const CubinSha& sha);
  // Its exit (the guard held): the outputs' fingerprints under --check.
  void launch_exit(uint32_t correlation, CUresult result);
  // A launch of the target recorded into a CUDA graph by stream capture: not substituted.
  void recorded_into_graph() { graph_launches_.fetch_add(1, std::memory_order_relaxed); }
  // A module was unloaded: handles may come back for other code.
  void forget_handles();
  std::string report_json(int pid);

 private:
  struct Handle {
    bool target = false;
    std::string why;  // not the target: why (a cubin of another sha256, unknown)
  };
  struct Mirror {
    CUdeviceptr src = 0, dst = 0;  // the app's, the variant's
    size_t size = 0;
    bool back = false;  // copied back after the launch (ApplyConfig::globals_back)
    std::string name;
  };
  struct Ready {  // per (original handle, context): checked once
    CUfunction variant = nullptr;
    std::vector<Mirror> globals;
    std::vector<ParamSlot> layout;  // the original's
  };
  struct Fingerprint {
    uint64_t launch;
    uint32_t param;
    int64_t via;  // -1: the parameter's own buffer
    uint64_t bytes;
    std::string hash;
    std::string global;  // non-empty: this module global of the app's, not a parameter's buffer
  };
  struct AppGlobal {
    std::string name;
    CUdeviceptr ptr = 0;
    size_t size = 0;
  };
  // The launched function's module or library, where the app's globals are looked up.
  struct Origin {
    CUmodule module = nullptr;
    CUlibrary library = nullptr;
  };
  static Origin origin_of(const LaunchDesc& d, bool is_kernel);
  static CUresult app_global(const Origin& o, const std::string& name, CUdeviceptr& ptr, size_t& size);
  const std::vector<AppGlobal>& checked_globals(const LaunchDesc& d, bool is_kernel, CUcontext ctx);
  void fingerprint(uint64_t launch, uint32_t param, int64_t via, const std::string& global, CUdeviceptr ptr,
                   size_t n, const std::string& what);
  void refuse(const std::string& kind, const std::string& message);
  bool prepare(const LaunchDesc& d, bool is_kernel, CUcontext ctx, Ready& out);
  bool mirror_globals(const Ready& ready, CUstream stream);  // with mu_ held
  Handle identify(const CubinSha& sha);  // with mu_ held
  CUmodule variant_module(CUcontext ctx);

  ApplyConfig cfg_;
  std::string image_;  // the variant cubin's bytes
  std::mutex mu_;
  std::map<CUfunction, Handle> handles_;
  std::map<CUcontext, CUmodule> modules_;
  std::map<std::pair<CUfunction, CUcontext>, Ready> ready_;
  std::map<std::pair<CUfunction, CUcontext>, std::vector<AppGlobal>> checked_globals_;
  int (*bench_held_)() = nullptr;
  std::atomic<bool> refused_{false};
  std::string refusal_kind_, refusal_;
  std::vector<std::string> unidentified_;  // same name, not the captured cubin: why (first few)
  std::vector<std::string> errors_;
  std::vector<Fingerprint> fingerprints_;
  std::vector<std::string> dumps_;
  std::vector<std::pair<std::string, uint64_t>> skipped_globals_;  // the variant lacks them
  bool fingerprints_truncated_ = false;
  std::atomic<uint64_t> launches_{0}, substituted_{0}, not_selected_{0}, graph_launches_{0}, failed_launches_{0};
};

// Replaces the function a launch call's CUPTI parameter struct holds.
void set_launch_function(CUpti_CallbackId cbid, void* params, CUfunction f);

}  // namespace kc
