// What each module / library handle was loaded from, for capture through interposed
// entry points (docs/interposer.md). Without CUPTI's module callback kerncap never sees
// the cubin the driver picked from an image (and PyTorch's are compressed); it keeps the
// image instead, and at the capture loads the target's image once more under a short
// CUPTI subscription, whose module callback hands over that very cubin (facts §24).
#pragma once
#include <cuda.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace kc {

struct ModuleImage {
  std::shared_ptr<const std::string> bytes;  // a copy (the caller may free its buffer)
  const void* borrowed = nullptr;            // cudart's registered fatbin: static data of a loaded object
  std::string path;                          // cuModuleLoad / cuLibraryLoadFromFile
  // cuModuleLoadDataEx's JIT options that shape the code (scalars), to load it the same
  // way again; `unmatched` names the options that cannot be replayed (empty: none).
  std::vector<CUjit_option> jit_options;
  std::vector<void*> jit_values;
  std::string unmatched;
  const void* data() const { return borrowed ? borrowed : bytes ? bytes->data() : nullptr; }
};

// The size of an in-memory image handed to cuModuleLoadData*/cuLibraryLoadData: a
// fatbin (its header's size), an ELF cubin (its section table's end) or NUL-terminated
// PTX. cudart's fatbin wrapper is unwrapped to the fatbin it points at, borrowed.
ModuleImage image_of(const void* image);
// The JIT options of a cuModuleLoadDataEx, kept as image_of's result expects them.
void keep_jit_options(ModuleImage& image, unsigned n, const CUjit_option* options, void* const* values);

class ModuleImages {
 public:
  void add_module(CUmodule m, ModuleImage image);
  void add_library(CUlibrary l, ModuleImage image);
  void forget_module(CUmodule m);
  void forget_library(CUlibrary l);
  // The image of `m`, else of `l`; false when neither was seen loading.
  bool find(CUmodule m, CUlibrary l, ModuleImage& out) const;
  std::vector<std::pair<CUlibrary, ModuleImage>> libraries() const;
  size_t size() const;

 private:
  mutable std::mutex mu_;
  std::map<CUmodule, ModuleImage> modules_;
  std::map<CUlibrary, ModuleImage> libraries_;
};

}  // namespace kc
