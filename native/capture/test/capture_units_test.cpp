// CPU unit tests of the interposer's GPU-independent parts: the cubin reader, SHA-256,
// the JSON writer and KERNCAP_COMMAND parser, the kernel matcher, the blob store (and
// its ENOSPC test hook, its pool of hard links), the memory tracker, the cubin
// selection, NVTX range tracking, rank/pid selection and the dispatch list, the
// closure targets (what a parameter word points at), XLA's autotuning window and the
// fingerprint of an all-zero chunk.
//
// Usage: capture_units_test <a.cubin> <variant.cubin> <scratch dir>
// Prints one JSON object of facts for tests/test_cubin_elf.py to cross-check
// (sha256, blob names) and exits non-zero on the first failed check.
#include <sys/stat.h>
#include <unistd.h>

#include <generated_nvtx_meta.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "blob_store.hpp"
#include "chunk_fingerprint.hpp"
#include "closure_targets.hpp"
#include "config.hpp"
#include "cubin_elf.hpp"
#include "fsutil.hpp"
#include "sample_stats.hpp"
#include "job_identity.hpp"
#include "json_writer.hpp"
#include "memory_tracker.hpp"
#include "module_registry.hpp"
#include "nvtx_ranges.hpp"
#include "sha256.hpp"
#include "xla_autotune.hpp"
#include "xxh64.hpp"

using namespace kc;

#include "unit_check.hpp"

template <class F>
static bool throws(F f) {
  try {
    f();
  } catch (const std::exception&) {
    return true;
  }
  return false;
}

