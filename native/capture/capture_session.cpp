#include "capture_session.hpp"
#include "captured_state.hpp"
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

namespace kc {

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
    globals_.push_back(CapturedGlobal{g.name, g.section, uint64_t(ptr), uint64_t(bytes)});
  }
}

std::vector<SnapshotItem> CaptureSession::snapshot_items() const {
  std::vector<SnapshotItem> items;
  for (size_t i = 0; i < regions_.size(); ++i) items.push_back(region_item(i, regions_[i]));
  for (const CapturedGlobal& g : globals_) items.push_back(global_item(g));
  for (size_t h = 0; h < host_regions_.size(); ++h)
    if (host_regions_[h].snapshot) items.push_back(host_item(h, host_regions_[h]));
  return items;
}

void CaptureSession::build_targets() {
  std::vector<const TrackedRegion*> regions;
  std::vector<const CapturedGlobal*> globals;
  std::vector<const HostItem*> hosts;
  for (const TrackedRegion& r : regions_) regions.push_back(&r);
  for (const CapturedGlobal& g : globals_) globals.push_back(&g);
  for (const HostItem& h : host_regions_) hosts.push_back(&h);
  targets_ = closure_targets(regions, globals, hosts, arrays_ ? arrays_->known_handles() : std::vector<uint64_t>());
}

// Every aligned 8-byte word of every parameter that looks like an address and points at
// nothing the capture holds (closure_targets.hpp): the manifest names each, since a
// replay cannot give the kernel what it points at.
void CaptureSession::find_unresolved() {
  closure_ = ClosureCheck();
  check_closure(params_, targets_, HostMappings::of_this_process(), -1, closure_);
  closure_warnings(closure_, warnings_);
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

  regions_ = readable_regions(mem_, ctx_, "at the target", warnings_);
  for (std::string& w : alias_warnings(regions_)) warnings_.push_back(std::move(w));
  host_regions_ = find_host_items(mem_, warnings_);
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
    for (const CapturedGlobal& g : globals_) {
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

Provenance CaptureSession::provenance(double total_s) const {
  Provenance p = process_provenance(cfg_, time_utc_);
  p.gpu = gpu_identity(device_);  // informational: a failing query leaves its field empty
  p.dispatch_index = dispatch_index_;
  p.interception = interception_;
  p.job = job_;
  p.bucket = bucket_;
  p.pre_s = pre_s_, p.post_s = post_s_, p.total_s = total_s;
  p.logical = logical_bytes_, p.snapshotted = snapshotted_bytes_, p.unchanged = unchanged_bytes_;
  p.zero = zero_bytes_, p.stored = blobs_ ? blobs_->stored_bytes() : 0;
  return p;
}

void CaptureSession::write_kernel(JsonWriter& w) const {
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
}

void CaptureSession::write_launch(JsonWriter& w) const {
  write_launch_config(w, launch_.grid, launch_.block, launch_.shared_mem, stream_kind(launch_), launch_.cooperative,
                      attrs_, params_.form);
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
  if (graph_) write_graph(w);
}

void CaptureSession::write_graph(JsonWriter& w) const {
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

// Snapshot items are regions, globals, then the snapshotted host regions (snapshot_items()).
std::string CaptureSession::manifest_json() const {
  ManifestView v;
  v.provenance = provenance(seconds_since(t_start_));
  v.kernel = [this](JsonWriter& w) { write_kernel(w); };
  v.launch = [this](JsonWriter& w) { write_launch(w); };
  v.params = &params_;
  v.targets = &targets_;
  if (arrays_) v.handle = [this](JsonWriter& w, uint32_t index) { arrays_->write_param(w, index); };
  size_t k = 0;
  for (const TrackedRegion& r : regions_) v.regions.push_back(ManifestRegion{&r, {&pre_[k], &post_[k]}}), ++k;
  for (const CapturedGlobal& g : globals_) v.globals.push_back(ManifestGlobal{&g, {&pre_[k], &post_[k]}}), ++k;
  for (const HostItem& h : host_regions_) {
    const bool snap = h.snapshot && k < pre_.size() && k < post_.size();
    v.hosts.push_back(ManifestHost{&h, snap ? ItemStates{&pre_[k], &post_[k]} : ItemStates{}});
    if (snap) ++k;
  }
  if (arrays_) v.arrays = [this](JsonWriter& w) { arrays_->write_json(w); };
  v.closure = &closure_;
  v.warnings = warnings_;
  if (arrays_) v.warnings.insert(v.warnings.end(), arrays_->warnings().begin(), arrays_->warnings().end());
  return kc::manifest_json(v);
}

}  // namespace kc
