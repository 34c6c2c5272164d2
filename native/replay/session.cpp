#include "session.hpp"

#include <algorithm>
#include <cstring>

#include "blob_loader.hpp"
#include "kernel_timer.hpp"

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

double from_bits(unsigned long long bits) {
  double d;
  static_assert(sizeof d == sizeof bits);
  std::memcpy(&d, &bits, sizeof d);
  return d;
}

// Milliseconds between each pair of recorded (and completed) events.
std::vector<double> elapsed_ms(const std::vector<Event>& start, const std::vector<Event>& stop) {
  std::vector<double> ms(start.size());
  for (size_t k = 0; k < start.size(); ++k) {
    float t = 0.0f;
    KC_CHECK(cuEventElapsedTime, (&t, start[k].get(), stop[k].get()), "a timing event");
    ms[k] = t;
  }
  return ms;
}

// cuMemcpy infers the kinds from the pointers: `src` may be mapped host memory.
std::string copy_to_host(CUdeviceptr src, size_t n, const std::string& what) {
  std::string out(n, '\0');
  if (n) KC_CHECK(cuMemcpy, (reinterpret_cast<CUdeviceptr>(out.data()), src, n), what);
  return out;
}

// Queues payload h for `dst`; one payload used at two lengths is a broken capture.
void add_job(std::map<std::string, BlobJob>& jobs, const std::string& h, size_t length, CUdeviceptr dst,
             const std::string& use) {
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
}

