// The CUDA arrays and texture/surface objects of one capture (docs/capture-format.md,
// "Arrays and texture objects"): which arrays the live objects reach, their contents
// before and after the kernel (copied out with cuMemcpy3D, packed row after row, stored
// as chunks like a region's), which parameters hold an object's handle, and what cannot
// be restored (an object whose array was freed, a table of handles in device memory).
//
// Driver calls are made by the capturing thread with the target's context current and
// kerncap's reentrancy guard set, like the rest of the capture.
#pragma once
#include <cuda.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "array_tracker.hpp"
#include "blob_store.hpp"
#include "cubin_elf.hpp"
#include "json_writer.hpp"
#include "launch_record.hpp"
#include "memory_tracker.hpp"
#include "snapshot.hpp"

namespace kc {

// Which parameters of one launch hold the handle of a live object, and what texture or
// surface instructions its kernel has (cubin_texture_ops.hpp).
struct LaunchHandles {
  std::vector<HandleMatch> matches;
  int uses_textures = -1;
};

class ArrayCapture {
 public:
  explicit ArrayCapture(ArrayState state) : state_(std::move(state)) {}

  bool empty() const { return state_.objects.empty(); }
  // At the target's entry: the arrays every live object reaches (a mipmapped array's
  // levels through cuMipmappedArrayGetLevel), their descriptors from the driver, the
  // captured region of every linear or pitched resource, and the parameters that hold
  // an object's handle (`cubin`: the chosen one, to tell a handle from an integer).
  void prepare(const std::vector<TrackedRegion>& regions, const ParamCapture& params, const std::string& kernel,
               const std::string& demangled, const Cubin& cubin);
  // The two halves of prepare(), for a sequence: the objects and their arrays once (at
  // the window's opening), then each launch's handle parameters; `where` prefixes the
  // launch's warnings ("launch 3: "). The first launch's matches are the manifest's
  // (texture_objects[].params), as its parameters are the manifest's.
  void prepare_objects(const std::vector<TrackedRegion>& regions);
  LaunchHandles match(const ParamCapture& params, const std::string& kernel, const std::string& demangled,
                      const Cubin& cubin, const std::string& where = std::string());
  // After the pre-state: memory the pointer parameters reach and module globals
  // (address, size, name) scanned for the handles of live objects no parameter holds:
  // a table of handles in device memory the replay cannot restore.
  void scan_for_tables(const ParamCapture& params, const std::vector<std::pair<uint64_t, uint64_t>>& globals,
                       const std::vector<std::string>& global_names) {
    scan_for_tables(primary_, params, globals, global_names);
  }
  void scan_for_tables(const LaunchHandles& launch, const ParamCapture& params,
                       const std::vector<std::pair<uint64_t, uint64_t>>& globals,
                       const std::vector<std::string>& global_names);
  // Copies every array's contents out and stores them as chunks: the pre-state, or the post-state.
  void snapshot(BlobStore& blobs, bool post);

  // The manifest's "arrays", "mipmapped_arrays" and "texture_objects".
  void write_json(JsonWriter& w) const;
  // A parameter's "handle" annotation (nothing when it holds none).
  void write_param(JsonWriter& w, uint32_t index) const { write_param(w, primary_, index); }
  void write_param(JsonWriter& w, const LaunchHandles& launch, uint32_t index) const;
  const std::vector<std::string>& warnings() const { return warnings_; }
  // Handle values of the live objects: words that are not addresses, for the check that
  // names pointer-sized parameter words pointing into nothing.
  std::vector<uint64_t> known_handles() const;
  uint64_t snapshotted_bytes() const { return snapshotted_; }
  uint64_t array_bytes() const;

 private:
  struct Array {
    CUarray handle = nullptr;
    ArrayDesc desc;
    std::string api;
    long mipmap = -1;  // index into mipmaps_
    unsigned level = 0;
    bool surface = false;   // a surface object reaches it: the kernel may write it
    std::string skip;       // why its contents are not captured
    ItemSnapshot pre, post;
    std::string label() const;
  };
  struct Mipmap {
    CUmipmappedArray handle = nullptr;
    ArrayDesc desc;
    unsigned levels = 0;
  };
  struct Object {
    long array = -1, mipmap = -1, region = -1;
    std::string why;                        // why the replay cannot recreate it ("" = restorable)
    std::vector<std::string> found_in;      // handle tables: "region 3 + 0x40"
  };

  long array_of(CUarray a, bool surface);
  long mipmap_of(CUmipmappedArray m, bool surface, std::string& why);
  void locate_linear(size_t k, const std::vector<TrackedRegion>& regions);
  std::string describe(size_t object) const;  // "texture object #0 (handle 1)"

  ArrayState state_;
  std::vector<Array> arrays_;
  std::vector<Mipmap> mipmaps_;
  std::vector<Object> objects_;                 // parallel to state_.objects
  LaunchHandles primary_;                       // the (first) launch's
  int uses_textures_ = -1;                      // texture_instructions() of the kernels, all launches
  bool matched_ = false;
  std::vector<std::string> warnings_;
  uint64_t snapshotted_ = 0;
  const std::vector<TrackedRegion>* regions_ = nullptr;
};

}  // namespace kc
