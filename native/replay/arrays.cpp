#include "arrays.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "array_format.hpp"

namespace kc::replay {
namespace {

CUDA_ARRAY3D_DESCRIPTOR to_driver(const ArrayDescSpec& d) {
  CUDA_ARRAY3D_DESCRIPTOR a;
  std::memset(&a, 0, sizeof a);
  a.Width = d.width;
  a.Height = d.height;
  a.Depth = d.depth;
  a.Format = static_cast<CUarray_format>(d.format);
  a.NumChannels = d.channels;
  a.Flags = d.flags;
  return a;
}

// Checks what the driver would reject opaquely: a shared reproducer is hostile input.
void check_desc(const ArrayDescSpec& d, const std::string& label) {
  if (!element_bytes(d.format, d.channels))
    throw Error("capture", label + ": format " + std::to_string(d.format) + " with " + std::to_string(d.channels) +
                               " channel(s) is not a CUDA array format kerncap captures");
  constexpr unsigned long long kMaxDim = 1ull << 20;  // beyond any CUDA array dimension
  if (d.width == 0 || d.width > kMaxDim || d.height > kMaxDim || d.depth > kMaxDim)
    throw Error("capture", label + ": dimensions " + std::to_string(d.width) + " x " + std::to_string(d.height) + " x " +
                               std::to_string(d.depth) + " are not those of a CUDA array");
  if (d.flags & (CUDA_ARRAY3D_SPARSE | CUDA_ARRAY3D_DEFERRED_MAPPING))
    throw Error("capture", label + ": flags " + std::to_string(d.flags) + " ask for a sparse or deferred array, "
                               "which kerncap does not capture");
}

bool same_desc(const CUDA_ARRAY3D_DESCRIPTOR& a, const ArrayDescSpec& d) {
  return a.Width == d.width && a.Height == d.height && a.Depth == d.depth && unsigned(a.Format) == d.format &&
         a.NumChannels == d.channels;
}

}  // namespace

Arrays::Arrays(const std::vector<MipmapSpec>& mipmaps, const std::vector<ArraySpec>& arrays,
               const std::vector<ObjectSpec>& objects) {
  try {
    for (const MipmapSpec& m : mipmaps) {
      check_desc(m.desc, m.label);
      if (m.levels == 0 || m.levels > 32)
        throw Error("capture", m.label + ": " + std::to_string(m.levels) + " mipmap levels is not a mipmapped array");
      const CUDA_ARRAY3D_DESCRIPTOR d = to_driver(m.desc);
      CUmipmappedArray h = nullptr;
      KC_CHECK(cuMipmappedArrayCreate, (&h, &d, m.levels), m.label);
      mipmaps_.push_back(h);
    }
    for (const ArraySpec& s : arrays) {
      check_desc(s.desc, s.label);
      Array a;
      a.label = s.label;
      if (s.mipmap >= 0) {
        if (size_t(s.mipmap) >= mipmaps_.size())
          throw Error("capture", s.label + " names mipmapped array " + std::to_string(s.mipmap) + ", which does not exist");
        KC_CHECK(cuMipmappedArrayGetLevel, (&a.handle, mipmaps_[size_t(s.mipmap)], s.level),
                 "level " + std::to_string(s.level) + " of " + mipmaps[size_t(s.mipmap)].label + " (" + s.label + ")");
        a.owned = false;
        CUDA_ARRAY3D_DESCRIPTOR got;
        std::memset(&got, 0, sizeof got);
        KC_CHECK(cuArray3DGetDescriptor, (&got, a.handle), s.label);
        if (!same_desc(got, s.desc))
          throw Error("capture", s.label + ": level " + std::to_string(s.level) + " of the recreated mipmapped array is " +
                                     std::to_string(got.Width) + " x " + std::to_string(got.Height) + " x " +
                                     std::to_string(got.Depth) + ", the capture recorded " + std::to_string(s.desc.width) +
                                     " x " + std::to_string(s.desc.height) + " x " + std::to_string(s.desc.depth));
      } else {
        const CUDA_ARRAY3D_DESCRIPTOR d = to_driver(s.desc);
        KC_CHECK(cuArray3DCreate, (&a.handle, &d), s.label);
      }
      a.row = size_t(s.desc.width) * element_bytes(s.desc.format, s.desc.channels);
      a.rows = size_t(std::max<unsigned long long>(s.desc.height, 1));
      a.slices = size_t(std::max<unsigned long long>(s.desc.depth, 1));
      a.staging = DeviceBuffer(a.row * a.rows * a.slices, "the staging buffer of " + s.label);
      arrays_.push_back(std::move(a));
    }
    for (const ObjectSpec& o : objects) {
      Object out;
      out.label = o.label;
      out.surface = o.surface;
      if (o.resource == "none") {
        notes_.push_back(o.label + " is not recreated (" + (o.why.empty() ? "the capture could not restore it" : o.why) +
                         "): a parameter holding its handle gets 0");
        objects_.push_back(out);
        continue;
      }
      CUDA_RESOURCE_DESC rd;
      std::memset(&rd, 0, sizeof rd);
      rd.flags = o.resource_flags;
      if (o.resource == "array") {
        if (o.array < 0 || size_t(o.array) >= arrays_.size())
          throw Error("capture", o.label + " names array " + std::to_string(o.array) + ", which does not exist");
        rd.resType = CU_RESOURCE_TYPE_ARRAY;
        rd.res.array.hArray = arrays_[size_t(o.array)].handle;
      } else if (o.resource == "mipmapped_array") {
        if (o.mipmap < 0 || size_t(o.mipmap) >= mipmaps_.size())
          throw Error("capture", o.label + " names mipmapped array " + std::to_string(o.mipmap) + ", which does not exist");
        rd.resType = CU_RESOURCE_TYPE_MIPMAPPED_ARRAY;
        rd.res.mipmap.hMipmappedArray = mipmaps_[size_t(o.mipmap)];
      } else if (o.resource == "linear") {
        rd.resType = CU_RESOURCE_TYPE_LINEAR;
        rd.res.linear.devPtr = o.address;
        rd.res.linear.format = static_cast<CUarray_format>(o.format);
        rd.res.linear.numChannels = o.channels;
        rd.res.linear.sizeInBytes = o.size;
      } else if (o.resource == "pitch2d") {
        rd.resType = CU_RESOURCE_TYPE_PITCH2D;
        rd.res.pitch2D.devPtr = o.address;
        rd.res.pitch2D.format = static_cast<CUarray_format>(o.format);
        rd.res.pitch2D.numChannels = o.channels;
        rd.res.pitch2D.width = o.width;
        rd.res.pitch2D.height = o.height;
        rd.res.pitch2D.pitchInBytes = o.pitch;
      } else {
        throw Error("capture", o.label + ": resource type \"" + o.resource + "\" is not one kerncap recreates");
      }
      if (o.surface) {
        if (rd.resType != CU_RESOURCE_TYPE_ARRAY)
          throw Error("capture", o.label + ": a surface object's resource must be an array, not " + o.resource);
        CUsurfObject h = 0;
        KC_CHECK(cuSurfObjectCreate, (&h, &rd), o.label);
        out.handle = h;
      } else {
        if (o.address_mode.size() != 3 || o.border_color.size() != 4)
          throw Error("capture", o.label + ": the texture descriptor needs 3 address modes and 4 border colour values");
        CUDA_TEXTURE_DESC td;
        std::memset(&td, 0, sizeof td);
        for (int i = 0; i < 3; ++i) td.addressMode[i] = static_cast<CUaddress_mode>(o.address_mode[size_t(i)]);
        td.filterMode = static_cast<CUfilter_mode>(o.filter_mode);
        td.flags = o.flags;
        td.maxAnisotropy = o.max_anisotropy;
        td.mipmapFilterMode = static_cast<CUfilter_mode>(o.mipmap_filter_mode);
        td.mipmapLevelBias = o.mipmap_level_bias;
        td.minMipmapLevelClamp = o.min_mipmap_level_clamp;
        td.maxMipmapLevelClamp = o.max_mipmap_level_clamp;
        for (int i = 0; i < 4; ++i) td.borderColor[i] = o.border_color[size_t(i)];
        CUDA_RESOURCE_VIEW_DESC vd;
        std::memset(&vd, 0, sizeof vd);
        if (o.has_view) {
          vd.format = static_cast<CUresourceViewFormat>(o.view_format);
          vd.width = o.view_width;
          vd.height = o.view_height;
          vd.depth = o.view_depth;
          vd.firstMipmapLevel = o.first_mipmap_level;
          vd.lastMipmapLevel = o.last_mipmap_level;
          vd.firstLayer = o.first_layer;
          vd.lastLayer = o.last_layer;
        }
        CUtexObject h = 0;
        KC_CHECK(cuTexObjectCreate, (&h, &rd, &td, o.has_view ? &vd : nullptr), o.label);
        out.handle = h;
      }
      objects_.push_back(out);
    }
  } catch (...) {
    release();
    throw;
  }
}

Arrays::~Arrays() { release(); }

void Arrays::release() noexcept {
  for (Object& o : objects_) {
    if (!o.handle) continue;
    if (o.surface) release_quietly([&] { KC_CU(cuSurfObjectDestroy)(o.handle); });
    else release_quietly([&] { KC_CU(cuTexObjectDestroy)(o.handle); });
    o.handle = 0;
  }
  for (Array& a : arrays_) {
    if (a.handle && a.owned) release_quietly([&] { KC_CU(cuArrayDestroy)(a.handle); });
    a.handle = nullptr;
  }
  for (CUmipmappedArray& m : mipmaps_) {
    if (m) release_quietly([&] { KC_CU(cuMipmappedArrayDestroy)(m); });
    m = nullptr;
  }
}

CUdeviceptr Arrays::staging(size_t i, const std::string& what) const {
  if (i >= arrays_.size())
    throw Error("capture", what + " names array " + std::to_string(i) + ", which does not exist (" +
                               std::to_string(arrays_.size()) + " arrays)");
  return arrays_[i].staging.get();
}

size_t Arrays::packed_size(size_t i) const { return i < arrays_.size() ? arrays_[i].staging.size() : 0; }

void Arrays::set_written(size_t i, bool written) {
  if (i < arrays_.size()) arrays_[i].written = written;
}

void Arrays::copy(const Array& a, CUstream s, bool to_array) const {
  const std::string what = to_array ? "restoring " + a.label : "reading " + a.label + " back";
  CUDA_MEMCPY3D c;
  std::memset(&c, 0, sizeof c);
  if (to_array) {
    c.srcMemoryType = CU_MEMORYTYPE_DEVICE;
    c.srcDevice = a.staging.get();
    c.srcPitch = a.row;
    c.srcHeight = a.rows;
    c.dstMemoryType = CU_MEMORYTYPE_ARRAY;
    c.dstArray = a.handle;
  } else {
    c.srcMemoryType = CU_MEMORYTYPE_ARRAY;
    c.srcArray = a.handle;
    c.dstMemoryType = CU_MEMORYTYPE_DEVICE;
    c.dstDevice = a.staging.get();
    c.dstPitch = a.row;
    c.dstHeight = a.rows;
  }
  c.WidthInBytes = a.row;
  c.Height = a.rows;
  c.Depth = a.slices;
  if (!a.unaligned) {
    const CUresult r = KC_CU(cuMemcpy3DAsync)(&c, s);
    // The driver documents that copies between device memory and arrays may refuse a
    // pitch cuMemAllocPitch did not choose (the packed row is any width): then the
    // unaligned copy, which has no such rule (synchronous, so after the stream's work).
    if ((r != CUDA_ERROR_INVALID_VALUE) || a.slices != 1)
      return check(r, "cuMemcpy3DAsync", what);
    a.unaligned = true;
  }
  KC_CHECK(cuStreamSynchronize, (s), what);
  CUDA_MEMCPY2D d;
  std::memset(&d, 0, sizeof d);
  d.srcMemoryType = c.srcMemoryType;
  d.srcDevice = c.srcDevice;
  d.srcArray = c.srcArray;
  d.srcPitch = c.srcPitch;
  d.dstMemoryType = c.dstMemoryType;
  d.dstDevice = c.dstDevice;
  d.dstArray = c.dstArray;
  d.dstPitch = c.dstPitch;
  d.WidthInBytes = a.row;
  d.Height = a.rows;
  KC_CHECK(cuMemcpy2DUnaligned, (&d), what + " (unaligned copy)");
}

void Arrays::push(CUstream s, bool written_only) const {
  for (const Array& a : arrays_)
    if (!written_only || a.written) copy(a, s, true);
}

void Arrays::pull(CUstream s) const {
  for (const Array& a : arrays_) copy(a, s, false);
}

void Arrays::patch(std::string& buffer, const std::vector<std::pair<size_t, long>>& handles) const {
  for (const auto& [offset, object] : handles) {
    if (object < 0 || size_t(object) >= objects_.size())
      throw Error("capture", "a parameter at offset " + std::to_string(offset) + " names texture object " +
                                 std::to_string(object) + ", which does not exist (" + std::to_string(objects_.size()) +
                                 " objects)");
    if (offset > buffer.size() || buffer.size() - offset < 8)
      throw Error("capture", "the handle of " + objects_[size_t(object)].label + " at parameter offset " +
                                 std::to_string(offset) + " lies outside the " + std::to_string(buffer.size()) +
                                 "-byte parameter buffer");
    const unsigned long long h = objects_[size_t(object)].handle;
    std::memcpy(&buffer[offset], &h, sizeof h);
  }
}

}  // namespace kc::replay
