// `kerncap apply` in the app's process (apply_mode.hpp, docs/apply.md).
#include "apply_mode.hpp"
#include "launch_kinds.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>

#include "driver.hpp"
#include "fsutil.hpp"
#include "json_writer.hpp"
#include "xxh64.hpp"

namespace kc {

namespace {

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

bool parse_u64(const std::string& s, uint64_t& out) {
  if (s.empty() || s.size() > 19 || s.find_first_not_of("0123456789") != std::string::npos) return false;
  out = std::stoull(s);
  return true;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, sep))
    if (!item.empty()) out.push_back(item);
  return out;
}

// The launch in flight on this thread, when its exit has work: the globals it may have
// written copied back into the app's, its outputs fingerprinted.
struct Pending {
  bool active = false;
  bool check = false;
  uint32_t correlation = 0;
  uint64_t index = 0;
  CUstream stream = nullptr;
  struct Back {
    CUdeviceptr app, variant;
    size_t size;
    std::string name;
  };
  std::vector<Back> back;
  struct Output {
    uint32_t param;
    CUdeviceptr ptr;         // the parameter's value
    int64_t via;             // >= 0: the output is the buffer the pointer at ptr + via names
    CUdeviceptr target = 0;  // that pointer, read before the launch
  };
  std::vector<Output> outputs;
  std::vector<std::pair<std::string, std::pair<CUdeviceptr, size_t>>> globals;  // the app's, compared
};
thread_local Pending tl_pending;

constexpr size_t kMaxHashed = size_t(1) << 30;  // bytes of one buffer read back at most

}  // namespace

ApplyConfig ApplyConfig::from_env(std::string& error) {
  ApplyConfig c;
  c.out_dir = env("KERNCAP_OUT");
  c.kernel = env("KERNCAP_KERNEL");
  c.variant = env("KERNCAP_APPLY_CUBIN");
  c.sha256 = env("KERNCAP_APPLY_SHA256");
  const std::string identify = env("KERNCAP_APPLY_IDENTIFY");
  c.by_name = identify == "name";
  if (!identify.empty() && identify != "name" && identify != "cubin")
    error = "KERNCAP_APPLY_IDENTIFY='" + identify + "' is neither cubin nor name";
  if (c.kernel.empty()) error = "KERNCAP_MODE=apply needs KERNCAP_KERNEL (the captured kernel's mangled name)";
  if (!c.by_name && c.sha256.empty()) error = "KERNCAP_MODE=apply needs KERNCAP_APPLY_SHA256 (the captured cubin's)";
  for (const std::string& g : split(env("KERNCAP_APPLY_GLOBALS"), ',')) {
    const size_t colon = g.rfind(':');
    uint64_t size = 0;
    if (colon == std::string::npos || !parse_u64(g.substr(colon + 1), size)) {
      error = "KERNCAP_APPLY_GLOBALS item '" + g + "' is not name:size";
      continue;
    }
    c.globals.emplace_back(g.substr(0, colon), size);
  }
  c.globals_back = split(env("KERNCAP_APPLY_GLOBALS_BACK"), ',');
  c.check_globals = split(env("KERNCAP_APPLY_CHECK_GLOBALS"), ',');
  for (const std::string& n : split(env("KERNCAP_APPLY_DISPATCH"), ',')) {
    uint64_t v = 0;
    if (!parse_u64(n, v)) error = "KERNCAP_APPLY_DISPATCH item '" + n + "' is not a launch number";
    c.dispatches.push_back(v);
  }
  std::sort(c.dispatches.begin(), c.dispatches.end());
  c.check = env("KERNCAP_APPLY_CHECK") == "1";
  const std::string outputs = env("KERNCAP_APPLY_OUTPUTS");
  if (!outputs.empty()) {
    c.outputs_given = true;
    for (const std::string& n : split(outputs, ',')) {
      const size_t at = n.find('@');
      uint64_t v = 0, via = 0;
      if (!parse_u64(n.substr(0, at), v) || v > 65535 ||
          (at != std::string::npos && (!parse_u64(n.substr(at + 1), via) || via > (uint64_t(1) << 40))))
        error = "KERNCAP_APPLY_OUTPUTS item '" + n + "' is neither a parameter index nor index@offset";
      c.outputs.push_back({uint32_t(v), at == std::string::npos ? -1 : int64_t(via)});
    }
  }
  uint64_t v = 0;
  if (const std::string s = env("KERNCAP_APPLY_DUMP_AT"); !s.empty()) {
    if (!parse_u64(s, v)) error = "KERNCAP_APPLY_DUMP_AT='" + s + "' is not a launch number";
    else c.dump_at = int64_t(v);
  }
  if (const std::string s = env("KERNCAP_APPLY_CHECK_MAX"); !s.empty()) {
    if (!parse_u64(s, v)) error = "KERNCAP_APPLY_CHECK_MAX='" + s + "' is not a number";
    else c.check_max = v;
  }
  c.profile = env("KERNCAP_APPLY_PROFILE") == "1";
  return c;
}

