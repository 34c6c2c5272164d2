// Decoding the launch APIs' CUPTI parameter structs, and recording one launch's
// parameters (layout from cuFuncGetParamInfo / cuKernelGetParamInfo, bytes from
// kernelParams[] or the `extra` buffer: cuBLASLt's nvjet passes one 1720-byte
// parameter through CU_LAUNCH_PARAM_BUFFER_POINTER, DESIGN fact 2).
#pragma once
#include <cuda.h>
#include <cupti.h>

#include <cstdint>
#include <string>
#include <vector>

#include "cubin_elf.hpp"

namespace kc {

// A launch as the driver API received it; points into the caller's arguments.
struct LaunchDesc {
  const char* api = "";
  CUfunction f = nullptr;
  unsigned grid[3] = {0, 0, 0};
  unsigned block[3] = {0, 0, 0};
  unsigned shared_mem = 0;
  CUstream stream = nullptr;
  void** kernel_params = nullptr;
  void** extra = nullptr;
  const CUlaunchAttribute* attrs = nullptr;  // cuLaunchKernelEx only
  unsigned num_attrs = 0;
  bool cooperative = false;
  bool per_thread_default = false;  // a _ptsz variant: a NULL stream means the per-thread stream
};

// Fills `d` when `cbid` is one of the launch calls kerncap watches (role kLaunch in
// watched_calls.cpp). Allocation-free.
bool decode_launch(CUpti_CallbackId cbid, const void* params, LaunchDesc& d);

// null | legacy | per-thread | user
const char* stream_kind(const LaunchDesc& d);

struct ParamSlot {
  uint32_t index = 0;
  uint64_t offset = 0;
  uint64_t size = 0;
};

struct ParamCapture {
  std::string form = "array";  // array | extra
  std::vector<ParamSlot> params;
  std::vector<unsigned char> buffer;  // packed: each parameter at its offset
  std::string layout_source;          // driver | cubin | extra-buffer | none
};

// The driver's parameter layout of a function (cuKernelGetParamInfo for a CUkernel,
// else cuFuncGetParamInfo); empty when the driver does not know it. Driver calls: call
// with kerncap's reentrancy guard set.
std::vector<ParamSlot> param_layout(CUfunction f, CUkernel kernel);

// The packed parameter bytes of launch `d` for `layout` (kernelParams), or the `extra`
// buffer as it is; false when neither form can be read (no exception: a hot path).
bool param_bytes(const LaunchDesc& d, const std::vector<ParamSlot>& layout, std::vector<unsigned char>& out);

// Reads the parameters of launch `d`. `kernel` is the CUkernel when the handle is
// one (else null); `cubin_info` is the fallback layout from .nv.info.
// Throws std::runtime_error naming the kernel when the bytes cannot be read.
ParamCapture capture_params(const LaunchDesc& d, CUkernel kernel, const KernelInfo* cubin_info,
                            const std::string& kernel_name);

}  // namespace kc
