#include "array_tracker.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

namespace kc {

std::string format_name(unsigned format) {
  switch (format) {
    case CU_AD_FORMAT_UNSIGNED_INT8: return "uint8";
    case CU_AD_FORMAT_UNSIGNED_INT16: return "uint16";
    case CU_AD_FORMAT_UNSIGNED_INT32: return "uint32";
    case CU_AD_FORMAT_SIGNED_INT8: return "int8";
    case CU_AD_FORMAT_SIGNED_INT16: return "int16";
    case CU_AD_FORMAT_SIGNED_INT32: return "int32";
    case CU_AD_FORMAT_HALF: return "half";
    case CU_AD_FORMAT_FLOAT: return "float";
    case CU_AD_FORMAT_UNORM_INT8X1: case CU_AD_FORMAT_UNORM_INT8X2: case CU_AD_FORMAT_UNORM_INT8X4: return "unorm8";
    case CU_AD_FORMAT_SNORM_INT8X1: case CU_AD_FORMAT_SNORM_INT8X2: case CU_AD_FORMAT_SNORM_INT8X4: return "snorm8";
    case CU_AD_FORMAT_UNORM_INT16X1: case CU_AD_FORMAT_UNORM_INT16X2: case CU_AD_FORMAT_UNORM_INT16X4: return "unorm16";
    case CU_AD_FORMAT_SNORM_INT16X1: case CU_AD_FORMAT_SNORM_INT16X2: case CU_AD_FORMAT_SNORM_INT16X4: return "snorm16";
    default: {
      char buf[32];
      std::snprintf(buf, sizeof buf, "format 0x%x", format);
      return buf;
    }
  }
}

uint64_t packed_bytes(const ArrayDesc& d) {
  const uint64_t e = element_bytes(d.format, d.channels);
  return d.width * e * std::max<uint64_t>(d.height, 1) * std::max<uint64_t>(d.depth, 1);
}

std::string unsupported_array(const ArrayDesc& d) {
  if (d.flags & CUDA_ARRAY3D_SPARSE) return "a sparse CUDA array (its tiles are mapped separately)";
  if (d.flags & CUDA_ARRAY3D_DEFERRED_MAPPING) return "a CUDA array with deferred mapping";
  if (element_bytes(d.format, d.channels) == 0)
    return "a CUDA array of " + format_name(d.format) + " with " + std::to_string(d.channels) +
           " channel(s) (planar or block-compressed data is not plain rows)";
  if (d.width == 0) return "a CUDA array of width 0";
  return "";
}

ArrayDesc mip_level_desc(const ArrayDesc& base, unsigned level) {
  ArrayDesc d = base;
  auto shrink = [level](uint64_t v) { return v == 0 ? 0 : std::max<uint64_t>(1, v >> std::min(level, 63u)); };
  d.width = shrink(base.width);
  d.height = shrink(base.height);
  // Layers and cube faces are not mip levels: only a 3-D array's depth shrinks.
  if (!(base.flags & (CUDA_ARRAY3D_LAYERED | CUDA_ARRAY3D_CUBEMAP))) d.depth = shrink(base.depth);
  return d;
}

ArrayDesc desc_of(const CUDA_ARRAY3D_DESCRIPTOR& a) {
  ArrayDesc d;
  d.width = a.Width;
  d.height = a.Height;
  d.depth = a.Depth;
  d.format = unsigned(a.Format);
  d.channels = a.NumChannels;
  d.flags = a.Flags;
  return d;
}

namespace {

ArrayDesc from_2d(const CUDA_ARRAY_DESCRIPTOR& a) {
  ArrayDesc d;
  d.width = a.Width;
  d.height = a.Height;
  d.format = unsigned(a.Format);
  d.channels = a.NumChannels;
  return d;
}

std::string hex(const void* p) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%#llx", static_cast<unsigned long long>(reinterpret_cast<uintptr_t>(p)));
  return buf;
}

}  // namespace

void ArrayTracker::forget_array(CUarray a, const std::string& why) {
  arrays_.erase(a);
  for (auto* objects : {&textures_, &surfaces_})
    for (auto& [h, o] : *objects)
      if (o.res.resType == CU_RESOURCE_TYPE_ARRAY && o.res.res.array.hArray == a && o.freed.empty()) o.freed = why;
}