Applier::Applier(ApplyConfig cfg) : cfg_(std::move(cfg)) {
  if (cfg_.variant.empty()) return;
  std::ifstream in(cfg_.variant, std::ios::binary);
  if (!in) {
    refuse("variant_unreadable", "cannot read the variant cubin " + cfg_.variant + ": " + std::strerror(errno));
    return;
  }
  image_.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  if (image_.empty()) refuse("variant_unreadable", "the variant cubin " + cfg_.variant + " is empty");
}

void Applier::refuse(const std::string& kind, const std::string& message) {
  if (refused_.exchange(true)) return;  // the first reason stands
  refusal_kind_ = kind;
  refusal_ = message;
}

void Applier::forget_handles() {
  std::lock_guard<std::mutex> lock(mu_);
  handles_.clear();
  ready_.clear();
  checked_globals_.clear();
}

CUmodule Applier::variant_module(CUcontext ctx) {
  auto it = modules_.find(ctx);
  if (it != modules_.end()) return it->second;
  CUmodule m = nullptr;
  const CUresult r = KC_CU(cuModuleLoadData)(&m, image_.data());
  if (r != CUDA_SUCCESS) {
    std::string msg = "cuModuleLoadData of the variant " + cfg_.variant + " failed: " + cu_error_string(r);
    if (r == CUDA_ERROR_NO_BINARY_FOR_GPU || r == CUDA_ERROR_INVALID_IMAGE || r == CUDA_ERROR_UNSUPPORTED_PTX_VERSION)
      msg += ": it was built for another architecture (or toolkit) than this GPU's; rebuild it with the "
             "captured kernel's flags (kerncap recompile DIR)";
    refuse("variant_load", msg);
    return nullptr;
  }
  modules_[ctx] = m;
  return m;
}

// The original module's globals: the launched CUkernel's library, else its module.
Applier::Origin Applier::origin_of(const LaunchDesc& d, bool is_kernel) {
  Origin o;
  if (is_kernel) {
    if (KC_CU(cuKernelGetLibrary)(&o.library, reinterpret_cast<CUkernel>(d.f)) != CUDA_SUCCESS) o.library = nullptr;
  } else if (KC_CU(cuFuncGetModule)(&o.module, d.f) != CUDA_SUCCESS) {
    o.module = nullptr;
  }
  return o;
}

CUresult Applier::app_global(const Origin& o, const std::string& name, CUdeviceptr& ptr, size_t& size) {
  return o.library ? KC_CU(cuLibraryGetGlobal)(&ptr, &size, o.library, name.c_str())
         : o.module ? KC_CU(cuModuleGetGlobal)(&ptr, &size, o.module, name.c_str()) : CUDA_ERROR_INVALID_HANDLE;
}

// Looked up once per (launched handle, context), in both runs of --check: the app's
// copy is what the next reader sees, whichever kernel wrote it.
const std::vector<Applier::AppGlobal>& Applier::checked_globals(const LaunchDesc& d, bool is_kernel, CUcontext ctx) {
  auto it = checked_globals_.find({d.f, ctx});
  if (it != checked_globals_.end()) return it->second;
  std::vector<AppGlobal> found;
  const Origin origin = origin_of(d, is_kernel);
  for (const std::string& name : cfg_.check_globals) {
    AppGlobal g{name};
    const CUresult r = app_global(origin, name, g.ptr, g.size);
    if (r == CUDA_SUCCESS) found.push_back(g);
    else errors_.push_back("the app's global " + name + " cannot be compared (" + cu_error_string(r) + ")");
  }
  return checked_globals_.emplace(std::make_pair(d.f, ctx), std::move(found)).first->second;
}

