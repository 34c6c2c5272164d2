#include "sequence_capture.hpp"
#include "provenance_util.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <array>
#include <set>

#include "driver.hpp"
#include "func_attributes.hpp"
#include "xxh64.hpp"

extern char** environ;

#ifndef KERNCAP_TOOL_VERSION
#define KERNCAP_TOOL_VERSION "0.1.0"
#endif

namespace kc {

namespace {

double since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

std::string region_label(size_t i, const TrackedRegion& r) {
  return "region " + std::to_string(i) + " (" + r.api + " " + hex_addr(r.base) + ", " + std::to_string(r.size) +
         " bytes)";
}

// Regions of the context that can be read now (graph memory only while its pool maps it).
std::vector<TrackedRegion> readable_regions(const MemoryTracker& mem, CUcontext ctx, std::vector<std::string>& warnings) {
  std::vector<TrackedRegion> out;
  for (const TrackedRegion& r : mem.regions_for(ctx)) {
    if (!std::strcmp(r.kind, "graph")) {
      int mapped = 0;
      if (KC_CU(cuPointerGetAttribute)(&mapped, CU_POINTER_ATTRIBUTE_MAPPED, CUdeviceptr(r.base)) != CUDA_SUCCESS ||
          !mapped) {
        warnings.push_back("graph-allocated memory " + hex_addr(r.base) + " (" + std::to_string(r.size) +
                           " bytes) is not mapped and was not captured");
        continue;
      }
    }
    out.push_back(r);
  }
  return out;
}

}  // namespace

SequenceCapture::SequenceCapture(const Config& cfg, MemoryTracker& mem, ModuleRegistry& modules,
                                 std::string selection_json)
    : cfg_(cfg), mem_(mem), registry_(modules), selection_json_(std::move(selection_json)) {
  partial_ = path_join(cfg.out_dir, "capture.partial-" + std::to_string(getpid()));
  final_ = path_join(cfg.out_dir, "capture");
  budget_.limit = cfg.fault_enospc_after;
}

SequenceCapture::~SequenceCapture() = default;

void SequenceCapture::log_line(const std::string& line) { log_lines_.push_back(utc_now() + " " + line); }

void SequenceCapture::abort() {
  snap_.reset();
  remove_tree(partial_);
}

void SequenceCapture::open() {
  t_start_ = std::chrono::steady_clock::now();
  time_utc_ = utc_now();
  make_dir(partial_);
  write_file_atomic(path_join(partial_, "INCOMPLETE"), std::string("capture in progress\n"), &budget_);
  make_dir(path_join(partial_, "blobs"));
  make_dir(path_join(partial_, "cubins"));
  KC_CHECK(cuCtxGetCurrent, (&ctx_), "the thread that opened the sequence");
  if (!ctx_) throw std::runtime_error("no CUDA context is current on the thread that opened the sequence");
  KC_CHECK(cuCtxGetDevice, (&device_), "the sequence's context");
  log_line(std::string("sequence (") + seq_mode_name(cfg_.seq_mode) + ") opened on device " + std::to_string(device_));
  // Drain work already in flight, so the pre-state is what the first launch will see.
  KC_CHECK(cuCtxSynchronize, (), "the sequence's context before the pre-state snapshot");
  for (const TrackedRegion& r : readable_regions(mem_, ctx_, warnings_)) regions_.push_back(RegionState{r, {}, {}});
  host_regions_ = mem_.host_regions();
  blobs_ = std::make_unique<BlobStore>(path_join(partial_, "blobs"), &budget_);
  snap_ = std::make_unique<Snapshotter>(*blobs_);
  std::vector<SnapshotItem> items;
  for (size_t i = 0; i < regions_.size(); ++i)
    items.push_back(SnapshotItem{regions_[i].region.base, regions_[i].region.size, region_label(i, regions_[i].region)});
  std::vector<ItemSnapshot> pre = snap_->run(items);
  for (size_t i = 0; i < regions_.size(); ++i) regions_[i].pre = std::move(pre[i]);
  pre_s_ = since(t_start_);
  log_line("pre-state: " + std::to_string(regions_.size()) + " regions in " + std::to_string(pre_s_) + " s");
  opened_ = true;
  t_open_ = std::chrono::steady_clock::now();
}

size_t SequenceCapture::module_of(CUmodule mod, CUlibrary lib, const FuncInfo& fi,
                                  const std::vector<std::pair<const char*, int>>& attrs) {
  std::vector<uint32_t> ids = registry_.ids_for_module(mod);
  if (ids.empty() && lib) ids = registry_.ids_for_library(lib);
  DriverFuncAttrs da;
  for (const auto& [k, v] : attrs) {
    if (!std::strcmp(k, "num_regs")) da.num_regs = v;
    if (!std::strcmp(k, "local_size_bytes")) da.local_size_bytes = v;
  }
  CubinChoice choice = registry_.choose(fi.name, ids, da);
  if (!choice.cubin) {
    std::string why = "no cubin holding " + fi.name + " (launch " + std::to_string(launches_.size()) +
                      " of the sequence) was seen by kerncap";
    for (const std::string& f : registry_.parse_failures()) why += "; " + f;
    throw std::runtime_error(why + ". Its module was loaded before kerncap was injected or in a form the driver did "
                             "not report; run the app with CUDA_MODULE_LOADING=EAGER");
  }
  const auto key = std::make_pair(mod, choice.cubin->sha256);
  if (auto it = module_ids_.find(key); it != module_ids_.end()) return it->second;
  for (const std::string& w : choice.warnings) warnings_.push_back(fi.demangled + ": " + w);
  Module m;
  m.handle = mod;
  m.library = lib;
  m.cubin = choice.cubin;
  m.selection = choice.selection;
  m.candidates = choice.candidates;
  m.verified = choice.verified;
  const size_t id = modules_.size();
  const std::string path = path_join(partial_, "cubins/" + choice.cubin->sha256 + ".cubin");
  bool written = false;
  for (const Module& other : modules_) written = written || other.cubin->sha256 == choice.cubin->sha256;
  if (!written) write_file_atomic(path, choice.cubin->cubin.data(), choice.cubin->cubin.size(), &budget_);
  // The module's globals, snapshotted now: no launch of the window has run this module's
  // code yet, so they hold what they held when the window opened (a copy into one made
  // inside the window is a recorded step and replays onto this state: the same bytes).
  std::vector<SnapshotItem> items;
  for (const ModuleGlobal& g : choice.cubin->cubin.module_globals()) {
    CUdeviceptr ptr = 0;
    size_t bytes = 0;
    CUresult r = KC_CU(cuModuleGetGlobal)(&ptr, &bytes, mod, g.name.c_str());
    if (r != CUDA_SUCCESS && lib) r = KC_CU(cuLibraryGetGlobal)(&ptr, &bytes, lib, g.name.c_str());
    if (r != CUDA_SUCCESS || !ptr || !bytes) {
      warnings_.push_back("module global " + g.name + " of " + fi.demangled + "'s module not captured: "
                          "cuModuleGetGlobal failed: " + cu_error_string(r) + "; a replay sees its initial value");
      continue;
    }
    m.globals.push_back(globals_.size());
    GlobalVar gv;
    gv.name = g.name, gv.section = g.section, gv.address = uint64_t(ptr), gv.size = uint64_t(bytes), gv.module = id;
    globals_.push_back(std::move(gv));
    items.push_back(SnapshotItem{uint64_t(ptr), uint64_t(bytes), "module global " + g.name + " (" + g.section + ")"});
  }
  if (!items.empty()) {
    KC_CHECK(cuCtxSynchronize, (), "the sequence's context before the module globals of " + fi.demangled);
    std::vector<ItemSnapshot> pre = snap_->run(items);
    for (size_t k = 0; k < items.size(); ++k) globals_[m.globals[k]].pre = std::move(pre[k]);
  }
  log_line("module " + std::to_string(id) + ": cubin " + choice.cubin->sha256 + " (" + choice.selection + "), " +
           std::to_string(m.globals.size()) + " globals");
  modules_.push_back(std::move(m));
  module_ids_.emplace(key, id);
  return id;
}

size_t SequenceCapture::kernel_of(const LaunchDesc& d, const FuncInfo& fi) {
  if (auto it = kernel_ids_.find(&fi); it != kernel_ids_.end()) return it->second;
  Kernel k;
  k.fi = &fi;
  CUmodule mod = nullptr;
  CUlibrary lib = nullptr;
  if (fi.is_kernel) {
    k.kernel = reinterpret_cast<CUkernel>(d.f);
    ModuleCollector loaded;  // lazy loading may load the module now: pair it
    KC_CHECK(cuKernelGetFunction, (&k.fn, k.kernel), "CUkernel " + fi.name);
    KC_CHECK(cuFuncGetModule, (&mod, k.fn), "kernel " + fi.name);
    registry_.pair_module(mod, loaded.ids());
    if (KC_CU(cuKernelGetLibrary)(&lib, k.kernel) != CUDA_SUCCESS) lib = nullptr;
  } else {
    k.fn = d.f;
    KC_CHECK(cuFuncGetModule, (&mod, k.fn), "kernel " + fi.name);
  }
  for (const auto& [key, attr] : kFuncAttributes) {
    int v = 0;
    if (KC_CU(cuFuncGetAttribute)(&v, attr, k.fn) == CUDA_SUCCESS) k.attributes.emplace_back(key, v);
  }
  k.module = module_of(mod, lib, fi, k.attributes);
  k.info = modules_[k.module].cubin->cubin.kernel_info(fi.name);
  const size_t id = kernels_.size();
  kernels_.push_back(std::move(k));
  kernel_ids_.emplace(&fi, id);
  return id;
}

int SequenceCapture::stream_of(CUstream s, bool per_thread) {
  const auto handle = uint64_t(reinterpret_cast<uintptr_t>(s));
  bool blocking = true;
  if (!log_.known_stream(handle, per_thread) && SequenceLog::stream_kind(handle, per_thread) == "user") {
    unsigned flags = 0;
    if (KC_CU(cuStreamGetFlags)(s, &flags) == CUDA_SUCCESS) blocking = !(flags & CU_STREAM_NON_BLOCKING);
  }
  return log_.stream(handle, per_thread, blocking);
}

size_t SequenceCapture::add_launch(const LaunchDesc& d, const FuncInfo& fi, const std::string& nvtx_path,
                                   bool per_thread) {
  const size_t kid = kernel_of(d, fi);
  const Kernel& k = kernels_[kid];
  Launch l;
  l.kernel = kid;
  l.api = d.api;
  for (int i = 0; i < 3; ++i) l.grid[i] = d.grid[i], l.block[i] = d.block[i];
  l.shared_mem = d.shared_mem;
  l.cooperative = d.cooperative;
  if (d.attrs && d.num_attrs) l.attrs.assign(d.attrs, d.attrs + d.num_attrs);
  l.params = capture_params(d, k.kernel, &k.info, fi.name);
  l.stream = stream_of(d.stream, per_thread || d.per_thread_default);
  l.nvtx = nvtx_path;
  const size_t index = launches_.size();
  log_.launch(index, l.stream, d.api);
  launches_.push_back(std::move(l));
  return index;
}

void SequenceCapture::add_h2d(const char* api, uint64_t dst, const void* host, uint64_t bytes, int stream) {
  std::vector<ChunkHash> chunks;
  const auto* p = static_cast<const unsigned char*>(host);
  for (uint64_t off = 0; off < bytes; off += Snapshotter::kChunkSize) {
    const size_t n = size_t(std::min<uint64_t>(Snapshotter::kChunkSize, bytes - off));
    ChunkHash c;
    uint64_t h = 0;
    if (blobs_->put(p + off, n, &h)) c.stored = true, c.hash = h;
    chunks.push_back(c);
  }
  payload_bytes_ += bytes;
  log_.copy(api, "h2d", dst, 0, bytes, stream, std::move(chunks));
}

namespace {

bool per_thread_name(const char* name) {
  const size_t n = name ? std::strlen(name) : 0;
  return n > 5 && (!std::strcmp(name + n - 5, "_ptsz") || !std::strcmp(name + n - 5, "_ptds"));
}

// Host or device memory, as a unified-addressing copy sees it (an address the driver
// does not know is pageable host memory).
bool is_device(CUdeviceptr p) {
  unsigned type = 0;
  if (KC_CU(cuPointerGetAttribute)(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, p) != CUDA_SUCCESS) return false;
  return type == CU_MEMORYTYPE_DEVICE || type == CU_MEMORYTYPE_UNIFIED;
}

}  // namespace

void SequenceCapture::on_call(CUpti_CallbackId cbid, const void* params, const char* name) {
  const bool pt = per_thread_name(name);
  auto stream = [&](CUstream s) { return stream_of(s, pt); };
  const std::string step = " (step " + std::to_string(log_.steps().size()) + " of the sequence)";
  switch (cbid) {
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoD_v2:
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoD_v2_ptds: {
      auto* a = static_cast<const cuMemcpyHtoD_v2_params*>(params);  // _ptds: same layout
      add_h2d(name, a->dstDevice, a->srcHost, a->ByteCount, stream(nullptr));
      return;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoDAsync_v2:
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoDAsync_v2_ptsz: {
      auto* a = static_cast<const cuMemcpyHtoDAsync_v2_params*>(params);
      add_h2d(name, a->dstDevice, a->srcHost, a->ByteCount, stream(a->hStream));
      return;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoH_v2:
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoH_v2_ptds: {
      auto* a = static_cast<const cuMemcpyDtoH_v2_params*>(params);  // _ptds: same layout
      log_.copy(name, "d2h", uint64_t(reinterpret_cast<uintptr_t>(a->dstHost)), a->srcDevice, a->ByteCount, stream(nullptr));
      return;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoHAsync_v2:
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoHAsync_v2_ptsz: {
      auto* a = static_cast<const cuMemcpyDtoHAsync_v2_params*>(params);
      log_.copy(name, "d2h", uint64_t(reinterpret_cast<uintptr_t>(a->dstHost)), a->srcDevice, a->ByteCount, stream(a->hStream));
      return;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoD_v2:
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoD_v2_ptds: {
      auto* a = static_cast<const cuMemcpyDtoD_v2_params*>(params);
      log_.copy(name, "d2d", a->dstDevice, a->srcDevice, a->ByteCount, stream(nullptr));
      return;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoDAsync_v2:
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoDAsync_v2_ptsz: {
      auto* a = static_cast<const cuMemcpyDtoDAsync_v2_params*>(params);
      log_.copy(name, "d2d", a->dstDevice, a->srcDevice, a->ByteCount, stream(a->hStream));
      return;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpy:
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpy_ptds:
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpyAsync:
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpyAsync_ptsz: {
      const bool async = cbid == CUPTI_DRIVER_TRACE_CBID_cuMemcpyAsync || cbid == CUPTI_DRIVER_TRACE_CBID_cuMemcpyAsync_ptsz;
      auto* a = static_cast<const cuMemcpyAsync_params*>(params);  // cuMemcpy: the same without hStream
      const int st = stream(async ? a->hStream : nullptr);
      const bool dd = is_device(a->dst), sd = is_device(a->src);
      if (dd && sd) log_.copy(name, "d2d", a->dst, a->src, a->ByteCount, st);
      else if (dd) add_h2d(name, a->dst, reinterpret_cast<const void*>(uintptr_t(a->src)), a->ByteCount, st);
      else if (sd) log_.copy(name, "d2h", a->dst, a->src, a->ByteCount, st);
      else log_.note(std::string(name) + ": a host-to-host copy inside the sequence is not replayed");
      return;
    }
#define KC_SEQ_SET(id, T, field, elem, async)                                                              \
  case CUPTI_DRIVER_TRACE_CBID_##id: {                                                                     \
    auto* a = static_cast<const T*>(params);                                                               \
    log_.memset(name, a->dstDevice, uint32_t(a->field), elem, a->N, 1, 0, stream(async ? KC_SEQ_ASTREAM(a) : nullptr)); \
    return;                                                                                                \
  }
#define KC_SEQ_ASTREAM(a) (a)->hStream
#define KC_SEQ_NOSTREAM(a) nullptr
    KC_SEQ_SET(cuMemsetD8Async, cuMemsetD8Async_params, uc, 1, true)
    KC_SEQ_SET(cuMemsetD8Async_ptsz, cuMemsetD8Async_ptsz_params, uc, 1, true)
    KC_SEQ_SET(cuMemsetD16Async, cuMemsetD16Async_params, us, 2, true)
    KC_SEQ_SET(cuMemsetD16Async_ptsz, cuMemsetD16Async_ptsz_params, us, 2, true)
    KC_SEQ_SET(cuMemsetD32Async, cuMemsetD32Async_params, ui, 4, true)
    KC_SEQ_SET(cuMemsetD32Async_ptsz, cuMemsetD32Async_ptsz_params, ui, 4, true)
#undef KC_SEQ_SET
#define KC_SEQ_SET(id, T, field, elem)                                                                     \
  case CUPTI_DRIVER_TRACE_CBID_##id: {                                                                     \
    auto* a = static_cast<const T*>(params);                                                               \
    log_.memset(name, a->dstDevice, uint32_t(a->field), elem, a->N, 1, 0, stream(nullptr));              \
    return;                                                                                                \
  }
    KC_SEQ_SET(cuMemsetD8_v2, cuMemsetD8_v2_params, uc, 1)
    KC_SEQ_SET(cuMemsetD8_v2_ptds, cuMemsetD8_v2_ptds_params, uc, 1)
    KC_SEQ_SET(cuMemsetD16_v2, cuMemsetD16_v2_params, us, 2)
    KC_SEQ_SET(cuMemsetD16_v2_ptds, cuMemsetD16_v2_ptds_params, us, 2)
    KC_SEQ_SET(cuMemsetD32_v2, cuMemsetD32_v2_params, ui, 4)
    KC_SEQ_SET(cuMemsetD32_v2_ptds, cuMemsetD32_v2_ptds_params, ui, 4)
#undef KC_SEQ_SET
#define KC_SEQ_SET2D(id, T, field, elem, async)                                                            \
  case CUPTI_DRIVER_TRACE_CBID_##id: {                                                                     \
    auto* a = static_cast<const T*>(params);                                                               \
    log_.memset(name, a->dstDevice, uint32_t(a->field), elem, a->Width, a->Height, a->dstPitch,           \
                stream(async ? KC_SEQ_ASTREAM(a) : nullptr));                                              \
    return;                                                                                                \
  }
    KC_SEQ_SET2D(cuMemsetD2D8Async, cuMemsetD2D8Async_params, uc, 1, true)
    KC_SEQ_SET2D(cuMemsetD2D8Async_ptsz, cuMemsetD2D8Async_ptsz_params, uc, 1, true)
    KC_SEQ_SET2D(cuMemsetD2D16Async, cuMemsetD2D16Async_params, us, 2, true)
    KC_SEQ_SET2D(cuMemsetD2D16Async_ptsz, cuMemsetD2D16Async_ptsz_params, us, 2, true)
    KC_SEQ_SET2D(cuMemsetD2D32Async, cuMemsetD2D32Async_params, ui, 4, true)
    KC_SEQ_SET2D(cuMemsetD2D32Async_ptsz, cuMemsetD2D32Async_ptsz_params, ui, 4, true)
#undef KC_SEQ_ASTREAM
#define KC_SEQ_ASTREAM(a) nullptr
    KC_SEQ_SET2D(cuMemsetD2D8_v2, cuMemsetD2D8_v2_params, uc, 1, false)
    KC_SEQ_SET2D(cuMemsetD2D8_v2_ptds, cuMemsetD2D8_v2_ptds_params, uc, 1, false)
    KC_SEQ_SET2D(cuMemsetD2D16_v2, cuMemsetD2D16_v2_params, us, 2, false)
    KC_SEQ_SET2D(cuMemsetD2D16_v2_ptds, cuMemsetD2D16_v2_ptds_params, us, 2, false)
    KC_SEQ_SET2D(cuMemsetD2D32_v2, cuMemsetD2D32_v2_params, ui, 4, false)
    KC_SEQ_SET2D(cuMemsetD2D32_v2_ptds, cuMemsetD2D32_v2_ptds_params, ui, 4, false)
#undef KC_SEQ_SET2D
#undef KC_SEQ_ASTREAM
#undef KC_SEQ_NOSTREAM
    case CUPTI_DRIVER_TRACE_CBID_cuEventRecord:
    case CUPTI_DRIVER_TRACE_CBID_cuEventRecord_ptsz: {
      auto* a = static_cast<const cuEventRecord_params*>(params);
      log_.record(name, uint64_t(reinterpret_cast<uintptr_t>(a->hEvent)), stream(a->hStream));
      return;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuEventRecordWithFlags:
    case CUPTI_DRIVER_TRACE_CBID_cuEventRecordWithFlags_ptsz: {
      auto* a = static_cast<const cuEventRecordWithFlags_params*>(params);
      log_.record(name, uint64_t(reinterpret_cast<uintptr_t>(a->hEvent)), stream(a->hStream));
      return;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuStreamWaitEvent:
    case CUPTI_DRIVER_TRACE_CBID_cuStreamWaitEvent_ptsz: {
      auto* a = static_cast<const cuStreamWaitEvent_params*>(params);
      log_.wait(name, stream(a->hStream), uint64_t(reinterpret_cast<uintptr_t>(a->hEvent)));
      return;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuStreamSynchronize:
    case CUPTI_DRIVER_TRACE_CBID_cuStreamSynchronize_ptsz:
      log_.sync_stream(name, stream(static_cast<const cuStreamSynchronize_params*>(params)->hStream));
      return;
    case CUPTI_DRIVER_TRACE_CBID_cuEventSynchronize:
      log_.sync_event(name, uint64_t(reinterpret_cast<uintptr_t>(static_cast<const cuEventSynchronize_params*>(params)->hEvent)));
      return;
    case CUPTI_DRIVER_TRACE_CBID_cuCtxSynchronize:
    case CUPTI_DRIVER_TRACE_CBID_cuCtxSynchronize_v2:
      log_.sync_context(name);
      return;
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchHostFunc:
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchHostFunc_ptsz:
      log_.note(std::string(name) + step + ": a host function inside the sequence is not replayed");
      return;
    case CUPTI_DRIVER_TRACE_CBID_cuMemPrefetchAsync_v2:
    case CUPTI_DRIVER_TRACE_CBID_cuMemPrefetchAsync_v2_ptsz:
      log_.note(std::string(name) + step + ": a prefetch hint inside the sequence is not replayed");
      return;
    default:
      log_.refuse(std::string(name) + step + " is a memory or stream operation kerncap does not record in a "
                  "sequence (it records 1-D copies, fills, event records and waits, synchronizations)");
      return;
  }
}

std::string SequenceCapture::close() {
  window_s_ = since(t_open_);
  if (!log_.refusal().empty()) throw std::runtime_error(log_.refusal());
  if (launches_.empty())
    throw std::runtime_error("the sequence holds no kernel launch (" + std::to_string(log_.steps().size()) +
                             " other step(s)): nothing to replay");
  const auto t_post = std::chrono::steady_clock::now();
  KC_CHECK(cuCtxSynchronize, (), "the sequence's context after its last launch (did a kernel of it fault?)");
  // Regions now: kept (post snapshot), freed inside the window (pre only), allocated
  // inside it (post only; its pre-state is zeros, since the app never wrote it before).
  std::vector<TrackedRegion> now = readable_regions(mem_, ctx_, warnings_);
  std::vector<RegionState> merged;
  std::set<uint64_t> kept;
  for (const TrackedRegion& r : now) {
    auto same = std::find_if(regions_.begin(), regions_.end(), [&](const RegionState& s) {
      return s.region.base == r.base && s.region.size == r.size;
    });
    if (same != regions_.end()) {
      kept.insert(r.base);
      continue;
    }
    for (const RegionState& s : regions_)
      if (r.base < s.region.end() && s.region.base < r.end())
        throw std::runtime_error("memory " + hex_addr(s.region.base) + " (" + std::to_string(s.region.size) +
                                 " bytes) was freed and reused as " + hex_addr(r.base) + " (" +
                                 std::to_string(r.size) + " bytes) inside the sequence; kerncap cannot replay "
                                 "memory that changes shape inside the window");
    merged.push_back(RegionState{r, {}, {}});
  }
  for (RegionState& s : regions_) {
    if (!kept.count(s.region.base))
      warnings_.push_back("region " + hex_addr(s.region.base) + " (" + std::to_string(s.region.size) +
                          " bytes) was freed inside the sequence: its final state is not compared");
    merged.push_back(std::move(s));
  }
  std::sort(merged.begin(), merged.end(), [](const RegionState& a, const RegionState& b) { return a.region.base < b.region.base; });
  regions_ = std::move(merged);
  std::vector<SnapshotItem> items;
  std::vector<size_t> which;
  for (size_t i = 0; i < regions_.size(); ++i) {
    const bool freed = regions_[i].pre && !kept.count(regions_[i].region.base);
    if (freed) continue;
    items.push_back(SnapshotItem{regions_[i].region.base, regions_[i].region.size, region_label(i, regions_[i].region)});
    which.push_back(i);
  }
  for (const GlobalVar& g : globals_)
    items.push_back(SnapshotItem{g.address, g.size, "module global " + g.name + " (" + g.section + ")"});
  std::vector<ItemSnapshot> post = snap_->run(items);
  for (size_t k = 0; k < which.size(); ++k) regions_[which[k]].post = std::move(post[k]);
  for (size_t j = 0; j < globals_.size(); ++j) globals_[j].post = std::move(post[which.size() + j]);
  post_s_ = since(t_post);
  log_line("post-state in " + std::to_string(post_s_) + " s; " + std::to_string(launches_.size()) + " launches, " +
           std::to_string(log_.steps().size()) + " steps, " + std::to_string(kernels_.size()) + " kernels, " +
           std::to_string(modules_.size()) + " modules");
  const double total = since(t_start_);
  snap_.reset();
  std::string log_text;
  log_line("capture complete: " + final_);
  for (const std::string& l : log_lines_) log_text += l + "\n";
  write_file_atomic(path_join(partial_, "interposer.log"), log_text, &budget_);
  write_file_atomic(path_join(partial_, "sequence.json"), sequence_json(), &budget_);
  write_file_atomic(path_join(partial_, "manifest.json"), manifest_json(total), &budget_);
  if (::unlink(path_join(partial_, "INCOMPLETE").c_str()) != 0)
    throw IoError("cannot remove", path_join(partial_, "INCOMPLETE"), errno);
  if (::rename(partial_.c_str(), final_.c_str()) != 0) throw IoError("cannot rename " + partial_ + " to", final_, errno);
  return final_;
}

// ---------------------------------------------------------------------------------
// Writing

int SequenceCapture::region_of(uint64_t address) const {
  auto it = std::upper_bound(regions_.begin(), regions_.end(), address,
                             [](uint64_t a, const RegionState& r) { return a < r.region.base; });
  if (it == regions_.begin()) return -1;
  --it;
  return address < it->region.end() ? int(it - regions_.begin()) : -1;
}

void SequenceCapture::write_params(JsonWriter& w, const ParamCapture& pc) const {
  const auto& buf = pc.buffer;
  w.key("params").begin_array();
  for (const ParamSlot& p : pc.params) {
    w.begin_object().field("index", p.index).field("offset", p.offset).field("size", p.size);
    const bool in_buffer = p.offset + p.size <= buf.size();
    w.field("value", in_buffer ? to_hex(buf.data() + p.offset, p.size) : std::string());
    if (in_buffer && p.size >= 8) {  // annotation only: aligned 8-byte values that point into a region
      std::vector<std::array<uint64_t, 3>> hits;
      for (uint64_t at = (8 - p.offset % 8) % 8; at + 8 <= p.size; at += 8) {
        uint64_t v;
        std::memcpy(&v, buf.data() + p.offset + at, 8);
        const int r = region_of(v);
        if (r >= 0) hits.push_back({at, uint64_t(r), v - regions_[size_t(r)].region.base});
      }
      if (p.size == 8 && hits.size() == 1) {
        w.key("pointer").begin_object().field("region", hits[0][1]).field("offset", hits[0][2]).end_object();
      } else if (!hits.empty()) {
        w.key("pointers").begin_array();
        for (const auto& h : hits)
          w.begin_object().field("at", h[0]).field("region", h[1]).field("offset", h[2]).end_object();
        w.end_array();
      }
    }
    w.end_object();
  }
  w.end_array();
  w.field("param_buffer", to_hex(buf.data(), buf.size()));
}

void SequenceCapture::write_launch(JsonWriter& w, const Launch& l, bool manifest) const {
  w.key("grid").begin_array().value(l.grid[0]).value(l.grid[1]).value(l.grid[2]).end_array();
  w.key("block").begin_array().value(l.block[0]).value(l.block[1]).value(l.block[2]).end_array();
  w.field("shared_mem_bytes", l.shared_mem);
  const SeqStream& st = log_.streams()[size_t(l.stream)];
  w.field("stream", st.kind);
  (void)manifest;
  w.field("cooperative", l.cooperative);
  w.key("attributes").begin_array();
  for (const CUlaunchAttribute& a : l.attrs)
    w.begin_object().field("id", int(a.id)).field("value", to_hex(&a.value, sizeof a.value)).end_object();
  w.end_array();
  w.field("param_form", l.params.form);
}

void SequenceCapture::write_kernel(JsonWriter& w, const Kernel& k) const {
  w.field("name", k.fi->name).field("demangled", k.fi->demangled);
  w.field("handle_kind", k.fi->is_kernel ? "CUkernel" : "CUfunction");
  w.key("attributes").begin_object();
  for (const auto& [key, v] : k.attributes) w.field(key, v);
  w.end_object();
}

std::string SequenceCapture::sequence_json() const {
  JsonWriter w;
  w.begin_object().field("format", "kerncap-sequence").field("format_version", 1);
  w.field("mode", seq_mode_name(cfg_.seq_mode));
  w.key("selection").raw(selection_json_.empty() ? std::string("{}") : selection_json_);
  if (!graph_json_.empty()) w.key("graph").raw(graph_json_);
  w.field("device", int(device_));
  w.key("modules").begin_array();
  for (size_t i = 0; i < modules_.size(); ++i) {
    const Module& m = modules_[i];
    w.begin_object().field("id", int(i)).field("cubin", "cubins/" + m.cubin->sha256 + ".cubin");
    w.field("sha256", m.cubin->sha256).field("selection", m.selection).field("candidates", m.candidates);
    w.key("globals").begin_array();
    for (size_t g : m.globals) w.value(uint64_t(g));
    w.end_array();
    w.end_object();
  }
  w.end_array();
  w.key("kernels").begin_array();
  for (size_t i = 0; i < kernels_.size(); ++i) {
    w.begin_object().field("id", int(i)).field("module", uint64_t(kernels_[i].module));
    write_kernel(w, kernels_[i]);
    w.end_object();
  }
  w.end_array();
  w.key("launches").begin_array();
  for (size_t i = 0; i < launches_.size(); ++i) {
    const Launch& l = launches_[i];
    w.begin_object().field("index", uint64_t(i)).field("kernel", uint64_t(l.kernel)).field("launch_api", l.api);
    w.field("stream_id", l.stream);
    write_launch(w, l, false);
    if (!l.nvtx.empty()) w.field("nvtx", l.nvtx);
    write_params(w, l.params);
    w.end_object();
  }
  w.end_array();
  log_.write_json(w);
  w.key("notes").begin_array();
  for (const std::string& n : log_.notes()) w.value(n);
  w.end_array();
  w.key("seconds").begin_object().field("pre", pre_s_).field("window", window_s_).field("post", post_s_).end_object();
  w.field("payload_bytes", payload_bytes_);
  w.end_object();
  return w.str();
}

void SequenceCapture::write_provenance(JsonWriter& w, double total_s) const {
  w.key("provenance").begin_object();
  w.field("tool_version", KERNCAP_TOOL_VERSION);
  std::vector<std::string> cmd;
  if (cfg_.command_json.empty() || !parse_json_string_list(cfg_.command_json, cmd)) cmd = process_cmdline();
  w.key("command").begin_array();
  for (const std::string& a : cmd) w.value(a);
  w.end_array();
  char cwd[4096];
  w.field("cwd", getcwd(cwd, sizeof cwd) ? std::string(cwd) : std::string());
  std::vector<std::string> env_kv;
  for (char** e = environ; e && *e; ++e) {
    const std::string kv(*e);
    const size_t eq = kv.find('=');
    if (eq != std::string::npos && kept_env(kv.substr(0, eq))) env_kv.push_back(kv);
  }
  std::sort(env_kv.begin(), env_kv.end());
  w.key("env").begin_object();
  for (const std::string& kv : env_kv) w.field(kv.substr(0, kv.find('=')), kv.substr(kv.find('=') + 1));
  w.end_object();
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  w.field("host", std::string(host)).field("pid", int(getpid())).field("time", time_utc_);
  char name[256] = {0};
  int major = 0, minor = 0, driver = 0;
  KC_CU(cuDeviceGetName)(name, sizeof name - 1, device_);
  KC_CU(cuDeviceGetAttribute)(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device_);
  KC_CU(cuDeviceGetAttribute)(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device_);
  KC_CU(cuDriverGetVersion)(&driver);
  CUuuid uuid{};
  std::string uuid_s;
  if (KC_CU(cuDeviceGetUuid)(&uuid, device_) == CUDA_SUCCESS) {
    const std::string h = to_hex(uuid.bytes, sizeof uuid.bytes);
    uuid_s = "GPU-" + h.substr(0, 8) + "-" + h.substr(8, 4) + "-" + h.substr(12, 4) + "-" + h.substr(16, 4) + "-" +
             h.substr(20);
  }
  w.key("gpu").begin_object().field("name", std::string(name));
  w.key("cc").begin_array().value(major).value(minor).end_array();
  w.field("uuid", uuid_s).field("driver_version", driver).field("ordinal", int(device_)).end_object();
  w.field("dispatch_index", cfg_.dispatch);
  if (!interception_.empty()) w.field("interception", interception_);
  if (job_) {
    w.key("job").begin_object().field("rank", job_->rank).field("rank_var", job_->rank_var);
    w.field("world_size", job_->world_size).field("local_rank", job_->local_rank).end_object();
  }
  w.key("match").begin_object().field("pattern", cfg_.kernel).field("mode", match_mode_name(cfg_.match)).end_object();
  w.key("capture_seconds").begin_object().field("pre", pre_s_).field("post", post_s_).field("total", total_s);
  w.field("window", window_s_).end_object();
  uint64_t logical = 0;
  for (const RegionState& r : regions_) logical += r.region.size;
  w.key("bytes").begin_object().field("logical", logical).field("snapshotted", uint64_t(0)).field("unchanged", uint64_t(0));
  w.field("stored", blobs_ ? blobs_->stored_bytes() : 0).end_object();
  w.end_object();
}

std::string SequenceCapture::manifest_json(double total_s) const {
  const Launch& first = launches_.front();
  const Kernel& k = kernels_[first.kernel];
  const Module& m = modules_[k.module];
  JsonWriter w;
  w.begin_object();
  w.field("format", "kerncap-capture").field("format_version", 1).field("complete", true);
  w.field("chunk_size", uint64_t(Snapshotter::kChunkSize)).field("hash", "xxh64");
  write_provenance(w, total_s);
  // The first launch as the kernel and launch of the manifest: a reader of one dispatch
  // opens the capture; the engine replays it as the sequence (sequence.json).
  w.key("kernel").begin_object();
  write_kernel(w, k);
  w.field("launch_api", first.api);
  w.key("module").begin_object().field("cubin", "cubins/" + m.cubin->sha256 + ".cubin").field("sha256", m.cubin->sha256);
  w.field("selection", m.selection).field("candidates", m.candidates);
  w.key("verified").begin_object();
  for (const auto& [name, ok] : m.verified) w.field(name, ok);
  w.end_object().end_object().end_object();
  w.key("launch").begin_object();
  write_launch(w, first, true);
  w.end_object();
  write_params(w, first.params);
  w.key("regions").begin_array();
  for (size_t i = 0; i < regions_.size(); ++i) {
    const RegionState& r = regions_[i];
    const size_t n = size_t((r.region.size + Snapshotter::kChunkSize - 1) / Snapshotter::kChunkSize);
    const std::vector<ChunkHash> zeros(n);
    const std::vector<ChunkHash>& pre = r.pre ? r.pre->chunks : zeros;
    const std::vector<ChunkHash>& post = r.post ? r.post->chunks : pre;
    w.begin_object().field("id", int(i)).field("base", r.region.base).field("size", r.region.size);
    w.field("api", r.region.api).field("kind", r.region.kind).field("written", pre != post);
    w.field("zero_fraction", r.pre && r.region.size ? double(r.pre->zero_bytes) / double(r.region.size) : 1.0);
    if (!r.pre) w.field("sequence_state", "allocated");
    else if (!r.post) w.field("sequence_state", "freed");
    if (r.region.reserve_base)
      w.key("reservation").begin_object().field("base", r.region.reserve_base).field("size", r.region.reserve_size).end_object();
    w.key("pre");
    write_hashes(w, pre);
    w.key("post");
    write_hashes(w, post);
    w.end_object();
  }
  w.end_array();
  w.key("host_regions").begin_array();
  for (const HostRegion& h : host_regions_)
    w.begin_object().field("base", h.base).field("size", h.size).field("api", h.api).end_object();
  w.end_array();
  w.key("globals").begin_array();
  for (const GlobalVar& g : globals_) {
    w.begin_object().field("name", g.name).field("section", g.section).field("size", g.size);
    w.field("address", g.address).field("written", g.pre.chunks != g.post.chunks).field("module", uint64_t(g.module));
    w.key("pre");
    write_hashes(w, g.pre.chunks);
    w.key("post");
    write_hashes(w, g.post.chunks);
    w.end_object();
  }
  w.end_array();
  w.key("sequence").begin_object().field("file", "sequence.json").field("mode", seq_mode_name(cfg_.seq_mode));
  w.field("launches", uint64_t(launches_.size())).field("steps", uint64_t(log_.steps().size()));
  w.field("kernels", uint64_t(kernels_.size())).field("modules", uint64_t(modules_.size())).end_object();
  w.key("warnings").begin_array();
  for (const std::string& s : warnings_) w.value(s);
  w.end_array();
  w.key("triton").null();
  w.end_object();
  return w.str();
}

}  // namespace kc