// Its levels go with it; objects over it are named as reading freed memory.
void ArrayTracker::forget_mipmap(CUmipmappedArray m) {
  if (mipmaps_.erase(m)) ++destroyed_;
  const std::string why = "its mipmapped array " + hex(m) + " was destroyed (cuMipmappedArrayDestroy) before the dispatch";
  std::vector<CUarray> levels;
  for (const auto& [h, a] : arrays_)
    if (a.mipmap == m) levels.push_back(h);
  for (CUarray l : levels) forget_array(l, why);
  for (auto* objects : {&textures_, &surfaces_})
    for (auto& [h, o] : *objects)
      if (o.res.resType == CU_RESOURCE_TYPE_MIPMAPPED_ARRAY && o.res.res.mipmap.hMipmappedArray == m &&
          o.freed.empty())
        o.freed = why;
}

void ArrayTracker::add_texture(const cuTexObjectCreate_params* a, CUcontext ctx) {
  if (!a->pTexObject || !a->pResDesc) return;
  TrackedObject o;
  o.handle = *a->pTexObject;
  o.res = *a->pResDesc;
  if (a->pTexDesc) o.tex = *a->pTexDesc;
  if (a->pResViewDesc) {
    o.has_view = true;
    o.view = *a->pResViewDesc;
  }
  o.ctx = ctx;
  textures_[o.handle] = o;  // a destroyed handle's value comes back for a new object
  ++created_;
}

