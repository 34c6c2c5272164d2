// The captured launch (configuration, attributes, parameter bytes) and a loaded cubin
// (the captured one or a variant) that must fit it.
#pragma once
#include <cuda.h>

#include <array>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "resources.hpp"

namespace kc::replay {

struct LaunchSpec {
  std::string kernel_name;  // mangled
  std::array<unsigned, 3> grid{1, 1, 1};
  std::array<unsigned, 3> block{1, 1, 1};
  unsigned shared_mem_bytes = 0;
  std::vector<std::pair<unsigned, std::string>> attributes;  // id, raw CUlaunchAttributeValue bytes
  bool cooperative = false;
  bool extra_form = false;  // arguments passed via `extra` (CU_LAUNCH_PARAM_BUFFER_POINTER)
  std::string param_buffer;
  std::vector<std::pair<size_t, size_t>> params;  // offset, size in param_buffer
  // (offset in param_buffer, texture/surface object): the replay's handle goes there.
  std::vector<std::pair<size_t, long>> handles;
};

// What cuLaunchKernelEx needs, built once from the spec.
class LaunchConfig {
 public:
  explicit LaunchConfig(LaunchSpec spec);
  LaunchConfig(const LaunchConfig&) = delete;
  LaunchConfig& operator=(const LaunchConfig&) = delete;
  void launch(CUfunction f, CUstream s);
  const LaunchSpec& spec() const { return spec_; }
  // Attributes left out because they name objects of the captured process.
  const std::vector<std::string>& notes() const { return notes_; }

 private:
  LaunchSpec spec_;
  std::vector<CUlaunchAttribute> attrs_;
  std::vector<void*> args_;  // kernelParams: pointers into spec_.param_buffer
  size_t buffer_size_ = 0;
  std::vector<std::string> notes_;
};

// The kernel of `spec` in a loaded module, checked against the capture's parameter
// layout (Error "variant" when it differs or is missing), its dynamic shared memory opted
// into; notes (a layout the driver could not report) go to `notes`.
CUfunction prepare_function(CUmodule module, const std::string& image, const LaunchSpec& spec, const std::string& label,
                            std::vector<std::string>& notes);
// The function attributes a replay reports (func_attributes.hpp names).
std::map<std::string, long long> function_attributes(CUfunction func, const std::string& label);

// A captured module global and the name it has in the module being loaded: the same
// name, the same global under the variant's module id (internal-linkage names embed a
// per-TU hash), or empty when the variant does not define it (then no code in the
// variant can reach it: it is neither restored nor compared).
struct GlobalRef {
  std::string captured;
  std::string in_module;
  size_t size = 0;
};

// The address of each global in `module` (0 for one it does not define), checked: same
// size as captured; Error "variant" when a name it should define is missing.
std::vector<CUdeviceptr> resolve_globals(CUmodule module, const std::string& label, const std::vector<GlobalRef>& globals,
                                         std::vector<std::string>& notes);

// A module loaded from a cubin image, its kernel checked against the capture.
class LoadedKernel {
 public:
  // Throws Error("variant", ...) when the image lacks the kernel or one of `globals`
  // that has a name in it, when such a global has another size, or when the kernel's
  // parameter layout differs from the capture.
  LoadedKernel(const std::string& image, const std::string& label, const LaunchSpec& spec,
               const std::vector<GlobalRef>& globals);
  CUfunction function() const { return func_; }
  // 0 for a global the module does not define.
  CUdeviceptr global_address(size_t i) const { return globals_.at(i); }
  std::map<std::string, long long> attributes() const;
  const std::vector<std::string>& notes() const { return notes_; }
  // Puts the module's own writable globals (those the capture does not have) back to
  // their bytes at load time, on `s`: state a program keeps there between launches
  // (a "computed already" flag, a cache) must not reach the next launch.
  void restore_own(CUstream s) const;
  size_t own_globals() const { return own_.size(); }

 private:
  struct OwnGlobal {
    std::string name;
    CUdeviceptr ptr = 0;
    size_t size = 0;
    DeviceBuffer initial;  // the load-time bytes
  };
  void snapshot_own(const std::string& image, const std::vector<GlobalRef>& globals);

  Module module_;
  CUfunction func_ = nullptr;
  std::vector<CUdeviceptr> globals_;
  std::vector<OwnGlobal> own_;
  std::string label_;
  std::vector<std::string> notes_;  // e.g. a parameter layout the driver could not report
};

}  // namespace kc::replay
