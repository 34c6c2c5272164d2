#include "capture_session.hpp"
#include "provenance_util.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <unordered_set>

#include "driver.hpp"
#include "func_attributes.hpp"
#include "json_writer.hpp"
#include "xxh64.hpp"

extern char** environ;

#ifndef KERNCAP_TOOL_VERSION
#define KERNCAP_TOOL_VERSION "0.1.0"
#endif

namespace kc {

namespace {

}  // namespace

CaptureSession::CaptureSession(const Config& cfg, MemoryTracker& mem, ModuleRegistry& modules,
                               const LaunchDesc& launch, const FuncInfo& func, uint64_t dispatch_index,
                               const std::string& name, const std::string& pool)
    : cfg_(cfg), mem_(mem), modules_(modules), func_(func), dispatch_index_(dispatch_index), launch_(launch),
      pool_(pool) {
  partial_ = path_join(cfg.out_dir, name + ".partial-" + std::to_string(getpid()));
  final_ = path_join(cfg.out_dir, name);
  if (launch.attrs && launch.num_attrs) attrs_.assign(launch.attrs, launch.attrs + launch.num_attrs);
  launch_.attrs = nullptr;  // the caller's array dies with the call: use attrs_
  budget_.limit = cfg.fault_enospc_after;
}

CaptureSession::~CaptureSession() = default;

void CaptureSession::log(const std::string& line) {
  log_.push_back(utc_now() + " " + line);
}

double CaptureSession::seconds_since(std::chrono::steady_clock::time_point t) const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

void CaptureSession::abort() {
  snap_.reset();
  remove_tree(partial_);
}

void CaptureSession::resolve_function() {
  const std::string& name = func_.name;
  if (func_.is_kernel) {
    kernel_ = reinterpret_cast<CUkernel>(launch_.f);
    // Under lazy loading this may load the module now: collect it and pair it.
    ModuleCollector loaded;
    KC_CHECK(cuKernelGetFunction, (&fn_, kernel_), "CUkernel " + name);
    KC_CHECK(cuFuncGetModule, (&module_, fn_), "kernel " + name);
    modules_.pair_module(module_, loaded.ids());
    if (KC_CU(cuKernelGetLibrary)(&library_, kernel_) != CUDA_SUCCESS) library_ = nullptr;
  } else {
    fn_ = launch_.f;
    KC_CHECK(cuFuncGetModule, (&module_, fn_), "kernel " + name);
  }
}

void CaptureSession::read_attributes() {
  for (const auto& [key, attr] : kFuncAttributes) {
    int v = 0;
    CUresult r = KC_CU(cuFuncGetAttribute)(&v, attr, fn_);
    if (r == CUDA_SUCCESS) attributes_.emplace_back(key, v);
    else log(std::string("cuFuncGetAttribute(") + key + ") on " + func_.name + " failed: " + cu_error_string(r));
  }
}

void CaptureSession::choose_cubin() {
  std::vector<uint32_t> ids = modules_.ids_for_module(module_);
  if (ids.empty() && library_) ids = modules_.ids_for_library(library_);
  DriverFuncAttrs attrs;
  for (const auto& [k, v] : attributes_) {
    if (!std::strcmp(k, "num_regs")) attrs.num_regs = v;
    if (!std::strcmp(k, "local_size_bytes")) attrs.local_size_bytes = v;
  }
  choice_ = modules_.choose(func_.name, ids, attrs);
  if (!choice_.cubin) {
    std::string why = "no cubin holding " + func_.name + " was seen by kerncap";
    for (const std::string& f : modules_.parse_failures()) why += "; " + f;
    throw std::runtime_error(why + ". Its module was loaded before kerncap was injected or in a form CUPTI did not "
                             "report; run the app with CUDA_MODULE_LOADING=EAGER");
  }
  for (const std::string& w : choice_.warnings) warnings_.push_back(w);
  log("cubin " + choice_.cubin->sha256 + " chosen by " + choice_.selection + " among " +
      std::to_string(choice_.candidates) + " candidate(s)");
  const Cubin& cb = choice_.cubin->cubin;
  write_file_atomic(path_join(partial_, "cubins/" + choice_.cubin->sha256 + ".cubin"), cb.data(), cb.size(), &budget_);
}

void CaptureSession::find_globals() {
  for (const ModuleGlobal& g : choice_.cubin->cubin.module_globals()) {
    CUdeviceptr ptr = 0;
    size_t bytes = 0;
    CUresult r = KC_CU(cuModuleGetGlobal)(&ptr, &bytes, module_, g.name.c_str());
    if (r != CUDA_SUCCESS && library_) r = KC_CU(cuLibraryGetGlobal)(&ptr, &bytes, library_, g.name.c_str());
    if (r != CUDA_SUCCESS || !ptr || !bytes) {
      warnings_.push_back("module global " + g.name + " (" + g.section + ", " + std::to_string(g.size) +
                          " bytes) not captured: cuModuleGetGlobal failed: " + cu_error_string(r) +
                          "; a replay sees its initial value");
      continue;
    }
    globals_.push_back(GlobalVar{g.name, g.section, uint64_t(ptr), uint64_t(bytes)});
  }
}

std::vector<SnapshotItem> CaptureSession::snapshot_items() const {
  std::vector<SnapshotItem> items;
  for (size_t i = 0; i < regions_.size(); ++i) {
    const TrackedRegion& r = regions_[i];
    items.push_back(SnapshotItem{r.base, r.size,
                                 "region " + std::to_string(i) + " (" + r.api + " " + hex_addr(r.base) + ", " +
                                     std::to_string(r.size) + " bytes)"});
  }
  for (const GlobalVar& g : globals_)
    items.push_back(SnapshotItem{g.address, g.size, "module global " + g.name + " (" + g.section + ")"});
  for (size_t h = 0; h < host_regions_.size(); ++h) {
    const HostItem& hi = host_regions_[h];
    if (!hi.snapshot) continue;
    items.push_back(SnapshotItem{hi.region.base, hi.region.size,
                                 "host region " + std::to_string(h) + " (" + hi.region.api + " " +
                                     hex_addr(hi.region.base) + ", " + std::to_string(hi.region.size) + " bytes)",
                                 true});
  }
  return items;
}

// Pinned memory the device can reach has a device pointer (the host pointer itself on
// every system with unified addressing and CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM).
// Registered I/O memory (CU_MEMHOSTREGISTER_IOMEMORY) is a device's registers: reading
// it can have effects, so it is recorded, never read.
void CaptureSession::find_host_regions() {
  host_regions_.clear();
  for (const HostRegion& h : mem_.host_regions()) {
    HostItem item;
    item.region = h;
    CUdeviceptr d = 0;
    CUresult r = KC_CU(cuMemHostGetDevicePointer)(&d, reinterpret_cast<void*>(uintptr_t(h.base)), 0);
    if (r != CUDA_SUCCESS || !d) {
      d = 0;
      if (KC_CU(cuPointerGetAttribute)(&d, CU_POINTER_ATTRIBUTE_DEVICE_POINTER, CUdeviceptr(h.base)) != CUDA_SUCCESS)
        d = 0;
    }
    item.device_pointer = uint64_t(d);
    const bool io = !std::strcmp(h.api, "cuMemHostRegister_v2") && (h.flags & CU_MEMHOSTREGISTER_IOMEMORY);
    if (io) item.why_not = "registered I/O memory (CU_MEMHOSTREGISTER_IOMEMORY) is never read by kerncap";
    else if (!item.device_pointer) item.why_not = "not mapped into the device's address space: no kernel can reach it";
    else if (h.size == 0) item.why_not = "empty";
    item.snapshot = item.why_not.empty();
    host_regions_.push_back(std::move(item));
  }
  for (size_t i = 0; i < host_regions_.size(); ++i) {
    const HostItem& h = host_regions_[i];
    if (h.snapshot || !h.device_pointer) continue;
    warnings_.push_back("host region " + std::to_string(i) + " (" + h.region.api + " " + hex_addr(h.region.base) +
                        ", " + std::to_string(h.region.size) + " bytes) was not captured: " + h.why_not +
                        "; a kernel that reads it faults in replay");
  }
}

void CaptureSession::build_targets() {
  targets_ = ClosureTargets();
  for (size_t i = 0; i < regions_.size(); ++i) targets_.add_region(int(i), regions_[i].base, regions_[i].size);
  for (size_t j = 0; j < globals_.size(); ++j) targets_.add_global(int(j), globals_[j].address, globals_[j].size);
  for (size_t h = 0; h < host_regions_.size(); ++h)
    if (host_regions_[h].device_pointer)
      targets_.add_host(int(h), host_regions_[h].device_pointer, host_regions_[h].region.size);
  if (arrays_) {
    int k = 0;
    for (uint64_t v : arrays_->known_handles()) targets_.add_handle(k++, v);
  }
}

// Every aligned 8-byte word of every parameter that looks like an address and points at
// nothing the capture holds (closure_targets.hpp): the manifest names each, since a
// replay cannot give the kernel what it points at.
void CaptureSession::find_unresolved() {
  unresolved_.clear();
  words_checked_ = 0;
  const auto& buf = params_.buffer;
  const HostMappings maps = HostMappings::of_this_process();
  for (const ParamSlot& p : params_.params) {
    if (p.offset + p.size > buf.size() || p.size < 8) continue;
    for (uint64_t at = (8 - p.offset % 8) % 8; at + 8 <= p.size; at += 8) {
      uint64_t v;
      std::memcpy(&v, buf.data() + p.offset + at, 8);
      ++words_checked_;
      std::string why = targets_.unresolved_reason(v, p.size > 8, maps);
      if (!why.empty()) unresolved_.push_back(Unresolved{p.index, at, v, std::move(why)});
    }
  }
  const size_t shown = std::min<size_t>(unresolved_.size(), 16);
  for (size_t k = 0; k < shown; ++k) {
    const Unresolved& u = unresolved_[k];
    warnings_.push_back("parameter " + std::to_string(u.param) + (u.at ? " word +" + std::to_string(u.at) : "") +
                        " holds " + hex_addr(u.value) + ", which points into nothing the capture holds: " + u.reason +
                        ". If the kernel dereferences it, the replay faults or reads other memory, and a write "
                        "through it is never compared");
  }
  if (unresolved_.size() > shown)
    warnings_.push_back(std::to_string(unresolved_.size() - shown) +
                        " more parameter word(s) point into nothing the capture holds (manifest closure.unresolved)");
}

void CaptureSession::prepare() {
  if (prepared_) return;
  prepared_ = true;
  t_start_ = std::chrono::steady_clock::now();
  time_utc_ = utc_now();
  make_dir(partial_);
  write_file_atomic(path_join(partial_, "INCOMPLETE"), std::string("capture in progress\n"), &budget_);
  make_dir(path_join(partial_, "blobs"));
  make_dir(path_join(partial_, "cubins"));
  log("capturing dispatch " + std::to_string(dispatch_index_) + " of " + func_.demangled + " (" + launch_.api + ")");

  KC_CHECK(cuCtxGetCurrent, (&ctx_), "the launching thread");
  KC_CHECK(cuCtxGetDevice, (&device_), "the launching thread's context");
  // Drain work already in flight, so the pre-state is what the kernel will see.
  KC_CHECK(cuCtxSynchronize, (), "the target's context before the pre-state snapshot");

  resolve_function();
  read_attributes();
  choose_cubin();
  find_globals();
  KernelInfo ki = choice_.cubin->cubin.kernel_info(func_.name);
  params_ = capture_params(launch_, kernel_, &ki, func_.name);
  if (params_.layout_source == "cubin")
    warnings_.push_back("the driver reported no parameter layout for " + func_.name + "; used the cubin's .nv.info");

  regions_.clear();
  for (const TrackedRegion& r : mem_.regions_for(ctx_)) {
    // Memory of a graph's allocation node is mapped only while the graph's pool holds it.
    if (!std::strcmp(r.kind, "graph")) {
      int mapped = 0;
      if (KC_CU(cuPointerGetAttribute)(&mapped, CU_POINTER_ATTRIBUTE_MAPPED, CUdeviceptr(r.base)) != CUDA_SUCCESS ||
          !mapped) {
        warnings_.push_back("graph-allocated memory " + hex_addr(r.base) + " (" + std::to_string(r.size) +
                            " bytes) is not mapped at the target and was not captured");
        continue;
      }
    }
    regions_.push_back(r);
  }
  for (std::string& w : alias_warnings(regions_)) warnings_.push_back(std::move(w));
  find_host_regions();
  if (array_tracker_) {
    arrays_ = std::make_unique<ArrayCapture>(array_tracker_->state(ctx_));
    arrays_->prepare(regions_, params_, func_.name, func_.demangled, choice_.cubin->cubin);
  }
  build_targets();  // after the arrays: their objects' handles are known targets
  find_unresolved();
  if (!pool_.empty()) make_dir(pool_);
  blobs_ = std::make_unique<BlobStore>(path_join(partial_, "blobs"), &budget_, pool_);
  snap_ = std::make_unique<Snapshotter>(*blobs_);
}

void CaptureSession::snapshot_baseline() {
  prepare();
  base_ = snap_->run(snapshot_items());
  log("baseline (to restore the app's memory): " + std::to_string(seconds_since(t_start_)) + " s");
}

void CaptureSession::before_launch() {
  prepare();
  KC_CHECK(cuCtxSynchronize, (), "the target's context before the pre-state snapshot");
  pre_ = snap_->run(snapshot_items());
  if (arrays_) {
    arrays_->snapshot(*blobs_, false);
    std::vector<std::pair<uint64_t, uint64_t>> ranges;
    std::vector<std::string> names;
    for (const GlobalVar& g : globals_) {
      ranges.emplace_back(g.address, g.size);
      names.push_back(g.name);
    }
    arrays_->scan_for_tables(params_, ranges, names);
  }
  pre_s_ = seconds_since(t_start_);  // from the target's entry: resolving, cubin, baseline and prefix included
  log("pre-state: " + std::to_string(regions_.size()) + " regions, " + std::to_string(globals_.size()) +
      " globals in " + std::to_string(pre_s_) + " s");
}

void CaptureSession::restore_baseline(const std::vector<ItemSnapshot>& now) {
  const std::vector<SnapshotItem> items = snapshot_items();
  std::vector<unsigned char> buf;
  for (size_t k = 0; k < items.size() && k < base_.size() && k < now.size(); ++k) {
    for (size_t c = 0; c < base_[k].chunks.size() && c < now[k].chunks.size(); ++c) {
      const ChunkHash& want = base_[k].chunks[c];
      if (want == now[k].chunks[c]) continue;
      const uint64_t off = uint64_t(c) * Snapshotter::kChunkSize;
      const size_t len = size_t(std::min<uint64_t>(Snapshotter::kChunkSize, items[k].size - off));
      const CUdeviceptr at = CUdeviceptr(items[k].base + off);
      void* host_at = reinterpret_cast<void*>(uintptr_t(items[k].base + off));
      const std::string what = items[k].label + " bytes " + hex_addr(items[k].base + off) + " (restoring the app's state)";
      if (!want.stored) {
        if (items[k].host) std::memset(host_at, 0, len);
        else KC_CHECK(cuMemsetD8, (at, 0, len), what);
      } else {
        const std::string path = path_join(blobs_->dir(), xxh64_hex(want.hash) + ".bin");
        buf.resize(len);
        read_file_exact(path, buf.data(), len);
        if (items[k].host) std::memcpy(host_at, buf.data(), len);
        else KC_CHECK(cuMemcpyHtoD, (at, buf.data(), len), what);
      }
      restored_bytes_ += len;
    }
  }
  KC_CHECK(cuCtxSynchronize, (), "the target's context after restoring the app's state");
  log("restored " + std::to_string(restored_bytes_) + " bytes of the app's state");
}

// Chunks only the baseline held (what the graph's earlier nodes overwrote) are not part
// of the capture: remove their blobs so the directory holds exactly what the manifest names.
void CaptureSession::drop_baseline_blobs() {
  std::unordered_set<uint64_t> used;
  for (const auto* snaps : {&pre_, &post_})
    for (const ItemSnapshot& it : *snaps)
      for (const ChunkHash& c : it.chunks)
        if (c.stored) used.insert(c.hash);
  for (const ItemSnapshot& it : base_)
    for (const ChunkHash& c : it.chunks)
      if (c.stored && !used.count(c.hash)) {
        const std::string path = path_join(blobs_->dir(), xxh64_hex(c.hash) + ".bin");
        if (::unlink(path.c_str()) != 0 && errno != ENOENT) throw IoError("cannot remove", path, errno);
        used.insert(c.hash);  // once
      }
}

bool CaptureSession::restore_after_failure() noexcept {
  if (base_.empty() || !snap_) return false;
  try {
    restore_baseline(snap_->run(snapshot_items()));
    return true;
  } catch (...) {
    return false;
  }
}

std::string CaptureSession::after_launch(CUresult launch_result) {
  // A kernel reading a texture whose array was freed may fault: say what the capture saw.
  const std::string note = arrays_ && !arrays_->warnings().empty() ? " (" + arrays_->warnings().front() + ")" : "";
  if (launch_result != CUDA_SUCCESS)
    throw CudaError(launch_result, std::string(launch_.api) + " of " + func_.name +
                                       " (the target launch itself) failed: " + cu_error_string(launch_result) + note);
  const auto t_post = std::chrono::steady_clock::now();
  KC_CHECK(cuCtxSynchronize, (), "the target's context after " + func_.name + " ran (did the kernel fault?)" + note);
  post_ = snap_->run(snapshot_items());
  if (arrays_) arrays_->snapshot(*blobs_, true);
  post_s_ = seconds_since(t_post);
  snapshotted_bytes_ = snap_->logical_bytes();  // pre + post, what the snapshot moved
  if (arrays_) snapshotted_bytes_ += arrays_->snapshotted_bytes();
  unchanged_bytes_ = snap_->unchanged_bytes();  // pre + post, known unchanged by fingerprint
  zero_bytes_ = snap_->zero_bytes();            // pre + post, known zero by fingerprint
  log("chunks copied: " + std::to_string(snapshotted_bytes_) + " bytes; unchanged by fingerprint, not copied: " +
      std::to_string(unchanged_bytes_) + " bytes; all zero by fingerprint, not copied: " +
      std::to_string(zero_bytes_) + " bytes" +
      (snap_->fingerprint_note().empty() ? "" : " (no fingerprints: " + snap_->fingerprint_note() + ")"));
  logical_bytes_ = 0;  // the captured address space: every region once
  for (const TrackedRegion& r : regions_) logical_bytes_ += r.size;
  log("post-state in " + std::to_string(post_s_) + " s");
  if (!base_.empty()) {
    restore_baseline(post_);
    drop_baseline_blobs();
  }
  snap_.reset();  // frees the pinned ring before the app continues

  std::string log_text;
  log("capture complete: " + final_);
  for (const std::string& l : log_) log_text += l + "\n";
  write_file_atomic(path_join(partial_, "interposer.log"), log_text, &budget_);
  write_file_atomic(path_join(partial_, "manifest.json"), manifest_json(), &budget_);
  if (::unlink(path_join(partial_, "INCOMPLETE").c_str()) != 0)
    throw IoError("cannot remove", path_join(partial_, "INCOMPLETE"), errno);
  if (::rename(partial_.c_str(), final_.c_str()) != 0) throw IoError("cannot rename " + partial_ + " to", final_, errno);
  return final_;
}

void CaptureSession::write_provenance(JsonWriter& w, double total_s) const {
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
    std::string kv(*e);
    size_t eq = kv.find('=');
    if (eq != std::string::npos && kept_env(kv.substr(0, eq))) env_kv.push_back(kv);
  }
  std::sort(env_kv.begin(), env_kv.end());
  w.key("env").begin_object();
  for (const std::string& kv : env_kv) {
    size_t eq = kv.find('=');
    w.field(kv.substr(0, eq), kv.substr(eq + 1));
  }
  w.end_object();
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  w.field("host", std::string(host)).field("pid", int(getpid())).field("time", time_utc_);

