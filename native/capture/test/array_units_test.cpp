// CPU unit tests of the capture's CUDA array and texture/surface object code that needs
// no driver (array_tracker.cpp, cubin_texture_ops.cpp): the tracker fed the CUPTI params
// structs the driver calls produce, descriptor helpers, the demangled-signature parser,
// handle matching, and the texture/surface instruction scan on cubins nvcc built here.
//
// Usage: array_units_test <sm_90 cubin> <sm_80 cubin>   (both of tex_kernels.cu)
// Prints one JSON object of facts for tests/test_array_units.py; exits non-zero on the
// first failed check.
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "array_tracker.hpp"
#include "cubin_elf.hpp"
#include "cubin_texture_ops.hpp"
#include "json_writer.hpp"

using namespace kc;

#include "unit_check.hpp"

static std::vector<unsigned char> read_file(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return std::vector<unsigned char>(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

static const TrackedObject* object(const ArrayState& s, uint64_t handle, bool surface) {
  for (const TrackedObject& o : s.objects)
    if (o.handle == handle && o.surface == surface) return &o;
  return nullptr;
}

int main(int argc, char** argv) {
  if (argc < 3) return 2;
  JsonWriter facts;
  facts.begin_object();

  // -- texture / surface instructions --------------------------------------------------
  for (int arg = 1; arg <= 2; ++arg) {
    const std::vector<unsigned char> image = read_file(argv[arg]);
    const Cubin c = Cubin::parse(image.data(), image.size());
    const std::string key = arg == 1 ? "sm90" : "sm80";
    facts.key(key).begin_object().field("sm", cubin_sm(c));
    for (const char* k : {"_Z7texreadyPfii", "_Z7tabreadPKyPfi", "_Z5surfwyii", "_Z3lodyP6float4f", "_Z5plainPfy",
                          "_Z7missingv"})
      facts.field(k, texture_instructions(c, k));
    facts.end_object();
  }
  CHECK(texture_opcode_family(0x899) == kTexOpsNone);  // USHF shares the low byte of SULD
  CHECK(texture_opcode_family(0xf60) == kTexOpsTexture && texture_opcode_family(0x361) == kTexOpsTexture);
  CHECK(texture_opcode_family(0xf9d) == kTexOpsSurface && texture_opcode_family(0x99e) == kTexOpsSurface);

  // -- descriptors ----------------------------------------------------------------------
  ArrayDesc d;
  d.width = 100; d.height = 30; d.format = CU_AD_FORMAT_FLOAT; d.channels = 4;
  CHECK(packed_bytes(d) == 100u * 16 * 30);
  CHECK(unsupported_array(d).empty());
  ArrayDesc planar = d;
  planar.format = CU_AD_FORMAT_NV12;
  CHECK(!unsupported_array(planar).empty() && packed_bytes(planar) == 0);
  ArrayDesc sparse = d;
  sparse.flags = CUDA_ARRAY3D_SPARSE;
  CHECK(unsupported_array(sparse).find("sparse") != std::string::npos);
  ArrayDesc layered = d;
  layered.depth = 6; layered.flags = CUDA_ARRAY3D_LAYERED;
  ArrayDesc l2 = mip_level_desc(layered, 2);
  CHECK(l2.width == 25 && l2.height == 7 && l2.depth == 6);  // layers do not shrink
  ArrayDesc vol = d;
  vol.depth = 9;
  CHECK(mip_level_desc(vol, 3).depth == 1 && mip_level_desc(vol, 3).width == 12);
  ArrayDesc one_d = d;
  one_d.height = 0;
  CHECK(mip_level_desc(one_d, 1).height == 0 && packed_bytes(one_d) == 1600);
  CHECK(element_bytes(CU_AD_FORMAT_UNORM_INT8X4, 4) == 4 && element_bytes(CU_AD_FORMAT_UNORM_INT8X4, 1) == 0);
  CHECK(element_bytes(CU_AD_FORMAT_HALF, 3) == 0);

  // -- the tracker, fed what the driver calls hand CUPTI --------------------------------
  ArrayTracker t;
  CUcontext ctx1 = reinterpret_cast<CUcontext>(0xC1), ctx2 = reinterpret_cast<CUcontext>(0xC2);
  CUarray a = reinterpret_cast<CUarray>(0xA10), b = reinterpret_cast<CUarray>(0xA20);
  CUarray lvl = reinterpret_cast<CUarray>(0xA31);
  CUmipmappedArray m = reinterpret_cast<CUmipmappedArray>(0xA30);
  CUDA_ARRAY3D_DESCRIPTOR d3{};
  d3.Width = 64; d3.Height = 32; d3.Format = CU_AD_FORMAT_FLOAT; d3.NumChannels = 1; d3.Flags = CUDA_ARRAY3D_SURFACE_LDST;
  cuArray3DCreate_v2_params c3{&a, &d3};
  CHECK(t.on_call(CUPTI_DRIVER_TRACE_CBID_cuArray3DCreate_v2, &c3, ctx1));
  CUDA_ARRAY_DESCRIPTOR d2{};
  d2.Width = 16; d2.Height = 8; d2.Format = CU_AD_FORMAT_UNSIGNED_INT8; d2.NumChannels = 2;
  cuArrayCreate_v2_params c2{&b, &d2};
  CHECK(t.on_call(CUPTI_DRIVER_TRACE_CBID_cuArrayCreate_v2, &c2, ctx1));
  cuMipmappedArrayCreate_params cm{&m, &d3, 3};
  CHECK(t.on_call(CUPTI_DRIVER_TRACE_CBID_cuMipmappedArrayCreate, &cm, ctx1));
  cuMipmappedArrayGetLevel_params gl{&lvl, m, 2};
  CHECK(t.on_call(CUPTI_DRIVER_TRACE_CBID_cuMipmappedArrayGetLevel, &gl, ctx1));
  CUDA_RESOURCE_DESC res{};
  res.resType = CU_RESOURCE_TYPE_ARRAY;
  res.res.array.hArray = a;
  CUDA_TEXTURE_DESC tex{};
  tex.filterMode = CU_TR_FILTER_MODE_LINEAR;
  tex.addressMode[0] = CU_TR_ADDRESS_MODE_CLAMP;
  tex.flags = CU_TRSF_NORMALIZED_COORDINATES;
  tex.mipmapLevelBias = 0.1f;     // not a binary fraction: must round-trip through JSON exactly
  tex.borderColor[3] = 1.0f / 3;
  CUtexObject h1 = 1, h2 = 2, h3 = 3;
  CUsurfObject s1 = 1;
  cuTexObjectCreate_params tc{&h1, &res, &tex, nullptr};
  CHECK(t.on_call(CUPTI_DRIVER_TRACE_CBID_cuTexObjectCreate, &tc, ctx1));
  cuSurfObjectCreate_params sc{&s1, &res};
  CHECK(t.on_call(CUPTI_DRIVER_TRACE_CBID_cuSurfObjectCreate, &sc, ctx1));
  CUDA_RESOURCE_DESC res_b = res;
  res_b.res.array.hArray = b;
  CUDA_RESOURCE_VIEW_DESC view{};
  view.format = CU_RES_VIEW_FORMAT_UINT_2X8;
  view.width = 16; view.height = 8; view.lastLayer = 0;
  cuTexObjectCreate_params tb{&h2, &res_b, &tex, &view};
  CHECK(t.on_call(CUPTI_DRIVER_TRACE_CBID_cuTexObjectCreate, &tb, ctx1));
  cuArrayDestroy_params ad{b};
  CHECK(t.on_call(CUPTI_DRIVER_TRACE_CBID_cuArrayDestroy, &ad, ctx1));
  // An array that gets b's old handle: the texture still names the freed one.
  CUarray b2 = b;
  cuArrayCreate_v2_params c2b{&b2, &d2};
  CHECK(t.on_call(CUPTI_DRIVER_TRACE_CBID_cuArrayCreate_v2, &c2b, ctx1));
  CUDA_RESOURCE_DESC res_m{};
  res_m.resType = CU_RESOURCE_TYPE_MIPMAPPED_ARRAY;
  res_m.res.mipmap.hMipmappedArray = m;
  cuTexObjectCreate_params tm{&h3, &res_m, &tex, nullptr};
  CHECK(t.on_call(CUPTI_DRIVER_TRACE_CBID_cuTexObjectCreate, &tm, ctx2));
  cuMemAlloc_v2_params not_ours{};
  CHECK(!t.on_call(CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2, &not_ours, ctx1));

  ArrayState s = t.state(nullptr);
  CHECK(s.arrays.size() == 3 && s.mipmaps.size() == 1 && s.objects.size() == 4);
  const TrackedObject* o1 = object(s, 1, false);
  const TrackedObject* o2 = object(s, 2, false);
  const TrackedObject* so = object(s, 1, true);  // textures and surfaces may share a value
  CHECK(o1 && o1->freed.empty() && o1->tex.mipmapLevelBias == 0.1f && !o1->has_view);
  CHECK(o2 && o2->freed.find("cuArrayDestroy") != std::string::npos && o2->has_view && o2->view.width == 16);
  CHECK(so && so->surface && so->res.res.array.hArray == a);
  bool level_found = false;
  for (const TrackedArray& x : s.arrays)
    if (x.handle == lvl) level_found = x.mipmap == m && x.level == 2 && x.desc.width == 16 && x.desc.height == 8;
  CHECK(level_found);
  CHECK(t.state(ctx2).objects.size() == 1 && t.state(ctx1).objects.size() == 3);
  // A destroyed texture's handle comes back for the next object: one entry, the new one.
  cuTexObjectDestroy_params td{h1};
  CHECK(t.on_call(CUPTI_DRIVER_TRACE_CBID_cuTexObjectDestroy, &td, ctx1));
  CUDA_RESOURCE_DESC res_lin{};
  res_lin.resType = CU_RESOURCE_TYPE_LINEAR;
  res_lin.res.linear.devPtr = 0x7f0000001000ull;
  res_lin.res.linear.format = CU_AD_FORMAT_FLOAT;
  res_lin.res.linear.numChannels = 1;
  res_lin.res.linear.sizeInBytes = 4096;
  cuTexObjectCreate_params tl{&h1, &res_lin, &tex, nullptr};
  CHECK(t.on_call(CUPTI_DRIVER_TRACE_CBID_cuTexObjectCreate, &tl, ctx1));
  s = t.state(ctx1);
  o1 = object(s, 1, false);
  CHECK(s.objects.size() == 3 && o1 && o1->res.resType == CU_RESOURCE_TYPE_LINEAR);
  // The mipmapped array goes: its level and the texture over it are gone or freed.
  cuMipmappedArrayDestroy_params md{m};
  CHECK(t.on_call(CUPTI_DRIVER_TRACE_CBID_cuMipmappedArrayDestroy, &md, ctx1));
  ArrayState after = t.state(nullptr);
  const TrackedObject* o3 = object(after, 3, false);
  CHECK(after.mipmaps.empty() && after.arrays.size() == 2 && o3 && o3->freed.find("mipmapped") != std::string::npos);
  t.drop_context(ctx2);
  CHECK(!object(t.state(nullptr), 3, false));
  facts.key("report").raw(t.report_json());

  // -- signatures and handle matching ------------------------------------------------------
  std::vector<std::string> types;
  CHECK(parameter_types("texread(unsigned long long, float*, int, int)", types) && types.size() == 4 &&
        types[0] == "unsigned long long" && types[1] == "float*");
  CHECK(parameter_types("void ns::k<3, std::pair<int, float> >(Args<int, (char)1>, unsigned long)", types) &&
        types.size() == 2 && types[1] == "unsigned long");
  CHECK(parameter_types("k()", types) && types.empty());
  CHECK(parameter_types("k(void)", types) && types.empty());
  CHECK(!parameter_types("kernel_c_name", types));
  CHECK(handle_type("unsigned long long") && handle_type("long") && !handle_type("float*") && !handle_type("int"));

  std::vector<TrackedObject> objs(3);
  objs[0].handle = 1;
  objs[1].handle = 2;
  objs[2].handle = 1;
  objs[2].surface = true;
  std::vector<ParamWord> words = {{0, 8, 1}, {1, 8, 0x7f0000001000ull}, {2, 4, 2}, {3, 8, 2}, {4, 8, 9}};
  std::vector<std::string> typed = {"unsigned long long", "float*", "int", "long", "unsigned long long"};
  auto m1 = match_handles(words, typed, objs, kTexOpsTexture);
  CHECK(m1.size() == 2 && m1[0].param == 0 && m1[0].objects.size() == 2 && m1[0].by_signature);
  CHECK(m1[1].param == 3 && m1[1].objects.size() == 1 && m1[1].objects[0] == 1);
  std::vector<std::string> pointer_first = {"float*", "float*", "int", "long", "unsigned long long"};
  CHECK(match_handles(words, pointer_first, objs, kTexOpsTexture).size() == 1);  // a pointer is never a handle
  auto untyped = match_handles(words, {}, objs, kTexOpsUnknown);
  CHECK(untyped.size() == 2 && !untyped[0].by_signature);
  CHECK(match_handles(words, typed, objs, kTexOpsNone).empty());  // no texture instruction: coincidence

  // -- descriptors as the manifest writes them ----------------------------------------------
  facts.key("texture");
  write_texture_desc(facts, tex);
  facts.key("view");
  write_view_desc(facts, view);
  facts.key("resource_linear");
  write_resource(facts, res_lin, -1, -1, 4);
  CUDA_RESOURCE_DESC pitch{};
  pitch.resType = CU_RESOURCE_TYPE_PITCH2D;
  pitch.res.pitch2D.devPtr = 0x7f0000002000ull;
  pitch.res.pitch2D.format = CU_AD_FORMAT_HALF;
  pitch.res.pitch2D.numChannels = 2;
  pitch.res.pitch2D.width = 300;
  pitch.res.pitch2D.height = 7;
  pitch.res.pitch2D.pitchInBytes = 1536;
  facts.key("resource_pitch");
  write_resource(facts, pitch, -1, -1, 2);
  facts.key("resource_array");
  write_resource(facts, res, 5, -1, -1);
  facts.key("floats").begin_array();
  for (float f : {0.1f, 1.0f / 3, -0.0f, 3.4028235e38f, 1e-45f}) facts.raw(float_json(f));
  facts.raw(float_json(__builtin_nanf(""))).raw(float_json(-__builtin_inff()));
  facts.end_array();
  facts.field("failures", failures).end_object();
  std::printf("%s\n", facts.str().c_str());
  return failures ? 1 : 0;
}
