#include "module_images.hpp"

#include <elf.h>

#include <algorithm>

#include <cstdint>
#include <cstring>

namespace kc {

namespace {
constexpr uint32_t kFatbinWrapperMagic = 0x466243b1;  // cudart's __fatBinC_Wrapper_t
constexpr uint32_t kFatbinMagic = 0xBA55ED50;
constexpr size_t kMaxImage = size_t(4) << 30;  // beyond this a "size" is a misread header

struct FatbinWrapper {
  int magic;
  int version;
  const unsigned long long* data;
  void* filename_or_fatbins;
};

struct FatbinHeader {
  uint32_t magic;
  uint16_t version;
  uint16_t header_size;
  uint64_t fat_size;
};

ModuleImage copy_of(const void* p, size_t n) {
  ModuleImage im;
  im.bytes = std::make_shared<const std::string>(static_cast<const char*>(p), n);
  return im;
}
}  // namespace

ModuleImage image_of(const void* image) {
  if (!image) return {};
  uint32_t magic = 0;
  std::memcpy(&magic, image, sizeof magic);
  if (magic == kFatbinWrapperMagic) {
    ModuleImage im;
    im.borrowed = static_cast<const FatbinWrapper*>(image)->data;
    return im;
  }
  if (magic == kFatbinMagic) {
    FatbinHeader h;
    std::memcpy(&h, image, sizeof h);
    const size_t n = size_t(h.header_size) + size_t(h.fat_size);
    return n <= kMaxImage ? copy_of(image, n) : ModuleImage{};
  }
  if (!std::memcmp(image, ELFMAG, SELFMAG)) {
    // The driver loaded it, so its headers are sound: the file ends where the last of
    // its tables and section contents ends.
    const char* base = static_cast<const char*>(image);
    Elf64_Ehdr e;
    std::memcpy(&e, base, sizeof e);
    size_t end = std::max<size_t>(sizeof e, size_t(e.e_shoff) + size_t(e.e_shnum) * e.e_shentsize);
    end = std::max(end, size_t(e.e_phoff) + size_t(e.e_phnum) * e.e_phentsize);
    if (end > kMaxImage) return {};
    for (unsigned i = 0; e.e_shentsize >= sizeof(Elf64_Shdr) && i < e.e_shnum; ++i) {
      Elf64_Shdr sh;
      std::memcpy(&sh, base + e.e_shoff + size_t(i) * e.e_shentsize, sizeof sh);
      if (sh.sh_type != SHT_NOBITS) end = std::max(end, size_t(sh.sh_offset) + size_t(sh.sh_size));
    }
    for (unsigned i = 0; e.e_phentsize >= sizeof(Elf64_Phdr) && i < e.e_phnum; ++i) {
      Elf64_Phdr ph;
      std::memcpy(&ph, base + e.e_phoff + size_t(i) * e.e_phentsize, sizeof ph);
      end = std::max(end, size_t(ph.p_offset) + size_t(ph.p_filesz));
    }
    return end <= kMaxImage ? copy_of(image, end) : ModuleImage{};
  }
  return copy_of(image, std::strlen(static_cast<const char*>(image)) + 1);  // PTX text
}

void keep_jit_options(ModuleImage& image, unsigned n, const CUjit_option* options, void* const* values) {
  for (unsigned i = 0; options && values && i < n; ++i) {
    switch (options[i]) {
      // Scalars that shape the code: loaded the same way again.
      case CU_JIT_MAX_REGISTERS:
      case CU_JIT_THREADS_PER_BLOCK:
      case CU_JIT_OPTIMIZATION_LEVEL:
      case CU_JIT_TARGET_FROM_CUCONTEXT:
      case CU_JIT_TARGET:
      case CU_JIT_FALLBACK_STRATEGY:
      case CU_JIT_GENERATE_DEBUG_INFO:
      case CU_JIT_GENERATE_LINE_INFO:
      case CU_JIT_CACHE_MODE:
      case CU_JIT_FTZ:
      case CU_JIT_PREC_DIV:
      case CU_JIT_PREC_SQRT:
      case CU_JIT_FMA:
      case CU_JIT_POSITION_INDEPENDENT_CODE:
      case CU_JIT_MIN_CTA_PER_SM:
      case CU_JIT_MAX_THREADS_PER_BLOCK:
      case CU_JIT_OVERRIDE_DIRECTIVE_VALUES:
        image.jit_options.push_back(options[i]);
        image.jit_values.push_back(values[i]);
        break;
      // Logs and outputs: nothing to do with the code.
      case CU_JIT_WALL_TIME:
      case CU_JIT_INFO_LOG_BUFFER:
      case CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES:
      case CU_JIT_ERROR_LOG_BUFFER:
      case CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES:
      case CU_JIT_LOG_VERBOSE:
        break;
      default:  // arrays of the app's (symbols, referenced names) and anything newer
        image.unmatched += (image.unmatched.empty() ? "" : ", ") + std::to_string(int(options[i]));
        break;
    }
  }
}

void ModuleImages::add_module(CUmodule m, ModuleImage image) {
  std::lock_guard<std::mutex> lock(mu_);
  modules_[m] = std::move(image);
}

void ModuleImages::add_library(CUlibrary l, ModuleImage image) {
  std::lock_guard<std::mutex> lock(mu_);
  libraries_[l] = std::move(image);
}

void ModuleImages::forget_module(CUmodule m) {
  std::lock_guard<std::mutex> lock(mu_);
  modules_.erase(m);
}

void ModuleImages::forget_library(CUlibrary l) {
  std::lock_guard<std::mutex> lock(mu_);
  libraries_.erase(l);
}

bool ModuleImages::find(CUmodule m, CUlibrary l, ModuleImage& out) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (m) {
    auto it = modules_.find(m);
    if (it != modules_.end()) {
      out = it->second;
      return true;
    }
  }
  if (l) {
    auto it = libraries_.find(l);
    if (it != libraries_.end()) {
      out = it->second;
      return true;
    }
  }
  return false;
}

std::vector<std::pair<CUlibrary, ModuleImage>> ModuleImages::libraries() const {
  std::lock_guard<std::mutex> lock(mu_);
  return {libraries_.begin(), libraries_.end()};
}

size_t ModuleImages::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return modules_.size() + libraries_.size();
}

}  // namespace kc
