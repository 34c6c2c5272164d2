// CUDA arrays, mipmapped arrays and texture/surface objects of a capture, recreated in
// the replay process (docs/capture-format.md, "Arrays and texture objects"; docs/replay.md).
//
// Each array has a staging buffer in device memory holding its contents packed row
// after row, the layout of the captured payload. The session treats that buffer as the
// array's item: restores write it and then push() copies it into the array; after a
// launch pull() copies the array back, so compare, read and keep_reference see what
// the kernel (a surface write) left there. Objects are recreated with the recorded
// descriptors: over the recreated arrays, or over linear and pitched memory at its
// captured address (restored there VA-faithfully). The replay's handles replace the
// app's in the launch's parameter buffer (patch()).
#pragma once
#include <cuda.h>

#include <string>
#include <utility>
#include <vector>

#include "resources.hpp"

namespace kc::replay {

struct ArrayDescSpec {
  unsigned format = 0, channels = 0, flags = 0;
  unsigned long long width = 0, height = 0, depth = 0;
};

struct MipmapSpec {
  std::string label;  // "mipmapped array 0"
  ArrayDescSpec desc;
  unsigned levels = 0;
};

struct ArraySpec {
  std::string label;  // "array 0"
  ArrayDescSpec desc;
  long mipmap = -1;   // a level of mipmapped array `mipmap` (index into the mipmaps)
  unsigned level = 0;
};

struct ObjectSpec {
  std::string label;       // "texture object 0 (captured handle 1)"
  bool surface = false;
  std::string resource;    // array | mipmapped_array | linear | pitch2d | none (not restorable)
  std::string why;         // resource "none": why the capture could not restore it
  long array = -1, mipmap = -1;
  unsigned long long address = 0, size = 0, width = 0, height = 0, pitch = 0;
  unsigned format = 0, channels = 0, resource_flags = 0;
  // CUDA_TEXTURE_DESC (textures)
  std::vector<int> address_mode{0, 0, 0};
  int filter_mode = 0;
  unsigned flags = 0, max_anisotropy = 0;
  int mipmap_filter_mode = 0;
  float mipmap_level_bias = 0, min_mipmap_level_clamp = 0, max_mipmap_level_clamp = 0;
  std::vector<float> border_color{0, 0, 0, 0};
  // CUDA_RESOURCE_VIEW_DESC
  bool has_view = false;
  int view_format = 0;
  unsigned long long view_width = 0, view_height = 0, view_depth = 0;
  unsigned first_mipmap_level = 0, last_mipmap_level = 0, first_layer = 0, last_layer = 0;
};

class Arrays {
 public:
  // Creates everything, checking each descriptor; throws Error("capture", ...) naming
  // the array or object for a descriptor the capture could not have written, and
  // CudaError naming the call and the object when the driver refuses one.
  Arrays(const std::vector<MipmapSpec>& mipmaps, const std::vector<ArraySpec>& arrays,
         const std::vector<ObjectSpec>& objects);
  ~Arrays();
  Arrays(const Arrays&) = delete;
  Arrays& operator=(const Arrays&) = delete;

  size_t count() const { return arrays_.size(); }
  // The staging buffer of array `i` and its packed size.
  CUdeviceptr staging(size_t i, const std::string& what) const;
  size_t packed_size(size_t i) const;
  void set_written(size_t i, bool written);
  // Staging buffers into the arrays (all of them, or those the captured kernel wrote).
  void push(CUstream s, bool written_only) const;
  // Arrays back into their staging buffers.
  void pull(CUstream s) const;
  // Writes the replay's handle of each (offset, object) into `param_buffer`.
  void patch(std::string& param_buffer, const std::vector<std::pair<size_t, long>>& handles) const;
  const std::vector<std::string>& notes() const { return notes_; }

 private:
  struct Array {
    std::string label;
    CUarray handle = nullptr;
    bool owned = true;  // false: a level, owned by its mipmapped array
    size_t row = 0, rows = 0, slices = 0;
    DeviceBuffer staging;
    bool written = false;
    mutable bool unaligned = false;  // the driver refused the packed pitch: cuMemcpy2DUnaligned
  };
  struct Object {
    std::string label;
    bool surface = false;
    unsigned long long handle = 0;  // 0: not recreated
  };
  void copy(const Array& a, CUstream s, bool to_array) const;
  void release() noexcept;

  std::vector<CUmipmappedArray> mipmaps_;
  std::vector<Array> arrays_;
  std::vector<Object> objects_;
  std::vector<std::string> notes_;
};

}  // namespace kc::replay
