#include "kernel.hpp"

#include <algorithm>
#include <cstring>

#include "cubin_elf.hpp"
#include "func_attributes.hpp"

namespace kc::replay {

LaunchConfig::LaunchConfig(LaunchSpec spec) : spec_(std::move(spec)) {
  bool has_cooperative = false;
  for (const auto& [id, raw] : spec_.attributes) {
    // These carry event handles of the captured process, or are graph-only.
    if (id == CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT || id == CU_LAUNCH_ATTRIBUTE_LAUNCH_COMPLETION_EVENT ||
        id == CU_LAUNCH_ATTRIBUTE_DEVICE_UPDATABLE_KERNEL_NODE) {
      notes_.push_back("launch attribute " + std::to_string(id) +
                       " left out: it names an object of the captured process");
      continue;
    }
    CUlaunchAttribute a;
    std::memset(&a, 0, sizeof a);
    a.id = static_cast<CUlaunchAttributeID>(id);
    std::memcpy(&a.value, raw.data(), std::min(raw.size(), sizeof a.value));
    attrs_.push_back(a);
    has_cooperative |= id == CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
  }
  if (spec_.cooperative && !has_cooperative) {
    CUlaunchAttribute a;
    std::memset(&a, 0, sizeof a);
    a.id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
    a.value.cooperative = 1;
    attrs_.push_back(a);
  }
  for (const auto& [offset, size] : spec_.params) {
    if (offset + size > spec_.param_buffer.size())
      throw Error("capture", "parameter at offset " + std::to_string(offset) + " (" + std::to_string(size) +
                                 " bytes) lies outside the captured parameter buffer of " +
                                 std::to_string(spec_.param_buffer.size()) + " bytes");
    args_.push_back(&spec_.param_buffer[offset]);
  }
  buffer_size_ = spec_.param_buffer.size();
}

void LaunchConfig::launch(CUfunction f, CUstream s) {
  CUlaunchConfig cfg;
  std::memset(&cfg, 0, sizeof cfg);
  cfg.gridDimX = spec_.grid[0];
  cfg.gridDimY = spec_.grid[1];
  cfg.gridDimZ = spec_.grid[2];
  cfg.blockDimX = spec_.block[0];
  cfg.blockDimY = spec_.block[1];
  cfg.blockDimZ = spec_.block[2];
  cfg.sharedMemBytes = spec_.shared_mem_bytes;
  cfg.hStream = s;
  cfg.attrs = attrs_.empty() ? nullptr : attrs_.data();
  cfg.numAttrs = static_cast<unsigned>(attrs_.size());
  const std::string what = "kernel " + spec_.kernel_name;
  if (spec_.extra_form) {
    void* extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, spec_.param_buffer.data(), CU_LAUNCH_PARAM_BUFFER_SIZE,
                     &buffer_size_, CU_LAUNCH_PARAM_END};
    KC_CHECK(cuLaunchKernelEx, (&cfg, f, nullptr, extra), what);
  } else {
    KC_CHECK(cuLaunchKernelEx, (&cfg, f, args_.empty() ? nullptr : args_.data(), nullptr), what);
  }
}

