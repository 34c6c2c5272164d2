#include "host_memory.hpp"

namespace kc::replay {

HostRegistration::HostRegistration(unsigned long long base, size_t size, const std::string& label) {
  KC_CHECK(cuMemHostRegister,
           (reinterpret_cast<void*>(static_cast<uintptr_t>(base)), size,
            CU_MEMHOSTREGISTER_DEVICEMAP | CU_MEMHOSTREGISTER_PORTABLE),
           label + " " + describe_range(base, size));
  base_ = base;
  size_ = size;
}

HostRegistration::~HostRegistration() {
  if (size_) release_quietly([&] { KC_CU(cuMemHostUnregister)(reinterpret_cast<void*>(static_cast<uintptr_t>(base_))); });
}

void check_device_pointers(CUdevice dev, const std::vector<HostSpec>& regions) {
  for (const HostSpec& h : regions) {
    CUdeviceptr d = 0;
    KC_CHECK(cuMemHostGetDevicePointer, (&d, reinterpret_cast<void*>(static_cast<uintptr_t>(h.base)), 0),
             h.label + " " + describe_range(h.base, h.size));
    if (d == h.device_pointer) continue;
    int same = -1;
    KC_CU(cuDeviceGetAttribute)(&same, CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM, dev);
    throw Error("address", h.label + " " + describe_range(h.base, h.size) +
                               " is mapped at its captured host address, but the device sees it at " + hex_address(d) +
                               " instead of the captured " + hex_address(h.device_pointer) +
                               " (CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM = " + std::to_string(same) +
                               " on this GPU): the kernel's pointers into it would be wrong. Replay on a GPU "
                               "and driver like the capturing machine's");
  }
}

}  // namespace kc::replay