// Checked once per (original handle, context): the variant's kernel, its parameter
// layout, the globals to mirror and their sizes.
bool Applier::prepare(const LaunchDesc& d, bool is_kernel, CUcontext ctx, Ready& out) {
  CUmodule vm = variant_module(ctx);
  if (!vm) return false;
  CUresult r = KC_CU(cuModuleGetFunction)(&out.variant, vm, cfg_.kernel.c_str());
  if (r != CUDA_SUCCESS) {
    refuse("variant_lacks_kernel", "the variant " + cfg_.variant + " has no kernel " + cfg_.kernel +
                                       " (cuModuleGetFunction: " + cu_error_string(r) +
                                       "); keep the kernel's name and extern \"C\"/template signature");
    return false;
  }
  CUkernel k = is_kernel ? reinterpret_cast<CUkernel>(d.f) : nullptr;
  out.layout = param_layout(d.f, k);
  const std::vector<ParamSlot> vl = param_layout(out.variant, nullptr);
  auto describe = [](const std::vector<ParamSlot>& l) {
    std::string s;
    for (const ParamSlot& p : l) s += (s.empty() ? "" : ", ") + std::to_string(p.offset) + "+" + std::to_string(p.size);
    return "[" + s + "]";
  };
  bool same = out.layout.size() == vl.size();
  for (size_t i = 0; same && i < vl.size(); ++i)
    same = out.layout[i].offset == vl[i].offset && out.layout[i].size == vl[i].size;
  if (!same) {
    refuse("param_layout", "the variant's " + cfg_.kernel + " takes parameters " + describe(vl) +
                               " (offset+size), the captured kernel " + describe(out.layout) +
                               " (cuFuncGetParamInfo); the launch's arguments would be misread");
    return false;
  }
  const Origin origin = origin_of(d, is_kernel);
  for (const auto& [name, size] : cfg_.globals) {
    Mirror m;
    size_t vs = 0, os = 0;
    r = KC_CU(cuModuleGetGlobal)(&m.dst, &vs, vm, name.c_str());
    if (r == CUDA_ERROR_NOT_FOUND) {
      skipped_globals_.emplace_back(name, size);
      continue;
    }
    if (r != CUDA_SUCCESS) {
      refuse("global", "cuModuleGetGlobal(" + name + ") on the variant failed: " + cu_error_string(r));
      return false;
    }
    if (vs != size) {
      refuse("global_size", "the variant's global " + name + " is " + std::to_string(vs) + " bytes, the captured "
                                "kernel's " + std::to_string(size) + "; kerncap cannot mirror it");
      return false;
    }
    r = app_global(origin, name, m.src, os);
    if (r != CUDA_SUCCESS || os != size) {
      refuse("global", "the app's global " + name + " of " + cfg_.kernel + " cannot be read (" +
                           (r != CUDA_SUCCESS ? cu_error_string(r) : "its size is " + std::to_string(os)) +
                           "), so the variant would not see its value");
      return false;
    }
    m.size = size;
    m.name = name;
    m.back = std::find(cfg_.globals_back.begin(), cfg_.globals_back.end(), name) != cfg_.globals_back.end();
    out.globals.push_back(m);
  }
  // Dynamic shared memory above the default needs the attribute the app set on its own function.
  if (d.shared_mem > 48 * 1024) {
    r = KC_CU(cuFuncSetAttribute)(out.variant, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, int(d.shared_mem));
    if (r != CUDA_SUCCESS) {
      refuse("shared_memory", "the variant cannot take the launch's " + std::to_string(d.shared_mem) +
                                  " bytes of dynamic shared memory (cuFuncSetAttribute: " + cu_error_string(r) + ")");
      return false;
    }
  }
  return true;
}