  // Informational only: a failing query leaves its field empty/zero rather than failing the capture.
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
  w.key("gpu").begin_object();
  w.field("name", std::string(name));
  w.key("cc").begin_array().value(major).value(minor).end_array();
  w.field("uuid", uuid_s).field("driver_version", driver).field("ordinal", int(device_));
  w.end_object();

  w.field("dispatch_index", dispatch_index_);
  if (!interception_.empty()) w.field("interception", interception_);
  if (job_) {
    w.key("job").begin_object().field("rank", job_->rank).field("rank_var", job_->rank_var);
    w.field("world_size", job_->world_size).field("local_rank", job_->local_rank).end_object();
  }
  if (bucket_) w.field("bucket", *bucket_);
  w.key("match").begin_object().field("pattern", cfg_.kernel).field("mode", match_mode_name(cfg_.match)).end_object();
  w.key("capture_seconds").begin_object().field("pre", pre_s_).field("post", post_s_).field("total", total_s).end_object();
  w.key("bytes").begin_object().field("logical", logical_bytes_).field("snapshotted", snapshotted_bytes_).field("unchanged", unchanged_bytes_).field("zero", zero_bytes_).field("stored", blobs_ ? blobs_->stored_bytes() : 0);
  w.end_object();
  w.end_object();
}

