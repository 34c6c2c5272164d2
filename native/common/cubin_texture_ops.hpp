// Does a kernel sample textures or access surfaces? Read from its SASS: on sm_80 … sm_90
// the instruction's opcode is the low 12 bits of its first 64-bit word, and the texture
// family (TEX, TLD, TLD4, TMML, TXD, TXQ) and the surface family (SULD, SUST, SUATOM,
// SURED) have opcodes of their own (established against nvdisasm on cubins compiled for
// sm_80, 86, 89 and 90, docs/facts.md). kerncap uses the answer to tell a parameter that
// holds a texture handle from an integer that happens to equal one, and to say that a
// kernel reading handles from memory cannot be replayed.
#pragma once
#include <string>

#include "cubin_elf.hpp"

namespace kc {

enum TextureOps : int {
  kTexOpsUnknown = -1,  // not an sm_8x/sm_9x cubin, or the kernel's code is not there
  kTexOpsNone = 0,
  kTexOpsTexture = 1,   // a texture instruction
  kTexOpsSurface = 2,   // a surface instruction
};

// The instruction families `kernel` uses: its own .text section and those of the
// module's device functions (sections without a .nv.info of their own).
int texture_instructions(const Cubin& cubin, const std::string& kernel);
// The cubin's SM version from its ELF header (90 for sm_90), or 0 when it does not say.
int cubin_sm(const Cubin& cubin);
// The family of one instruction's opcode (low 12 bits), for sm_80 … sm_90.
int texture_opcode_family(unsigned opcode);

}  // namespace kc
