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
    Elf64_Ehdr e;
    std::memcpy(&e, image, sizeof e);
    size_t end = size_t(e.e_shoff) + size_t(e.e_shnum) * e.e_shentsize;
    end = std::max(end, size_t(e.e_phoff) + size_t(e.e_phnum) * e.e_phentsize);
    return end <= kMaxImage ? copy_of(image, end) : ModuleImage{};
  }
  return copy_of(image, std::strlen(static_cast<const char*>(image)) + 1);  // PTX text
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