void CaptureSession::write_kernel(JsonWriter& w) const {
  w.key("kernel").begin_object();
  w.field("name", func_.name).field("demangled", func_.demangled);
  w.field("handle_kind", func_.is_kernel ? "CUkernel" : "CUfunction").field("launch_api", launch_.api);
  w.key("module").begin_object();
  w.field("cubin", "cubins/" + choice_.cubin->sha256 + ".cubin").field("sha256", choice_.cubin->sha256);
  w.field("selection", choice_.selection).field("candidates", choice_.candidates);
  w.key("verified").begin_object();
  for (const auto& [k, ok] : choice_.verified) w.field(k, ok);
  w.end_object();
  w.end_object();
  w.key("attributes").begin_object();
  for (const auto& [k, v] : attributes_) w.field(k, v);
  w.end_object();
  w.end_object();
}

void CaptureSession::write_launch(JsonWriter& w) const {
  w.key("launch").begin_object();
  w.key("grid").begin_array().value(launch_.grid[0]).value(launch_.grid[1]).value(launch_.grid[2]).end_array();
  w.key("block").begin_array().value(launch_.block[0]).value(launch_.block[1]).value(launch_.block[2]).end_array();
  w.field("shared_mem_bytes", launch_.shared_mem).field("stream", stream_kind(launch_));
  w.field("cooperative", launch_.cooperative);
  w.key("attributes").begin_array();
  for (const CUlaunchAttribute& a : attrs_) {
    w.begin_object().field("id", int(a.id)).field("value", to_hex(&a.value, sizeof a.value)).end_object();
  }
  w.end_array();
  w.field("param_form", params_.form);
  if (nvtx_) {
    w.key("nvtx").begin_object().field("path", nvtx_->path);
    w.key("stack").begin_array();
    for (const std::string& n : nvtx_->stack) w.value(n);
    w.end_array();
    w.key("ranges").begin_array();
    for (const std::string& n : nvtx_->ranges) w.value(n);
    w.end_array();
    w.end_object();
  }
  if (graph_) {
    const GraphOrigin& g = *graph_;
    w.key("graph").begin_object();
    w.field("exec_id", g.exec_id).field("exec_launch", g.exec_launch);
    w.field("node_index", uint64_t(g.node_index)).field("nodes", uint64_t(g.nodes));
    w.field("target_index", uint64_t(g.target_index)).field("targets", uint64_t(g.targets));
    w.key("path").begin_array();
    for (int i : g.path) w.value(i);
    w.end_array();
    w.field("built_by", g.built_by).field("updates", g.updates).field("instantiate_flags", g.instantiate_flags);
    w.field("prefix_nodes", uint64_t(g.prefix_nodes));
    w.key("skipped").begin_object();
    for (const auto& [k, n] : g.skipped) w.field(k, uint64_t(n));
    w.end_object();
    w.key("edges").begin_object();
    for (const auto& [k, n] : g.edges) w.field(k, uint64_t(n));
    w.end_object();
    w.field("restored_bytes", restored_bytes_);
    w.end_object();
  }
  w.end_object();
}

