// Host memory of a capture in the replay process (docs/replay.md, "Host memory").
//
// The replay server maps the captured host ranges at their original addresses before
// CUDA starts in it (engine/kerncap/replay/host_memory.py: mmap MAP_FIXED_NOREPLACE).
// Here they are registered with the driver (cuMemHostRegister, DEVICEMAP) and every host
// region's device pointer is checked against the captured one: kernels hold that
// pointer, so replay at any other device address would be wrong. Their contents are
// items of the session like device regions: restored from resident copies before each
// run and compared after it.
#pragma once
#include <cuda.h>

#include <string>
#include <vector>

#include "resources.hpp"

namespace kc::replay {

struct HostSpec {
  std::string label;                   // "host region 2"
  unsigned long long base = 0;         // host address
  unsigned long long size = 0;
  unsigned long long device_pointer = 0;  // as captured
};

// One registered host range (mapped by the server beforehand), unregistered on destruction.
class HostRegistration {
 public:
  HostRegistration(unsigned long long base, size_t size, const std::string& label);
  ~HostRegistration();
  HostRegistration(HostRegistration&& o) noexcept : base_(take(o.base_)), size_(take(o.size_)) {}
  HostRegistration& operator=(HostRegistration&&) = delete;
  HostRegistration(const HostRegistration&) = delete;

 private:
  unsigned long long base_ = 0;
  size_t size_ = 0;
};

// Throws Error("address") naming the region when the device sees it at another address
// than the capture recorded (and why: the device attribute that decides it).
void check_device_pointers(CUdevice dev, const std::vector<HostSpec>& regions);

}  // namespace kc::replay