// Fills the zeroed resident copies: the payloads, then the post-state chunks that repeat
// their pre-state chunk (copied from it once it is loaded).
void upload_state(CUcontext ctx, const std::string& blob_dir, std::map<std::string, BlobJob>& jobs,
                  const std::vector<std::pair<CUdeviceptr, CUdeviceptr>>& post_from_pre,
                  const std::vector<size_t>& post_from_pre_len, int threads) {
  KC_CHECK(cuCtxSynchronize, (), "zeroing the resident state");  // memsets done before uploads
  std::vector<BlobJob> list;
  list.reserve(jobs.size());
  for (auto& [h, job] : jobs) list.push_back(std::move(job));
  load_blobs(ctx, blob_dir, list, threads);
  for (size_t i = 0; i < post_from_pre.size(); ++i)
    KC_CHECK(cuMemcpyDtoD, (post_from_pre[i].first, post_from_pre[i].second, post_from_pre_len[i]),
             "post-state chunk shared with the pre-state");
  KC_CHECK(cuCtxSynchronize, (), "loading the resident state");
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

std::pair<size_t, size_t> Session::memory() const {
  size_t free = 0, total = 0;
  KC_CHECK(cuMemGetInfo, (&free, &total), "the device");
  return {free, total};
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

void Session::map_shared(const std::vector<std::pair<size_t, std::vector<unsigned long long>>>& groups) {
  for (const auto& [size, bases] : groups) mappings_.emplace_back(ctx_.device(), bases, size);
}

void Session::map_zero(const std::vector<std::pair<unsigned long long, unsigned long long>>& ranges, size_t chunk) {
  if (zero_) throw Error("input", "the zero backing is already mapped");
  if (ranges.empty()) return;
  zero_ = std::make_unique<ZeroBacking>(ctx_.device(), granularity_, chunk, ranges);
  state_notes_.push_back("sparse replay: " + zero_->note());
}

void Session::register_host(const std::vector<SpanSpec>& ranges, const std::vector<HostSpec>& regions) {
  if (!host_.empty()) throw Error("input", "host memory is already registered");
  for (const SpanSpec& r : ranges) host_.emplace_back(r.base, r.size, r.label);
  check_device_pointers(ctx_.device(), regions);
}

Session::Item Session::plan_item(const ItemSpec& spec, size_t chunks) const {
  if (spec.pre.size() != chunks || spec.post.size() != chunks)
    throw Error("capture", spec.label + " lists the wrong number of chunks");
  Item item;
  item.spec = spec;
  item.target = spec.base;
  if (spec.array >= 0) {  // a CUDA array: its staging buffer stands for it (arrays.hpp)
    if (!arrays_) throw Error("input", spec.label + " is an array, but no arrays were loaded");
    item.target = arrays_->staging(size_t(spec.array), spec.label);
    if (arrays_->packed_size(size_t(spec.array)) != spec.size)
      throw Error("capture", spec.label + " lists " + std::to_string(spec.size) + " bytes, its descriptor makes " +
                                 std::to_string(arrays_->packed_size(size_t(spec.array))));
  }
  std::vector<std::pair<unsigned long long, unsigned long long>> parts = spec.segments;
  if (!spec.sparse) parts.assign(1, {0, spec.size});
  if (spec.sparse && (spec.host || !spec.global_name.empty()))
    throw Error("input", spec.label + ": only device regions replay sparsely");
  for (const auto& [off, len] : parts) {
    if (off > spec.size || len > spec.size - off || len == 0 ||
        (!item.segments.empty() && off < item.segments.back().offset + item.segments.back().length))
      throw Error("input", spec.label + ": backed part +" + std::to_string(off) + " (" + std::to_string(len) +
                               " bytes) is empty, overlaps the previous one or lies outside the item");
    Segment seg;
    seg.offset = off;
    seg.length = len;
    item.segments.push_back(std::move(seg));
  }
  return item;
}

// The segment holding item bytes [off, off + len), or npos when none holds them all.
size_t Session::segment_of(const Item& item, size_t off, size_t len) {
  for (size_t k = 0; k < item.segments.size(); ++k) {
    const Segment& g = item.segments[k];
    if (off >= g.offset && off + len <= g.offset + g.length) return k;
  }
  return SIZE_MAX;
}

std::vector<bool> Session::mark_written(Item& item, unsigned long long chunk_size, size_t chunks) {
  const ItemSpec& spec = item.spec;
  std::vector<bool> seg_written(item.segments.size(), false);
  for (size_t i = 0; i < chunks; ++i) {
    const size_t off = i * chunk_size, len = std::min<size_t>(chunk_size, spec.size - off);
    const bool live = spec.pre[i] || spec.post[i];
    const size_t k = segment_of(item, off, len);
    if (live && k == SIZE_MAX)
      throw Error("input", spec.label + " chunk " + std::to_string(i) +
                               " holds data but lies outside every backed part (a sparse plan that is wrong)");
    if (spec.pre[i] != spec.post[i]) {
      seg_written[k] = true;
      if (!item.written.empty() && item.written.back().segment == k &&
          item.written.back().offset + item.written.back().length == off)
        item.written.back().length += len;
      else
        item.written.push_back(Written{k, off, len});
    }
  }
  return seg_written;
}

void Session::allocate_segments(Item& item, const std::vector<bool>& seg_written) {
  const ItemSpec& spec = item.spec;
  for (size_t k = 0; k < item.segments.size(); ++k) {
    Segment& g = item.segments[k];
    const std::string part = item.segments.size() > 1 ? " +" + std::to_string(g.offset) : std::string();
    g.pre = DeviceBuffer(g.length, "resident pre-state of " + spec.label + part);
    KC_CHECK(cuMemsetD8, (g.pre.get(), 0, g.length), "resident pre-state of " + spec.label + part);
    if (seg_written[k]) {
      g.post = DeviceBuffer(g.length, "resident post-state of " + spec.label + part);
      KC_CHECK(cuMemsetD8, (g.post.get(), 0, g.length), "resident post-state of " + spec.label + part);
    }
  }
}

void Session::load_state(const std::string& blob_dir, unsigned long long chunk_size,
                         const std::vector<ItemSpec>& specs, int threads) {
  if (!items_.empty()) throw Error("input", "the capture state is already loaded");
  if (chunk_size == 0) throw Error("capture", "chunk_size is 0 in the manifest");
  stream_ = std::make_unique<Stream>("the replay stream");
  std::map<std::string, BlobJob> jobs;
  std::vector<std::pair<CUdeviceptr, CUdeviceptr>> post_from_pre;  // dst, src (chunk)
  std::vector<size_t> post_from_pre_len;

  for (const ItemSpec& spec : specs) {
    const size_t chunks = (spec.size + chunk_size - 1) / chunk_size;
    Item item = plan_item(spec, chunks);
    const std::vector<bool> seg_written = mark_written(item, chunk_size, chunks);
    if (spec.array >= 0) arrays_->set_written(size_t(spec.array), !item.written.empty());
    allocate_segments(item, seg_written);
    for (size_t i = 0; i < chunks; ++i) {
      const size_t off = i * chunk_size, len = std::min<size_t>(chunk_size, spec.size - off);
      if (!spec.pre[i] && !spec.post[i]) continue;  // zero before and after: the copies start zeroed
      const Segment& g = item.segments[segment_of(item, off, len)];
      const size_t at = off - g.offset;
      const std::string where = " chunk " + std::to_string(i);
      if (spec.pre[i]) add_job(jobs, *spec.pre[i], len, g.pre.get() + at, spec.label + " pre-state" + where);
      if (!g.post.get() || !spec.post[i]) continue;  // unwritten part, or a zero chunk (already zero)
      if (spec.post[i] == spec.pre[i]) {
        post_from_pre.emplace_back(g.post.get() + at, g.pre.get() + at);
        post_from_pre_len.push_back(len);
      } else {
        add_job(jobs, *spec.post[i], len, g.post.get() + at, spec.label + " post-state" + where);
      }
    }
    items_.push_back(std::move(item));
  }
  // Globals are numbered in order among themselves (LoadedKernel resolves them so).
  size_t g = 0;
  for (Item& item : items_)
    if (!item.spec.global_name.empty()) item.global_index = g++;

  upload_state(ctx_.get(), blob_dir, jobs, post_from_pre, post_from_pre_len, threads);
}

void Session::load_arrays(const std::vector<MipmapSpec>& mipmaps, const std::vector<ArraySpec>& arrays,
                          const std::vector<ObjectSpec>& objects) {
  if (!items_.empty() || arrays_) throw Error("input", "load_arrays must come once, before load_state");
  arrays_ = std::make_unique<Arrays>(mipmaps, arrays, objects);
}

std::map<std::string, long long> Session::load_program(const std::string& key, LaunchSpec spec,
                                                       const std::string& image, const std::string& label,
                                                       const std::vector<std::string>& global_names) {
  if (!stream_) throw Error("input", "load_state must come before load_program");
  std::vector<GlobalRef> globals;
  for (const Item& item : items_)
    if (!item.spec.global_name.empty()) globals.push_back({item.spec.global_name, item.spec.global_name, item.spec.size});
  if (!global_names.empty()) {
    if (global_names.size() != globals.size())
      throw Error("input", "load_program got " + std::to_string(global_names.size()) + " global names for " +
                               std::to_string(globals.size()) + " module globals");
    for (size_t i = 0; i < globals.size(); ++i) globals[i].in_module = global_names[i];
  }
  if (!spec.handles.empty()) {  // the replay's texture/surface handles where the app's were
    if (!arrays_) throw Error("capture", "the launch names texture objects, but none were loaded");
    arrays_->patch(spec.param_buffer, spec.handles);
  }
  // Built completely before it replaces what the key held: a bad variant leaves the
  // session as it was.
  Program p;
  p.launch = std::make_unique<LaunchConfig>(std::move(spec));
  p.kernel = std::make_unique<LoadedKernel>(image, label, p.launch->spec(), globals);
  p.label = label;
  std::map<std::string, long long> attrs = p.kernel->attributes();
  programs_[key] = std::move(p);  // the node (and current_, if it points there) stays put
  return attrs;
}

std::map<std::string, long long> Session::load_sequence(const std::string& key, SeqSpec spec, const std::string& label) {
  if (!stream_) throw Error("input", "load_state must come before load_sequence");
  size_t globals = 0;
  for (const Item& item : items_)
    if (!item.spec.global_name.empty()) ++globals;
  spec.globals = globals;
  for (SeqStepSpec& step : spec.steps) {  // each launch gets the replay's texture/surface handles, as one dispatch does
    if (step.op != "launch" || step.launch.handles.empty()) continue;
    if (!arrays_) throw Error("capture", step.label + " names texture objects, but none were loaded");
    arrays_->patch(step.launch.param_buffer, step.launch.handles);
  }
  Program p;
  p.seq = std::make_unique<SequenceProgram>(std::move(spec), label);
  p.label = label;
  std::map<std::string, long long> attrs = p.seq->attributes();
  programs_[key] = std::move(p);
  return attrs;
}

size_t Session::sequence_steps() const {
  if (!current_ || !current_->seq) throw Error("input", "the selected program is not a sequence");
  return current_->seq->steps();
}

void Session::run_steps(size_t begin, size_t end) {
  require_kernel("run_steps");
  if (!current_->seq) throw Error("input", "run_steps needs a sequence program");
  if (begin > end || end > current_->seq->steps())
    throw Error("input", "steps " + std::to_string(begin) + "-" + std::to_string(end) + " of a sequence of " +
                             std::to_string(current_->seq->steps()));
  current_->seq->enqueue(stream_->get(), begin, end, nullptr);
  KC_CHECK(cuStreamSynchronize, (stream_->get()),
           "steps " + std::to_string(begin) + "-" + std::to_string(end) + " of " + program_what());
}

std::vector<std::vector<double>> Session::time_steps(int iterations, int warmup) {
  require_kernel("time_steps");
  if (!current_->seq) throw Error("input", "time_steps needs a sequence program");
  if (iterations < 1 || warmup < 0) throw Error("input", "iterations must be >= 1 and warmup >= 0");
  SequenceProgram& seq = *current_->seq;
  if (seq.mode() == "graph")
    throw Error("input", "a sequence replayed as one CUDA graph has no per-launch times; time it in the streams or "
                         "serial order");
  size_t launches = 0;
  for (size_t i = 0; i < seq.steps(); ++i) launches += seq.is_launch(i);
  const CUstream s = stream_->get();
  std::vector<Event> start(iterations), stop(iterations);
  std::vector<std::vector<Event>> marks(static_cast<size_t>(iterations));
  std::vector<std::vector<std::pair<CUevent, CUevent>>> handles(static_cast<size_t>(iterations));
  for (int it = 0; it < iterations; ++it) {
    marks[size_t(it)].resize(2 * launches);
    for (size_t k = 0; k < launches; ++k)
      handles[size_t(it)].emplace_back(marks[size_t(it)][2 * k].get(), marks[size_t(it)][2 * k + 1].get());
  }
  restore_all();
  for (int it = 0; it < warmup + iterations; ++it) {
    restore_written();
    const int k = it - warmup;
    if (k >= 0) KC_CHECK(cuEventRecord, (start[size_t(k)].get(), s), "a timing event");
    seq.enqueue(s, 0, seq.steps(), k >= 0 ? &handles[size_t(k)] : nullptr);
    if (k >= 0) KC_CHECK(cuEventRecord, (stop[size_t(k)].get(), s), "a timing event");
  }
  KC_CHECK(cuStreamSynchronize, (s), program_what());
  const std::vector<double> whole = elapsed_ms(start, stop);
  std::vector<std::vector<double>> out(static_cast<size_t>(iterations));
  for (int it = 0; it < iterations; ++it) {
    out[size_t(it)].push_back(whole[size_t(it)]);
    for (const auto& [a, b] : handles[size_t(it)]) {
      float t = 0.0f;
      KC_CHECK(cuEventElapsedTime, (&t, a, b), "a launch's timing event");
      out[size_t(it)].push_back(t);
    }
  }
  return out;
}

void Session::mask(const std::vector<std::tuple<size_t, unsigned long long, unsigned long long>>& spans,
                   const std::string& against) {
  require_kernel("mask");
  for (const auto& [index, offset, length] : spans) {
    const ItemPointers p = item_pointers(index, against);
    if (offset > p.size || length > p.size - offset)
      throw Error("input", "masked span +" + std::to_string(offset) + " (" + std::to_string(length) +
                               " bytes) lies outside " + p.label + " (" + format_bytes(p.size) + ")");
    if (length)
      KC_CHECK(cuMemcpyDtoDAsync, (p.actual + offset, p.expected + offset, length, stream_->get()),
               "masking " + p.label + " +" + std::to_string(offset));
  }
  KC_CHECK(cuStreamSynchronize, (stream_->get()), "masking the excluded spans");
}

void Session::select_program(const std::string& key) {
  auto it = programs_.find(key);
  if (it == programs_.end()) throw Error("input", "no program loaded under key " + key);
  current_ = &it->second;
  current_key_ = key;
}

void Session::drop_program(const std::string& key) {
  if (key == current_key_) {
    current_ = nullptr;
    current_key_.clear();
  }
  programs_.erase(key);
}

void Session::require_kernel(const char* what) const {
  if (!current_ || !stream_) throw Error("input", std::string("no kernel selected before ") + what);
}

CUdeviceptr Session::target_of(const Item& item) const {
  if (!item.spec.global_name.empty() && current_->seq) return current_->seq->global_address(item.global_index);
  return item.spec.global_name.empty() ? item.target : current_->kernel->global_address(item.global_index);
}

CUdeviceptr Session::actual_of(const Item& item) const {
  // A module global the selected program does not define: no code of it can reach the
  // global, so what it "leaves" there is the pre-state (a global is one segment).
  const CUdeviceptr t = target_of(item);
  return t ? t : item.segments.front().pre.get();
}

void Session::copy(const Item& item, CUdeviceptr dst, CUdeviceptr src, size_t n, const std::string& what) {
  if (item.spec.host)
    KC_CHECK(cuMemcpyAsync, (dst, src, n, stream_->get()), what);
  else
    KC_CHECK(cuMemcpyDtoDAsync, (dst, src, n, stream_->get()), what);
}

const Session::Item& Session::item_at(size_t index, const char* what) const {
  if (index >= items_.size())
    throw Error("input", std::string(what) + ": item " + std::to_string(index) + " does not exist (" +
                             std::to_string(items_.size()) + " regions and globals)");
  return items_[index];
}

void Session::restore_all() {
  if (zero_ && !zero_->read_only()) zero_->clear(stream_->get());  // what a stray write left
  for (const Item& item : items_)
    if (const CUdeviceptr dst = target_of(item))  // 0: a module global the program does not define
      for (const Segment& g : item.segments)
        copy(item, dst + g.offset, g.pre.get(), g.length, "restoring " + item.spec.label);
  if (arrays_) arrays_->push(stream_->get(), false);  // the staging buffers into the arrays
  if (current_ && current_->kernel) current_->kernel->restore_own(stream_->get());
  zero_gaps();
}

void Session::zero_gaps() {
  for (const auto& [base, size] : gaps_)
    KC_CHECK(cuMemsetD8Async, (base, 0, size, stream_->get()), "the padding of a mapped page");
}

void Session::set_gaps(const std::vector<std::pair<unsigned long long, unsigned long long>>& gaps) {
  if (!stream_) throw Error("input", "load_state must come before set_gaps");
  size_t longest = 0;
  for (const auto& g : gaps) longest = std::max<size_t>(longest, g.second);
  gaps_ = gaps;
  if (longest > gap_zero_.size()) {
    gap_zero_ = DeviceBuffer(longest, "zeros for the padding of mapped pages");
    KC_CHECK(cuMemsetD8Async, (gap_zero_.get(), 0, longest, stream_->get()), "zeros for the padding");
  }
  zero_gaps();
  KC_CHECK(cuStreamSynchronize, (stream_->get()), "zeroing the padding of mapped pages");
}

unsigned long long Session::gap_bytes() {
  if (gaps_.empty()) return 0;
  if (!comparer_) comparer_ = std::make_unique<Comparer>();
  const CUstream s = stream_->get();
  const CmpResult zero{0, kNone, 0, 0};
  if (results_.size() < sizeof(CmpResult)) results_ = DeviceBuffer(sizeof(CmpResult), "compare results");
  KC_CHECK(cuMemcpyHtoDAsync, (results_.get(), &zero, sizeof zero, s), "compare results");
  for (const auto& [base, size] : gaps_) comparer_->bytes(s, base, gap_zero_.get(), size, results_.get());
  CmpResult out{};
  KC_CHECK(cuStreamSynchronize, (s), "comparing the padding of mapped pages");
  KC_CHECK(cuMemcpyDtoH, (&out, results_.get(), sizeof out), "compare results");
  return out.mismatches;
}

void Session::restore_written() {
  if (zero_ && !zero_->read_only()) zero_->clear(stream_->get());
  for (const Item& item : items_) {
    const CUdeviceptr dst = target_of(item);
    if (!dst) continue;  // a module global the selected program does not define
    for (const Written& w : item.written) {
      const Segment& g = item.segments[w.segment];
      copy(item, dst + w.offset, g.pre.get() + (w.offset - g.offset), w.length,
           "restoring the written part of " + item.spec.label);
    }
  }
  if (arrays_) arrays_->push(stream_->get(), true);  // arrays a surface wrote
  if (current_ && current_->kernel) current_->kernel->restore_own(stream_->get());
  zero_gaps();
}

void Session::launch() {
  if (current_->seq) current_->seq->enqueue(stream_->get(), 0, current_->seq->steps(), nullptr);
  else current_->launch->launch(current_->kernel->function(), stream_->get());
}

std::string Session::program_what() const {
  if (current_->seq) return "the sequence of " + current_->label;
  return "kernel " + current_->launch->spec().kernel_name + " of " + current_->label;
}

void Session::read_into_l2(size_t budget) {  // budget: the L2's size; more would only evict what was read first
  for (const Item& item : items_) {
    // host memory is not the device's to cache; an array's bytes live in the array
    if (item.spec.host || item.spec.array >= 0) continue;
    const CUdeviceptr dst = target_of(item);
    if (!dst) continue;  // a module global the selected program does not define
    for (const Segment& g : item.segments) {
      if (!budget) return;
      const size_t n = std::min<size_t>(g.length, budget);
      filler_->touch(stream_->get(), dst + g.offset, n, item.spec.label);
      budget -= n;
    }
  }
}

std::vector<double> Session::time(int iterations, int warmup, bool flush_l2, bool warm_l2, bool kernel_timer) {
  require_kernel("timing");
  if (iterations < 1 || warmup < 0) throw Error("input", "iterations must be >= 1 and warmup >= 0");
  if (flush_l2 && warm_l2) throw Error("input", "flush_l2 and warm_l2 ask for opposite L2 states: choose one");
  if (flush_l2 && !l2_scratch_.get()) l2_scratch_ = DeviceBuffer(kL2ScratchBytes, "the L2 flush buffer");
  size_t l2_bytes = 0;  // asked once, not before every launch
  if (warm_l2) {
    int l2 = 0;
    KC_CHECK(cuDeviceGetAttribute, (&l2, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, ctx_.device()), "the device's L2 size");
    l2_bytes = size_t(l2);
    if (!filler_) filler_ = std::make_unique<Filler>();
  }
  if (time_inputs_.empty()) set_time_inputs({{}});
  std::vector<Event> start(iterations), stop(iterations);
  const CUstream s = stream_->get();
  const size_t inputs = time_inputs_.size();
  last_check_.clear();
  if (check_) {
    if (!check_specs_.empty() && check_specs_.size() != items_.size())
      throw Error("input", "the timing check has " + std::to_string(check_specs_.size()) + " compare specs for " +
                               std::to_string(items_.size()) + " regions and globals");
    if (check_results_.size() < size_t(iterations) * sizeof(CmpResult))
      check_results_ = DeviceBuffer(size_t(iterations) * sizeof(CmpResult), "the timing check's results");
    const std::vector<CmpResult> zero(size_t(iterations), CmpResult{0, kNone, 0, 0});
    KC_CHECK(cuMemcpyHtoDAsync, (check_results_.get(), zero.data(), zero.size() * sizeof(CmpResult), s),
             "the timing check's results");
    if (!comparer_) comparer_ = std::make_unique<Comparer>();
  }
  restore_all();
  last_events_ms_.clear();
  std::unique_ptr<KernelTimer> timer;  // on for this timing only: CUPTI's records cost every other launch
  if (kernel_timer) timer = std::make_unique<KernelTimer>();
  for (int it = 0; it < warmup + iterations; ++it) {
    const size_t input = size_t(it) % inputs;
    restore_written();
    if (inputs > 1) {  // the spans some input redraws: back to the captured bytes, then this input's
      for (const auto& [index, offset, bytes] : input_spans_) {
        const Item& item = items_[index];
        for (const Segment& g : item.segments)
          if (offset >= g.offset && offset + bytes <= g.offset + g.length)
            copy(item, target_of(item) + offset, g.pre.get() + (offset - g.offset), bytes,
                 "restoring the perturbed span of " + item.spec.label);
      }
      if (!time_inputs_[input].fills.empty()) fill(time_inputs_[input].fills);
    }
    if (flush_l2)
      KC_CHECK(cuMemsetD32Async, (l2_scratch_.get(), static_cast<unsigned>(it + 1), kL2ScratchBytes / 4, s),
               "the L2 flush buffer");
    if (warm_l2) read_into_l2(l2_bytes);
    const int k = it - warmup;
    if (k >= 0) KC_CHECK(cuEventRecord, (start[k].get(), s), "a timing event");
    if (k >= 0 && timer) timer->begin(uint64_t(k));
    launch();
    if (k >= 0 && timer) timer->end();
    if (k >= 0) KC_CHECK(cuEventRecord, (stop[k].get(), s), "a timing event");
    if (k >= 0 && check_) {  // outside the timed interval, before the next restore
      if (arrays_) arrays_->pull(s);
      enqueue_check(time_inputs_[input], time_inputs_[input].fills.empty() ? -1 : int(input),
                    check_results_.get() + size_t(k) * sizeof(CmpResult));
    }
  }
  KC_CHECK(cuStreamSynchronize, (s), program_what());
  if (check_) {
    std::vector<CmpResult> host(static_cast<size_t>(iterations));
    KC_CHECK(cuMemcpyDtoH, (host.data(), check_results_.get(), host.size() * sizeof(CmpResult)),
             "the timing check's results");
    for (int k = 0; k < iterations; ++k)
      last_check_.emplace_back(int(size_t(k + warmup) % inputs), host[size_t(k)].mismatches);
  }
  if (!timer) return elapsed_ms(start, stop);
  last_events_ms_ = elapsed_ms(start, stop);
  return timer->spans_ms(uint64_t(iterations));
}

void Session::set_time_inputs(const std::vector<std::vector<FillSpec>>& inputs) {
  if (!stream_) throw Error("input", "load_state must come before set_time_inputs");
  std::vector<TimeInput> out;
  std::set<std::tuple<size_t, size_t, size_t>> spans;
  for (size_t j = 0; j < std::max<size_t>(inputs.size(), 1); ++j) {
    TimeInput in;
    if (j < inputs.size()) in.fills = inputs[j];
    for (size_t i = 0; i < items_.size(); ++i)  // what the captured kernel writes
      for (const Written& w : items_[i].written) in.check.push_back(Range{i, w.segment, w.offset, w.length});
    for (const FillSpec& f : in.fills) {  // and every span this input redraws
      const Item& item = item_at(f.item, "a timing input");
      const size_t bytes = size_t(f.count) * dtype_size(f.dtype);
      if (!dtype_size(f.dtype) || f.offset > item.spec.size || bytes > item.spec.size - f.offset)
        throw Error("input", "a timing input's span +" + std::to_string(f.offset) + " lies outside " +
                                 item.spec.label + " or has an unsupported dtype " + f.dtype);
      for (size_t k = 0; k < item.segments.size(); ++k) {
        const Segment& g = item.segments[k];
        if (f.offset >= g.offset && f.offset + bytes <= g.offset + g.length) {
          in.check.push_back(Range{f.item, k, size_t(f.offset), bytes});
          spans.emplace(f.item, size_t(f.offset), bytes);
        }
      }
    }
    out.push_back(std::move(in));
  }
  time_inputs_ = std::move(out);
  input_spans_.assign(spans.begin(), spans.end());
}

void Session::set_check(bool on, const std::vector<CompareSpec>& specs) {
  if (!specs.empty() && specs.size() != items_.size())
    throw Error("input", "set_check got " + std::to_string(specs.size()) + " compare specs for " +
                             std::to_string(items_.size()) + " regions and globals");
  check_ = on;
  check_specs_ = specs;
}

void Session::enqueue_check(const TimeInput& in, int slot, CUdeviceptr out) {
  const CUstream s = stream_->get();
  for (const Range& r : in.check) {
    const Item& item = items_[r.item];
    const Segment& g = item.segments[r.segment];
    if (slot >= 0 && !item.refs.count(slot)) continue;  // nothing kept for it: not an output on this input
    const CUdeviceptr actual = actual_of(item) + r.offset;
    const CUdeviceptr expected = expected_at(item, g, slot) + (r.offset - g.offset);
    const CompareSpec* spec = check_specs_.empty() ? nullptr : &check_specs_[r.item];
    if (spec && spec->dtype == "none") continue;  // e.g. a fused variant's intermediates, left unwritten
    if (spec && !spec->dtype.empty())
      comparer_->elements(s, spec->dtype, spec->atol, spec->rtol, actual, expected, r.length, out, item.spec.label);
    else
      comparer_->bytes(s, actual, expected, r.length, out);
  }
}

int Session::slot_of(const std::string& against) {
  if (against == "captured") return -1;
  if (against == "reference") return 0;
  if (against.rfind("reference:", 0) == 0) {
    const std::string n = against.substr(10);
    if (!n.empty() && n.size() < 6 && n.find_first_not_of("0123456789") == std::string::npos) return std::stoi(n);
  }
  throw Error("input", "compare against " + against + ": expected \"captured\", \"reference\" or \"reference:N\"");
}

CUdeviceptr Session::expected_at(const Item& item, const Segment& g, int slot) const {
  if (slot < 0) return g.post.get() ? g.post.get() : g.pre.get();
  if (!item.refs.count(slot)) return g.pre.get();
  return g.refs.at(slot).get();
}

std::vector<CompareOut> Session::validate(const std::vector<CompareSpec>& specs) {
  require_kernel("validation");
  restore_all();
  run();
  return compare(specs, "captured");
}

void Session::restore() {
  require_kernel("restore");
  restore_all();
}

void Session::fill(const std::vector<FillSpec>& fills) {
  require_kernel("fill");
  if (!filler_) filler_ = std::make_unique<Filler>();
  for (const FillSpec& f : fills) {
    const Item& item = item_at(f.item, "fill");
    const size_t unit = dtype_size(f.dtype);
    if (unit == 0) throw Error("input", "cannot perturb " + item.spec.label + ": unsupported dtype " + f.dtype);
    if (f.offset > item.spec.size || f.count > (item.spec.size - f.offset) / unit)
      throw Error("input", "perturbed span +" + std::to_string(f.offset) + " (" + std::to_string(f.count) + " " +
                               f.dtype + ") lies outside " + item.spec.label + " (" + format_bytes(item.spec.size) +
                               ")");
    if (!(f.lo <= f.hi)) throw Error("input", "perturbed span of " + item.spec.label + " has an empty range");
    const CUdeviceptr dst = target_of(item);
    if (!dst) throw Error("input", "cannot perturb " + item.spec.label + ": " + current_->label + " does not define it");
    const size_t bytes = size_t(f.count) * unit;
    bool backed = false;
    for (const Segment& g : item.segments) backed |= f.offset >= g.offset && f.offset + bytes <= g.offset + g.length;
    if (!backed)
      throw Error("input", "cannot perturb " + item.spec.label + " +" + std::to_string(f.offset) +
                               ": the span reaches its zero-backed, read-only part (sparse replay)");
    const FillParams p{f.mean, f.stddev, f.lo, f.hi, f.p_zero, f.seed};
    filler_->fill(stream_->get(), f.dtype, dst + f.offset, f.count, p,
                  item.spec.label + " +" + std::to_string(f.offset));
  }
  if (arrays_) arrays_->push(stream_->get(), false);  // perturbed staging buffers into their arrays
}

void Session::run() {
  require_kernel("run");
  launch();
  KC_CHECK(cuStreamSynchronize, (stream_->get()),
           program_what());
  if (arrays_) {  // what the kernel left in the arrays (surface writes), for compare and read
    arrays_->pull(stream_->get());
    KC_CHECK(cuStreamSynchronize, (stream_->get()), "reading the CUDA arrays back after the kernel");
  }
}

void Session::keep_reference(const std::vector<size_t>& indices, int slot) {
  require_kernel("keep_reference");
  for (size_t i : indices) {
    item_at(i, "keep_reference");
    Item& item = items_[i];
    const CUdeviceptr actual = actual_of(item);
    const bool own = target_of(item) != 0;  // else actual is the pre-state buffer itself
    for (Segment& g : item.segments) {
      DeviceBuffer& ref = g.refs[slot];
      if (!ref.get()) ref = DeviceBuffer(g.length, "reference state of " + item.spec.label);
      copy(item, ref.get(), own ? actual + g.offset : actual, g.length,
           "keeping the reference state of " + item.spec.label);
    }
    item.refs.insert(slot);
  }
  KC_CHECK(cuStreamSynchronize, (stream_->get()), "keeping reference states");
}

void Session::clear_references() {
  for (Item& item : items_) item.refs.clear();
}

// Where a segment's bytes are for the selected program (see actual_of).
CUdeviceptr Session::actual_at(const Item& item, const Segment& g) const {
  return target_of(item) ? target_of(item) + g.offset : g.pre.get();
}

void Session::enqueue_compares(CUstream s, const std::vector<CompareSpec>& specs, int slot,
                               const std::vector<size_t>& first_slot) {
  for (size_t i = 0; i < items_.size(); ++i) {
    const Item& item = items_[i];
    for (size_t k = 0; k < item.segments.size(); ++k) {
      const Segment& g = item.segments[k];
      const CUdeviceptr out = results_.get() + (first_slot[i] + 2 * k) * sizeof(CmpResult);
      comparer_->bytes(s, actual_at(item, g), expected_at(item, g, slot), g.length, out);
      if (!specs[i].dtype.empty())
        comparer_->elements(s, specs[i].dtype, specs[i].atol, specs[i].rtol, actual_at(item, g),
                            expected_at(item, g, slot), g.length, out + sizeof(CmpResult), item.spec.label);
    }
  }
}

void Session::enqueue_zero_check(CUstream s, size_t zero_slot) {
  if (!zero_expected_.get()) {
    zero_expected_ = DeviceBuffer(zero_->chunk(), "the zero chunk's expected state");
    KC_CHECK(cuMemsetD8Async, (zero_expected_.get(), 0, zero_->chunk(), s), "the zero chunk's expected state");
  }
  comparer_->bytes(s, zero_->view(), zero_expected_.get(), zero_->chunk(),
                   results_.get() + zero_slot * sizeof(CmpResult));
  if (zero_->small_view())  // the granule chunk behind range tails (never larger than the chunk)
    comparer_->bytes(s, zero_->small_view(), zero_expected_.get(), zero_->small_chunk(),
                     results_.get() + (zero_slot + 1) * sizeof(CmpResult));
}

void Session::summarize(CompareOut& o, const Item& item, const CompareSpec& spec, const std::vector<CmpResult>& host,
                        size_t base, unsigned long long dirty_zero, int slot) const {
  const bool elementwise = !spec.dtype.empty();
  const size_t unit = elementwise ? dtype_size(spec.dtype) : 1;
  const Segment* first_seg = nullptr;
  unsigned long long first_in_seg = kNone;
  for (size_t k = 0; k < item.segments.size(); ++k) {
    const Segment& g = item.segments[k];
    const CmpResult& b = host[base + 2 * k];
    const CmpResult& e = host[base + 2 * k + 1];
    o.mismatched_bytes += b.mismatches;
    if (b.first != kNone && o.first_byte == kNone) o.first_byte = g.offset + b.first;
    if (elementwise) {
      o.mismatched_elements += e.mismatches;
      if (e.first != kNone && o.first_element == kNone) o.first_element = g.offset / unit + e.first;
      o.max_abs = std::max(o.max_abs, from_bits(e.max_abs_bits));
      o.max_rel = std::max(o.max_rel, from_bits(e.max_rel_bits));
    }
    const unsigned long long first = elementwise ? e.first : b.first;
    if (first != kNone && !first_seg) {
      first_seg = &g;
      first_in_seg = first;
    }
  }
  if (dirty_zero && item.spec.sparse)
    o.mismatched_bytes += dirty_zero;  // a stray write into a sparse region's zero backing
  if (!first_seg) return;
  const size_t at = size_t(first_in_seg) * unit;
  o.window_offset = first_seg->offset + at;
  const size_t n = std::min<size_t>(kWindowElements * unit, first_seg->length - at);
  o.actual = copy_to_host(actual_at(item, *first_seg) + at, n, item.spec.label);
  o.expected = copy_to_host(expected_at(item, *first_seg, slot) + at, n, "expected state of " + item.spec.label);
}

std::vector<CompareOut> Session::compare(const std::vector<CompareSpec>& specs, const std::string& against) {
  require_kernel("compare");
  if (specs.size() != items_.size())
    throw Error("input", "compare got " + std::to_string(specs.size()) + " compare specs for " +
                             std::to_string(items_.size()) + " regions and globals");
  const int slot = slot_of(against);
  if (!comparer_) comparer_ = std::make_unique<Comparer>();
  const CUstream s = stream_->get();

  // Two result slots (bytes, elements) per segment, then two for the zero chunk.
  std::vector<size_t> first_slot(items_.size());
  size_t slots = 0;
  for (size_t i = 0; i < items_.size(); ++i) {
    first_slot[i] = slots;
    slots += 2 * items_[i].segments.size();
  }
  const bool check_zero = zero_ && !zero_->read_only();
  const size_t zero_slot = slots;
  if (check_zero) slots += 2;
  if (results_.size() < slots * sizeof(CmpResult))
    results_ = DeviceBuffer(std::max<size_t>(slots, 1) * sizeof(CmpResult), "compare results");
  std::vector<CmpResult> host(slots, CmpResult{0, kNone, 0, 0});
  // On the replay stream (not the legacy one): ordered before the compare kernels.
  if (slots)
    KC_CHECK(cuMemcpyHtoDAsync, (results_.get(), host.data(), slots * sizeof(CmpResult), s), "compare results");
  enqueue_compares(s, specs, slot, first_slot);
  if (check_zero)  // read-write zero backing: any byte no longer zero is a stray write
    enqueue_zero_check(s, zero_slot);
  KC_CHECK(cuStreamSynchronize, (s), "the compare kernels");
  if (slots) KC_CHECK(cuMemcpyDtoH, (host.data(), results_.get(), slots * sizeof(CmpResult)), "compare results");
  const unsigned long long dirty_zero =
      check_zero ? host[zero_slot].mismatches + (zero_->small_view() ? host[zero_slot + 1].mismatches : 0) : 0;

  std::vector<CompareOut> outs(items_.size());
  for (size_t i = 0; i < items_.size(); ++i)
    summarize(outs[i], items_[i], specs[i], host, first_slot[i], dirty_zero, slot);
  return outs;
}

std::string Session::read(size_t index, unsigned long long offset, unsigned long long length) {
  require_kernel("read");
  const Item& item = item_at(index, "read");
  if (offset > item.spec.size || length > item.spec.size - offset)
    throw Error("input", "read of " + std::to_string(length) + " bytes at +" + std::to_string(offset) +
                             " lies outside " + item.spec.label + " (" + format_bytes(item.spec.size) + ")");
  KC_CHECK(cuStreamSynchronize, (stream_->get()), "reading " + item.spec.label);
  return copy_to_host(actual_of(item) + offset, length, item.spec.label);
}

Session::ItemPointers Session::item_pointers(size_t index, const std::string& against) const {
  require_kernel("item_pointers");
  const Item& item = item_at(index, "item_pointers");
  const int slot = slot_of(against);
  // One whole-item segment (every item but a sparse region, whose copies cover only its
  // backed parts: no one buffer holds its expected state).
  if (item.spec.sparse)
    throw Error("input", item.spec.label + " replays sparsely (only its backed parts have resident copies): "
                                           "no map of the whole region; replay with KERNCAP_SPARSE=0 for one");
  const Segment& g = item.segments.front();
  ItemPointers p;
  p.actual = actual_of(item);
  p.pre = g.pre.get();
  p.expected = expected_at(item, g, slot);
  p.size = item.spec.size;
  p.label = item.spec.label;
  return p;
}

CUstream Session::stream() const {
  if (!stream_) throw Error("input", "load_state must come before the replay stream is used");
  return stream_->get();
}

std::vector<double> Session::time_empty(int iterations) {
  if (!stream_) throw Error("input", "load_state must come before time_empty");
  if (iterations < 1) throw Error("input", "iterations must be >= 1");
  if (!filler_) filler_ = std::make_unique<Filler>();
  std::vector<Event> start(iterations), stop(iterations);
  const CUstream s = stream_->get();
  for (int k = 0; k < iterations; ++k) {
    KC_CHECK(cuEventRecord, (start[k].get(), s), "a timing event");
    filler_->empty(s);
    KC_CHECK(cuEventRecord, (stop[k].get(), s), "a timing event");
  }
  KC_CHECK(cuStreamSynchronize, (s), "kc_empty (the launch floor)");
  return elapsed_ms(start, stop);
}

std::string Session::pci_bus_id() const {
  char id[64] = {};
  KC_CHECK(cuDeviceGetPCIBusId, (id, sizeof id - 1, ctx_.device()), "the device");
  return id;
}

std::vector<std::string> Session::notes() const {
  std::vector<std::string> out = state_notes_;
  if (current_) {
    if (current_->seq) {
      out.insert(out.end(), current_->seq->notes().begin(), current_->seq->notes().end());
    } else {
      out.insert(out.end(), current_->launch->notes().begin(), current_->launch->notes().end());
      out.insert(out.end(), current_->kernel->notes().begin(), current_->kernel->notes().end());
    }
  }
  if (arrays_) out.insert(out.end(), arrays_->notes().begin(), arrays_->notes().end());
  return out;
}

std::string Session::health() {
  CUresult r = KC_CU(cuCtxSynchronize)();
  return r == CUDA_SUCCESS ? std::string() : cu_error_string(r);
}

}  // namespace kc::replay