// Whether a launched handle runs the captured kernel: by name, or by its cubin's sha256.
Applier::Handle Applier::identify(const CubinSha& sha) {
  Handle h;
  if (cfg_.by_name) {
    h.target = true;
    return h;
  }
  std::string why;
  const std::string got = sha(why);
  h.target = !got.empty() && got == cfg_.sha256;
  h.why = got.empty() ? "its cubin could not be read: " + why
                      : "its cubin's sha256 is " + got.substr(0, 16) + "…, not the captured " +
                            cfg_.sha256.substr(0, 16) + "…";
  if (!h.target && unidentified_.size() < 8) unidentified_.push_back(h.why);
  return h;
}

namespace {

// An output reached through a table is the buffer the table names *before* the launch
// (the work queued on its stream done): a variant that pointed the table at a buffer of its
// own would otherwise be compared by what it wrote there, the app's buffer unlooked at.
void resolve_tables(Pending& p, std::vector<std::string>& errors) {
  bool synced = false;
  for (Pending::Output& o : p.outputs) {
    if (o.via < 0) continue;
    CUresult r = synced ? CUDA_SUCCESS : KC_CU(cuStreamSynchronize)(p.stream);
    synced = true;
    if (r == CUDA_SUCCESS) r = KC_CU(cuMemcpyDtoH)(&o.target, o.ptr + CUdeviceptr(o.via), 8);
    if (r != CUDA_SUCCESS) {
      o.target = 0;
      errors.push_back("launch " + std::to_string(p.index) + ": parameter " + std::to_string(o.param) +
                        ": reading the pointer at +" + std::to_string(o.via) + " of its buffer before the launch "
                        "failed (" + cu_error_string(r) + ")");
    }
  }
}

}  // namespace

// The app's globals into the variant's, on the launch's stream, before it.
bool Applier::mirror_globals(const Ready& ready, CUstream stream) {
  for (const Mirror& m : ready.globals) {
    const CUresult r = KC_CU(cuMemcpyDtoDAsync)(m.dst, m.src, m.size, stream);
    if (r != CUDA_SUCCESS) {
      refuse("global", "copying global " + m.name + " into the variant failed (cuMemcpyDtoDAsync: " +
                           cu_error_string(r) + ")");
      return false;
    }
  }
  return true;
}

void Applier::launch_enter(CUpti_CallbackId cbid, void* params, const LaunchDesc& d, bool is_kernel,
                           uint32_t correlation, const CubinSha& sha) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = handles_.find(d.f);
  if (it == handles_.end()) it = handles_.emplace(d.f, identify(sha)).first;
  if (!it->second.target) return;
  const uint64_t index = launches_.fetch_add(1, std::memory_order_relaxed);
  CUstream stream = d.stream;
  if (!stream && d.per_thread_default) stream = CU_STREAM_PER_THREAD;
  CUcontext ctx = nullptr;
  CUresult r = KC_CU(cuCtxGetCurrent)(&ctx);
  if (r != CUDA_SUCCESS) errors_.push_back("cuCtxGetCurrent failed: " + cu_error_string(r));
  Ready* ready = nullptr;
  auto rk = ready_.find({d.f, ctx});
  if (rk != ready_.end()) ready = &rk->second;

  const bool selected = (cfg_.dispatches.empty() ||
                         std::binary_search(cfg_.dispatches.begin(), cfg_.dispatches.end(), index)) &&
                        !(bench_held_ && bench_held_());
  if (!cfg_.variant.empty() && !selected) not_selected_.fetch_add(1, std::memory_order_relaxed);
  Pending p;
  p.correlation = correlation;
  p.index = index;
  p.stream = stream;
  if (!cfg_.variant.empty() && selected && !refused_.load()) {
    if (!ready) {
      Ready fresh;
      if (prepare(d, is_kernel, ctx, fresh)) ready = &ready_.emplace(std::make_pair(d.f, ctx), fresh).first->second;
    }
    if (ready && mirror_globals(*ready, stream)) {
      set_launch_function(cbid, params, ready->variant);
      substituted_.fetch_add(1, std::memory_order_relaxed);
      for (const Mirror& m : ready->globals)
        if (m.back) p.back.push_back({m.src, m.dst, m.size, m.name});
    }
  }
  p.check = cfg_.check && index < cfg_.check_max;
  if (cfg_.check && !p.check) fingerprints_truncated_ = true;
  p.active = p.check || !p.back.empty();
  if (!p.check) {
    tl_pending = std::move(p);
    return;
  }
  // The outputs: the parameters named (KERNCAP_APPLY_OUTPUTS), else every 8-byte
  // parameter holding a device address.
  std::vector<ParamSlot> layout = ready ? ready->layout : param_layout(d.f, is_kernel ? reinterpret_cast<CUkernel>(d.f) : nullptr);
  std::vector<unsigned char> bytes;
  if (layout.empty() || !param_bytes(d, layout, bytes)) {
    errors_.push_back("launch " + std::to_string(index) + ": the parameters of " + cfg_.kernel + " could not be read");
  } else {
    for (const ParamSlot& s : layout) {
      if (s.size != 8 || s.offset + 8 > bytes.size()) continue;
      CUdeviceptr ptr = 0;
      std::memcpy(&ptr, bytes.data() + s.offset, 8);
      if (!cfg_.outputs_given) p.outputs.push_back({s.index, ptr, -1});
      for (const ApplyConfig::Output& o : cfg_.outputs)
        if (o.param == s.index) p.outputs.push_back({s.index, ptr, o.via});
    }
  }
  for (const AppGlobal& g : checked_globals(d, is_kernel, ctx)) p.globals.push_back({g.name, {g.ptr, g.size}});
  resolve_tables(p, errors_);
  tl_pending = std::move(p);
}

