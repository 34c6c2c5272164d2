#include "session.hpp"

#include <algorithm>
#include <cstring>

#include "blob_loader.hpp"

namespace kc::replay {
namespace {

constexpr size_t kL2ScratchBytes = 256ull << 20;
constexpr size_t kWindowElements = 64;

// cuInit, turning "no driver / no device" into Error("no_gpu"); returns the ordinal.
int init_driver(int ordinal) {
  try {
    KC_CHECK(cuInit, (0), "the CUDA driver");
    int count = 0;
    KC_CHECK(cuDeviceGetCount, (&count), "the CUDA driver");
    if (ordinal < 0 || ordinal >= count)
      throw Error("no_gpu", "device " + std::to_string(ordinal) + " does not exist (" + std::to_string(count) +
                                " visible)");
  } catch (const CudaError& e) {
    throw Error("no_gpu", e.what());
  } catch (const Error&) {
    throw;
  } catch (const std::runtime_error& e) {  // libcuda.so.1 missing or too old
    throw Error("no_gpu", e.what());
  }
  return ordinal;
}

void merge_into(std::vector<std::pair<size_t, size_t>>& ranges, size_t offset, size_t length) {
  if (!ranges.empty() && ranges.back().first + ranges.back().second == offset)
    ranges.back().second += length;
  else
    ranges.emplace_back(offset, length);
}

double from_bits(unsigned long long bits) {
  double d;
  static_assert(sizeof d == sizeof bits);
  std::memcpy(&d, &bits, sizeof d);
  return d;
}

std::string copy_to_host(CUdeviceptr src, size_t n, const std::string& what) {
  std::string out(n, '\0');
  if (n) KC_CHECK(cuMemcpyDtoH, (out.data(), src, n), what);
  return out;
}

}  // namespace

Session::Session(int ordinal) : ctx_(init_driver(ordinal)) {
  CUmemAllocationProp prop = {};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = ctx_.device();
  KC_CHECK(cuMemGetAllocationGranularity, (&granularity_, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
           "device " + std::to_string(ordinal));
}

std::pair<int, int> Session::compute_capability() const {
  int major = 0, minor = 0;
  KC_CHECK(cuDeviceGetAttribute, (&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, ctx_.device()), "the device");
  KC_CHECK(cuDeviceGetAttribute, (&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, ctx_.device()), "the device");
  return {major, minor};
}

std::string Session::device_name() const {
  char name[256] = {};
  KC_CHECK(cuDeviceGetName, (name, sizeof name - 1, ctx_.device()), "the device");
  return name;
}

std::string Session::device_uuid() const {
  CUuuid uuid{};
  KC_CHECK(cuDeviceGetUuid, (&uuid, ctx_.device()), "the device");
  static const char* hex = "0123456789abcdef";
  std::string h;
  for (unsigned char b : uuid.bytes) {
    h += hex[b >> 4];
    h += hex[b & 15];
  }
  return "GPU-" + h.substr(0, 8) + "-" + h.substr(8, 4) + "-" + h.substr(12, 4) + "-" + h.substr(16, 4) + "-" +
         h.substr(20);
}

void Session::reserve(const std::vector<SpanSpec>& spans) {
  for (const SpanSpec& s : spans) reservations_.emplace_back(s.base, s.size, s.label);
}

void Session::map(const std::vector<std::pair<unsigned long long, unsigned long long>>& ranges) {
  for (const auto& [base, size] : ranges) mappings_.emplace_back(ctx_.device(), base, size);
}

void Session::load_state(const std::string& blob_dir, unsigned long long chunk_size,
                         const std::vector<ItemSpec>& specs, int threads) {
  if (!items_.empty()) throw Error("input", "the capture state is already loaded");
  if (chunk_size == 0) throw Error("capture", "chunk_size is 0 in the manifest");
  stream_ = std::make_unique<Stream>("the replay stream");
  std::map<std::string, BlobJob> jobs;
  std::vector<std::pair<CUdeviceptr, CUdeviceptr>> post_from_pre;  // dst, src (chunk)
  std::vector<size_t> post_from_pre_len;

  auto add_job = [&](const std::string& h, size_t length, CUdeviceptr dst, const std::string& use) {
    BlobJob& job = jobs[h];
    if (job.targets.empty()) {
      job.hash = h;
      job.length = length;
      job.use = use;
    } else if (job.length != length) {
      throw Error("capture", "payload " + h + " is used as " + std::to_string(job.length) + " bytes (" + job.use +
                                 ") and as " + std::to_string(length) + " bytes (" + use + ")");
    }
    job.targets.push_back(dst);
  };

  for (const ItemSpec& spec : specs) {
    const size_t chunks = (spec.size + chunk_size - 1) / chunk_size;
    if (spec.pre.size() != chunks || spec.post.size() != chunks)
      throw Error("capture", spec.label + " lists the wrong number of chunks");
    Item item;
    item.spec = spec;
    item.target = spec.base;
    item.pre = DeviceBuffer(spec.size, "resident pre-state of " + spec.label);
    KC_CHECK(cuMemsetD8, (item.pre.get(), 0, spec.size), "resident pre-state of " + spec.label);
    for (size_t i = 0; i < chunks; ++i) {
      const size_t off = i * chunk_size;
      if (spec.pre[i] != spec.post[i]) merge_into(item.written, off, std::min<size_t>(chunk_size, spec.size - off));
    }
    if (!item.written.empty()) {
      item.post = DeviceBuffer(spec.size, "resident post-state of " + spec.label);
      KC_CHECK(cuMemsetD8, (item.post.get(), 0, spec.size), "resident post-state of " + spec.label);
    }
    for (size_t i = 0; i < chunks; ++i) {
      const size_t off = i * chunk_size, len = std::min<size_t>(chunk_size, spec.size - off);
      const std::string at = " chunk " + std::to_string(i);
      if (spec.pre[i]) add_job(*spec.pre[i], len, item.pre.get() + off, spec.label + " pre-state" + at);
      if (!item.post.get() || !spec.post[i]) continue;  // unwritten item, or a zero chunk (already zero)
      if (spec.post[i] == spec.pre[i]) {
        post_from_pre.emplace_back(item.post.get() + off, item.pre.get() + off);
        post_from_pre_len.push_back(len);
      } else {
        add_job(*spec.post[i], len, item.post.get() + off, spec.label + " post-state" + at);
      }
    }
    items_.push_back(std::move(item));
  }
  // Globals are numbered in order among themselves (LoadedKernel resolves them so).
  size_t g = 0;
  for (Item& item : items_)
    if (!item.spec.global_name.empty()) item.global_index = g++;

  KC_CHECK(cuCtxSynchronize, (), "zeroing the resident state");  // memsets done before uploads
  std::vector<BlobJob> list;
  list.reserve(jobs.size());
  for (auto& [h, job] : jobs) list.push_back(std::move(job));
  load_blobs(ctx_.get(), blob_dir, list, threads);
  for (size_t i = 0; i < post_from_pre.size(); ++i)
    KC_CHECK(cuMemcpyDtoD, (post_from_pre[i].first, post_from_pre[i].second, post_from_pre_len[i]),
             "post-state chunk shared with the pre-state");
  KC_CHECK(cuCtxSynchronize, (), "loading the resident state");
}

void Session::set_launch(LaunchSpec spec) { launch_ = std::make_unique<LaunchConfig>(std::move(spec)); }

std::map<std::string, long long> Session::load_module(const std::string& image, const std::string& label) {
  if (!launch_) throw Error("input", "set_launch must come before load_module");
  std::vector<std::pair<std::string, size_t>> globals;
  for (const Item& item : items_)
    if (!item.spec.global_name.empty()) globals.emplace_back(item.spec.global_name, item.spec.size);
  // Built completely before it replaces the current kernel: a bad variant leaves the
  // session as it was.
  auto loaded = std::make_unique<LoadedKernel>(image, label, launch_->spec(), globals);
  kernel_ = std::move(loaded);
  return kernel_->attributes();
}

void Session::require_kernel(const char* what) const {
  if (!kernel_ || !stream_) throw Error("input", std::string("no kernel loaded before ") + what);
}

CUdeviceptr Session::target_of(const Item& item) const {
  return item.spec.global_name.empty() ? item.target : kernel_->global_address(item.global_index);
}

void Session::restore_all() {
  for (const Item& item : items_)
    KC_CHECK(cuMemcpyDtoDAsync, (target_of(item), item.pre.get(), item.spec.size, stream_->get()),
             "restoring " + item.spec.label);
}

void Session::restore_written() {
  for (const Item& item : items_) {
    const CUdeviceptr dst = target_of(item);
    for (const auto& [off, len] : item.written)
      KC_CHECK(cuMemcpyDtoDAsync, (dst + off, item.pre.get() + off, len, stream_->get()),
               "restoring the written part of " + item.spec.label);
  }
}

void Session::launch() { launch_->launch(kernel_->function(), stream_->get()); }

std::vector<double> Session::time(int iterations, int warmup, bool flush_l2) {
  require_kernel("timing");
  if (iterations < 1 || warmup < 0) throw Error("input", "iterations must be >= 1 and warmup >= 0");
  if (flush_l2 && !l2_scratch_.get()) l2_scratch_ = DeviceBuffer(kL2ScratchBytes, "the L2 flush buffer");
  std::vector<Event> start(iterations), stop(iterations);
  const CUstream s = stream_->get();
  restore_all();
  for (int it = 0; it < warmup + iterations; ++it) {
    restore_written();
    if (flush_l2)
      KC_CHECK(cuMemsetD32Async, (l2_scratch_.get(), static_cast<unsigned>(it + 1), kL2ScratchBytes / 4, s),
               "the L2 flush buffer");
    const int k = it - warmup;
    if (k >= 0) KC_CHECK(cuEventRecord, (start[k].get(), s), "a timing event");
    launch();
    if (k >= 0) KC_CHECK(cuEventRecord, (stop[k].get(), s), "a timing event");
  }
  KC_CHECK(cuStreamSynchronize, (s), "kernel " + launch_->spec().kernel_name);
  std::vector<double> ms(iterations);
  for (int k = 0; k < iterations; ++k) {
    float t = 0.0f;
    KC_CHECK(cuEventElapsedTime, (&t, start[k].get(), stop[k].get()), "a timing event");
    ms[k] = t;
  }
  return ms;
}

std::vector<CompareOut> Session::validate(const std::vector<CompareSpec>& specs) {
  require_kernel("validation");
  if (specs.size() != items_.size())
    throw Error("input", "validate got " + std::to_string(specs.size()) + " compare specs for " +
                             std::to_string(items_.size()) + " regions and globals");
  if (!comparer_) comparer_ = std::make_unique<Comparer>();
  const CUstream s = stream_->get();
  restore_all();
  launch();
  KC_CHECK(cuStreamSynchronize, (s), "kernel " + launch_->spec().kernel_name);

  const size_t slots = 2 * items_.size();
  if (results_.size() < slots * sizeof(CmpResult))
    results_ = DeviceBuffer(std::max<size_t>(slots, 1) * sizeof(CmpResult), "compare results");
  std::vector<CmpResult> host(slots, CmpResult{0, kNone, 0, 0});
  // On the replay stream (not the legacy one): ordered before the compare kernels.
  if (slots)
    KC_CHECK(cuMemcpyHtoDAsync, (results_.get(), host.data(), slots * sizeof(CmpResult), s), "compare results");
  for (size_t i = 0; i < items_.size(); ++i) {
    const Item& item = items_[i];
    const CUdeviceptr actual = target_of(item);
    const CUdeviceptr expected = item.post.get() ? item.post.get() : item.pre.get();
    const CUdeviceptr out = results_.get() + 2 * i * sizeof(CmpResult);
    comparer_->bytes(s, actual, expected, item.spec.size, out);
    if (!specs[i].dtype.empty())
      comparer_->elements(s, specs[i].dtype, specs[i].atol, specs[i].rtol, actual, expected, item.spec.size,
                          out + sizeof(CmpResult), item.spec.label);
  }
  KC_CHECK(cuStreamSynchronize, (s), "the compare kernels");
  if (slots) KC_CHECK(cuMemcpyDtoH, (host.data(), results_.get(), slots * sizeof(CmpResult)), "compare results");

  std::vector<CompareOut> outs(items_.size());
  for (size_t i = 0; i < items_.size(); ++i) {
    const Item& item = items_[i];
    const CmpResult& b = host[2 * i];
    const CmpResult& e = host[2 * i + 1];
    CompareOut& o = outs[i];
    o.mismatched_bytes = b.mismatches;
    o.first_byte = b.first;
    const bool elementwise = !specs[i].dtype.empty();
    if (elementwise) {
      o.mismatched_elements = e.mismatches;
      o.first_element = e.first;
      o.max_abs = from_bits(e.max_abs_bits);
      o.max_rel = from_bits(e.max_rel_bits);
    }
    const size_t unit = elementwise ? dtype_size(specs[i].dtype) : 1;
    const unsigned long long first = elementwise ? e.first : b.first;
    if (first == kNone) continue;
    o.window_offset = first * unit;
    const size_t n = std::min<size_t>(kWindowElements * unit, item.spec.size - o.window_offset);
    const CUdeviceptr expected = item.post.get() ? item.post.get() : item.pre.get();
    o.actual = copy_to_host(target_of(item) + o.window_offset, n, item.spec.label);
    o.expected = copy_to_host(expected + o.window_offset, n, "expected state of " + item.spec.label);
  }
  return outs;
}

std::vector<std::string> Session::notes() const {
  std::vector<std::string> out;
  if (launch_) out = launch_->notes();
  if (kernel_) out.insert(out.end(), kernel_->notes().begin(), kernel_->notes().end());
  return out;
}

std::string Session::health() {
  CUresult r = KC_CU(cuCtxSynchronize)();
  return r == CUDA_SUCCESS ? std::string() : cu_error_string(r);
}

}  // namespace kc::replay
