#include "launch_record.hpp"

#include <cstring>
#include <type_traits>

#include <cupti.h>  // also brings the cbids and generated_cuda_meta.h (which has no include guard)

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "driver.hpp"
#include "launch_kinds.hpp"

namespace kc {

namespace {

template <class P>
void from_classic(const P* p, LaunchDesc& d) {
  d.f = p->f;
  d.grid[0] = p->gridDimX; d.grid[1] = p->gridDimY; d.grid[2] = p->gridDimZ;
  d.block[0] = p->blockDimX; d.block[1] = p->blockDimY; d.block[2] = p->blockDimZ;
  d.shared_mem = p->sharedMemBytes;
  d.stream = p->hStream;
  d.kernel_params = p->kernelParams;
}

template <class P>
void from_ex(const P* p, LaunchDesc& d) {
  d.f = p->f;
  d.kernel_params = p->kernelParams;
  d.extra = p->extra;
  if (const CUlaunchConfig* c = p->config) {
    d.grid[0] = c->gridDimX; d.grid[1] = c->gridDimY; d.grid[2] = c->gridDimZ;
    d.block[0] = c->blockDimX; d.block[1] = c->blockDimY; d.block[2] = c->blockDimZ;
    d.shared_mem = c->sharedMemBytes;
    d.stream = c->hStream;
    d.attrs = c->attrs;
    d.num_attrs = c->attrs ? c->numAttrs : 0;
    for (unsigned i = 0; i < d.num_attrs; ++i)
      if (d.attrs[i].id == CU_LAUNCH_ATTRIBUTE_COOPERATIVE && d.attrs[i].value.cooperative) d.cooperative = true;
  }
}

// cuLaunchKernel and cuLaunchKernelEx may pass the parameters in an `extra` buffer.
void** extra_of(const cuLaunchKernel_params* p) { return p->extra; }
void** extra_of(const cuLaunchKernel_ptsz_params* p) { return p->extra; }
void** extra_of(const cuLaunchKernelEx_params* p) { return p->extra; }
void** extra_of(const cuLaunchKernelEx_ptsz_params* p) { return p->extra; }
template <class P>
void** extra_of(const P*) { return nullptr; }

}  // namespace

bool decode_launch(CUpti_CallbackId cbid, const void* params_in, LaunchDesc& d) {
  // Not `d = LaunchDesc()`: GCC built that as a stack temporary written in 16-byte
  // stores and read back at other offsets, a store-forwarding stall on every launch
  // (half of the armed dispatcher's samples under perf). LaunchDesc is all scalars.
  static_assert(std::is_trivially_copyable<LaunchDesc>::value, "reset by memset");
  std::memset(static_cast<void*>(&d), 0, sizeof d);
  d.api = "";
  switch (cbid) {
#define KC_DECODE_LAUNCH(call, params, form, per_thread, coop)        \
  case CUPTI_DRIVER_TRACE_CBID_##call: {                              \
    auto* p = static_cast<const params*>(params_in);                  \
    from_##form(p, d);                                                \
    d.extra = extra_of(p);                                            \
    d.api = #call;                                                    \
    d.per_thread_default = per_thread;                                \
    d.cooperative = d.cooperative || coop; /* ex: also its attribute */ \
    return true;                                                      \
  }
    KC_LAUNCH_KINDS(KC_DECODE_LAUNCH)
#undef KC_DECODE_LAUNCH
    default:
      return false;
  }
}

const char* stream_kind(const LaunchDesc& d) {
  if (d.stream == CU_STREAM_LEGACY) return "legacy";
  if (d.stream == CU_STREAM_PER_THREAD) return "per-thread";
  if (d.stream == nullptr) return d.per_thread_default ? "per-thread" : "null";
  return "user";
}

