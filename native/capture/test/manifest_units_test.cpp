// CPU unit test of the one manifest writer (manifest_writer.cpp) as both capture kinds
// use it: a single dispatch's view (capture_session.cpp) and a sequence's (sequence_capture.cpp:
// regions allocated and freed inside the window, globals of its modules, closure words of
// several launches). Prints {"single": manifest, "sequence": manifest, "launch_params":
// [...]} for tests/test_manifest_writer.py, which reads them with the engine's reader;
// exits non-zero when a check failed.
#include <cstdio>
#include <cstring>
#include <string>

#include "manifest_writer.hpp"

using namespace kc;

#include "unit_check.hpp"

namespace {

constexpr uint64_t kRegion = 0x7f0000000000, kHost = 0x7e0000000000, kGlobal = 0x7d0000000000;

ItemSnapshot snap(uint64_t hash, uint64_t zero_bytes = 0) {
  ItemSnapshot s;
  ChunkHash c;
  c.stored = hash != 0;
  c.hash = hash;
  s.chunks.push_back(c);
  s.zero_bytes = zero_bytes;
  return s;
}

// Parameters: a pointer into the region, the host region's device pointer, a word into
// nothing (an anonymous host mapping), and a plain integer.
ParamCapture params(uint64_t stray) {
  ParamCapture p;
  const uint64_t words[] = {kRegion + 0x40, kHost + 8, stray, 12345};
  for (uint32_t i = 0; i < 4; ++i) p.params.push_back(ParamSlot{i, uint64_t(8) * i, 8});
  p.buffer.resize(sizeof words);
  std::memcpy(p.buffer.data(), words, sizeof words);
  return p;
}

void arrays_json(JsonWriter& w) {
  w.key("arrays").begin_array().end_array();
  w.key("mipmapped_arrays").begin_array().end_array();
  w.key("texture_objects").begin_array().end_array();
}

struct Fixture {
  Config cfg;
  TrackedRegion region, fresh, gone;
  HostItem host;
  CapturedGlobal global{"g_table", ".nv.global", kGlobal, 256, -1};
  ItemSnapshot pre = snap(0x11, 0), post = snap(0x22), host_pre = snap(0x33), host_post = snap(0x44);
  ItemSnapshot fresh_post = snap(0x55), gone_pre = snap(0x66), g_pre = snap(0), g_post = snap(0x77);
  HostMappings maps = HostMappings::parse("7c0000000000-7c0000100000 rw-p 00000000 00:00 0\n");
  Fixture() {
    region.base = kRegion, region.size = 4096, region.api = "cuMemMap", region.kind = "vmm";
    region.physical = 1, region.physical_offset = 0;
    fresh.base = kRegion + 0x100000, fresh.size = 4096, fresh.api = "cuMemAlloc_v2", fresh.kind = "device";
    gone.base = kRegion + 0x200000, gone.size = 4096, gone.api = "cuMemAlloc_v2", gone.kind = "device";
    host.region.base = kHost, host.region.size = 4096, host.region.api = "cuMemHostAlloc", host.region.flags = 2;
    host.device_pointer = kHost, host.snapshot = true;
  }
  ClosureTargets targets(bool sequence) const {
    std::vector<const TrackedRegion*> r{&region};
    if (sequence) r.push_back(&fresh), r.push_back(&gone);
    return closure_targets(r, {&global}, {&host}, {});
  }
};

ManifestView view(const Fixture& f, const ParamCapture& p, const ClosureTargets& t, const ClosureCheck& c) {
  ManifestView v;
  v.provenance = process_provenance(f.cfg, "2026-12-04T00:00:00Z");
  v.kernel = [](JsonWriter& w) {
    w.field("name", "_Z1kPf").field("demangled", "k(float*)").field("handle_kind", "CUfunction");
    w.field("launch_api", "cuLaunchKernel");
    w.key("module").begin_object().field("cubin", "cubins/x.cubin").end_object();
  };
  const unsigned grid[3] = {1, 1, 1}, block[3] = {32, 1, 1};
  v.launch = [grid, block](JsonWriter& w) { write_launch_config(w, grid, block, 0, "legacy", false, {}, "array"); };
  v.params = &p;
  v.targets = &t;
  v.regions.push_back(ManifestRegion{&f.region, {&f.pre, &f.post}});
  v.hosts.push_back(ManifestHost{&f.host, {&f.host_pre, &f.host_post}});
  v.arrays = arrays_json;
  v.closure = &c;
  return v;
}

}  // namespace

int main() {
  Fixture f;
  const uint64_t stray = 0x7c0000000100;  // in the anonymous mapping: accessible memory kerncap does not hold
  const ParamCapture p = params(stray);

  // One dispatch.
  const ClosureTargets t1 = f.targets(false);
  ClosureCheck c1;
  check_closure(p, t1, f.maps, -1, c1);
  CHECK(c1.words_checked == 4 && c1.unresolved.size() == 1 && c1.unresolved[0].value == stray);
  ManifestView single = view(f, p, t1, c1);
  CapturedGlobal g1 = f.global;
  single.globals.push_back(ManifestGlobal{&g1, {&f.g_pre, &f.g_post}});
  closure_warnings(c1, single.warnings);
  CHECK(single.warnings.size() == 1 && single.warnings[0].rfind("parameter 2 holds", 0) == 0);

  // A sequence: two launches, a region allocated inside the window and one freed there,
  // a global of module 0.
  const ClosureTargets t2 = f.targets(true);
  ClosureCheck c2;
  check_closure(p, t2, f.maps, 0, c2);
  check_closure(params(kRegion + 0x100010), t2, f.maps, 1, c2);  // launch 1: into the fresh region
  CHECK(c2.words_checked == 8 && c2.unresolved.size() == 1 && c2.unresolved[0].launch == 0);
  ManifestView seq = view(f, p, t2, c2);
  seq.provenance.window_s = 0.5;
  seq.regions.push_back(ManifestRegion{&f.fresh, {nullptr, &f.fresh_post}});
  seq.regions.push_back(ManifestRegion{&f.gone, {&f.gone_pre, nullptr}});
  CapturedGlobal g2 = f.global;
  g2.module = 0;
  seq.globals.push_back(ManifestGlobal{&g2, {&f.g_pre, &f.g_post}});
  seq.extra = [](JsonWriter& w) {
    w.key("sequence").begin_object().field("file", "sequence.json").field("launches", 2).end_object();
  };
  closure_warnings(c2, seq.warnings);
  CHECK(seq.warnings.size() == 1 && seq.warnings[0].rfind("launch 0 parameter 2 holds", 0) == 0);

  JsonWriter launch;  // a sequence.json launch's parameters (write_params, as sequence_capture.cpp writes them)
  launch.begin_object();
  write_params(launch, params(kRegion + 0x100010), t2, [](JsonWriter& w, uint32_t index) {
    if (index == 3) w.key("handle").begin_object().field("object", 0).field("match", "value").end_object();
  });
  launch.end_object();

  JsonWriter out;
  out.begin_object().field("failures", failures);
  out.key("single").raw(manifest_json(single));
  out.key("sequence").raw(manifest_json(seq));
  out.key("launch_params").raw(launch.str());
  out.end_object();
  std::printf("%s\n", out.str().c_str());
  return failures ? 1 : 0;
}