void Applier::launch_exit(uint32_t correlation, CUresult result) {
  Pending& p = tl_pending;
  if (!p.active || p.correlation != correlation) return;
  p.active = false;
  std::lock_guard<std::mutex> lock(mu_);
  if (result != CUDA_SUCCESS) {
    failed_launches_.fetch_add(1, std::memory_order_relaxed);
    errors_.push_back("launch " + std::to_string(p.index) + " of " + cfg_.kernel + " failed: " + cu_error_string(result));
    return;
  }
  // Stream-ordered after the variant: the app's next reader of the global (a kernel, a
  // cudaMemcpyFromSymbol) sees what the variant wrote, as it would the captured kernel's.
  for (const Pending::Back& b : p.back) {
    const CUresult c = KC_CU(cuMemcpyDtoDAsync)(b.app, b.variant, b.size, p.stream);
    if (c != CUDA_SUCCESS)
      errors_.push_back("launch " + std::to_string(p.index) + ": copying the variant's global " + b.name +
                        " back into the app's failed (cuMemcpyDtoDAsync: " + cu_error_string(c) + ")");
  }
  if (!p.check) return;
  CUresult r = KC_CU(cuStreamSynchronize)(p.stream);
  if (r != CUDA_SUCCESS) {
    errors_.push_back("launch " + std::to_string(p.index) + ": cuStreamSynchronize failed: " + cu_error_string(r));
    return;
  }
  for (const auto& [param, value, via, target] : p.outputs) {
    const std::string what = "launch " + std::to_string(p.index) + ": parameter " + std::to_string(param) +
                             (via < 0 ? "" : " (the pointer at +" + std::to_string(via) + " of its buffer)");
    if (via >= 0 && !target) continue;  // unread before the launch: said then
    CUdeviceptr ptr = via < 0 ? value : target, now = target;
    if (via >= 0 && KC_CU(cuMemcpyDtoH)(&now, value + CUdeviceptr(via), 8) == CUDA_SUCCESS && now != target)
      errors_.push_back(what + " was changed by the launch (the captured kernel never writes it): the buffer it "
                        "named before is the one compared");
    CUdeviceptr base = 0;
    size_t size = 0;
    if (KC_CU(cuMemGetAddressRange)(&base, &size, ptr) != CUDA_SUCCESS) {
      if (cfg_.outputs_given) errors_.push_back(what + " points at no device allocation");
      continue;  // a scalar that is no address
    }
    fingerprint(p.index, param, via, "", ptr, std::min<size_t>(base + size - ptr, kMaxHashed), what);
  }
  for (const auto& [name, at] : p.globals)
    fingerprint(p.index, 0, -1, name, at.first, at.second, "launch " + std::to_string(p.index) + ": global " + name);
}