void CaptureSession::write_params(JsonWriter& w) const {
  const auto& buf = params_.buffer;
  w.key("params").begin_array();
  for (const ParamSlot& p : params_.params) {
    w.begin_object().field("index", p.index).field("offset", p.offset).field("size", p.size);
    const bool in_buffer = p.offset + p.size <= buf.size();
    w.field("value", in_buffer ? to_hex(buf.data() + p.offset, p.size) : std::string());
    // Annotation only (bytes stay as captured): 8-byte values that point into a region.
    if (in_buffer && p.size >= 8) {
      struct Hit { uint64_t at; int region; uint64_t offset; };
      std::vector<Hit> hits, host_hits;
      for (uint64_t at = (8 - p.offset % 8) % 8; at + 8 <= p.size; at += 8) {
        uint64_t v;
        std::memcpy(&v, buf.data() + p.offset + at, 8);
        const TargetHit t = targets_.find(v);
        if (t.kind == TargetHit::kRegion) hits.push_back(Hit{at, t.index, t.offset});
        else if (t.kind == TargetHit::kHost) host_hits.push_back(Hit{at, t.index, t.offset});
      }
      if (p.size == 8 && hits.size() == 1) {
        w.key("pointer").begin_object().field("region", hits[0].region).field("offset", hits[0].offset).end_object();
      } else if (!hits.empty()) {
        w.key("pointers").begin_array();
        for (const Hit& h : hits)
          w.begin_object().field("at", h.at).field("region", h.region).field("offset", h.offset).end_object();
        w.end_array();
      }
      if (!host_hits.empty()) {  // into host regions, by the device pointer the kernel was given
        w.key("host_pointers").begin_array();
        for (const Hit& h : host_hits)
          w.begin_object().field("at", h.at).field("host_region", h.region).field("offset", h.offset).end_object();
        w.end_array();
      }
    }
    if (arrays_) arrays_->write_param(w, p.index);  // a texture/surface object's handle
    w.end_object();
  }
  w.end_array();
  w.field("param_buffer", to_hex(buf.data(), buf.size()));
}

