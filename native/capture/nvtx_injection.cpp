// NVTX's tool entry points: kerncap's own tool when it captures through interposed
// entry points (nvtx_tool.cpp), else forwarded to CUPTI.
//
// CUPTI sees NVTX calls only when NVTX_INJECTION64_PATH names a library exporting
// InitializeInjectionNvtx2 (CUPTI implements it). It must be the libcupti *instance*
// kerncap subscribed through: a PyTorch process loads its pip wheel's libcupti at
// `import torch`, and this library's libcupti dependency then resolves to that one by
// its SONAME, so a path to the toolkit's libcupti would load a second CUPTI that no
// subscriber listens to. The engine therefore names this library, and these entry
// points hand NVTX to whichever libcupti this library is bound to.
#include <cupti.h>
#include <dlfcn.h>

#include "nvtx_tool.hpp"

#define KC_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

// The symbol `name` of the libcupti that cuptiSubscribe resolved to in this library.
void* cupti_symbol(const char* name) {
  Dl_info info{};
  if (!dladdr(reinterpret_cast<void*>(&cuptiSubscribe), &info) || !info.dli_fname) return nullptr;
  void* lib = dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD);
  if (!lib) return nullptr;
  void* sym = dlsym(lib, name);
  dlclose(lib);  // drops the reference NOLOAD took; the library stays (this one depends on it)
  return sym;
}

}  // namespace

KC_EXPORT int InitializeInjectionNvtx2(void* get_export_table) {
  if (kc::own_nvtx_tool_wanted())
    return kc::install_nvtx_tool(reinterpret_cast<NvtxGetExportTableFunc_t>(get_export_table));
  using Init = int (*)(void*);
  auto init = reinterpret_cast<Init>(cupti_symbol("InitializeInjectionNvtx2"));
  return init ? init(get_export_table) : 0;  // 0: NVTX runs without a tool
}

KC_EXPORT int InitializeInjectionNvtxExtension(void* module_info) {
  if (kc::own_nvtx_tool_wanted()) return 0;  // kerncap's tool follows no extension module
  using Init = int (*)(void*);
  auto init = reinterpret_cast<Init>(cupti_symbol("InitializeInjectionNvtxExtension"));
  return init ? init(module_info) : 0;
}
