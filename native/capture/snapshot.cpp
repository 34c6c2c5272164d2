#include "snapshot.hpp"

#include <algorithm>
#include <cstdio>

#include "driver.hpp"
#include "func_attributes.hpp"

namespace kc {


Snapshotter::Snapshotter(BlobStore& store) : store_(store) {}

Snapshotter::~Snapshotter() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  for (auto& t : workers_) t.join();
  // Best effort: the process may be tearing down; never throw from here.
  for (auto& s : slots_) {
    if (s.done) KC_CU(cuEventDestroy)(s.done);
    if (s.host) KC_CU(cuMemFreeHost)(s.host);
  }
  if (stream_) KC_CU(cuStreamDestroy)(stream_);
}

void Snapshotter::init_resources() {
  if (stream_) return;
  KC_CHECK(cuStreamCreate, (&stream_, CU_STREAM_NON_BLOCKING), "the snapshot stream");
  for (size_t i = 0; i < kSlots; ++i) {
    Slot s;
    void* p = nullptr;
    CUresult r = KC_CU(cuMemHostAlloc)(&p, kSlotSize, 0);
    if (r != CUDA_SUCCESS) {
      if (!slots_.empty()) break;  // fewer buffers only cost overlap
      check(r, "cuMemHostAlloc", "the pinned staging buffer (" + std::to_string(kSlotSize >> 20) + " MB)");
    }
    s.host = static_cast<unsigned char*>(p);
    r = KC_CU(cuEventCreate)(&s.done, CU_EVENT_DISABLE_TIMING);
    if (r != CUDA_SUCCESS) {
      KC_CU(cuMemFreeHost)(p);
      check(r, "cuEventCreate", "a snapshot ring event");
    }
    slots_.push_back(std::move(s));
  }
  unsigned hw = std::thread::hardware_concurrency();
  size_t n = std::min<size_t>(8, std::max<unsigned>(2, hw));
  for (size_t i = 0; i < n; ++i) workers_.emplace_back([this] { worker_main(); });
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

std::vector<ItemSnapshot> Snapshotter::run(const std::vector<SnapshotItem>& items) {
  init_resources();
  std::vector<ItemSnapshot> out(items.size());
  for (size_t i = 0; i < items.size(); ++i) out[i].chunks.resize((items[i].size + kChunkSize - 1) / kChunkSize);

  std::deque<size_t> in_flight;
  const size_t none = SIZE_MAX;
  size_t cur = none;
  try {
    for (size_t i = 0; i < items.size(); ++i) {
      const SnapshotItem& it = items[i];
      for (size_t c = 0; c < out[i].chunks.size(); ++c) {
        const uint64_t off = uint64_t(c) * kChunkSize;
        const size_t len = size_t(std::min<uint64_t>(kChunkSize, it.size - off));
        if (cur == none || slots_[cur].fill + len > kSlotSize) {
          if (cur != none) {
            KC_CHECK(cuEventRecord, (slots_[cur].done, stream_), "the snapshot stream");
            in_flight.push_back(cur);
          }
          cur = acquire_slot(in_flight);
        }
        Slot& s = slots_[cur];
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
      cur = none;
    }
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
  } catch (...) {
    // Leave the ring idle before unwinding: no copy in flight, no worker on a slot.
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
    throw;
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
