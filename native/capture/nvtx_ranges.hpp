// NVTX ranges as CUPTI's NVTX callback domain reports them (the engine points
// NVTX_INJECTION64_PATH at this library, which hands NVTX to the libcupti kerncap is
// bound to: see nvtx_injection.cpp), kept so that a launch can ask "which ranges am I
// in?" (docs/selection.md).
//
// A launch's NVTX path is the names of the open start/end ranges (process-wide, in the
// order they started) followed by the launching thread's push/pop stack, joined with
// '/'. A range of a named domain (nvtxDomainCreateA) appears as "domain:name"; messages
// may be ASCII, wide (ASCII part) or registered strings (nvtxDomainRegisterStringA).
// The pattern (substring, or regex search) is matched against that path.
//
// Cost: the path and the match are recomputed only when a range opens or closes; a
// launch reads a per-thread cached answer (one generation compare).
#pragma once
#include <cupti.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <regex>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

namespace kc {

// What a capture records about the ranges around its launch (manifest launch.nvtx).
struct NvtxContext {
  std::string path;
  std::vector<std::string> stack;   // this thread's push/pop ranges, outermost first
  std::vector<std::string> ranges;  // open start/end ranges, oldest first
};

class NvtxRanges {
 public:
  // Empty pattern: no selection (ranges are still followed, e.g. to tag launches).
  // Throws std::runtime_error naming the pattern when a regex does not compile.
  NvtxRanges(std::string pattern, bool regex);

  void on_callback(CUpti_CallbackId cbid, const CUpti_NvtxData* d);

  // At a launch, on the launching thread.
  bool matches();                 // inside a matching range (true when there is no pattern)
  uint32_t path_id();             // the current path, interned (0: no range open)
  NvtxContext context();
  const std::string& path_of(uint32_t id) const;  // for path_id() values

  bool has_pattern() const { return !pattern_.empty(); }
  // proc-<pid>.json's "nvtx" section: the pattern, whether any NVTX call arrived, the
  // range names and paths seen (capped), launches of the target in and outside a match.
  std::string report_json(uint64_t target_in, uint64_t target_outside) const;

 private:
  struct Entry {
    uintptr_t domain;  // 0: the default domain
    std::string name;  // as shown in paths ("domain:name" for named domains)
  };
  struct Thread {
    std::vector<Entry> stack;
    uint64_t gen = 0;  // global generation the cached answer was computed at (0: never)
    bool stack_changed = true;
    bool match = false;
    uint32_t path_id = 0;
  };
  static Thread& me();

  std::string message(uintptr_t domain, const void* attributes) const;  // nvtxEventAttributes_t
  std::string display(uintptr_t domain, const std::string& name) const;
  void push(uintptr_t domain, std::string name);
  void pop(uintptr_t domain);
  void start(uint64_t id, std::string name);
  void end(uint64_t id);
  void refresh(Thread& t);
  std::string path_text(const Thread& t) const;
  uint32_t intern(const std::string& path);

  std::string pattern_;
  std::unique_ptr<std::regex> re_;

  mutable std::mutex mu_;
  std::atomic<uint64_t> gen_{1};  // bumped when a start/end range opens or closes
  std::map<uint64_t, std::pair<uint64_t, std::string>> open_;  // range id -> (start order, name)
  uint64_t started_ = 0;
  std::unordered_map<uintptr_t, std::string> domains_;
  std::unordered_map<uintptr_t, std::string> strings_;  // registered string handles
  std::set<std::string> names_seen_, paths_seen_;
  std::vector<std::string> paths_{std::string()};  // interned paths; id 0 = ""
  std::unordered_map<std::string, uint32_t> path_ids_;
  std::atomic<bool> any_{false};
};

}  // namespace kc
