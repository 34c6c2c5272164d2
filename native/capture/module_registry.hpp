// Cubins of the process that may hold the target kernel, and which module/library
// handle each belongs to (DESIGN fact 3).
//
// CUPTI's MODULE_LOADED callback hands over the ELF cubin and a module id but no
// handle. It fires synchronously inside the call that loads: cuModuleLoad*,
// cuLibraryLoad*, or under lazy loading inside whatever call needed the code (a
// launch, cuKernelGetFunction). The thread that makes such a call installs a
// Collector; module ids loaded while it is installed are paired with the handle the
// call produced. Only cubins with a function symbol matching the target pattern are
// kept (copied); autotuners make several same-named cubins, all are kept.
#pragma once
#include <cuda.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "cubin_elf.hpp"

namespace kc {

class KernelMatcher;

struct KeptCubin {
  uint32_t module_id = 0;
  Cubin cubin;
  std::string sha256;
};

// Collects the module ids loaded on this thread while it lives (nesting restores).
class ModuleCollector {
 public:
  ModuleCollector();
  ~ModuleCollector();
  ModuleCollector(const ModuleCollector&) = delete;
  ModuleCollector& operator=(const ModuleCollector&) = delete;
  const std::vector<uint32_t>& ids() const { return ids_; }
  // Called from MODULE_LOADED: appends to the innermost collector of this thread;
  // false when this thread has none.
  static bool note_loaded(uint32_t module_id);

 private:
  std::vector<uint32_t> ids_;
  ModuleCollector* prev_;
};

// What the launch-time lookup found out about the kernel's cubin.
struct CubinChoice {
  std::shared_ptr<const KeptCubin> cubin;  // null: no cubin holds the kernel
  std::string selection;                  // handle | unique-symbol | attributes | ambiguous
  int candidates = 0;                     // distinct cubins whose symbol table holds the name
  std::vector<std::pair<std::string, bool>> verified;  // attribute -> cubin agrees with the driver
  std::vector<std::string> warnings;
};

// Driver-reported attributes used to verify / disambiguate.
struct DriverFuncAttrs {
  int num_regs = -1;
  int local_size_bytes = -1;
};

class ModuleRegistry {
 public:
  // MODULE_LOADED: parse, keep if a function symbol matches. Never throws.
  void on_module_loaded(uint32_t module_id, const void* cubin, size_t size, const KernelMatcher& matcher);
  void on_module_unloading(uint32_t module_id);
  void pair_module(CUmodule mod, const std::vector<uint32_t>& ids);
  void pair_library(CUlibrary lib, const std::vector<uint32_t>& ids);
  // True when any of `ids` is a kept cubin (pairing it is worth a driver call).
  bool any_kept(const std::vector<uint32_t>& ids) const;
  // Module ids paired with a handle (empty when unknown).
  std::vector<uint32_t> ids_for_module(CUmodule mod) const;
  std::vector<uint32_t> ids_for_library(CUlibrary lib) const;

  // Picks the cubin for kernel `mangled`: first among `handle_ids`, else the unique
  // cubin holding the symbol, else the one whose .nv.info agrees with `attrs`.
  CubinChoice choose(const std::string& mangled, const std::vector<uint32_t>& handle_ids,
                     const DriverFuncAttrs& attrs) const;
  // Cubins that could not be parsed (first few messages), for the manifest warnings.
  std::vector<std::string> parse_failures() const;

 private:
  mutable std::mutex mu_;
  std::map<uint32_t, std::shared_ptr<const KeptCubin>> kept_;
  std::map<CUmodule, std::vector<uint32_t>> by_module_;
  std::map<CUlibrary, std::vector<uint32_t>> by_library_;
  std::vector<std::string> parse_failures_;
};

}  // namespace kc