bool ArrayTracker::on_call(CUpti_CallbackId cbid, const void* p, CUcontext ctx) {
  std::lock_guard<std::mutex> lock(mu_);
  switch (cbid) {
    case CUPTI_DRIVER_TRACE_CBID_cuArrayCreate_v2: {
      auto* a = static_cast<const cuArrayCreate_v2_params*>(p);
      if (!a->pHandle || !*a->pHandle || !a->pAllocateArray) return true;
      arrays_[*a->pHandle] = TrackedArray{*a->pHandle, from_2d(*a->pAllocateArray), "cuArrayCreate_v2", ctx, nullptr, 0};
      ++created_;
      return true;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuArray3DCreate_v2: {
      auto* a = static_cast<const cuArray3DCreate_v2_params*>(p);
      if (!a->pHandle || !*a->pHandle || !a->pAllocateArray) return true;
      arrays_[*a->pHandle] = TrackedArray{*a->pHandle, desc_of(*a->pAllocateArray), "cuArray3DCreate_v2", ctx, nullptr, 0};
      ++created_;
      return true;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuArrayDestroy: {
      CUarray a = static_cast<const cuArrayDestroy_params*>(p)->hArray;
      if (arrays_.count(a)) ++destroyed_;
      forget_array(a, "its CUDA array " + hex(a) + " was destroyed (cuArrayDestroy) before the dispatch");
      return true;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMipmappedArrayCreate: {
      auto* a = static_cast<const cuMipmappedArrayCreate_params*>(p);
      if (!a->pHandle || !*a->pHandle || !a->pMipmappedArrayDesc) return true;
      mipmaps_[*a->pHandle] = TrackedMipmap{*a->pHandle, desc_of(*a->pMipmappedArrayDesc), a->numMipmapLevels, ctx};
      ++created_;
      return true;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMipmappedArrayGetLevel: {
      auto* a = static_cast<const cuMipmappedArrayGetLevel_params*>(p);
      if (!a->pLevelArray || !*a->pLevelArray) return true;
      auto m = mipmaps_.find(a->hMipmappedArray);
      if (m == mipmaps_.end()) return true;  // created before kerncap watched: its objects say so
      arrays_[*a->pLevelArray] = TrackedArray{*a->pLevelArray, mip_level_desc(m->second.desc, a->level),
                                              "cuMipmappedArrayGetLevel", m->second.ctx, m->first, a->level};
      return true;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMipmappedArrayDestroy:
      forget_mipmap(static_cast<const cuMipmappedArrayDestroy_params*>(p)->hMipmappedArray);
      return true;
    case CUPTI_DRIVER_TRACE_CBID_cuTexObjectCreate:
      add_texture(static_cast<const cuTexObjectCreate_params*>(p), ctx);
      return true;
    case CUPTI_DRIVER_TRACE_CBID_cuTexObjectDestroy:
      if (textures_.erase(static_cast<const cuTexObjectDestroy_params*>(p)->texObject)) ++destroyed_;
      return true;
    case CUPTI_DRIVER_TRACE_CBID_cuSurfObjectCreate: {
      auto* a = static_cast<const cuSurfObjectCreate_params*>(p);
      if (!a->pSurfObject || !a->pResDesc) return true;
      TrackedObject o;
      o.handle = *a->pSurfObject;
      o.surface = true;
      o.res = *a->pResDesc;
      o.ctx = ctx;
      surfaces_[o.handle] = o;
      ++created_;
      return true;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuSurfObjectDestroy:
      if (surfaces_.erase(static_cast<const cuSurfObjectDestroy_params*>(p)->surfObject)) ++destroyed_;
      return true;
    default:
      return false;
  }
}

void ArrayTracker::drop_context(CUcontext ctx) {
  std::lock_guard<std::mutex> lock(mu_);
  auto drop = [ctx](auto& m) {
    for (auto it = m.begin(); it != m.end();) it = it->second.ctx == ctx ? m.erase(it) : std::next(it);
  };
  drop(arrays_);
  drop(mipmaps_);
  drop(textures_);
  drop(surfaces_);
}

ArrayState ArrayTracker::state(CUcontext ctx) const {
  std::lock_guard<std::mutex> lock(mu_);
  ArrayState s;
  auto mine = [ctx](CUcontext c) { return !ctx || !c || c == ctx; };
  for (const auto& [h, a] : arrays_)
    if (mine(a.ctx)) s.arrays.push_back(a);
  for (const auto& [h, m] : mipmaps_)
    if (mine(m.ctx)) s.mipmaps.push_back(m);
  for (const auto* objects : {&textures_, &surfaces_})
    for (const auto& [h, o] : *objects)
      if (mine(o.ctx)) s.objects.push_back(o);
  return s;
}

std::string ArrayTracker::report_json() const {
  std::lock_guard<std::mutex> lock(mu_);
  JsonWriter w;
  w.begin_object().field("arrays", uint64_t(arrays_.size())).field("mipmapped_arrays", uint64_t(mipmaps_.size()));
  w.field("textures", uint64_t(textures_.size())).field("surfaces", uint64_t(surfaces_.size()));
  w.field("created", created_).field("destroyed", destroyed_);
  w.key("freed_resources").begin_array();
  for (const auto* objects : {&textures_, &surfaces_})
    for (const auto& [h, o] : *objects)
      if (!o.freed.empty())
        w.begin_object().field("kind", o.surface ? "surface" : "texture").field("handle", h).field("why", o.freed).end_object();
  w.end_array().end_object();
  return w.str();
}

// -- parameters ----------------------------------------------------------------------------

namespace {

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(' '), e = s.find_last_not_of(' ');
  return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
}

}  // namespace

bool parameter_types(const std::string& demangled, std::vector<std::string>& types) {
  types.clear();
  if (demangled.empty() || demangled.back() != ')') return false;
  // The parameter list is the last top-level parenthesis group.
  int depth = 0;
  size_t open = std::string::npos;
  for (size_t i = demangled.size(); i-- > 0;) {
    const char c = demangled[i];
    if (c == ')') ++depth;
    else if (c == '(' && --depth == 0) { open = i; break; }
  }
  if (open == std::string::npos) return false;
  const std::string list = demangled.substr(open + 1, demangled.size() - open - 2);
  if (trim(list).empty() || trim(list) == "void") return true;
  std::string cur;
  depth = 0;
  for (char c : list) {
    if (c == '<' || c == '(' || c == '[') ++depth;
    if (c == '>' || c == ')' || c == ']') --depth;
    if (c == ',' && depth == 0) {
      types.push_back(trim(cur));
      cur.clear();
    } else {
      cur += c;
    }
  }
  types.push_back(trim(cur));
  return true;
}

bool handle_type(const std::string& type) {
  static const char* ok[] = {"unsigned long long", "unsigned long", "long long", "long", "unsigned long long int",
                             "cudaTextureObject_t", "cudaSurfaceObject_t", "CUtexObject", "CUsurfObject",
                             "unsigned long long const", "unsigned long const", "long long const", "long const"};
  for (const char* t : ok)
    if (type == t) return true;
  return false;
}

std::vector<HandleMatch> match_handles(const std::vector<ParamWord>& params, const std::vector<std::string>& types,
                                       const std::vector<TrackedObject>& objects, int uses_textures) {
  std::vector<HandleMatch> out;
  if (uses_textures == 0 || objects.empty()) return out;
  const bool typed = !types.empty() && types.size() == params.size();
  for (size_t i = 0; i < params.size(); ++i) {
    const ParamWord& p = params[i];
    if (p.size != 8 || p.value == 0) continue;
    if (typed && !handle_type(types[i])) continue;
    HandleMatch m;
    m.param = p.index;
    m.by_signature = typed;
    for (size_t k = 0; k < objects.size(); ++k)
      if (objects[k].handle == p.value) m.objects.push_back(k);
    if (!m.objects.empty()) out.push_back(std::move(m));
  }
  return out;
}

// -- manifest ------------------------------------------------------------------------------

std::string float_json(float f) {
  if (std::isnan(f)) return "\"nan\"";
  if (std::isinf(f)) return f > 0 ? "\"inf\"" : "\"-inf\"";
  if (f == 0.0f) return std::signbit(f) ? "-0.0" : "0";  // "-0" would read back as the integer 0
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.9g", double(f));
  return buf;
}

void write_texture_desc(JsonWriter& w, const CUDA_TEXTURE_DESC& t) {
  w.begin_object();
  w.key("address_mode").begin_array();
  for (int i = 0; i < 3; ++i) w.value(int(t.addressMode[i]));
  w.end_array();
  w.field("filter_mode", int(t.filterMode)).field("flags", t.flags).field("max_anisotropy", t.maxAnisotropy);
  w.field("mipmap_filter_mode", int(t.mipmapFilterMode));
  w.key("mipmap_level_bias").raw(float_json(t.mipmapLevelBias));
  w.key("min_mipmap_level_clamp").raw(float_json(t.minMipmapLevelClamp));
  w.key("max_mipmap_level_clamp").raw(float_json(t.maxMipmapLevelClamp));
  w.key("border_color").begin_array();
  for (int i = 0; i < 4; ++i) w.raw(float_json(t.borderColor[i]));
  w.end_array();
  w.end_object();
}

void write_view_desc(JsonWriter& w, const CUDA_RESOURCE_VIEW_DESC& v) {
  w.begin_object().field("format", int(v.format)).field("width", uint64_t(v.width)).field("height", uint64_t(v.height));
  w.field("depth", uint64_t(v.depth)).field("first_mipmap_level", v.firstMipmapLevel);
  w.field("last_mipmap_level", v.lastMipmapLevel).field("first_layer", v.firstLayer).field("last_layer", v.lastLayer);
  w.end_object();
}

void write_resource(JsonWriter& w, const CUDA_RESOURCE_DESC& r, long array_id, long mipmap_id, long region) {
  w.begin_object();
  switch (r.resType) {
    case CU_RESOURCE_TYPE_ARRAY:
      w.field("type", "array");
      if (array_id >= 0) w.field("array", array_id);
      break;
    case CU_RESOURCE_TYPE_MIPMAPPED_ARRAY:
      w.field("type", "mipmapped_array");
      if (mipmap_id >= 0) w.field("mipmapped_array", mipmap_id);
      break;
    case CU_RESOURCE_TYPE_LINEAR:
      w.field("type", "linear").field("address", uint64_t(r.res.linear.devPtr));
      w.field("format", unsigned(r.res.linear.format)).field("channels", r.res.linear.numChannels);
      w.field("size", uint64_t(r.res.linear.sizeInBytes));
      if (region >= 0) w.field("region", region);
      break;
    case CU_RESOURCE_TYPE_PITCH2D:
      w.field("type", "pitch2d").field("address", uint64_t(r.res.pitch2D.devPtr));
      w.field("format", unsigned(r.res.pitch2D.format)).field("channels", r.res.pitch2D.numChannels);
      w.field("width", uint64_t(r.res.pitch2D.width)).field("height", uint64_t(r.res.pitch2D.height));
      w.field("pitch", uint64_t(r.res.pitch2D.pitchInBytes));
      if (region >= 0) w.field("region", region);
      break;
    default:
      w.field("type", "unknown").field("res_type", int(r.resType));
      break;
  }
  w.field("flags", r.flags);
  w.end_object();
}

}  // namespace kc
