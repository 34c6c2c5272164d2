#include "resources.hpp"

#include <cstdio>
#include <fstream>
#include <sstream>

namespace kc::replay {

std::string hex_address(unsigned long long v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%llx", v);
  return buf;
}

std::string format_bytes(unsigned long long n) {
  static const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(n);
  int u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  char buf[32];
  if (u == 0 || v == static_cast<double>(static_cast<unsigned long long>(v)))
    std::snprintf(buf, sizeof buf, "%llu %s", static_cast<unsigned long long>(v), units[u]);
  else
    std::snprintf(buf, sizeof buf, "%.1f %s", v, units[u]);
  return buf;
}

std::string describe_range(unsigned long long base, unsigned long long size) {
  return "[" + hex_address(base) + ", +" + format_bytes(size) + ")";
}

// ---------------------------------------------------------------------------
PrimaryContext::PrimaryContext(int ordinal) : ordinal_(ordinal) {
  const std::string what = "device " + std::to_string(ordinal);
  KC_CHECK(cuDeviceGet, (&dev_, ordinal), what);
  KC_CHECK(cuDevicePrimaryCtxRetain, (&ctx_, dev_), what);
  try {
    KC_CHECK(cuCtxSetCurrent, (ctx_), "the primary context of " + what);
  } catch (...) {
    release_quietly([&] { KC_CU(cuDevicePrimaryCtxRelease)(dev_); });
    throw;
  }
}

PrimaryContext::~PrimaryContext() {
  release_quietly([&] { KC_CU(cuDevicePrimaryCtxRelease)(dev_); });
}

// ---------------------------------------------------------------------------
DeviceBuffer::DeviceBuffer(size_t size, const std::string& what) : size_(size) {
  KC_CHECK(cuMemAlloc, (&ptr_, size ? size : 1), what + " (" + format_bytes(size) + ")");
}

DeviceBuffer::~DeviceBuffer() {
  if (ptr_) release_quietly([&] { KC_CU(cuMemFree)(ptr_); });
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    if (ptr_) release_quietly([&] { KC_CU(cuMemFree)(ptr_); });
    ptr_ = take(o.ptr_);
    size_ = take(o.size_);
  }
  return *this;
}

PinnedBuffer::PinnedBuffer(size_t size, const std::string& what) : size_(size) {
  KC_CHECK(cuMemHostAlloc, (&ptr_, size ? size : 1, 0), what + " (" + format_bytes(size) + " pinned)");
}

PinnedBuffer::~PinnedBuffer() {
  if (ptr_) release_quietly([&] { KC_CU(cuMemFreeHost)(ptr_); });
}

Stream::Stream(const std::string& what) { KC_CHECK(cuStreamCreate, (&s_, CU_STREAM_NON_BLOCKING), what); }

Stream::~Stream() {
  if (s_) release_quietly([&] { KC_CU(cuStreamDestroy)(s_); });
}

Event::Event() { KC_CHECK(cuEventCreate, (&e_, CU_EVENT_DEFAULT), "a timing event"); }

Event::~Event() {
  if (e_) release_quietly([&] { KC_CU(cuEventDestroy)(e_); });
}

Module::Module(const void* image, const std::string& what) { KC_CHECK(cuModuleLoadData, (&m_, image), what); }

Module::~Module() {
  if (m_) release_quietly([&] { KC_CU(cuModuleUnload)(m_); });
}

Module& Module::operator=(Module&& o) noexcept {
  if (this != &o) {
    if (m_) release_quietly([&] { KC_CU(cuModuleUnload)(m_); });
    m_ = take(o.m_);
  }
  return *this;
}

// ---------------------------------------------------------------------------
namespace {

// The /proc/self/maps lines that overlap [base, base + size): who holds the range on
// the host side (the driver mirrors device reservations in the process's address
// space, so a CUDA allocation shows up here too, usually as an anonymous mapping).
std::string host_mappings_overlapping(unsigned long long base, unsigned long long size) {
  std::ifstream maps("/proc/self/maps");
  std::string line, found;
  int count = 0;
  while (std::getline(maps, line)) {
    unsigned long long lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%llx-%llx", &lo, &hi) != 2) continue;
    if (hi <= base || lo >= base + size) continue;
    if (++count > 4) continue;
    std::istringstream fields(line);
    std::string range, perms, offset, dev, inode, path;
    fields >> range >> perms >> offset >> dev >> inode;
    std::getline(fields >> std::ws, path);
    if (!found.empty()) found += "; ";
    found += describe_range(lo, hi - lo) + " " + perms + " " + (path.empty() ? "[anonymous]" : path);
  }
  if (count > 4) found += "; and " + std::to_string(count - 4) + " more";
  return found;
}

}  // namespace

Reservation::Reservation(unsigned long long base, size_t size, const std::string& label) {
  CUdeviceptr got = 0;
  KC_CHECK(cuMemAddressReserve, (&got, size, 0, static_cast<CUdeviceptr>(base), 0),
           "span " + label + " " + describe_range(base, size));
  if (got == base) {
    base_ = got;
    size_ = size;
    return;
  }
  release_quietly([&] { KC_CU(cuMemAddressFree)(got, size); });
  std::string holder = host_mappings_overlapping(base, size);
  std::string msg = "cannot reserve span " + label + " " + describe_range(base, size) +
                    " at its captured address: cuMemAddressReserve placed it at " + hex_address(got) + " instead. ";
  if (!holder.empty())
    msg += "The range overlaps host mapping(s) of this process: " + holder + ".";
  else
    msg += "No host mapping overlaps it; the driver (or an earlier allocation in this process) holds part of it.";
  throw Error("address", msg);
}

Reservation::~Reservation() {
  if (size_) release_quietly([&] { KC_CU(cuMemAddressFree)(base_, size_); });
}

Mapping::Mapping(CUdevice dev, unsigned long long base, size_t size)
    : Mapping(dev, std::vector<unsigned long long>{base}, size) {}

Mapping::Mapping(CUdevice dev, const std::vector<unsigned long long>& bases, size_t size) : size_(size) {
  auto what = [&](unsigned long long base) {
    std::string w = "pages " + describe_range(base, size);
    if (bases.size() > 1)
      w += " (one physical allocation mapped at " + std::to_string(bases.size()) + " addresses, as the app did)";
    return w;
  };
  if (bases.empty()) throw Error("input", "a physical allocation of " + format_bytes(size) + " mapped nowhere");
  CUmemAllocationProp prop = {};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = dev;
  CUmemAccessDesc access = {};
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  try {
    KC_CHECK(cuMemCreate, (&handle_, size, &prop, 0), what(bases.front()));
    for (unsigned long long base : bases) {
      KC_CHECK(cuMemMap, (static_cast<CUdeviceptr>(base), size, 0, handle_, 0), what(base));
      bases_.push_back(static_cast<CUdeviceptr>(base));
      KC_CHECK(cuMemSetAccess, (static_cast<CUdeviceptr>(base), size, &access, 1), what(base));
    }
  } catch (...) {
    release();
    throw;
  }
}

void Mapping::release() noexcept {
  for (CUdeviceptr base : bases_) release_quietly([&] { KC_CU(cuMemUnmap)(base, size_); });
  bases_.clear();
  if (handle_) release_quietly([&] { KC_CU(cuMemRelease)(handle_); });
  handle_ = 0;
}

Mapping::~Mapping() { release(); }

}  // namespace kc::replay
