#include "array_capture.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>

#include "cubin_texture_ops.hpp"
#include "driver.hpp"

namespace kc {
namespace {

constexpr uint64_t kScanBytes = 64 << 10;  // per pointer: tables of handles are small
constexpr size_t kFoundInMax = 4;

std::string hex(uint64_t v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

std::string hex(const void* p) { return hex(uint64_t(reinterpret_cast<uintptr_t>(p))); }

const char* kind_of(const TrackedObject& o) { return o.surface ? "surface" : "texture"; }

std::string dims(const ArrayDesc& d) {
  std::string s = std::to_string(d.width);
  if (d.height) s += "x" + std::to_string(d.height);
  if (d.depth) s += "x" + std::to_string(d.depth);
  return s + " " + format_name(d.format) + (d.channels > 1 ? "x" + std::to_string(d.channels) : "");
}

}  // namespace

std::string ArrayCapture::Array::label() const {
  return "CUDA array " + hex(handle) + " (" + dims(desc) + (mipmap >= 0 ? ", mip level " + std::to_string(level) : "") +
         ")";
}

std::string ArrayCapture::describe(size_t k) const {
  const TrackedObject& o = state_.objects[k];
  return std::string(kind_of(o)) + " object #" + std::to_string(k) + " (handle " + std::to_string(o.handle) + ")";
}

long ArrayCapture::array_of(CUarray a, bool surface) {
  for (size_t i = 0; i < arrays_.size(); ++i)
    if (arrays_[i].handle == a) {
      arrays_[i].surface |= surface;
      return long(i);
    }
  Array out;
  out.handle = a;
  out.surface = surface;
  const TrackedArray* tracked = nullptr;
  for (const TrackedArray& t : state_.arrays)
    if (t.handle == a) tracked = &t;
  // The driver's descriptor is the authority (also for an array kerncap did not see made).
  CUDA_ARRAY3D_DESCRIPTOR d{};
  const CUresult r = KC_CU(cuArray3DGetDescriptor)(&d, a);
  if (r == CUDA_SUCCESS) {
    out.desc = desc_of(d);
  } else if (tracked) {
    out.desc = tracked->desc;
  } else {
    return -1;
  }
  out.api = tracked ? tracked->api : "unknown";
  out.skip = unsupported_array(out.desc);
  arrays_.push_back(std::move(out));
  const long id = long(arrays_.size() - 1);
  // A level of a mipmapped array: the whole mipmapped array comes along (the replay
  // gets the level from its own mipmapped array, as the app did).
  if (tracked && tracked->mipmap) {
    std::string why;
    mipmap_of(tracked->mipmap, surface, why);
  }
  return id;
}

long ArrayCapture::mipmap_of(CUmipmappedArray m, bool surface, std::string& why) {
  for (size_t i = 0; i < mipmaps_.size(); ++i)
    if (mipmaps_[i].handle == m) {
      for (Array& a : arrays_)
        if (a.mipmap == long(i)) a.surface |= surface;
      return long(i);
    }
  const TrackedMipmap* tracked = nullptr;
  for (const TrackedMipmap& t : state_.mipmaps)
    if (t.handle == m) tracked = &t;
  if (!tracked) {
    why = "its mipmapped array " + hex(m) + " was not created through a call kerncap watched";
    return -1;
  }
  Mipmap mm{m, tracked->desc, tracked->levels};
  mipmaps_.push_back(mm);
  const long id = long(mipmaps_.size() - 1);
  for (unsigned level = 0; level < tracked->levels; ++level) {
    CUarray la = nullptr;
    // kerncap's own call (guarded): not recorded as the app's.
    const CUresult r = KC_CU(cuMipmappedArrayGetLevel)(&la, m, level);
    if (r != CUDA_SUCCESS || !la) {
      why = "level " + std::to_string(level) + " of mipmapped array " + hex(m) +
            " could not be read: cuMipmappedArrayGetLevel failed: " + cu_error_string(r);
      return id;
    }
    const long k = array_of(la, surface);
    if (k < 0) {
      why = "level " + std::to_string(level) + " of mipmapped array " + hex(m) + " has no descriptor";
      return id;
    }
    arrays_[size_t(k)].mipmap = id;
    arrays_[size_t(k)].level = level;
    if (arrays_[size_t(k)].api == "unknown") arrays_[size_t(k)].api = "cuMipmappedArrayGetLevel";
    if (!arrays_[size_t(k)].skip.empty() && why.empty()) why = "level " + std::to_string(level) + " is " + arrays_[size_t(k)].skip;
  }
  return id;
}

void ArrayCapture::locate_linear(size_t k, const std::vector<TrackedRegion>& regions) {
  const CUDA_RESOURCE_DESC& r = state_.objects[k].res;
  uint64_t base, size;
  if (r.resType == CU_RESOURCE_TYPE_LINEAR) {
    base = r.res.linear.devPtr;
    size = r.res.linear.sizeInBytes;
  } else {
    base = r.res.pitch2D.devPtr;
    size = uint64_t(r.res.pitch2D.pitchInBytes) * r.res.pitch2D.height;
  }
  Object& c = objects_[k];
  for (size_t i = 0; i < regions.size(); ++i) {
    const TrackedRegion& g = regions[i];
    if (base >= g.base && base < g.end()) {
      c.region = long(i);
      if (base + size > g.end())
        c.why = "its memory " + hex(base) + " + " + std::to_string(size) + " bytes runs past region " +
                std::to_string(i) + " (" + std::to_string(g.size) + " bytes)";
      return;
    }
  }
  c.why = "its memory " + hex(base) + " (" + std::to_string(size) +
          " bytes) lies in no captured region (freed, or allocated by a call kerncap does not track)";
}

void ArrayCapture::prepare(const std::vector<TrackedRegion>& regions, const ParamCapture& params,
                           const std::string& kernel, const std::string& demangled, const Cubin& cubin) {
  prepare_objects(regions);
  match(params, kernel, demangled, cubin);
}

void ArrayCapture::prepare_objects(const std::vector<TrackedRegion>& regions) {
  regions_ = &regions;
  objects_.assign(state_.objects.size(), Object{});
  for (size_t k = 0; k < state_.objects.size(); ++k) {
    const TrackedObject& o = state_.objects[k];
    Object& c = objects_[k];
    switch (o.res.resType) {
      case CU_RESOURCE_TYPE_ARRAY:
        if (!o.freed.empty()) {
          c.why = o.freed;
          break;
        }
        c.array = array_of(o.res.res.array.hArray, o.surface);
        if (c.array < 0)
          c.why = "its CUDA array " + hex(o.res.res.array.hArray) + " is not known to the driver (destroyed?)";
        else if (!arrays_[size_t(c.array)].skip.empty())
          c.why = "its contents are not captured: " + arrays_[size_t(c.array)].label() + " is " +
                  arrays_[size_t(c.array)].skip;
        break;
      case CU_RESOURCE_TYPE_MIPMAPPED_ARRAY:
        if (!o.freed.empty()) {
          c.why = o.freed;
          break;
        }
        c.mipmap = mipmap_of(o.res.res.mipmap.hMipmappedArray, o.surface, c.why);
        break;
      case CU_RESOURCE_TYPE_LINEAR:
      case CU_RESOURCE_TYPE_PITCH2D:
        locate_linear(k, regions);
        break;
      default:
        c.why = "resource type " + std::to_string(int(o.res.resType)) + " is not one kerncap recreates";
        break;
    }
  }
  for (const Array& a : arrays_)
    if (!a.skip.empty()) warnings_.push_back(a.label() + " is " + a.skip + ": its contents are not captured");
}

LaunchHandles ArrayCapture::match(const ParamCapture& params, const std::string& kernel, const std::string& demangled,
                                  const Cubin& cubin, const std::string& where) {
  std::vector<ParamWord> words;
  for (const ParamSlot& p : params.params) {
    ParamWord w{p.index, p.size, 0};
    if (p.size == 8 && p.offset + 8 <= params.buffer.size()) std::memcpy(&w.value, params.buffer.data() + p.offset, 8);
    else if (p.size == 8) w.size = 0;  // not in the buffer: cannot be matched
    words.push_back(w);
  }
  std::vector<std::string> types;
  if (!parameter_types(demangled, types)) types.clear();
  LaunchHandles out;
  out.uses_textures = texture_instructions(cubin, kernel);
  out.matches = match_handles(words, types, state_.objects, out.uses_textures);
  // The kernels' instructions over every launch: unknown when one is unknown.
  if (!matched_ || out.uses_textures < 0 || uses_textures_ < 0)
    uses_textures_ = !matched_ || out.uses_textures < 0 ? out.uses_textures : uses_textures_;
  else
    uses_textures_ |= out.uses_textures;
  if (!matched_) primary_ = out;
  matched_ = true;
  for (const HandleMatch& m : out.matches) {
    const size_t k = m.objects.front();
    const std::string p = where + "parameter " + std::to_string(m.param);
    if (m.objects.size() > 1) {
      std::string also;
      for (size_t j = 1; j < m.objects.size(); ++j) also += (also.empty() ? "" : ", ") + describe(m.objects[j]);
      warnings_.push_back(p + "'s value " + std::to_string(state_.objects[k].handle) + " is the handle of " +
                          describe(k) + " and of " + also + ": kerncap takes it for the first; if the kernel uses it "
                          "as the other, the replay reads the wrong object");
    }
    if (!m.by_signature)
      warnings_.push_back(p + " (8 bytes) equals the handle of " + describe(k) +
                          ", but the kernel's signature does not say its type: kerncap takes it for that handle and "
                          "the replay passes its own handle of the recreated object there (were it a plain integer, "
                          "the replay would change it)");
    if (!objects_[k].why.empty())
      warnings_.push_back(p + " holds the handle of " + describe(k) + ", which the replay cannot recreate: " +
                          objects_[k].why + ". The replay passes handle 0 there: this dispatch cannot be replayed "
                          "faithfully");
  }
  return out;
}

void ArrayCapture::scan_for_tables(const LaunchHandles& launch, const ParamCapture& params,
                                   const std::vector<std::pair<uint64_t, uint64_t>>& globals,
                                   const std::vector<std::string>& global_names) {
  const int uses_textures = launch.uses_textures;
  const std::vector<HandleMatch>& matches = launch.matches;
  if (uses_textures == kTexOpsNone || state_.objects.empty() || !regions_) return;
  std::set<size_t> matched;
  for (const HandleMatch& m : matches) matched.insert(m.objects.begin(), m.objects.end());
  std::map<uint64_t, std::vector<size_t>> wanted;  // handle value -> unmatched objects holding it
  for (size_t k = 0; k < state_.objects.size(); ++k)
    if (!matched.count(k)) wanted[state_.objects[k].handle].push_back(k);
  // Memory to scan: from every pointer in the parameters (to its region's end), and the
  // module globals; at most kScanBytes each.
  struct Range { uint64_t base, size; std::string where; long region; };
  std::vector<Range> ranges;
  std::set<uint64_t> seen;
  for (uint64_t at = 0; at + 8 <= params.buffer.size(); at += 8) {
    uint64_t v;
    std::memcpy(&v, params.buffer.data() + at, 8);
    for (size_t i = 0; i < regions_->size(); ++i) {
      const TrackedRegion& g = (*regions_)[i];
      if (v < g.base || v >= g.end() || !seen.insert(v & ~uint64_t(7)).second) continue;
      const uint64_t b = v & ~uint64_t(7);
      ranges.push_back({b, std::min<uint64_t>(kScanBytes, g.end() - b), "region " + std::to_string(i), long(i)});
    }
  }
  for (size_t j = 0; j < globals.size(); ++j)
    if (globals[j].second >= 8)
      ranges.push_back({globals[j].first, std::min<uint64_t>(kScanBytes, globals[j].second),
                        "module global " + (j < global_names.size() ? global_names[j] : std::string("?")), -1});
  bool found_any = false;
  std::vector<unsigned char> buf;
  for (const Range& r : ranges) {
    if (wanted.empty()) break;
    buf.resize(size_t(r.size));
    if (KC_CU(cuMemcpyDtoH)(buf.data(), CUdeviceptr(r.base), size_t(r.size)) != CUDA_SUCCESS) continue;
    std::set<size_t> here;
    uint64_t first_at = 0, words = 0;
    for (uint64_t off = 0; off + 8 <= r.size; off += 8) {
      uint64_t v;
      std::memcpy(&v, buf.data() + off, 8);
      auto it = wanted.find(v);
      if (it == wanted.end()) continue;
      if (here.empty()) first_at = off;
      ++words;
      for (size_t k : it->second) {
        here.insert(k);
        Object& c = objects_[k];
        const uint64_t in = r.region >= 0 ? r.base + off - (*regions_)[size_t(r.region)].base : off;
        if (c.found_in.size() < kFoundInMax) c.found_in.push_back(r.where + " + " + hex(in));
      }
    }
    if (here.empty()) continue;
    found_any = true;
    std::string objs;
    for (size_t k : here) {
      objs += (objs.empty() ? "" : ", ") + describe(k);
      if (objects_[k].why.empty())
        objects_[k].why = "its handle is read from device memory (" + objects_[k].found_in.front() +
                          "), where kerncap does not replace it";
    }
    const uint64_t in = r.region >= 0 ? r.base + first_at - (*regions_)[size_t(r.region)].base : first_at;
    const bool sure = uses_textures > 0 && matches.empty();
    warnings_.push_back(r.where + " + " + hex(in) + (sure ? " holds " : " may hold ") + "a table of texture/surface "
                        "handles in device memory (" + std::to_string(words) + " word(s) equal to the handles of " +
                        objs + "): kerncap puts the replay's handles only into kernel parameters, so a replayed kernel "
                        "reading this table gets handles that mean nothing in the replay process. " +
                        (sure ? "This dispatch cannot be replayed faithfully."
                              : "If it is such a table, this dispatch cannot be replayed faithfully."));
  }
  if (!found_any && uses_textures > 0 && matches.empty())
    warnings_.push_back("the kernel has texture or surface instructions, but no parameter holds the handle of a live "
                        "texture or surface object and none was found in the memory its pointer parameters reach or in "
                        "its module globals: it gets its handles from somewhere kerncap does not restore, so this "
                        "dispatch cannot be replayed faithfully");
}

void ArrayCapture::snapshot(BlobStore& blobs, bool post) {
  std::vector<unsigned char> buf;
  for (Array& a : arrays_) {
    ItemSnapshot& snap = post ? a.post : a.pre;
    snap = ItemSnapshot{};
    if (!a.skip.empty()) continue;
    const uint64_t row = a.desc.width * element_bytes(a.desc.format, a.desc.channels);
    const uint64_t rows = std::max<uint64_t>(a.desc.height, 1), slices = std::max<uint64_t>(a.desc.depth, 1);
    const uint64_t size = row * rows * slices;
    buf.assign(size_t(size), 0);
    CUDA_MEMCPY3D c;
    std::memset(&c, 0, sizeof c);
    c.srcMemoryType = CU_MEMORYTYPE_ARRAY;
    c.srcArray = a.handle;
    c.dstMemoryType = CU_MEMORYTYPE_HOST;
    c.dstHost = buf.data();
    c.dstPitch = size_t(row);
    c.dstHeight = size_t(rows);
    c.WidthInBytes = size_t(row);
    c.Height = size_t(rows);
    c.Depth = size_t(slices);
    KC_CHECK(cuMemcpy3D, (&c), std::string(post ? "the post-state of " : "the pre-state of ") + a.label());
    snapshotted_ += size;
    for (uint64_t off = 0; off < size; off += Snapshotter::kChunkSize) {
      const size_t len = size_t(std::min<uint64_t>(Snapshotter::kChunkSize, size - off));
      ChunkHash h;
      h.stored = blobs.put(buf.data() + off, len, &h.hash);
      if (!h.stored) snap.zero_bytes += len;
      snap.chunks.push_back(h);
    }
  }
}

uint64_t ArrayCapture::array_bytes() const {
  uint64_t n = 0;
  for (const Array& a : arrays_)
    if (a.skip.empty()) n += packed_bytes(a.desc);
  return n;
}

std::vector<uint64_t> ArrayCapture::known_handles() const {
  std::vector<uint64_t> out;
  for (const TrackedObject& o : state_.objects) out.push_back(o.handle);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

namespace {

void write_desc(JsonWriter& w, const ArrayDesc& d) {
  w.field("format", d.format).field("format_name", format_name(d.format)).field("channels", d.channels);
  w.field("width", d.width).field("height", d.height).field("depth", d.depth).field("flags", d.flags);
}

}  // namespace

void ArrayCapture::write_json(JsonWriter& w) const {
  w.key("arrays").begin_array();
  for (size_t i = 0; i < arrays_.size(); ++i) {
    const Array& a = arrays_[i];
    const bool captured = a.skip.empty();
    w.begin_object().field("id", uint64_t(i)).field("handle", uint64_t(reinterpret_cast<uintptr_t>(a.handle)));
    w.field("api", a.api);
    write_desc(w, a.desc);
    w.field("size", captured ? packed_bytes(a.desc) : uint64_t(0)).field("surface", a.surface);
    if (a.mipmap >= 0) w.key("mipmap").begin_object().field("id", a.mipmap).field("level", a.level).end_object();
    w.field("captured", captured);
    if (!captured) w.field("why", a.skip);
    w.field("written", a.pre.chunks != a.post.chunks);
    const uint64_t size = packed_bytes(a.desc);
    w.field("zero_fraction", captured && size ? double(a.pre.zero_bytes) / double(size) : 1.0);
    w.key("pre");
    write_hashes(w, a.pre.chunks);
    w.key("post");
    write_hashes(w, a.post.chunks);
    w.end_object();
  }
  w.end_array();
  w.key("mipmapped_arrays").begin_array();
  for (size_t i = 0; i < mipmaps_.size(); ++i) {
    const Mipmap& m = mipmaps_[i];
    w.begin_object().field("id", uint64_t(i)).field("handle", uint64_t(reinterpret_cast<uintptr_t>(m.handle)));
    write_desc(w, m.desc);
    w.field("levels", m.levels);
    w.key("level_arrays").begin_array();
    for (size_t k = 0; k < arrays_.size(); ++k)
      if (arrays_[k].mipmap == long(i)) w.value(uint64_t(k));
    w.end_array();
    w.end_object();
  }
  w.end_array();
  w.key("texture_objects").begin_array();
  for (size_t k = 0; k < state_.objects.size(); ++k) {
    const TrackedObject& o = state_.objects[k];
    const Object& c = objects_[k];
    w.begin_object().field("id", uint64_t(k)).field("kind", kind_of(o)).field("handle", o.handle);
    w.key("resource");
    write_resource(w, o.res, c.array, c.mipmap, c.region);
    if (!o.surface) {
      w.key("texture");
      write_texture_desc(w, o.tex);
      if (o.has_view) {
        w.key("view");
        write_view_desc(w, o.view);
      }
    }
    w.key("params").begin_array();
    for (const HandleMatch& m : primary_.matches)
      if (m.objects.front() == k) w.value(m.param);
    w.end_array();
    w.field("restorable", c.why.empty());
    if (!c.why.empty()) w.field("why", c.why);
    if (!c.found_in.empty()) {
      w.key("found_in").begin_array();
      for (const std::string& f : c.found_in) w.value(f);
      w.end_array();
    }
    w.end_object();
  }
  w.end_array();
  w.field("texture_instructions", uses_textures_ < 0 ? "unknown"
                                  : uses_textures_ == 0 ? "none"
                                  : uses_textures_ == kTexOpsTexture ? "texture"
                                  : uses_textures_ == kTexOpsSurface ? "surface" : "texture and surface");
}

void ArrayCapture::write_param(JsonWriter& w, const LaunchHandles& launch, uint32_t index) const {
  for (const HandleMatch& m : launch.matches) {
    if (m.param != index) continue;
    const TrackedObject& o = state_.objects[m.objects.front()];
    w.key("handle").begin_object().field("object", uint64_t(m.objects.front())).field("kind", kind_of(o));
    w.field("match", m.by_signature ? "signature" : "value");
    if (m.objects.size() > 1) {
      w.key("candidates").begin_array();
      for (size_t k : m.objects) w.value(uint64_t(k));
      w.end_array();
    }
    w.end_object();
    return;
  }
}

}  // namespace kc
