// CUDA arrays, mipmapped arrays and texture/surface objects of the process, kept from
// their creation and destruction calls (watched_list.hpp, role kArray) so that a capture
// can snapshot the arrays a kernel reads or writes and the replay can recreate the
// objects with the same descriptors (docs/capture-format.md, "Arrays and texture
// objects"). Texture and surface handles are small integers per process (1, 2, …; a
// destroyed handle's value is reused: DESIGN fact 14), so a handle from the app means
// nothing in the replay process: the capture says which parameters hold one.
//
// Everything here is free of driver calls (the CPU unit tests run it); the snapshot and
// the driver's own descriptors are in array_capture.cpp.
#pragma once
#include <cuda.h>
#include <cupti.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "array_format.hpp"
#include "json_writer.hpp"

namespace kc {

// CUDA_ARRAY3D_DESCRIPTOR, as kerncap keeps it (sizes in elements; 0 = dimension unused).
struct ArrayDesc {
  uint64_t width = 0, height = 0, depth = 0;
  unsigned format = 0;  // CUarray_format
  unsigned channels = 0;
  unsigned flags = 0;   // CUDA_ARRAY3D_*
  bool operator==(const ArrayDesc& o) const {
    return width == o.width && height == o.height && depth == o.depth && format == o.format &&
           channels == o.channels && flags == o.flags;
  }
};

// "float", "uint8", "half", …; "format 0x<hex>" for formats kerncap does not copy.
std::string format_name(unsigned format);
// The array's contents packed row after row (no pitch): width × elements × rows × slices.
uint64_t packed_bytes(const ArrayDesc& d);
// Why kerncap cannot snapshot an array of this descriptor, or "" when it can.
std::string unsupported_array(const ArrayDesc& d);
// kerncap's copy of the driver's CUDA_ARRAY3D_DESCRIPTOR.
ArrayDesc desc_of(const CUDA_ARRAY3D_DESCRIPTOR& a);
// The descriptor of level `level` of a mipmapped array (layers and cube faces stay).
ArrayDesc mip_level_desc(const ArrayDesc& base, unsigned level);

struct TrackedArray {
  CUarray handle = nullptr;
  ArrayDesc desc;
  const char* api = "";                // cuArrayCreate_v2 | cuArray3DCreate_v2 | cuMipmappedArrayGetLevel
  CUcontext ctx = nullptr;
  CUmipmappedArray mipmap = nullptr;   // a level of this mipmapped array
  unsigned level = 0;
};

struct TrackedMipmap {
  CUmipmappedArray handle = nullptr;
  ArrayDesc desc;
  unsigned levels = 0;
  CUcontext ctx = nullptr;
};

struct TrackedObject {
  uint64_t handle = 0;
  bool surface = false;
  CUDA_RESOURCE_DESC res{};
  CUDA_TEXTURE_DESC tex{};        // textures only
  bool has_view = false;
  CUDA_RESOURCE_VIEW_DESC view{};
  CUcontext ctx = nullptr;
  // Its array or mipmapped array was destroyed while the object lives: reading it reads
  // freed memory in the app, and the replay has nothing to recreate.
  std::string freed;
};

// What was live at one moment, for a capture.
struct ArrayState {
  std::vector<TrackedArray> arrays;
  std::vector<TrackedMipmap> mipmaps;
  std::vector<TrackedObject> objects;
};

class ArrayTracker {
 public:
  // A successful call of role kArray, at its exit (its CUPTI params struct): records
  // what it created or forgets what it destroyed. False for any other call.
  bool on_call(CUpti_CallbackId cbid, const void* params, CUcontext ctx);
  void drop_context(CUcontext ctx);
  // What is live in `ctx` (everything when ctx is null).
  ArrayState state(CUcontext ctx) const;
  // proc-<pid>.json's "arrays" section: live counts, objects whose resource was freed.
  std::string report_json() const;

 private:
  void forget_mipmap(CUmipmappedArray m);  // with mu_ held
  void add_texture(const cuTexObjectCreate_params* a, CUcontext ctx);
  void forget_array(CUarray a, const std::string& why);

  mutable std::mutex mu_;
  std::map<CUarray, TrackedArray> arrays_;
  std::map<CUmipmappedArray, TrackedMipmap> mipmaps_;
  std::map<uint64_t, TrackedObject> textures_, surfaces_;
  uint64_t created_ = 0, destroyed_ = 0;
};

// -- kernel parameters holding handles ---------------------------------------------------

// The types of a kernel's parameters from its demangled name ("f(unsigned long long,
// float*, int)" → 3 types); false when the name carries no parameter list (extern "C").
bool parameter_types(const std::string& demangled, std::vector<std::string>& types);
// A type a texture or surface handle can be passed as (cudaTextureObject_t is an
// unsigned long long).
bool handle_type(const std::string& type);

struct HandleMatch {
  uint32_t param = 0;              // parameter index
  std::vector<size_t> objects;     // indices into the object list whose handle it equals
  bool by_signature = false;       // the signature says the type can hold a handle
};

struct ParamWord {
  uint32_t index = 0;
  uint64_t size = 0;
  uint64_t value = 0;  // valid when size == 8
};

// The 8-byte parameters whose value equals a live object's handle. `types` empty: the
// signature is unknown (every 8-byte parameter may hold one). `uses_textures` < 0:
// unknown; 0: the kernel has no texture or surface instruction, so no parameter is a
// handle it uses (a match would be a coincidence).
std::vector<HandleMatch> match_handles(const std::vector<ParamWord>& params, const std::vector<std::string>& types,
                                       const std::vector<TrackedObject>& objects, int uses_textures);

// -- manifest ----------------------------------------------------------------------------

// JSON numbers for floats that round-trip through float32 ("%.9g"); non-finite as strings.
std::string float_json(float f);
// The "texture" / "view" / resource objects of a texture or surface object
// (docs/capture-format.md); `array_id`/`mipmap_id`/`region` are -1 when unknown.
void write_texture_desc(JsonWriter& w, const CUDA_TEXTURE_DESC& t);
void write_view_desc(JsonWriter& w, const CUDA_RESOURCE_VIEW_DESC& v);
void write_resource(JsonWriter& w, const CUDA_RESOURCE_DESC& r, long array_id, long mipmap_id, long region);

}  // namespace kc