// ---------------------------------------------------------------------------
namespace {

std::string joined(const std::vector<std::string>& parts) {
  std::string out;
  for (const std::string& p : parts) out += (out.empty() ? "" : ", ") + p;
  return out;
}

// How many parameters the image's .nv.info says the kernel takes (EIATTR_KPARAM_INFO),
// or -1 when the image is no cubin we can read (e.g. a fatbin) or lacks the kernel.
long cubin_param_count(const std::string& image, const std::string& kernel) {
  try {
    const kc::Cubin cubin = kc::Cubin::parse(image.data(), image.size(), /*copy=*/false);
    if (!cubin.has_function(kernel)) return -1;
    return static_cast<long>(cubin.kernel_info(kernel).params.size());
  } catch (const kc::ElfError&) {
    return -1;
  }
}

// Returns a note instead of checking when the driver cannot report the layout.
//
// Only indices the kernel has are asked for when the cubin's count agrees with the
// capture: probing one past the last parameter fails by design (CUDA_ERROR_INVALID_VALUE),
// and compute-sanitizer reports every failing API call as a host error, so the common
// path must make none. The driver stays the authority: when the cubin's count is unknown
// or disagrees, the probe decides (and its last, failing call is expected).
std::string check_param_layout(CUfunction f, const LaunchSpec& spec, const std::string& label,
                               long cubin_count) {
  const std::string head = "variant " + label + ": the parameters of " + spec.kernel_name + " differ from the capture: ";
  const bool bounded = cubin_count >= 0 && static_cast<size_t>(cubin_count) == spec.params.size();
  size_t count = 0;
  for (;; ++count) {
    if (bounded && count == spec.params.size()) break;
    size_t offset = 0, size = 0;
    CUresult r = KC_CU(cuFuncGetParamInfo)(f, count, &offset, &size);
    if (r == CUDA_ERROR_INVALID_VALUE && !bounded) break;  // past the last parameter
    if (r != CUDA_SUCCESS && count == 0)
      return "parameter layout of " + label + " not checked: cuFuncGetParamInfo failed: " + cu_error_string(r);
    check(r, "cuFuncGetParamInfo", "parameter " + std::to_string(count) + " of " + spec.kernel_name);
    if (count >= spec.params.size()) continue;  // counted below
    const auto& [want_offset, want_size] = spec.params[count];
    if (offset != want_offset || size != want_size) {
      throw Error("variant", head + "parameter " + std::to_string(count) + " is " + std::to_string(size) +
                                 " bytes at offset " + std::to_string(offset) + ", the capture has " +
                                 std::to_string(want_size) + " bytes at offset " + std::to_string(want_offset));
    }
  }
  if (count != spec.params.size())
    throw Error("variant", head + "it takes " + std::to_string(count) + " parameters, the capture has " +
                               std::to_string(spec.params.size()));
  return std::string();
}

}  // namespace

CUfunction prepare_function(CUmodule module, const std::string& image, const LaunchSpec& spec, const std::string& label,
                            std::vector<std::string>& notes) {
  CUfunction func = nullptr;
  CUresult r = KC_CU(cuModuleGetFunction)(&func, module, spec.kernel_name.c_str());
  if (r == CUDA_ERROR_NOT_FOUND) throw Error("variant", "variant " + label + " has no kernel " + spec.kernel_name);
  check(r, "cuModuleGetFunction", spec.kernel_name + " in " + label);
  if (std::string note = check_param_layout(func, spec, label, cubin_param_count(image, spec.kernel_name));
      !note.empty()) notes.push_back(note);
  // Dynamic shared memory above the default (48 KB minus static) needs an opt-in.
  if (spec.shared_mem_bytes > 0) {
    int current = 0;
    KC_CHECK(cuFuncGetAttribute, (&current, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, func),
             spec.kernel_name + " in " + label);
    if (spec.shared_mem_bytes > static_cast<unsigned>(current)) {
      KC_CHECK(cuFuncSetAttribute,
               (func, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, static_cast<int>(spec.shared_mem_bytes)),
               spec.kernel_name + " in " + label + " (" + std::to_string(spec.shared_mem_bytes) +
                   " bytes of dynamic shared memory)");
    }
  }
  return func;
}

std::map<std::string, long long> function_attributes(CUfunction func, const std::string& label) {
  std::map<std::string, long long> out;
  for (const auto& [name, attr] : kFuncAttributes) {
    int v = 0;
    KC_CHECK(cuFuncGetAttribute, (&v, attr, func), std::string(name) + " of the kernel in " + label);
    out[name] = v;
  }
  return out;
}