void CaptureSession::write_regions(JsonWriter& w) const {
  w.key("regions").begin_array();
  for (size_t i = 0; i < regions_.size(); ++i) {
    const TrackedRegion& r = regions_[i];
    w.begin_object().field("id", int(i)).field("base", r.base).field("size", r.size);
    w.field("api", r.api).field("kind", r.kind).field("written", pre_[i].chunks != post_[i].chunks);
    w.field("zero_fraction", r.size ? double(pre_[i].zero_bytes) / double(r.size) : 1.0);
    if (r.reserve_base)
      w.key("reservation").begin_object().field("base", r.reserve_base).field("size", r.reserve_size).end_object();
    if (r.physical)  // one physical allocation mapped here and elsewhere (memory_tracker.hpp)
      w.key("physical").begin_object().field("allocation", r.physical).field("offset", r.physical_offset).end_object();
    w.key("pre");
    write_hashes(w, pre_[i].chunks);
    w.key("post");
    write_hashes(w, post_[i].chunks);
    w.end_object();
  }
  w.end_array();
  write_host_regions(w);
  w.key("globals").begin_array();
  for (size_t j = 0; j < globals_.size(); ++j) {
    const GlobalVar& g = globals_[j];
    const size_t k = regions_.size() + j;
    w.begin_object().field("name", g.name).field("section", g.section).field("size", g.size);
    w.field("address", g.address).field("written", pre_[k].chunks != post_[k].chunks);
    w.key("pre");
    write_hashes(w, pre_[k].chunks);
    w.key("post");
    write_hashes(w, post_[k].chunks);
    w.end_object();
  }
  w.end_array();
}