static std::vector<unsigned char> read_file(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return std::vector<unsigned char>(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

static bool file_exists(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0;
}

static void test_cubin(const std::vector<unsigned char>& bytes, JsonWriter& facts) {
  Cubin c = Cubin::parse(bytes.data(), bytes.size());
  std::set<std::string> fns;
  for (const auto& n : c.function_names()) fns.insert(n);
  CHECK(fns.count("scale_kern"));
  CHECK(fns.count("_Z4tmplIfEvPT_S0_"));
  CHECK(fns.count("_Z4tmplIdEvPT_S0_"));
  CHECK(fns.count("_Z5spillPfi"));
  CHECK(c.has_function("scale_kern"));
  CHECK(!c.has_function("scale"));  // an object, not a function

  std::set<std::string> globals;
  for (const ModuleGlobal& g : c.module_globals()) {
    globals.insert(g.name + "@" + g.section + ":" + std::to_string(g.size));
  }
  CHECK(globals.count("scale@.nv.constant3:4"));
  CHECK(globals.count("table@.nv.constant3:64"));
  CHECK(globals.count("counter@.nv.global:4"));
  CHECK(globals.count("hidden@.nv.global:4"));
  CHECK(globals.count("ginit@.nv.global.init:16"));
  CHECK(globals.size() == 5);  // nothing from .nv.constant0.* parameter banks

  KernelInfo k = c.kernel_info("scale_kern");
  CHECK(k.num_regs > 0);
  CHECK(k.static_shared >= 1024);  // float tile[256]
  CHECK(k.param_bank > 0);
  CHECK(k.params.size() == 3);
  if (k.params.size() == 3) {
    CHECK(k.params[0].offset == 0 && k.params[0].size == 8);
    CHECK(k.params[1].offset == 8 && k.params[1].size == 8);
    CHECK(k.params[2].offset == 16 && k.params[2].size == 4);
  }
  KernelInfo s = c.kernel_info("_Z5spillPfi");
  CHECK(s.frame_size == 256);  // float loc[64] lives in local memory
  KernelInfo none = c.kernel_info("no_such_kernel");
  CHECK(none.num_regs == -1 && none.params.empty());

  facts.field("sha256", sha256_hex(bytes.data(), bytes.size()));
  facts.field("scale_kern_regs", k.num_regs);

  // Malformed images: every truncation throws ElfError or parses; none may crash
  // (the test is built with AddressSanitizer).
  for (size_t n = 0; n < bytes.size(); n += 61) {
    try {
      Cubin t = Cubin::parse(bytes.data(), n, false);
      t.function_names();
      t.module_globals();
      t.kernel_info("scale_kern");
    } catch (const ElfError&) {
    }
  }
  std::vector<unsigned char> junk(bytes);
  for (size_t i = 64; i < junk.size(); i += 7) junk[i] ^= 0x5a;  // corrupt everything past the header
  try {
    Cubin t = Cubin::parse(junk.data(), junk.size(), false);
    t.function_names();
    t.module_globals();
    t.kernel_info("scale_kern");
  } catch (const ElfError&) {
  }
  CHECK(throws([] { Cubin::parse("not an elf", 10); }));
  std::vector<unsigned char> bad(bytes);
  bad[0x28] = 0xff; bad[0x2f] = 0x7f;  // e_shoff far past the end
  CHECK(throws([&] { Cubin::parse(bad.data(), bad.size()); }));
}

static void test_small_pieces() {
  CHECK(is_module_constant_section(".nv.constant3"));
  CHECK(is_module_constant_section(".nv.constant12"));
  CHECK(is_module_constant_section(".nv.constant2._Z3foov"));
  CHECK(!is_module_constant_section(".nv.constant0"));
  CHECK(!is_module_constant_section(".nv.constant0._Z3foov"));
  CHECK(!is_module_constant_section(".nv.constant"));
  CHECK(!is_module_constant_section(".nv.constantx"));
  CHECK(!is_module_constant_section(".nv.global"));

  CHECK(sha256_hex("", 0) == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(sha256_hex("abc", 3) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  const char* two = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  CHECK(sha256_hex(two, 56) == "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");

  std::vector<std::string> argv;
  CHECK(parse_json_string_list("[\"python3\", \"app.py\", \"--x=\\\"q\\\"\", \"\\u00e9\\n\"]", argv));
  CHECK(argv.size() == 4 && argv[2] == "--x=\"q\"" && argv[3] == "\xc3\xa9\n");
  CHECK(parse_json_string_list(" [ ] ", argv) && argv.empty());
  CHECK(!parse_json_string_list("[\"a\",]", argv));
  CHECK(!parse_json_string_list("python3 app.py", argv));
  CHECK(!parse_json_string_list("[1]", argv));

  KernelMatcher sub("tmpl<float>", MatchMode::Substring);
  CHECK(sub.matches_symbol("_Z4tmplIfEvPT_S0_"));
  CHECK(!sub.matches_symbol("_Z4tmplIdEvPT_S0_"));
  KernelMatcher re("^scale_k.*n$", MatchMode::Regex);
  CHECK(re.matches_symbol("scale_kern"));
  CHECK(!re.matches_symbol("xscale_kern"));
  KernelMatcher exact("_Z5spillPfi", MatchMode::Exact);
  CHECK(exact.matches_symbol("_Z5spillPfi"));
  CHECK(!exact.matches("spill", "spill(float*, int)"));
  CHECK(throws([] { KernelMatcher bad("(", MatchMode::Regex); }));
  CHECK(demangle("_Z5spillPfi") == "spill(float*, int)");
  CHECK(demangle("scale_kern") == "scale_kern");
}

static void test_blob_store(const std::string& dir, JsonWriter& facts) {
  const std::string blobs = path_join(dir, "blobs");
  make_dir(blobs);
  BlobStore store(blobs, nullptr);
  std::vector<unsigned char> zero(4 << 20, 0), data(1000003);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<unsigned char>(i * 131 + 7);
  uint64_t h = 0;
  CHECK(!store.put(zero.data(), zero.size(), &h));
  CHECK(all_zero(zero.data() + 1, zero.size() - 3));
  zero[zero.size() - 1] = 1;
  CHECK(!all_zero(zero.data(), zero.size()));
  CHECK(!all_zero(zero.data() + 5, zero.size() - 5));
  CHECK(store.put(data.data(), data.size(), &h));
  const std::string path = path_join(blobs, xxh64_hex(h) + ".bin");
  CHECK(file_exists(path));
  CHECK(read_file(path) == data);
  CHECK(store.stored_bytes() == data.size());
  CHECK(store.put(data.data(), data.size(), &h));
  CHECK(store.stored_bytes() == data.size());  // deduplicated
  facts.field("blob", xxh64_hex(h)).field("blob_path", path);

  // The ENOSPC hook: the write that crosses the budget fails, names the file and leaves nothing behind.
  const std::string blobs2 = path_join(dir, "blobs2");
  make_dir(blobs2);
  WriteBudget budget;
  budget.limit = 1500000;
  BlobStore limited(blobs2, &budget);
  CHECK(limited.put(data.data(), data.size(), &h));
  data[0] ^= 1;
  bool enospc = false;
  try {
    limited.put(data.data(), data.size(), &h);
  } catch (const IoError& e) {
    enospc = e.err == ENOSPC && std::string(e.what()).find(xxh64_hex(h)) != std::string::npos;
  }
  CHECK(enospc);
  CHECK(!file_exists(path_join(blobs2, xxh64_hex(h) + ".bin")));
}

static void test_memory_tracker() {
  MemoryTracker m;
  auto ctx = reinterpret_cast<CUcontext>(0x10);
  auto other = reinterpret_cast<CUcontext>(0x20);
  m.on_alloc(0x100000, 0x1000, "cuMemAlloc_v2", "device", ctx);
  m.on_alloc(0x200000, 0x2000, "cuMemAllocManaged", "managed", ctx);
  m.on_alloc(0x300000, 0x1000, "cuMemAlloc_v2", "device", other);
  auto r = m.regions_for(ctx);
  CHECK(r.size() == 2 && r[0].base == 0x100000 && r[1].kind == std::string("managed"));
  m.on_free(0x100000);
  CHECK(m.regions_for(ctx).size() == 1);
  // A new allocation over a stale entry replaces it (regions never overlap).
  m.on_alloc(0x201000, 0x1000, "cuMemAllocAsync", "async", ctx);
  r = m.regions_for(ctx);
  CHECK(r.size() == 2 && r[0].base == 0x200000 && r[0].size == 0x1000 && r[1].base == 0x201000);

  // VMM: a reservation mapped page by page is one region; an unmap splits it.
  const uint64_t res = 0x7f0000000000ull, page = 2 << 20;
  m.on_reserve(res, 64ull << 20);
  for (int i = 0; i < 4; ++i) m.on_map(res + i * page, page);
  r = m.regions_for(ctx);
  CHECK(r.size() == 3 && r[2].base == res && r[2].size == 4 * page && r[2].reserve_size == (64ull << 20));
  m.on_unmap(res + page, page);
  r = m.regions_for(ctx);
  CHECK(r.size() == 4 && r[2].size == page && r[3].base == res + 2 * page && r[3].size == 2 * page);
  m.on_address_free(res);
  CHECK(m.regions_for(ctx).size() == 2);

  // One physical allocation mapped at two adjacent ranges (a ring buffer wrapping by
  // address): two regions, not merged, each naming the allocation and its offset; the
  // pages of another allocation next to them stay merged and unnamed.
  const uint64_t ring = 0x7e0000000000ull;
  m.on_reserve(ring, 64ull << 20);
  m.on_map(ring, page, 0, 0xAAA);
  m.on_map(ring + page, page, 0, 0xAAA);
  m.on_map(ring + 2 * page, page, 0, 0xBBB);
  m.on_map(ring + 3 * page, page, 0, 0xCCC);
  r = m.regions_for(ctx);
  CHECK(r.size() == 5);
  CHECK(r[2].base == ring && r[2].size == page && r[2].physical != 0 && r[2].physical_offset == 0);
  CHECK(r[3].base == ring + page && r[3].physical == r[2].physical);
  CHECK(r[4].base == ring + 2 * page && r[4].size == 2 * page && r[4].physical == 0);
  CHECK(alias_warnings(r).empty());
  // Unmapping one alias: the allocation is mapped once, nothing is named any more.
  m.on_unmap(ring + page, page);
  r = m.regions_for(ctx);
  CHECK(r.size() == 4 && r[2].physical == 0 && r[2].size == page);
  // Two mappings of one allocation covering different extents: named for the capture.
  std::vector<TrackedRegion> odd(2);
  odd[0].base = ring; odd[0].size = 2 * page; odd[0].physical = 9;
  odd[1].base = ring + 2 * page; odd[1].size = page; odd[1].physical = 9; odd[1].physical_offset = page;
  auto why = alias_warnings(odd);
  CHECK(why.size() == 1 && why[0].find("physical allocation 9 is mapped at 2 places") == 0 &&
        why[0].find("region 1 (0x7e0000400000, 2097152 bytes at offset 2097152)") != std::string::npos);
  m.on_address_free(ring);
  CHECK(m.regions_for(ctx).size() == 2);
  m.drop_context(ctx);
  CHECK(m.regions_for(ctx).empty());

  m.on_host_alloc(0x5000, 64, "cuMemHostAlloc", CU_MEMHOSTALLOC_DEVICEMAP);
  CHECK(m.host_regions().size() == 1 && m.host_regions()[0].flags == CU_MEMHOSTALLOC_DEVICEMAP);
  m.on_host_free(0x5000);
  CHECK(m.host_regions().empty());
}

static void test_selection(const std::vector<unsigned char>& a, const std::vector<unsigned char>& b,
                           JsonWriter& facts) {
  KernelMatcher matcher("scale_kern", MatchMode::Substring);
  KernelMatcher nothing("no_such_kernel", MatchMode::Exact);
  DriverFuncAttrs attrs;
  {
    ModuleRegistry reg;
    reg.on_module_loaded(1, a.data(), a.size(), nothing);
    CHECK(!reg.choose("scale_kern", {}, attrs).cubin);  // filtered out: not kept
    reg.on_module_loaded(2, a.data(), a.size(), matcher);
    reg.on_module_loaded(3, a.data(), a.size(), matcher);  // the same bytes loaded twice
    CubinChoice c = reg.choose("scale_kern", {}, attrs);
    CHECK(c.cubin && c.selection == "unique-symbol" && c.candidates == 1);
  }
  ModuleRegistry reg;
  {
    ModuleCollector outer;
    reg.on_module_loaded(10, a.data(), a.size(), matcher);
    ModuleCollector::note_loaded(10);
    {
      ModuleCollector inner;
      reg.on_module_loaded(11, b.data(), b.size(), matcher);
      ModuleCollector::note_loaded(11);
      CHECK(inner.ids() == std::vector<uint32_t>{11});
    }
    CHECK(outer.ids() == std::vector<uint32_t>{10});
  }
  auto mod_b = reinterpret_cast<CUmodule>(0xb0);
  reg.pair_module(mod_b, {11});
  CHECK(reg.any_kept({11}) && !reg.any_kept({99}));
  const int regs_a = Cubin::parse(a.data(), a.size()).kernel_info("scale_kern").num_regs;
  const int regs_b = Cubin::parse(b.data(), b.size()).kernel_info("scale_kern").num_regs;

  CubinChoice by_handle = reg.choose("scale_kern", reg.ids_for_module(mod_b), attrs);
  CHECK(by_handle.selection == "handle" && by_handle.candidates == 2);
  CHECK(by_handle.cubin && by_handle.cubin->module_id == 11);

  attrs.num_regs = regs_b;
  CubinChoice by_attrs = reg.choose("scale_kern", {}, attrs);
  if (regs_a != regs_b) {
    CHECK(by_attrs.selection == "attributes" && by_attrs.cubin->module_id == 11);
  } else {
    CHECK(by_attrs.selection == "ambiguous" && !by_attrs.warnings.empty());
  }
  attrs.num_regs = regs_a;
  CubinChoice verified = reg.choose("scale_kern", {11}, attrs);
  CHECK(verified.selection == "handle");
  bool has_regs = false;
  for (const auto& [k, ok] : verified.verified)
    if (k == "num_regs") has_regs = (ok == (regs_a == regs_b));
  CHECK(has_regs);

  reg.on_module_unloading(11);
  CHECK(reg.ids_for_module(mod_b).empty());
  CHECK(reg.choose("scale_kern", {}, DriverFuncAttrs()).selection == "unique-symbol");
  facts.field("regs_a", regs_a).field("regs_b", regs_b);
}

// NVTX callbacks as CUPTI delivers them: params struct + pointer to the return value.
template <class P>
static void nvtx_call(NvtxRanges& r, CUpti_CallbackId id, const P& params, const void* ret = nullptr) {
  CUpti_NvtxData d{"nvtx", &params, ret};
  r.on_callback(id, &d);
}

static void test_nvtx_ranges() {
  NvtxRanges r("forward.S1024/layer.5", false);
  CHECK(!r.matches());  // no range open
  nvtx_call(r, CUPTI_CBID_NVTX_nvtxRangePushA, nvtxRangePushA_params{"forward.S1024"});
  nvtx_call(r, CUPTI_CBID_NVTX_nvtxRangePushA, nvtxRangePushA_params{"layer.4"});
  CHECK(!r.matches());
  nvtx_call(r, CUPTI_CBID_NVTX_nvtxRangePop, nvtxRangePop_params{nullptr});
  nvtx_call(r, CUPTI_CBID_NVTX_nvtxRangePushA, nvtxRangePushA_params{"layer.5"});
  CHECK(r.matches());
  const uint32_t id = r.path_id();
  CHECK(r.path_of(id) == "forward.S1024/layer.5");
  const NvtxContext c = r.context();
  CHECK(c.stack.size() == 2 && c.stack[1] == "layer.5" && c.ranges.empty());

  // A named domain with a registered string: shown as "domain:name"; popping the
  // domain's range leaves the default domain's stack as it was.
  const nvtxDomainHandle_t dom = reinterpret_cast<nvtxDomainHandle_t>(uintptr_t(0x1000));
  nvtx_call(r, CUPTI_CBID_NVTX_nvtxDomainCreateA, nvtxDomainCreateA_params{"kc"}, &dom);
  const nvtxStringHandle_t str = reinterpret_cast<nvtxStringHandle_t>(uintptr_t(0x2000));
  nvtx_call(r, CUPTI_CBID_NVTX_nvtxDomainRegisterStringA, nvtxDomainRegisterStringA_params{dom, "phase.B"}, &str);
  nvtxEventAttributes_t a{};
  a.version = NVTX_VERSION;
  a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  a.messageType = NVTX_MESSAGE_TYPE_REGISTERED;
  a.message.registered = str;
  nvtxDomainRangePushEx_params dp{};
  dp.domain = dom;
  dp.core.eventAttrib = &a;
  nvtx_call(r, CUPTI_CBID_NVTX_nvtxDomainRangePushEx, dp);
  CHECK(r.path_of(r.path_id()) == "forward.S1024/layer.5/kc:phase.B");
  CHECK(r.matches());  // substring
  nvtx_call(r, CUPTI_CBID_NVTX_nvtxRangePop, nvtxRangePop_params{nullptr});  // pops layer.5, not kc:phase.B
  CHECK(r.path_of(r.path_id()) == "forward.S1024/kc:phase.B");
  CHECK(!r.matches());
  nvtx_call(r, CUPTI_CBID_NVTX_nvtxDomainRangePop, nvtxDomainRangePop_params{dom});
  nvtx_call(r, CUPTI_CBID_NVTX_nvtxRangePop, nvtxRangePop_params{nullptr});
  nvtx_call(r, CUPTI_CBID_NVTX_nvtxRangePop, nvtxRangePop_params{nullptr});  // unmatched pop: ignored
  CHECK(r.path_of(r.path_id()).empty());

  // Start/end ranges are process-wide: opened on this thread, seen from another.
  NvtxRanges w("window", false);
  const nvtxRangeId_t rid = 42;
  nvtx_call(w, CUPTI_CBID_NVTX_nvtxRangeStartA, nvtxRangeStartA_params{"window"}, &rid);
  bool other = false;
  std::thread([&] { other = w.matches(); }).join();
  CHECK(other);
  nvtx_call(w, CUPTI_CBID_NVTX_nvtxRangeEnd, nvtxRangeEnd_params{rid});
  std::thread([&] { other = w.matches(); }).join();
  CHECK(!other);

  NvtxRanges re("^forward\\.S\\d+/layer\\.5$", true);
  nvtx_call(re, CUPTI_CBID_NVTX_nvtxRangePushA, nvtxRangePushA_params{"forward.S256"});
  nvtx_call(re, CUPTI_CBID_NVTX_nvtxRangePushA, nvtxRangePushA_params{"layer.5"});
  CHECK(re.matches());
  nvtx_call(re, CUPTI_CBID_NVTX_nvtxRangePushA, nvtxRangePushA_params{"attn"});
  CHECK(!re.matches());
  CHECK(throws([] { NvtxRanges bad("(", true); }));
  const std::string report = re.report_json(3, 4);
  CHECK(report.find("\"layer.5\"") != std::string::npos && report.find("\"target_outside\":4") != std::string::npos);
}

static void test_job_selection() {
  const char* vars[] = {"RANK", "LOCAL_RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID", "WORLD_SIZE",
                        "OMPI_COMM_WORLD_SIZE", "SLURM_NTASKS", "SLURM_NPROCS", "OMPI_COMM_WORLD_LOCAL_RANK",
                        "SLURM_LOCALID"};
  for (const char* v : vars) unsetenv(v);
  Config c;
  c.want_rank = 1;
  JobIdentity none = JobIdentity::from_env();
  CHECK(none.rank == -1);
  SelectionVerdict v = select_process(c, none);
  CHECK(!v.selected && !v.fatal && v.errors.size() == 1 && v.errors[0].first == "no_rank");

  setenv("RANK", "1", 1);
  setenv("WORLD_SIZE", "2", 1);
  setenv("LOCAL_RANK", "1", 1);
  JobIdentity j = JobIdentity::from_env();
  CHECK(j.rank == 1 && j.rank_var == "RANK" && j.world_size == 2 && j.local_rank == 1);
  CHECK(select_process(c, j).selected);
  c.want_rank = 0;
  v = select_process(c, j);
  CHECK(!v.selected && !v.fatal && v.errors.empty());
  c.want_rank = 5;
  v = select_process(c, j);
  CHECK(!v.selected && v.fatal && v.errors[0].first == "rank_out_of_range");
  CHECK(v.errors[0].second.find("world size is 2") != std::string::npos);
  // --rank 1 --pid <someone else>: this process is rank 1 but not that pid.
  c.want_rank = 1;
  c.want_pid = j.pid + 1;
  v = select_process(c, j);
  CHECK(!v.selected && v.fatal && v.errors[0].first == "selection_conflict");
  c.want_pid = j.pid;
  CHECK(select_process(c, j).selected);
  c.want_rank = -1;
  c.want_pid = j.pid + 1;
  v = select_process(c, j);
  CHECK(!v.selected && !v.fatal);
  setenv("OMPI_COMM_WORLD_RANK", "3", 1);
  unsetenv("RANK");
  unsetenv("LOCAL_RANK");
  j = JobIdentity::from_env();
  CHECK(j.rank == 3 && j.rank_var == "OMPI_COMM_WORLD_RANK");
  for (const char* var : vars) unsetenv(var);
}

static void test_dispatch_list() {
  setenv("KERNCAP_MODE", "capture", 1);
  setenv("KERNCAP_OUT", "/tmp", 1);
  setenv("KERNCAP_KERNEL", "k", 1);
  setenv("KERNCAP_DISPATCH", "40,3,17,3", 1);
  setenv("KERNCAP_SET", "1", 1);
  Config c = Config::from_env();
  CHECK(c.error.empty() && c.set && c.dispatches.size() == 3 && c.dispatch == 3 && c.last_dispatch() == 40);
  CHECK(c.wants_dispatch(17) && !c.wants_dispatch(18));
  unsetenv("KERNCAP_SET");
  CHECK(!Config::from_env().error.empty());  // a list needs set mode
  setenv("KERNCAP_DISPATCH", "3,x", 1);
  CHECK(!Config::from_env().error.empty());
  setenv("KERNCAP_DISPATCH", "2", 1);
  setenv("KERNCAP_BUCKETS", "1", 1);
  setenv("KERNCAP_NVTX", "layer", 1);
  setenv("KERNCAP_NVTX_MATCH", "glob", 1);
  c = Config::from_env();
  CHECK(c.buckets && c.set && c.keep_running && !c.error.empty());
  setenv("KERNCAP_NVTX_MATCH", "regex", 1);
  setenv("KERNCAP_RANK", "-1", 1);
  CHECK(!Config::from_env().error.empty());
  setenv("KERNCAP_RANK", "1", 1);
  setenv("KERNCAP_DEVICE", "0", 1);
  c = Config::from_env();
  CHECK(c.error.empty() && c.nvtx_regex && c.want_rank == 1 && c.want_device == 0 && c.want_pid == -1);
  for (const char* v : {"KERNCAP_MODE", "KERNCAP_OUT", "KERNCAP_KERNEL", "KERNCAP_DISPATCH", "KERNCAP_BUCKETS",
                        "KERNCAP_NVTX", "KERNCAP_NVTX_MATCH", "KERNCAP_RANK", "KERNCAP_DEVICE"})
    unsetenv(v);
}

// Two captures of one process share a blob pool: the second links, never rewrites.
static void test_blob_pool(const std::string& dir) {
  const std::string pool = path_join(dir, "pool"), one = path_join(dir, "one"), two = path_join(dir, "two");
  for (const std::string& d : {pool, one, two}) make_dir(d);
  std::vector<unsigned char> data(4096, 7);
  uint64_t h1 = 0, h2 = 0;
  BlobStore a(one, nullptr, pool), b(two, nullptr, pool);
  CHECK(a.put(data.data(), data.size(), &h1));
  CHECK(b.put(data.data(), data.size(), &h2));
  CHECK(h1 == h2);
  struct stat s1{}, s2{}, sp{};
  const std::string name = xxh64_hex(h1) + ".bin";
  CHECK(::stat(path_join(one, name).c_str(), &s1) == 0 && ::stat(path_join(two, name).c_str(), &s2) == 0);
  CHECK(::stat(path_join(pool, name).c_str(), &sp) == 0);
  CHECK(s1.st_ino == sp.st_ino && s2.st_ino == sp.st_ino && sp.st_nlink == 3);
}

static void test_closure_targets(JsonWriter& facts) {
  const uint64_t dev = 0x7f0000000000ull, host = 0x7e0000100000ull;
  ClosureTargets t;
  t.add_region(1, dev + 0x1000, 0x1000);
  t.add_region(0, dev, 0x1000);  // out of order: still found
  t.add_global(0, dev + 0x10000, 64);
  t.add_host(0, host, 4096);
  t.add_handle(0, 3);
  TargetHit h = t.find(dev + 0x1010);
  CHECK(h.kind == TargetHit::kRegion && h.index == 1 && h.offset == 0x10);
  CHECK(t.find(dev).kind == TargetHit::kRegion && t.find(dev).index == 0);
  CHECK(t.find(dev + 0x2000).kind == TargetHit::kNone);  // one past the end of region 1
  CHECK(t.find(dev + 0x10020).kind == TargetHit::kGlobal);
  h = t.find(host + 8);
  CHECK(h.kind == TargetHit::kHost && h.index == 0 && h.offset == 8);
  CHECK(t.find(3).kind == TargetHit::kHandle);
  CHECK(!ClosureTargets::looks_like_address(1u << 24) && ClosureTargets::looks_like_address(dev));
  CHECK(!ClosureTargets::looks_like_address(0x3f8000003f800000ull));  // two packed 1.0f

  const HostMappings maps = HostMappings::parse(
      "7e0000000000-7e0000200000 rw-p 00000000 00:00 0 \n"
      "7f0000000000-7f1000000000 ---p 00000000 00:00 0 \n"
      "garbage line\n"
      "555555554000-555555556000 r-xp 00000000 08:01 42 /usr/bin/app\n");
  CHECK(maps.size() == 3);
  CHECK(maps.find(0x555555555000ull) && maps.find(0x555555555000ull)->path == "/usr/bin/app");
  CHECK(!maps.find(0x600000000000ull));
  // Captured targets are never named; host memory the capture lacks always is; a device
  // address in the driver's reservation inside a struct only when 256-byte aligned.
  CHECK(t.unresolved_reason(host + 8, false, maps).empty());
  const std::string pageable = t.unresolved_reason(0x7e0000000040ull, true, maps);
  CHECK(pageable.find("host memory kerncap does not capture") != std::string::npos);
  CHECK(t.unresolved_reason(dev + 0x800000, false, maps).find("no allocation kerncap tracked") != std::string::npos);
  CHECK(t.unresolved_reason(dev + 0x800004, true, maps).empty());
  CHECK(!t.unresolved_reason(dev + 0x800100, true, maps).empty());
  CHECK(t.unresolved_reason(0x600000000000ull, false, maps).empty());  // in no mapping: not an address
  CHECK(t.unresolved_reason(4096, false, maps).empty());
  facts.field("pageable_reason", pageable);
}

static void test_xla_autotune() {
  CHECK(XlaAutotune::is_helper("xla::gpu::RedzoneAllocatorKernelImpl<unsigned char>(unsigned char*, ...)"));
  CHECK(XlaAutotune::is_helper("xla_fp_comparison<__half>"));
  CHECK(!XlaAutotune::is_helper("gemm_fusion_dot_1"));
  const uint64_t ms = 1000 * 1000;
  XlaAutotune x(50 * ms);
  CHECK(!x.skip_target(1000 * ms) && x.note(false).empty());  // no helper yet: counted
  CHECK(x.note(true).find("not seen") != std::string::npos);
  x.on_helper(1000 * ms);
  CHECK(x.skip_target(1010 * ms) && x.skip_target(1050 * ms));
  CHECK(!x.skip_target(1051 * ms));  // past the window: a real launch
  CHECK(x.helpers() == 1 && x.skipped() == 2);
  CHECK(x.note(true).find("2 launch(es) of the target within 50 ms") != std::string::npos);
  XlaAutotune off(0);
  off.on_helper(1);
  CHECK(!off.skip_target(2) && off.note(true).find("turned off") != std::string::npos);
}

// The sampled profile's totals: the Hajek estimate, and a sample that read another
// context's time slice (issue 31: 1.49 ms around a ~21 us kernel) left out, while a
// kernel's own spread, however wide below a millisecond, is kept.
static void test_sample_stats() {
  SampleStats s;
  for (int i = 0; i < 19; ++i) s.add(21'000 + 100 * (i % 3), 1.0);
  s.add(1'494'000, 1.0);  // the preempted sample
  SampleStats::Kept k = s.kept();
  CHECK(k.timed == 19 && k.preempted == 1);
  CHECK(s.total(20) > 20 * 21'000.0 && s.total(20) < 20 * 21'300.0);
  CHECK(s.max_ns == 1'494'000 && s.min_ns == 21'000 && s.timed == 20);

  SampleStats wide;  // 0.18-0.9 ms: the spread of a real kernel, under 1 ms over the mean
  for (double t : {180'000.0, 250'000.0, 900'000.0, 260'000.0, 270'000.0}) wide.add(t, 2.0);
  CHECK(wide.kept().preempted == 0 && wide.kept().timed == 5);
  CHECK(wide.total(10) > 3'719'999.0 && wide.total(10) < 3'720'001.0);

  SampleStats few;  // two samples: nothing to compare a large one with
  few.add(10'000, 1.0);
  few.add(5'000'000, 1.0);
  CHECK(few.kept().preempted == 0);

  SampleStats many;  // at most kTop left out, largest first; merging keeps the largest
  for (int i = 0; i < 40; ++i) many.add(50'000, 1.0);
  SampleStats slices;
  for (int i = 0; i < 6; ++i) slices.add(2'000'000 + 1000 * i, 1.0);
  many.merge(slices);
  CHECK(many.timed == 46 && many.n_top == SampleStats::kTop && many.top_t[0] == 2'005'000);
  k = many.kept();
  CHECK(k.preempted == uint64_t(SampleStats::kTop) && k.timed == 46 - SampleStats::kTop);
  CHECK(many.total_variance(46) > 0);
}

// The host formula against a word-by-word evaluation of chunk_fingerprint.cu's mixing.
static void test_zero_fingerprint(JsonWriter& facts) {
  auto direct = [](uint64_t bytes) {
    auto fmix = [](uint64_t k) {
      k ^= k >> 33; k *= 0xff51afd7ed558ccdULL; k ^= k >> 33; k *= 0xc4ceb9fe1a85ec53ULL; k ^= k >> 33;
      return k;
    };
    uint64_t a = 0, b = 0, words = bytes >> 3;
    auto mix = [&](uint64_t w, uint64_t i) {
      a += fmix(w ^ (i * 0x9e3779b97f4a7c15ULL + 0x632be59bd9b4e019ULL));
      b += fmix(((w << 29) | (w >> 35)) ^ (i * 0xd6e8feb86659fd93ULL + 0xa0761d6478bd642fULL));
    };
    for (uint64_t i = 0; i < words; ++i) mix(0, i);
    if (bytes & 7) mix(uint64_t(bytes & 7) << 56, words);
    return Fingerprint{a, b};
  };
  for (uint64_t n : {0ull, 7ull, 8ull, 4096ull, 4101ull, 1ull << 20, 4ull << 20})
    CHECK(zero_fingerprint(n) == direct(n));
  CHECK(!(zero_fingerprint(4096) == zero_fingerprint(4104)));
  char buf[64];
  std::snprintf(buf, sizeof buf, "%016llx%016llx", (unsigned long long)zero_fingerprint(4 << 20).a,
                (unsigned long long)zero_fingerprint(4 << 20).b);
  facts.field("zero_fingerprint_4mib", std::string(buf));
}

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s a.cubin variant.cubin scratch-dir\n", argv[0]);
    return 2;
  }
  const auto a = read_file(argv[1]);
  const auto b = read_file(argv[2]);
  JsonWriter facts;
  facts.begin_object();
  try {
    test_cubin(a, facts);
    test_small_pieces();
    test_blob_store(argv[3], facts);
    test_memory_tracker();
    test_selection(a, b, facts);
    test_nvtx_ranges();
    test_job_selection();
    test_dispatch_list();
    test_blob_pool(argv[3]);
    test_closure_targets(facts);
    test_xla_autotune();
    test_zero_fingerprint(facts);
    test_sample_stats();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "unexpected exception: %s\n", e.what());
    ++failures;
  }
  facts.field("escapes", std::string("q\"b\\n\n\x01\xff\xc3\xa9"));
  facts.field("failures", failures);
  facts.end_object();
  std::printf("%s\n", facts.str().c_str());
  return failures ? 1 : 0;
}
