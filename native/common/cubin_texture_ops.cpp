#include "cubin_texture_ops.hpp"

#include <cstdint>
#include <cstring>

namespace kc {

int cubin_sm(const Cubin& cubin) {
  if (cubin.size() < 0x34) return 0;
  const unsigned char* d = cubin.data();
  if (d[7] != 0x41) return 0;  // ELFOSABI_CUDA (v2 ABI): e_flags bits 8..15 hold the SM version
  uint32_t flags;
  std::memcpy(&flags, d + 0x30, sizeof flags);
  return int((flags >> 8) & 0xff);
}

int texture_opcode_family(unsigned opcode) {
  const unsigned low = opcode & 0xff, form = (opcode >> 8) & 0xf;
  // Operand forms seen: 0x3 / 0xb / 0xf for the texture family (handle in a register,
  // bound, uniform register), 0x9 / 0xb / 0xf for surfaces. Other instructions share the
  // low byte in other forms (USHF is 0x899), so both parts must agree.
  if (low >= 0x60 && low <= 0x6f && (form == 0x3 || form == 0xb || form == 0xf)) return kTexOpsTexture;
  if (low >= 0x98 && low <= 0x9f && (form == 0x9 || form == 0xb || form == 0xf)) return kTexOpsSurface;
  return kTexOpsNone;
}

int texture_instructions(const Cubin& cubin, const std::string& kernel) {
  const int sm = cubin_sm(cubin);
  if (sm < 80 || sm > 99) return kTexOpsUnknown;
  const int own = cubin.find_section(".text." + kernel);
  if (own < 0) return kTexOpsUnknown;
  int found = kTexOpsNone;
  const auto& sections = cubin.sections();
  for (size_t i = 0; i < sections.size(); ++i) {
    const ElfSection& s = sections[i];
    if (s.name.compare(0, 6, ".text.") != 0) continue;
    // Another kernel's code is not this kernel's; a device function's may be.
    if (int(i) != own && cubin.find_section(".nv.info." + s.name.substr(6)) >= 0) continue;
    if (s.offset > cubin.size() || cubin.size() - s.offset < s.size) return kTexOpsUnknown;
    for (uint64_t at = 0; at + 8 <= s.size; at += 16) {
      uint64_t word;
      std::memcpy(&word, cubin.data() + s.offset + at, sizeof word);
      found |= texture_opcode_family(unsigned(word & 0xfff));
    }
  }
  return found;
}

}  // namespace kc