std::vector<CUdeviceptr> resolve_globals(CUmodule module, const std::string& label, const std::vector<GlobalRef>& globals,
                                         std::vector<std::string>& notes) {
  std::vector<CUdeviceptr> out;
  for (const GlobalRef& g : globals) {
    if (g.in_module.empty()) {
      notes.push_back("module global " + g.captured + " is not defined by " + label +
                      ": nothing in it can reach the global, so it is not restored; it is compared as the "
                      "variant leaves it, unchanged from the pre-state");
      out.push_back(0);
      continue;
    }
    CUdeviceptr p = 0;
    size_t got = 0;
    const CUresult r = KC_CU(cuModuleGetGlobal)(&p, &got, module, g.in_module.c_str());
    if (r == CUDA_ERROR_NOT_FOUND)
      throw Error("variant", "variant " + label + " has no module global " + g.in_module + " (the captured module has it)");
    check(r, "cuModuleGetGlobal", g.in_module + " in " + label);
    if (got != g.size)
      throw Error("variant", "variant " + label + ": module global " + g.in_module + " is " + std::to_string(got) +
                                 " bytes, the capture has " + std::to_string(g.size));
    if (g.in_module != g.captured)
      notes.push_back("module global " + g.captured + " is restored into " + g.in_module +
                      " (the same global under the variant's module id)");
    out.push_back(p);
  }
  return out;
}

LoadedKernel::LoadedKernel(const std::string& image, const std::string& label, const LaunchSpec& spec,
                           const std::vector<GlobalRef>& globals)
    : module_(image.data(), label), label_(label) {
  func_ = prepare_function(module_.get(), image, spec, label, notes_);
  globals_ = resolve_globals(module_.get(), label, globals, notes_);
  snapshot_own(image, globals);
}

void LoadedKernel::snapshot_own(const std::string& image, const std::vector<GlobalRef>& globals) {
  std::vector<kc::ModuleGlobal> defined;
  try {
    defined = kc::Cubin::parse(image.data(), image.size(), /*copy=*/false).module_globals();
  } catch (const kc::ElfError& e) {
    notes_.push_back("the module globals of " + label_ + " could not be listed (" + e.what() +
                     "): state it keeps in globals of its own is not reset between launches");
    return;
  }
  std::vector<std::string> named;
  size_t total = 0;
  for (const kc::ModuleGlobal& g : defined) {
    if (g.section.compare(0, 10, ".nv.global") != 0) continue;  // __constant__: the kernel cannot write it
    bool captured = false;
    for (const GlobalRef& r : globals) captured |= r.in_module == g.name;
    if (captured) continue;  // restored from the capture like any region
    OwnGlobal own;
    own.name = g.name;
    KC_CHECK(cuModuleGetGlobal, (&own.ptr, &own.size, module_.get(), g.name.c_str()), g.name + " in " + label_);
    if (own.size == 0) continue;
    own.initial = DeviceBuffer(own.size, "the load-time bytes of " + g.name + " in " + label_);
    // cuMemcpy: a __managed__ variable's address is not device memory.
    KC_CHECK(cuMemcpy, (own.initial.get(), own.ptr, own.size), "the load-time bytes of " + g.name + " in " + label_);
    total += own.size;
    if (named.size() < 4) named.push_back(g.name + " (" + format_bytes(own.size) + ")");
    own_.push_back(std::move(own));
  }
  if (!own_.empty())
    notes_.push_back(label_ + " defines " + std::to_string(own_.size()) + " writable module global" +
                     (own_.size() == 1 ? "" : "s") + " the capture does not have (" + format_bytes(total) + ": " +
                     joined(named) + (own_.size() > named.size() ? ", ..." : "") +
                     "): restored to their load-time bytes before every launch");
}

void LoadedKernel::restore_own(CUstream s) const {
  for (const OwnGlobal& g : own_)
    KC_CHECK(cuMemcpyAsync, (g.ptr, g.initial.get(), g.size, s), "restoring " + g.name + " of " + label_);
}

std::map<std::string, long long> LoadedKernel::attributes() const { return function_attributes(func_, label_); }

}  // namespace kc::replay
