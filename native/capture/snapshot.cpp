#include "snapshot.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "chunk_fingerprint.hpp"
#include "driver.hpp"
#include "func_attributes.hpp"

namespace kc {

namespace {

// True when [base, base + size) lies in allocations the driver knows, so the
// fingerprint kernel can read it without faulting (a fault would end the app's context;
// a failed copy only fails the capture). VMM ranges merged from several mappings are
// walked mapping by mapping.
constexpr uint64_t kMinFingerprintBytes = 1 << 20;

bool readable_on_device(uint64_t base, uint64_t size) {
  uint64_t at = base;
  const uint64_t end = base + size;
  while (at < end) {
    CUdeviceptr b = 0;
    size_t n = 0;
    if (KC_CU(cuMemGetAddressRange)(&b, &n, CUdeviceptr(at)) != CUDA_SUCCESS || n == 0 || b > at ||
        b + n <= at)
      return false;
    at = b + n;
  }
  return true;
}

}  // namespace


Snapshotter::Snapshotter(BlobStore& store) : store_(store) {}

Snapshotter::~Snapshotter() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  for (auto& t : workers_) t.join();
  // Best effort: the process may be tearing down; never throw from here.
  free_ring();
  if (stream_) KC_CU(cuStreamDestroy)(stream_);
}

void Snapshotter::free_ring() {
  for (auto& s : slots_) {
    if (s.done) KC_CU(cuEventDestroy)(s.done);
    if (s.host) KC_CU(cuMemFreeHost)(s.host);
  }
  slots_.clear();
  slot_size_ = 0;
}

void Snapshotter::init_resources() {
  if (stream_) return;
  KC_CHECK(cuStreamCreate, (&stream_, CU_STREAM_NON_BLOCKING), "the snapshot stream");
  unsigned hw = std::thread::hardware_concurrency();
  size_t n = std::min<size_t>(8, std::max<unsigned>(2, hw));
  for (size_t i = 0; i < n; ++i) workers_.emplace_back([this] { worker_main(); });
}

// Pinning memory costs about as much as copying it once (a 4 x 64 MB ring took longer
// than a whole set member's copies): the ring is sized to what this run copies, and
// only grows.
void Snapshotter::ensure_ring(uint64_t bytes) {
  if (bytes == 0) return;
  const size_t size = size_t(std::min<uint64_t>(kSlotSize, (bytes + kChunkSize - 1) / kChunkSize * kChunkSize));
  const size_t count = size_t(std::min<uint64_t>(kSlots, (bytes + size - 1) / size));
  if (slot_size_ >= size && slots_.size() >= count) return;
  free_ring();  // no copy is in flight between runs
  for (size_t i = 0; i < count; ++i) {
    Slot s;
    void* p = nullptr;
    CUresult r = KC_CU(cuMemHostAlloc)(&p, size, 0);
    if (r != CUDA_SUCCESS) {
      if (!slots_.empty()) break;  // fewer buffers only cost overlap
      check(r, "cuMemHostAlloc", "the pinned staging buffer (" + std::to_string(size >> 20) + " MB)");
    }
    s.host = static_cast<unsigned char*>(p);
    r = KC_CU(cuEventCreate)(&s.done, CU_EVENT_DISABLE_TIMING);
    if (r != CUDA_SUCCESS) {
      KC_CU(cuMemFreeHost)(p);
      check(r, "cuEventCreate", "a snapshot ring event");
    }
    slots_.push_back(std::move(s));
  }
  slot_size_ = size;
}

void Snapshotter::worker_main() {
  for (;;) {
    Task t;
    bool skip;
    {
      std::unique_lock<std::mutex> lock(mu_);
      work_cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stop_ with nothing left
      t = queue_.front();
      queue_.pop_front();
      skip = error_ != nullptr;  // the capture is being aborted: just release the slot
    }
    if (!skip) {
      try {
        uint64_t h = 0;
        t.out->stored = store_.put(t.host, t.len, &h);
        t.out->hash = h;
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu_);
        if (!error_) error_ = std::current_exception();
      }
    }
    std::lock_guard<std::mutex> lock(mu_);
    Slot& s = slots_[t.slot];
    if (--s.pending == 0) {
      s.busy = false;
      free_cv_.notify_all();
    }
  }
}

void Snapshotter::rethrow_worker_error() {
  std::lock_guard<std::mutex> lock(mu_);
  if (error_) std::rethrow_exception(error_);
}