// One output's bytes hashed, and written to a file at KERNCAP_APPLY_DUMP_AT's launch.
void Applier::fingerprint(uint64_t launch, uint32_t param, int64_t via, const std::string& global, CUdeviceptr ptr,
                          size_t n, const std::string& what) {
  std::vector<unsigned char> host(n);
  const CUresult r = KC_CU(cuMemcpyDtoH)(host.data(), ptr, n);
  if (r != CUDA_SUCCESS) {
    errors_.push_back(what + ": reading its buffer failed (cuMemcpyDtoH: " + cu_error_string(r) + ")");
    return;
  }
  fingerprints_.push_back({launch, param, via, n, xxh64_hex(xxh64(host.data(), n)), global});
  if (cfg_.dump_at < 0 || launch != uint64_t(cfg_.dump_at) || global.find('/') != std::string::npos) return;
  // named as kerncap.capture.apply.Mismatch.dump_name reads it
  const std::string name = "dump-" + std::to_string(launch) +
                           (global.empty() ? "-p" + std::to_string(param) + (via < 0 ? "" : "+" + std::to_string(via))
                                           : "-g" + global) + ".bin";
  try {
    write_file_atomic(path_join(cfg_.out_dir, name), host.data(), n);
    dumps_.push_back(name);
  } catch (const std::exception& e) {
    errors_.push_back(std::string("cannot write ") + name + ": " + e.what());
  }
}

std::string Applier::report_json(int pid) {
  std::lock_guard<std::mutex> lock(mu_);
  JsonWriter w;
  w.begin_object().field("pid", pid).field("kernel", cfg_.kernel);
  w.key("variant");
  if (cfg_.variant.empty()) w.null();
  else w.value(cfg_.variant);
  w.field("identify", cfg_.by_name ? "name" : "cubin");
  w.field("launches", launches_.load()).field("substituted", substituted_.load());
  w.field("not_selected", not_selected_.load()).field("graph_launches", graph_launches_.load());
  w.field("failed_launches", failed_launches_.load());
  w.key("refusal");
  if (refused_.load()) w.begin_object().field("kind", refusal_kind_).field("message", refusal_).end_object();
  else w.null();
  w.key("unidentified").begin_array();
  for (const std::string& s : unidentified_) w.value(s);
  w.end_array();
  w.key("skipped_globals").begin_array();
  for (const auto& [name, size] : skipped_globals_) w.begin_object().field("name", name).field("size", size).end_object();
  w.end_array();
  w.key("errors").begin_array();
  for (size_t i = 0; i < errors_.size() && i < 20; ++i) w.value(errors_[i]);
  w.end_array();
  w.field("check", cfg_.check).field("fingerprints_truncated", fingerprints_truncated_);
  w.key("fingerprints").begin_array();
  for (const Fingerprint& f : fingerprints_)
  {
    w.begin_object().field("launch", f.launch);
    if (f.global.empty()) w.field("param", f.param);
    else w.field("global", f.global);
    if (f.via >= 0) w.field("via", f.via);
    w.field("bytes", f.bytes).field("hash", f.hash).end_object();
  }
  w.end_array();
  w.key("dumps").begin_array();
  for (const std::string& s : dumps_) w.value(s);
  w.end_array();
  w.end_object();
  return w.str();
}

void set_launch_function(CUpti_CallbackId cbid, void* params, CUfunction f) {
  switch (cbid) {
#define KC_SET_FUNCTION(call, params_struct, form, per_thread, coop) \
  case CUPTI_DRIVER_TRACE_CBID_##call:                               \
    static_cast<params_struct*>(params)->f = f;                      \
    break;
    KC_LAUNCH_KINDS(KC_SET_FUNCTION)
#undef KC_SET_FUNCTION
    default: break;
  }
}

}  // namespace kc
