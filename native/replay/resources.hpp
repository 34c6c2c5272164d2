// RAII owners of CUDA driver objects used by the replay core.
//
// Constructors check every CUresult (KC_CHECK names the call and the object);
// destructors release quietly: they run on error paths, where a second failure
// must not hide the first one.
#pragma once
#include <cuda.h>

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "driver.hpp"

namespace kc::replay {

// Runs a release call from a destructor: never throws.
template <class F>
void release_quietly(F&& f) noexcept {
  try {
    f();
  } catch (...) {
  }
}

// "0x7f3a00000000".
std::string hex_address(unsigned long long v);
// "[0x7f3a00000000, +256 MiB)".
std::string describe_range(unsigned long long base, unsigned long long size);
// "256 MiB", "2.5 KiB".
std::string format_bytes(unsigned long long n);

// The device's primary context, retained and made current on the calling thread.
class PrimaryContext {
 public:
  explicit PrimaryContext(int ordinal);
  ~PrimaryContext();
  PrimaryContext(const PrimaryContext&) = delete;
  PrimaryContext& operator=(const PrimaryContext&) = delete;
  CUcontext get() const { return ctx_; }
  CUdevice device() const { return dev_; }
  int ordinal() const { return ordinal_; }

 private:
  int ordinal_;
  CUdevice dev_ = 0;
  CUcontext ctx_ = nullptr;
};

// Moves the handle out, leaving the source empty (all wrappers below are move-only).
template <class T>
T take(T& v) {
  return std::exchange(v, T{});
}

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(size_t size, const std::string& what);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(take(o.ptr_)), size_(take(o.size_)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  CUdeviceptr get() const { return ptr_; }
  size_t size() const { return size_; }

 private:
  CUdeviceptr ptr_ = 0;
  size_t size_ = 0;
};

// Page-locked host memory (staging for host-to-device copies).
class PinnedBuffer {
 public:
  PinnedBuffer(size_t size, const std::string& what);
  ~PinnedBuffer();
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  unsigned char* data() const { return static_cast<unsigned char*>(ptr_); }
  size_t size() const { return size_; }

 private:
  void* ptr_ = nullptr;
  size_t size_ = 0;
};

class Stream {
 public:
  explicit Stream(const std::string& what);
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  CUstream get() const { return s_; }

 private:
  CUstream s_ = nullptr;
};

class Event {
 public:
  Event();
  ~Event();
  Event(Event&& o) noexcept : e_(take(o.e_)) {}
  Event& operator=(Event&&) = delete;
  Event(const Event&) = delete;
  CUevent get() const { return e_; }

 private:
  CUevent e_ = nullptr;
};

class Module {
 public:
  Module() = default;
  // cuModuleLoadData; `what` names the image in errors (a cubin path).
  Module(const void* image, const std::string& what);
  ~Module();
  Module(Module&& o) noexcept : m_(take(o.m_)) {}
  Module& operator=(Module&& o) noexcept;
  CUmodule get() const { return m_; }

 private:
  CUmodule m_ = nullptr;
};

// A virtual address range reserved at exactly the requested base.
class Reservation {
 public:
  // Throws kc::replay::Error("address", ...) naming the span and the likely holder
  // of the range when the driver places the reservation elsewhere.
  Reservation(unsigned long long base, size_t size, const std::string& label);
  ~Reservation();
  Reservation(Reservation&& o) noexcept : base_(take(o.base_)), size_(take(o.size_)) {}
  Reservation& operator=(Reservation&&) = delete;
  Reservation(const Reservation&) = delete;

 private:
  CUdeviceptr base_ = 0;
  size_t size_ = 0;
};

// Physical device memory mapped read/write at [base, base + size) inside a reservation;
// or one physical allocation mapped at several such ranges (an app's aliased mappings:
// a write through one address reads back through the others).
class Mapping {
 public:
  Mapping(CUdevice dev, unsigned long long base, size_t size);
  Mapping(CUdevice dev, const std::vector<unsigned long long>& bases, size_t size);
  ~Mapping();
  Mapping(Mapping&& o) noexcept : bases_(take(o.bases_)), size_(take(o.size_)), handle_(take(o.handle_)) {}
  Mapping& operator=(Mapping&&) = delete;
  Mapping(const Mapping&) = delete;

 private:
  void release() noexcept;
  std::vector<CUdeviceptr> bases_;  // mapped so far
  size_t size_ = 0;
  CUmemGenericAllocationHandle handle_ = 0;
};

// Errors that are not driver failures: kind is "capture" (damaged payloads),
// "variant" (a cubin that does not fit the capture), "address" (a span that cannot
// be reserved at its original address) or "no_gpu".
class Error : public std::runtime_error {
 public:
  Error(std::string kind, const std::string& message) : std::runtime_error(message), kind(std::move(kind)) {}
  std::string kind;
};

}  // namespace kc::replay