void Snapshotter::dispatch(size_t k) {
  std::lock_guard<std::mutex> lock(mu_);
  Slot& s = slots_[k];
  s.pending = s.tasks.size();
  if (s.pending == 0) {
    s.busy = false;
    free_cv_.notify_all();
    return;
  }
  for (const Task& t : s.tasks) queue_.push_back(t);
  work_cv_.notify_all();
}

size_t Snapshotter::acquire_slot(std::deque<size_t>& in_flight) {
  for (;;) {
    rethrow_worker_error();
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (size_t k = 0; k < slots_.size(); ++k) {
        if (!slots_[k].busy) {
          slots_[k].busy = true;
          slots_[k].fill = 0;
          slots_[k].tasks.clear();
          return k;
        }
      }
    }
    if (!in_flight.empty()) {
      size_t k = in_flight.front();
      in_flight.pop_front();
      KC_CHECK(cuEventSynchronize, (slots_[k].done), "a device-to-host snapshot copy");
      dispatch(k);
      continue;
    }
    std::unique_lock<std::mutex> lock(mu_);
    free_cv_.wait(lock, [&] {
      if (error_) return true;
      for (const Slot& s : slots_)
        if (!s.busy) return true;
      return false;
    });
  }
}

// Which chunks were fingerprinted, and what the fingerprints read.
struct Snapshotter::Fingerprints {
  std::vector<DeviceChunk> chunks;
  std::vector<std::pair<size_t, size_t>> where;  // (item, chunk) of each fingerprinted chunk
  std::vector<Fingerprint> fps;
};

// Fingerprints each chunk of the items the device can read (keep: none kept yet).
void Snapshotter::fingerprint(const std::vector<SnapshotItem>& items, const std::vector<ItemSnapshot>& out,
                              std::vector<std::vector<char>>& keep, Fingerprints& fp) {
  ChunkFingerprinter& fingerprinter = chunk_fingerprinter();
  const bool fingerprints = fingerprinter.available();
  if (!fingerprints) fingerprint_note_ = fingerprinter.reason();
  for (size_t i = 0; i < items.size(); ++i) {
    keep[i].assign(out[i].chunks.size(), 0);
    const SnapshotItem& it = items[i];
    // Below kMinFingerprintBytes a copy costs less than asking the driver whether the
    // region is mapped (one call per region: 200k small regions took 0.7 s more).
    if (!fingerprints || it.host || it.size < kMinFingerprintBytes || it.base % 8 ||
        !readable_on_device(it.base, it.size))
      continue;
    for (size_t c = 0; c < out[i].chunks.size(); ++c) {
      const uint64_t off = uint64_t(c) * kChunkSize;
      fp.chunks.emplace_back(it.base + off, std::min<uint64_t>(kChunkSize, it.size - off));
      fp.where.emplace_back(i, c);
    }
  }
  if (!fp.chunks.empty() && !fingerprinter.run(fp.chunks, stream_, fp.fps)) fingerprint_note_ = fingerprinter.reason();
}

// Marks kept each fingerprinted chunk that is unchanged since `memory` remembered it
// (its stored hash reused) or all zero.
void Snapshotter::keep_known(const Fingerprints& fp, const ChunkMemory& memory, std::vector<ItemSnapshot>& out,
                             std::vector<std::vector<char>>& keep) {
  for (size_t k = 0; k < fp.fps.size(); ++k) {
    auto [i, c] = fp.where[k];
    const RememberedChunk* r = memory.find(fp.chunks[k]);
    if (r && r->fp == fp.fps[k] && (!r->stored || store_.adopt(r->hash))) {
      out[i].chunks[c] = ChunkHash{r->stored, r->hash};
      keep[i][c] = 1;
      unchanged_ += fp.chunks[k].second;
    } else if (fp.fps[k] == zero_fingerprint(fp.chunks[k].second)) {
      // All zero (as sure as "unchanged" is): nothing to copy, nothing to store.
      out[i].chunks[c] = ChunkHash{false, 0};
      keep[i][c] = 1;
      zero_ += fp.chunks[k].second;
    }
  }
}

