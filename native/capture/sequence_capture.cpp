#include "sequence_capture.hpp"
#include "captured_state.hpp"
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

namespace kc {

namespace {

double since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
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
  snapshot_pre();
  pre_s_ = since(t_start_);
  log_line("pre-state: " + std::to_string(regions_.size()) + " regions, " + std::to_string(hosts_.size()) +
           " host regions in " + std::to_string(pre_s_) + " s");
  opened_ = true;
  t_open_ = std::chrono::steady_clock::now();
}

// The state as the window opens: every readable region, the host regions the device can
// reach, and the arrays the live texture/surface objects reach, as one dispatch's pre-state.
void SequenceCapture::snapshot_pre() {
  open_regions_ = readable_regions(mem_, ctx_, "when the sequence opened", warnings_);
  for (std::string& w : alias_warnings(open_regions_)) warnings_.push_back(std::move(w));
  for (const TrackedRegion& r : open_regions_) regions_.push_back(RegionState{r, {}, {}});
  for (HostItem& h : find_host_items(mem_, warnings_)) hosts_.push_back(HostState{std::move(h), {}, {}});
  blobs_ = std::make_unique<BlobStore>(path_join(partial_, "blobs"), &budget_);
  snap_ = std::make_unique<Snapshotter>(*blobs_);
  std::vector<SnapshotItem> items;
  for (size_t i = 0; i < open_regions_.size(); ++i) items.push_back(region_item(i, open_regions_[i]));
  for (size_t h = 0; h < hosts_.size(); ++h)
    if (hosts_[h].item.snapshot) items.push_back(host_item(h, hosts_[h].item));
  std::vector<ItemSnapshot> pre = snap_->run(items);
  size_t k = 0;
  for (RegionState& r : regions_) r.pre = std::move(pre[k++]);
  for (HostState& h : hosts_)
    if (h.item.snapshot) h.pre = std::move(pre[k++]);
  if (array_tracker_) {
    arrays_ = std::make_unique<ArrayCapture>(array_tracker_->state(ctx_));
    arrays_->prepare_objects(open_regions_);
    arrays_->snapshot(*blobs_, false);
  }
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
    gv.global = CapturedGlobal{g.name, g.section, uint64_t(ptr), uint64_t(bytes), long(id)};
    items.push_back(global_item(gv.global));
    globals_.push_back(std::move(gv));
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
  if (arrays_) check_launch_handles(l, k, index);
  log_.launch(index, l.stream, d.api);
  launches_.push_back(std::move(l));
  return index;
}

// Which parameters hold a live object's handle, as for one dispatch; the first launch of
// each kernel also has the memory its pointers reach scanned for tables of handles
// (after a drain: the scan reads device memory the window's earlier launches may write).
void SequenceCapture::check_launch_handles(Launch& l, const Kernel& k, size_t index) {
  const Cubin& cubin = modules_[k.module].cubin->cubin;
  l.handles = arrays_->match(l.params, k.fi->name, k.fi->demangled, cubin, "launch " + std::to_string(index) + ": ");
  if (arrays_->empty() || !scanned_kernels_.insert(l.kernel).second) return;
  KC_CHECK(cuCtxSynchronize, (), "the sequence's context before scanning launch " + std::to_string(index) +
                                     "'s memory for texture handles");
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  std::vector<std::string> names;
  for (size_t g : modules_[k.module].globals) {
    ranges.emplace_back(globals_[g].global.address, globals_[g].global.size);
    names.push_back(globals_[g].global.name);
  }
  arrays_->scan_for_tables(l.handles, l.params, ranges, names);
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

// An enqueueing or synchronizing call of the owner inside the window (not a launch): a
// copy, a fill, or an ordering call (event, synchronization); anything else refused.
void SequenceCapture::on_call(CUpti_CallbackId cbid, const void* params, const char* name) {
  if (on_copy(cbid, params, name) || on_fill(cbid, params, name)) return;
  on_order(cbid, params, name);
}

// 1-D copies; a host-to-device copy keeps the host bytes. False: not a copy.
bool SequenceCapture::on_copy(CUpti_CallbackId cbid, const void* params, const char* name) {
  const bool pt = per_thread_name(name);
  auto stream = [&](CUstream s) { return stream_of(s, pt); };
  switch (cbid) {
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoD_v2:
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoD_v2_ptds: {
      auto* a = static_cast<const cuMemcpyHtoD_v2_params*>(params);  // _ptds: same layout
      add_h2d(name, a->dstDevice, a->srcHost, a->ByteCount, stream(nullptr));
      return true;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoDAsync_v2:
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoDAsync_v2_ptsz: {
      auto* a = static_cast<const cuMemcpyHtoDAsync_v2_params*>(params);
      add_h2d(name, a->dstDevice, a->srcHost, a->ByteCount, stream(a->hStream));
      return true;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoH_v2:
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoH_v2_ptds: {
      auto* a = static_cast<const cuMemcpyDtoH_v2_params*>(params);  // _ptds: same layout
      log_.copy(name, "d2h", uint64_t(reinterpret_cast<uintptr_t>(a->dstHost)), a->srcDevice, a->ByteCount, stream(nullptr));
      return true;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoHAsync_v2:
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoHAsync_v2_ptsz: {
      auto* a = static_cast<const cuMemcpyDtoHAsync_v2_params*>(params);
      log_.copy(name, "d2h", uint64_t(reinterpret_cast<uintptr_t>(a->dstHost)), a->srcDevice, a->ByteCount, stream(a->hStream));
      return true;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoD_v2:
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoD_v2_ptds: {
      auto* a = static_cast<const cuMemcpyDtoD_v2_params*>(params);
      log_.copy(name, "d2d", a->dstDevice, a->srcDevice, a->ByteCount, stream(nullptr));
      return true;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoDAsync_v2:
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoDAsync_v2_ptsz: {
      auto* a = static_cast<const cuMemcpyDtoDAsync_v2_params*>(params);
      log_.copy(name, "d2d", a->dstDevice, a->srcDevice, a->ByteCount, stream(a->hStream));
      return true;
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
      return true;
    }
    default:
      return false;
  }
}

// Fills (cuMemsetD8/16/32[_2D][Async]). False: not a fill.
bool SequenceCapture::on_fill(CUpti_CallbackId cbid, const void* params, const char* name) {
  const bool pt = per_thread_name(name);
  auto stream = [&](CUstream s) { return stream_of(s, pt); };
  switch (cbid) {
#define KC_SEQ_SET(id, T, field, elem, async)                                                              \
  case CUPTI_DRIVER_TRACE_CBID_##id: {                                                                     \
    auto* a = static_cast<const T*>(params);                                                               \
    log_.memset(name, a->dstDevice, uint32_t(a->field), elem, a->N, 1, 0, stream(async ? KC_SEQ_ASTREAM(a) : nullptr)); \
    return true;                                                                                           \
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
    return true;                                                                                           \
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
    return true;                                                                                           \
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
    default:
      return false;
  }
}

// Event records and waits, host synchronizations, what is noted as not replayed, and the refusal.
void SequenceCapture::on_order(CUpti_CallbackId cbid, const void* params, const char* name) {
  const bool pt = per_thread_name(name);
  auto stream = [&](CUstream s) { return stream_of(s, pt); };
  const std::string step = " (step " + std::to_string(log_.steps().size()) + " of the sequence)";
  switch (cbid) {
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

// Regions now: kept (post snapshot), freed inside the window (pre only), allocated
// inside it (post only; its pre-state is zeros, since the app never wrote it before).
// Returns the bases of the kept ones; regions_ ends sorted by base.
std::set<uint64_t> SequenceCapture::merge_regions() {
  std::vector<TrackedRegion> now = readable_regions(mem_, ctx_, "when the sequence closed", warnings_);
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
  return kept;
}

// The post-state of every region still live, every global, every host region still
// registered, and the arrays.
void SequenceCapture::snapshot_post(const std::set<uint64_t>& kept) {
  std::set<uint64_t> host_live;
  for (const HostRegion& h : mem_.host_regions()) host_live.insert(h.base);
  std::vector<SnapshotItem> items;
  std::vector<RegionState*> regions;
  std::vector<HostState*> hosts;
  for (size_t i = 0; i < regions_.size(); ++i) {
    if (regions_[i].pre && !kept.count(regions_[i].region.base)) continue;  // freed inside the window
    items.push_back(region_item(i, regions_[i].region));
    regions.push_back(&regions_[i]);
  }
  for (const GlobalVar& g : globals_) items.push_back(global_item(g.global));
  for (size_t h = 0; h < hosts_.size(); ++h) {
    if (!hosts_[h].pre) continue;
    if (!host_live.count(hosts_[h].item.region.base)) {
      warnings_.push_back("host region " + std::to_string(h) + " (" + hex_addr(hosts_[h].item.region.base) +
                          ") was freed inside the sequence: its final state is not compared");
      continue;
    }
    items.push_back(host_item(h, hosts_[h].item));
    hosts.push_back(&hosts_[h]);
  }
  std::vector<ItemSnapshot> post = snap_->run(items);
  size_t k = 0;
  for (RegionState* r : regions) r->post = std::move(post[k++]);
  for (GlobalVar& g : globals_) g.post = std::move(post[k++]);
  for (HostState* h : hosts) h->post = std::move(post[k++]);
  if (!arrays_) return;
  arrays_->snapshot(*blobs_, true);
  // Objects made inside the window are not in the capture: a launch passing one replays
  // with the app's handle, which means nothing there.
  const std::vector<uint64_t> known = arrays_->known_handles();
  for (const TrackedObject& o : array_tracker_->state(ctx_).objects)
    if (!std::binary_search(known.begin(), known.end(), o.handle))
      warnings_.push_back(std::string(o.surface ? "surface" : "texture") + " object (handle " +
                          std::to_string(o.handle) + ") was created inside the sequence: kerncap captures the "
                          "objects live when the window opens, so a launch that uses it cannot be replayed faithfully");
}

// Every launch's parameter words against what the capture holds, as for one dispatch.
void SequenceCapture::check_closure_of_launches() {
  std::vector<const TrackedRegion*> regions;
  std::vector<const CapturedGlobal*> globals;
  std::vector<const HostItem*> hosts;
  for (const RegionState& r : regions_) regions.push_back(&r.region);
  for (const GlobalVar& g : globals_) globals.push_back(&g.global);
  for (const HostState& h : hosts_) hosts.push_back(&h.item);
  targets_ = closure_targets(regions, globals, hosts, arrays_ ? arrays_->known_handles() : std::vector<uint64_t>());
  const HostMappings maps = HostMappings::of_this_process();
  closure_ = ClosureCheck();
  for (size_t i = 0; i < launches_.size(); ++i) kc::check_closure(launches_[i].params, targets_, maps, long(i), closure_);
  closure_warnings(closure_, warnings_);
}

std::string SequenceCapture::close() {
  window_s_ = since(t_open_);
  if (!log_.refusal().empty()) throw std::runtime_error(log_.refusal());
  if (launches_.empty())
    throw std::runtime_error("the sequence holds no kernel launch (" + std::to_string(log_.steps().size()) +
                             " other step(s)): nothing to replay");
  const auto t_post = std::chrono::steady_clock::now();
  KC_CHECK(cuCtxSynchronize, (), "the sequence's context after its last launch (did a kernel of it fault?)");
  snapshot_post(merge_regions());
  check_closure_of_launches();
  post_s_ = since(t_post);
  log_line("post-state in " + std::to_string(post_s_) + " s; " + std::to_string(launches_.size()) + " launches, " +
           std::to_string(log_.steps().size()) + " steps, " + std::to_string(kernels_.size()) + " kernels, " +
           std::to_string(modules_.size()) + " modules");
  const double total = since(t_start_);
  snapshotted_bytes_ = snap_->logical_bytes() + (arrays_ ? arrays_->snapshotted_bytes() : 0);
  unchanged_bytes_ = snap_->unchanged_bytes();
  zero_bytes_ = snap_->zero_bytes();
  for (const RegionState& r : regions_) logical_bytes_ += r.region.size;
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

void SequenceCapture::write_params(JsonWriter& w, const Launch& l) const {
  HandleWriter handle;
  if (arrays_) handle = [this, &l](JsonWriter& jw, uint32_t index) { arrays_->write_param(jw, l.handles, index); };
  kc::write_params(w, l.params, targets_, handle);
}

void SequenceCapture::write_launch(JsonWriter& w, const Launch& l) const {
  const SeqStream& st = log_.streams()[size_t(l.stream)];
  write_launch_config(w, l.grid, l.block, l.shared_mem, st.kind.c_str(), l.cooperative, l.attrs, l.params.form);
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
    write_launch(w, l);
    if (!l.nvtx.empty()) w.field("nvtx", l.nvtx);
    write_params(w, l);
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

Provenance SequenceCapture::provenance(double total_s) const {
  Provenance p = process_provenance(cfg_, time_utc_);
  p.gpu = gpu_identity(device_);  // informational: a failing query leaves its field empty
  p.dispatch_index = cfg_.dispatch;
  p.interception = interception_;
  p.job = job_;
  p.pre_s = pre_s_, p.post_s = post_s_, p.total_s = total_s, p.window_s = window_s_;
  p.logical = logical_bytes_, p.snapshotted = snapshotted_bytes_, p.unchanged = unchanged_bytes_;
  p.zero = zero_bytes_, p.stored = blobs_ ? blobs_->stored_bytes() : 0;
  return p;
}

// The first launch as the kernel, launch and parameters of the manifest: a reader of one
// dispatch opens the capture; the engine replays it as the sequence (sequence.json).
std::string SequenceCapture::manifest_json(double total_s) const {
  const Launch& first = launches_.front();
  ManifestView v;
  v.provenance = provenance(total_s);
  v.kernel = [this, &first](JsonWriter& w) {
    const Kernel& k = kernels_[first.kernel];
    const Module& m = modules_[k.module];
    write_kernel(w, k);
    w.field("launch_api", first.api);
    w.key("module").begin_object().field("cubin", "cubins/" + m.cubin->sha256 + ".cubin").field("sha256", m.cubin->sha256);
    w.field("selection", m.selection).field("candidates", m.candidates);
    w.key("verified").begin_object();
    for (const auto& [name, ok] : m.verified) w.field(name, ok);
    w.end_object().end_object();
  };
  v.launch = [this, &first](JsonWriter& w) { write_launch(w, first); };
  v.params = &first.params;
  v.targets = &targets_;
  if (arrays_) v.handle = [this, &first](JsonWriter& w, uint32_t index) { arrays_->write_param(w, first.handles, index); };
  for (const RegionState& r : regions_)
    v.regions.push_back(ManifestRegion{&r.region, {r.pre ? &*r.pre : nullptr, r.post ? &*r.post : nullptr}});
  for (const HostState& h : hosts_)
    v.hosts.push_back(ManifestHost{&h.item, {h.pre ? &*h.pre : nullptr, h.post ? &*h.post : (h.pre ? &*h.pre : nullptr)}});
  for (const GlobalVar& g : globals_) v.globals.push_back(ManifestGlobal{&g.global, {&g.pre, &g.post}});
  if (arrays_) v.arrays = [this](JsonWriter& w) { arrays_->write_json(w); };
  v.closure = &closure_;
  v.extra = [this](JsonWriter& w) {
    w.key("sequence").begin_object().field("file", "sequence.json").field("mode", seq_mode_name(cfg_.seq_mode));
    w.field("launches", uint64_t(launches_.size())).field("steps", uint64_t(log_.steps().size()));
    w.field("kernels", uint64_t(kernels_.size())).field("modules", uint64_t(modules_.size())).end_object();
  };
  v.warnings = warnings_;
  if (arrays_) v.warnings.insert(v.warnings.end(), arrays_->warnings().begin(), arrays_->warnings().end());
  return kc::manifest_json(v);
}

}  // namespace kc
