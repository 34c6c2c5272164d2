#include "cubin_elf.hpp"

#include <algorithm>
#include <cstring>

namespace kc {
namespace {

constexpr uint32_t kSymtab = 2;   // SHT_SYMTAB
constexpr uint8_t kSttObject = 1; // STT_OBJECT
constexpr uint8_t kSttFunc = 2;   // STT_FUNC
constexpr uint16_t kShnUndef = 0;
constexpr uint16_t kShnLoreserve = 0xff00;

// .nv.info attribute ids (EIATTR_*) and record formats (EIFMT_*), as found in cubins.
constexpr uint8_t kEiattrFrameSize = 0x11;
constexpr uint8_t kEiattrKparamInfo = 0x17;
constexpr uint8_t kEiattrRegcount = 0x2f;
constexpr uint8_t kFmtNval = 1, kFmtBval = 2, kFmtHval = 3, kFmtSval = 4;

// The image being read: pointer + size, every access bounds-checked.
struct Bytes {
  const unsigned char* p;
  size_t n;
  size_t size() const { return n; }
  const unsigned char* data() const { return p; }
  unsigned char operator[](uint64_t i) const { return p[i]; }
};

template <class T>
T read_at(const Bytes& b, uint64_t off, const char* what) {
  if (off > b.size() || b.size() - off < sizeof(T)) {
    throw ElfError(std::string("cubin truncated: ") + what + " at offset " + std::to_string(off) +
                   " lies past the end (" + std::to_string(b.size()) + " bytes)");
  }
  T v;
  std::memcpy(&v, b.data() + off, sizeof(T));
  return v;
}

std::string read_cstr(const Bytes& b, const ElfSection& strtab, uint64_t idx, const char* what) {
  if (idx >= strtab.size) throw ElfError(std::string("cubin: ") + what + " name index out of range");
  uint64_t start = strtab.offset + idx, end = strtab.offset + strtab.size;
  uint64_t p = start;
  while (p < end && b[p] != 0) ++p;
  if (p == end) throw ElfError(std::string("cubin: ") + what + " name is not NUL-terminated");
  return std::string(reinterpret_cast<const char*>(b.data() + start), p - start);
}

}  // namespace

bool is_module_constant_section(const std::string& name) {
  static const char kPrefix[] = ".nv.constant";
  const size_t n = sizeof(kPrefix) - 1;
  if (name.compare(0, n, kPrefix) != 0 || name.size() == n) return false;
  size_t i = n;
  if (name[i] < '0' || name[i] > '9') return false;
  unsigned bank = 0;
  while (i < name.size() && name[i] >= '0' && name[i] <= '9') bank = bank * 10 + unsigned(name[i++] - '0');
  if (i != name.size() && name[i] != '.') return false;
  return bank >= 1;
}

Cubin Cubin::parse(const void* data, size_t size, bool copy) {
  Cubin c;
  const auto* p = static_cast<const unsigned char*>(data);
  if (!p) throw ElfError("no cubin image (null pointer)");
  if (copy) {
    auto owned = std::make_shared<std::vector<unsigned char>>(p, p + size);
    p = owned->data();
    c.owned_ = std::move(owned);
  }
  c.data_ = p;
  c.size_ = size;
  const Bytes b{p, size};
  if (size < 64 || std::memcmp(b.data(), "\x7f" "ELF", 4) != 0) throw ElfError("not an ELF image (bad magic)");
  if (b[4] != 2) throw ElfError("not a 64-bit ELF image (cubins are ELF64)");
  if (b[5] != 1) throw ElfError("not a little-endian ELF image");
  c.machine_ = read_at<uint16_t>(b, 18, "e_machine");
  const uint64_t shoff = read_at<uint64_t>(b, 0x28, "e_shoff");
  const uint16_t shentsize = read_at<uint16_t>(b, 0x3a, "e_shentsize");
  const uint16_t shnum = read_at<uint16_t>(b, 0x3c, "e_shnum");
  const uint16_t shstrndx = read_at<uint16_t>(b, 0x3e, "e_shstrndx");
  if (shnum == 0) throw ElfError("cubin has no section headers");
  if (shentsize < 64) throw ElfError("cubin section header size " + std::to_string(shentsize) + " < 64");
  if (shstrndx >= shnum) throw ElfError("cubin section-name table index out of range");

  c.sections_.resize(shnum);
  std::vector<uint32_t> name_idx(shnum);
  for (uint16_t i = 0; i < shnum; ++i) {
    const uint64_t h = shoff + uint64_t(i) * shentsize;
    ElfSection& s = c.sections_[i];
    name_idx[i] = read_at<uint32_t>(b, h + 0, "sh_name");
    s.type = read_at<uint32_t>(b, h + 4, "sh_type");
    s.flags = read_at<uint64_t>(b, h + 8, "sh_flags");
    s.offset = read_at<uint64_t>(b, h + 24, "sh_offset");
    s.size = read_at<uint64_t>(b, h + 32, "sh_size");
    s.link = read_at<uint32_t>(b, h + 40, "sh_link");
    s.info = read_at<uint32_t>(b, h + 44, "sh_info");
    const bool nobits = s.type == 8;  // SHT_NOBITS occupies no file bytes
    if (!nobits && (s.offset > size || size - s.offset < s.size)) {
      throw ElfError("cubin section " + std::to_string(i) + " extends past the end of the image");
    }
  }
  const ElfSection shstr = c.sections_[shstrndx];
  for (uint16_t i = 0; i < shnum; ++i) c.sections_[i].name = read_cstr(b, shstr, name_idx[i], "section");

  for (uint16_t i = 0; i < shnum; ++i) {
    if (c.sections_[i].type != kSymtab) continue;
    c.symtab_ = i;
    const ElfSection& st = c.sections_[i];
    if (st.link >= shnum) throw ElfError("cubin .symtab links to a missing string table");
    const ElfSection& strtab = c.sections_[st.link];
    const uint64_t count = st.size / 24;
    c.symbols_.reserve(count);
    for (uint64_t k = 0; k < count; ++k) {
      const uint64_t e = st.offset + k * 24;
      ElfSymbol sym;
      const uint32_t nidx = read_at<uint32_t>(b, e, "st_name");
      const uint8_t info = read_at<uint8_t>(b, e + 4, "st_info");
      sym.type = info & 0xf;
      sym.binding = info >> 4;
      sym.section = read_at<uint16_t>(b, e + 6, "st_shndx");
      sym.value = read_at<uint64_t>(b, e + 8, "st_value");
      sym.size = read_at<uint64_t>(b, e + 16, "st_size");
      sym.name = read_cstr(b, strtab, nidx, "symbol");
      c.symbols_.push_back(std::move(sym));
    }
    break;
  }
  return c;
}

std::vector<std::string> Cubin::function_names() const {
  std::vector<std::string> out;
  for (const auto& s : symbols_)
    if (s.type == kSttFunc && s.section != kShnUndef && s.section < kShnLoreserve) out.push_back(s.name);
  return out;
}

bool Cubin::has_function(const std::string& name) const {
  for (const auto& s : symbols_)
    if (s.type == kSttFunc && s.section != kShnUndef && s.name == name) return true;
  return false;
}

int Cubin::find_section(const std::string& name) const {
  for (size_t i = 0; i < sections_.size(); ++i)
    if (sections_[i].name == name) return int(i);
  return -1;
}

namespace {

// Walks the records of one .nv.info section; calls fn(attr, value_offset, value_size).
template <class Fn>
void walk_nv_info(const Bytes& b, const ElfSection& s, Fn fn) {
  uint64_t p = s.offset;
  const uint64_t end = s.offset + s.size;
  while (p + 2 <= end) {
    const uint8_t fmt = b[p], attr = b[p + 1];
    if (fmt == kFmtNval) {
      fn(attr, p + 2, uint64_t(0));
      p += 2;
    } else if (fmt == kFmtBval || fmt == kFmtHval) {  // value in the next 2 bytes, record padded to 4
      if (p + 4 > end) return;
      fn(attr, p + 2, uint64_t(fmt == kFmtBval ? 1 : 2));
      p += 4;
    } else if (fmt == kFmtSval) {
      if (p + 4 > end) return;
      uint16_t n;
      std::memcpy(&n, b.data() + p + 2, 2);
      if (p + 4 + n > end) return;
      fn(attr, p + 4, uint64_t(n));
      p += 4 + n;
    } else {
      return;  // unknown format: stop rather than misread
    }
  }
}

}  // namespace

KernelInfo Cubin::kernel_info(const std::string& kernel) const {
  KernelInfo ki;
  const Bytes b{data_, size_};
  // Symbol index of the kernel: .nv.info keys its REGCOUNT/FRAME_SIZE records by it.
  int64_t sym_index = -1;
  for (size_t i = 0; i < symbols_.size(); ++i)
    if (symbols_[i].type == kSttFunc && symbols_[i].name == kernel) { sym_index = int64_t(i); break; }
  if (sym_index < 0) return ki;

  int global_info = find_section(".nv.info");
  if (global_info >= 0) {
    walk_nv_info(b, sections_[global_info], [&](uint8_t attr, uint64_t off, uint64_t n) {
      if ((attr != kEiattrRegcount && attr != kEiattrFrameSize) || n != 8) return;
      uint32_t sym, val;
      std::memcpy(&sym, b.data() + off, 4);
      std::memcpy(&val, b.data() + off + 4, 4);
      if (int64_t(sym) != sym_index) return;
      (attr == kEiattrRegcount ? ki.num_regs : ki.frame_size) = int(val);
    });
  }
  int own_info = find_section(".nv.info." + kernel);
  if (own_info >= 0) {
    walk_nv_info(b, sections_[own_info], [&](uint8_t attr, uint64_t off, uint64_t n) {
      if (attr != kEiattrKparamInfo || n != 12) return;
      uint16_t ordinal, offset;
      uint32_t flags;
      std::memcpy(&ordinal, b.data() + off + 4, 2);
      std::memcpy(&offset, b.data() + off + 6, 2);
      std::memcpy(&flags, b.data() + off + 8, 4);
      ki.params.push_back({ordinal, offset, (flags >> 18) & 0x3fff});
    });
    std::sort(ki.params.begin(), ki.params.end(),
              [](const KernelParamInfo& a, const KernelParamInfo& c) { return a.ordinal < c.ordinal; });
  }
  int shared = find_section(".nv.shared." + kernel);
  if (shared >= 0) ki.static_shared = int64_t(sections_[shared].size);
  int bank = find_section(".nv.constant0." + kernel);
  if (bank >= 0) ki.param_bank = int64_t(sections_[bank].size);
  return ki;
}

std::vector<ModuleGlobal> Cubin::module_globals() const {
  std::vector<ModuleGlobal> out;
  for (const auto& s : symbols_) {
    if (s.type != kSttObject || s.section == kShnUndef || s.section >= sections_.size() || s.size == 0) continue;
    const std::string& sec = sections_[s.section].name;
    if (is_module_constant_section(sec) || sec.compare(0, 10, ".nv.global") == 0) {
      out.push_back({s.name, sec, s.size});
    }
  }
  return out;
}

}  // namespace kc