// Queues the copy of every chunk not kept, slot by slot, each full slot's event recorded
// into in_flight (the last one's too).
void Snapshotter::copy_chunks(const std::vector<SnapshotItem>& items, std::vector<ItemSnapshot>& out,
                              const std::vector<std::vector<char>>& keep, std::deque<size_t>& in_flight) {
  const size_t none = SIZE_MAX;
  size_t cur = none;
  for (size_t i = 0; i < items.size(); ++i) {
    const SnapshotItem& it = items[i];
    for (size_t c = 0; c < out[i].chunks.size(); ++c) {
      if (keep[i][c]) continue;
      const uint64_t off = uint64_t(c) * kChunkSize;
      const size_t len = size_t(std::min<uint64_t>(kChunkSize, it.size - off));
      if (cur == none || slots_[cur].fill + len > slot_size_) {
        if (cur != none) {
          KC_CHECK(cuEventRecord, (slots_[cur].done, stream_), "the snapshot stream");
          in_flight.push_back(cur);
        }
        cur = acquire_slot(in_flight);
      }
      Slot& s = slots_[cur];
      if (it.host)  // the app's host memory: the GPU is drained and the app's threads are held
        std::memcpy(s.host + s.fill, reinterpret_cast<const void*>(uintptr_t(it.base + off)), len);
      else
        KC_CHECK(cuMemcpyDtoHAsync, (s.host + s.fill, CUdeviceptr(it.base + off), len, stream_),
                 it.label + " bytes " + hex_addr(it.base + off) + "+" + std::to_string(len));
      s.tasks.push_back(Task{s.host + s.fill, len, &out[i].chunks[c], cur});
      s.fill += len;
      logical_ += len;
    }
  }
  if (cur != none) {
    KC_CHECK(cuEventRecord, (slots_[cur].done, stream_), "the snapshot stream");
    in_flight.push_back(cur);
  }
}

// Waits for the copies in flight, hands each slot to the workers and waits until every
// slot is free again; throws a worker's error.
void Snapshotter::finish_copies(std::deque<size_t>& in_flight) {
  while (!in_flight.empty()) {
    size_t k = in_flight.front();
    in_flight.pop_front();
    KC_CHECK(cuEventSynchronize, (slots_[k].done), "a device-to-host snapshot copy");
    dispatch(k);
  }
  {
    std::unique_lock<std::mutex> lock(mu_);
    free_cv_.wait(lock, [&] {
      for (const Slot& s : slots_)
        if (s.busy) return false;
      return true;
    });
  }
  rethrow_worker_error();
}

// Leave the ring idle before unwinding: no copy in flight, no worker on a slot.
void Snapshotter::idle_ring() {
  KC_CU(cuStreamSynchronize)(stream_);
  std::unique_lock<std::mutex> lock(mu_);
  free_cv_.wait(lock, [&] {
    for (const Slot& s : slots_)
      if (s.pending) return false;
    return true;
  });
  for (Slot& s : slots_) {
    s.busy = false;
    s.tasks.clear();
  }
  error_ = nullptr;
}

std::vector<ItemSnapshot> Snapshotter::run(const std::vector<SnapshotItem>& items) {
  init_resources();
  std::vector<ItemSnapshot> out(items.size());
  for (size_t i = 0; i < items.size(); ++i) out[i].chunks.resize((items[i].size + kChunkSize - 1) / kChunkSize);

  // Fingerprint every chunk that can be read on the device; a chunk whose fingerprint
  // matches the remembered one keeps its hash (and blob) and is not copied.
  std::vector<std::vector<char>> keep(items.size());
  Fingerprints fp;
  fingerprint(items, out, keep, fp);
  ChunkMemory& memory = chunk_memory();
  keep_known(fp, memory, out, keep);

  uint64_t to_copy = 0;
  for (size_t i = 0; i < items.size(); ++i)
    for (size_t c = 0; c < out[i].chunks.size(); ++c)
      if (!keep[i][c]) to_copy += std::min<uint64_t>(kChunkSize, items[i].size - uint64_t(c) * kChunkSize);
  ensure_ring(to_copy);

  std::deque<size_t> in_flight;
  try {
    copy_chunks(items, out, keep, in_flight);
    finish_copies(in_flight);
  } catch (...) {
    idle_ring();
    throw;
  }
  for (size_t k = 0; k < fp.fps.size(); ++k) {
    auto [i, c] = fp.where[k];
    memory.remember(fp.chunks[k], RememberedChunk{fp.fps[k], out[i].chunks[c].stored, out[i].chunks[c].hash});
  }
  for (size_t i = 0; i < items.size(); ++i) {
    for (size_t c = 0; c < out[i].chunks.size(); ++c) {
      if (out[i].chunks[c].stored) continue;
      const uint64_t off = uint64_t(c) * kChunkSize;
      out[i].zero_bytes += std::min<uint64_t>(kChunkSize, items[i].size - off);
    }
  }
  return out;
}

}  // namespace kc
