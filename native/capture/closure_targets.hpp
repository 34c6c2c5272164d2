// What a parameter word can point at in a capture's closure: a region, a module global,
// a host region (through its device pointer) or a known handle value. One lookup for
// the manifest's pointer annotations and for the words that point at nothing the
// capture holds (docs/capture-format.md, "closure"): those are named in a warning,
// because a replay cannot give the kernel what they point at.
//
// Handles (texture and surface objects) are values, not ranges: add_handle() makes a
// value known, so that a parameter holding it is not reported.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace kc {

struct TargetHit {
  enum Kind : uint8_t { kNone, kRegion, kGlobal, kHost, kHandle };
  Kind kind = kNone;
  int index = -1;        // into the capture's regions / globals / host regions / handles
  uint64_t offset = 0;   // from the target's start (0 for a handle)
  explicit operator bool() const { return kind != kNone; }
};

// The process's host mappings (/proc/self/maps), to say what an unknown address is.
struct HostMapping {
  uint64_t lo = 0, hi = 0;
  std::string perms;  // "rw-p", "---p", ...
  std::string path;   // "" for an anonymous mapping, "[heap]", "/dev/nvidia0", ...
  bool accessible() const { return perms.size() >= 2 && (perms[0] == 'r' || perms[1] == 'w'); }
  std::string describe() const;  // "[0x7f.., +2 MiB) rw-p [anonymous]"
};

class HostMappings {
 public:
  // Parses /proc/self/maps text (one mapping a line); malformed lines are skipped.
  static HostMappings parse(const std::string& text);
  static HostMappings of_this_process();
  const HostMapping* find(uint64_t address) const;
  size_t size() const { return maps_.size(); }

 private:
  std::vector<HostMapping> maps_;  // sorted by lo
};

class ClosureTargets {
 public:
  void add_region(int index, uint64_t base, uint64_t size) { add(TargetHit::kRegion, index, base, size); }
  void add_global(int index, uint64_t address, uint64_t size) { add(TargetHit::kGlobal, index, address, size); }
  // A host region as the device sees it: at its device pointer.
  void add_host(int index, uint64_t device_pointer, uint64_t size) { add(TargetHit::kHost, index, device_pointer, size); }
  void add_handle(int index, uint64_t value) { handles_.push_back({value, index}); }
  // The target holding `v`: regions first (the manifest's annotation), then globals, host
  // regions and handles. Ranges may be added in any order.
  TargetHit find(uint64_t v) const;

  // A word that could be an address at all: in [4 GiB, 2^47) (user space on x86-64 Linux,
  // above every 32-bit count). Sizes, packed floats and small handles fall outside.
  static bool looks_like_address(uint64_t v) { return v >= (uint64_t(1) << 32) && v < (uint64_t(1) << 47); }

  // Why a parameter word is named (empty: it is not): `v` looks like an address, hits no
  // target, and lies in a host mapping (accessible memory kerncap does not capture, or
  // the driver's reservation of device addresses). A word inside a struct parameter
  // (`in_struct`) in the driver's reservation is named only when 256-byte aligned, as
  // allocations are: packed 32-bit pairs (sizes, magic divisors) land there too.
  std::string unresolved_reason(uint64_t v, bool in_struct, const HostMappings& maps) const;

 private:
  struct Range {
    uint64_t base, size;
    int index;
  };
  struct Handle {
    uint64_t value;
    int index;
  };
  void add(TargetHit::Kind kind, int index, uint64_t base, uint64_t size);
  std::vector<Range> ranges_[TargetHit::kHost + 1];  // by kind, each sorted by base
  std::vector<Handle> handles_;
};

}  // namespace kc