std::string CaptureSession::manifest_json() const {
  const double total_s = seconds_since(t_start_);
  JsonWriter w;
  w.begin_object();
  w.field("format", "kerncap-capture").field("format_version", 1).field("complete", true);
  w.field("chunk_size", uint64_t(Snapshotter::kChunkSize)).field("hash", "xxh64");
  write_provenance(w, total_s);
  write_kernel(w);
  write_launch(w);
  write_params(w);
  write_regions(w);
  if (arrays_) arrays_->write_json(w);
  write_closure(w);
  w.key("warnings").begin_array();
  for (const std::string& s : warnings_) w.value(s);
  if (arrays_)
    for (const std::string& s : arrays_->warnings()) w.value(s);
  w.end_array();
  w.key("triton").null();
  w.end_object();
  return w.str();
}

void CaptureSession::write_host_regions(JsonWriter& w) const {
  w.key("host_regions").begin_array();
  size_t k = regions_.size() + globals_.size();  // host items follow regions and globals
  for (size_t h = 0; h < host_regions_.size(); ++h) {
    const HostItem& hi = host_regions_[h];
    const HostRegion& r = hi.region;
    w.begin_object().field("id", int(h)).field("base", r.base).field("size", r.size).field("api", r.api);
    w.field("flags", uint64_t(r.flags));
    if (hi.device_pointer) w.field("device_pointer", hi.device_pointer);
    else w.key("device_pointer").null();
    w.field("snapshotted", hi.snapshot);
    if (hi.snapshot && k < pre_.size() && k < post_.size()) {
      w.field("written", pre_[k].chunks != post_[k].chunks);
      w.field("zero_fraction", r.size ? double(pre_[k].zero_bytes) / double(r.size) : 1.0);
      w.key("pre");
      write_hashes(w, pre_[k].chunks);
      w.key("post");
      write_hashes(w, post_[k].chunks);
      ++k;
    } else {
      w.field("why_not", hi.why_not);
    }
    w.end_object();
  }
  w.end_array();
}

void CaptureSession::write_closure(JsonWriter& w) const {
  w.key("closure").begin_object().field("words_checked", words_checked_);
  w.key("unresolved").begin_array();
  for (const Unresolved& u : unresolved_)
    w.begin_object().field("param", uint64_t(u.param)).field("at", u.at).field("value", u.value)
        .field("reason", u.reason).end_object();
  w.end_array().end_object();
}

}  // namespace kc
