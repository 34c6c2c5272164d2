// A small, bounds-checked reader for NVIDIA cubins (ELF64, little endian).
//
// The capture interposer gets cubin bytes from CUPTI's MODULE_LOADED callback and
// needs: the kernel symbols (to keep only cubins that hold the target), the module
// globals (STT_OBJECT in .nv.constantN, N >= 1, and .nv.global*: DESIGN fact 4) and a
// few per-kernel attributes from .nv.info (register count, frame size) to check
// which of several same-named cubins was launched. Every read is range-checked:
// a malformed image makes parse() throw kc::ElfError naming the problem.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace kc {

class ElfError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct ElfSection {
  std::string name;
  uint32_t type = 0;
  uint64_t flags = 0;
  uint64_t offset = 0;
  uint64_t size = 0;
  uint32_t link = 0;
  uint32_t info = 0;
};

struct ElfSymbol {
  std::string name;
  uint8_t type = 0;     // STT_* (low nibble of st_info)
  uint8_t binding = 0;  // STB_* (high nibble)
  uint16_t section = 0; // st_shndx
  uint64_t value = 0;
  uint64_t size = 0;
};

// One kernel parameter as recorded by EIATTR_KPARAM_INFO.
struct KernelParamInfo {
  uint32_t ordinal = 0;
  uint32_t offset = 0;
  uint32_t size = 0;
};

// What .nv.info / .nv.info.<kernel> / section sizes say about one kernel.
struct KernelInfo {
  int num_regs = -1;           // EIATTR_REGCOUNT, -1 when absent
  int frame_size = -1;         // EIATTR_FRAME_SIZE (local memory per thread)
  int64_t static_shared = -1;  // size of .nv.shared.<kernel>, -1 when absent
  int64_t param_bank = -1;     // size of .nv.constant0.<kernel>
  std::vector<KernelParamInfo> params;  // sorted by ordinal
};

// A module global worth snapshotting: __constant__ / __device__ data.
struct ModuleGlobal {
  std::string name;
  std::string section;
  uint64_t size = 0;
};

class Cubin {
 public:
  // Parses `data`. With copy=false the Cubin only points at `data`, which must outlive
  // it (cheap filtering inside a CUPTI callback); copy=true keeps its own copy.
  // Throws ElfError when the image is not a sane ELF64.
  static Cubin parse(const void* data, size_t size, bool copy = true);

  const std::vector<ElfSection>& sections() const { return sections_; }
  const std::vector<ElfSymbol>& symbols() const { return symbols_; }
  const unsigned char* data() const { return data_; }
  size_t size() const { return size_; }
  uint16_t machine() const { return machine_; }

  // Names of STT_FUNC symbols defined in the image (the kernels and device functions).
  std::vector<std::string> function_names() const;
  bool has_function(const std::string& name) const;
  // Section index by name, or -1.
  int find_section(const std::string& name) const;
  // Per-kernel attributes; fields stay -1 / empty when the cubin does not say.
  KernelInfo kernel_info(const std::string& kernel) const;
  // STT_OBJECT symbols in .nv.constantN (N >= 1) and .nv.global* sections.
  std::vector<ModuleGlobal> module_globals() const;

 private:
  std::shared_ptr<const std::vector<unsigned char>> owned_;
  const unsigned char* data_ = nullptr;
  size_t size_ = 0;
  std::vector<ElfSection> sections_;
  std::vector<ElfSymbol> symbols_;
  uint16_t machine_ = 0;
  int symtab_ = -1;
};

// True for ".nv.constant1" ... ".nv.constant17" (not .nv.constant0*, the parameter banks).
bool is_module_constant_section(const std::string& name);

}  // namespace kc