// The driver's layout: iterate paramIndex until the call refuses the index.
std::vector<ParamSlot> param_layout(CUfunction f, CUkernel kernel) {
  std::vector<ParamSlot> out;
  for (size_t i = 0; i < 65536; ++i) {
    size_t off = 0, size = 0;
    CUresult r = kernel ? KC_CU(cuKernelGetParamInfo)(kernel, i, &off, &size)
                        : KC_CU(cuFuncGetParamInfo)(f, i, &off, &size);
    if (r != CUDA_SUCCESS) break;
    out.push_back(ParamSlot{uint32_t(i), off, size});
  }
  return out;
}

namespace {

// The CU_LAUNCH_PARAM_BUFFER_POINTER/SIZE pair of an `extra` array, or false.
bool extra_buffer(void** extra, const void*& buf, size_t& size) {
  buf = nullptr;
  bool have_size = false;
  for (size_t i = 0; i < 64 && extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
    if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER) buf = extra[i + 1];
    else if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE && extra[i + 1]) {
      size = *static_cast<const size_t*>(extra[i + 1]);
      have_size = true;
    }
  }
  return buf && have_size;
}

}  // namespace

bool param_bytes(const LaunchDesc& d, const std::vector<ParamSlot>& layout, std::vector<unsigned char>& out) {
  out.clear();
  if (d.kernel_params) {
    uint64_t total = 0;
    for (const ParamSlot& p : layout) total = std::max(total, p.offset + p.size);
    out.assign(total, 0);
    for (const ParamSlot& p : layout) {
      const void* src = d.kernel_params[p.index];
      if (!src && p.size) return false;
      if (p.size) std::memcpy(out.data() + p.offset, src, p.size);
    }
    return true;
  }
  if (d.extra) {
    const void* buf = nullptr;
    size_t size = 0;
    if (!extra_buffer(d.extra, buf, size)) return false;
    const auto* b = static_cast<const unsigned char*>(buf);
    out.assign(b, b + size);
    return true;
  }
  return true;  // a kernel without parameters
}

ParamCapture capture_params(const LaunchDesc& d, CUkernel kernel, const KernelInfo* cubin_info,
                            const std::string& kernel_name) {
  ParamCapture pc;
  pc.params = param_layout(d.f, kernel);
  pc.layout_source = "driver";
  if (pc.params.empty() && cubin_info && !cubin_info->params.empty()) {
    for (const KernelParamInfo& k : cubin_info->params) pc.params.push_back(ParamSlot{k.ordinal, k.offset, k.size});
    pc.layout_source = "cubin";
  }

  if (d.kernel_params) {
    uint64_t total = 0;
    for (const ParamSlot& p : pc.params) total = std::max(total, p.offset + p.size);
    pc.buffer.assign(total, 0);
    for (const ParamSlot& p : pc.params) {
      const void* src = d.kernel_params[p.index];
      if (!src && p.size) throw std::runtime_error("kernelParams[" + std::to_string(p.index) + "] of " + kernel_name + " is NULL");
      if (p.size) std::memcpy(pc.buffer.data() + p.offset, src, p.size);
    }
    if (pc.params.empty()) pc.layout_source = "none";
    return pc;
  }

  if (d.extra) {
    const void* buf = nullptr;
    size_t size = 0;
    if (!extra_buffer(d.extra, buf, size))
      throw std::runtime_error("the `extra` launch options of " + kernel_name +
                               " hold no CU_LAUNCH_PARAM_BUFFER_POINTER/SIZE pair");
    pc.form = "extra";
    const auto* b = static_cast<const unsigned char*>(buf);
    pc.buffer.assign(b, b + size);
    // Keep the driver's per-parameter layout when it fits the buffer, else one parameter.
    bool fits = !pc.params.empty();
    for (const ParamSlot& p : pc.params) fits = fits && p.offset + p.size <= size;
    if (!fits) {
      pc.params.assign(1, ParamSlot{0, 0, size});
      pc.layout_source = "extra-buffer";
    }
    return pc;
  }

  // Neither form: a kernel without parameters.
  pc.params.clear();
  pc.layout_source = "none";
  return pc;
}

}  // namespace kc
