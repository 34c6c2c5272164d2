// proc-<pid>.json: what one process of the app saw (docs/capture-format.md). The
// engine reads the error kinds cupti_subscriber, stream_capture, graph_node, disk
// and capture_failed to tell the user why nothing (or something odd) was captured.
#pragma once
#include <cstdint>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace kc {

struct ProcError {
  std::string kind;
  std::string message;
};

struct ProcCounters {
  const char* mode = "off";
  uint64_t launches = 0;
  std::vector<std::pair<std::string, uint64_t>> kernels_seen;  // top 200 by count
  uint64_t target_matches = 0;
  std::vector<std::string> refused_kernels;  // matched, but NCCL's own (never a target)
};

class ProcReport {
 public:
  // Identical (kind, message) pairs are recorded once; at most 100 errors are kept.
  void add_error(const std::string& kind, const std::string& message);
  void set_captured(const std::string& dir);  // once per capture (set captures: several)
  // A top-level field holding raw JSON (job identity, NVTX, selection), replaced on each call.
  void set_section(const std::string& key, const std::string& json);
  // Profile mode's detach at exit: "ok", or the CUPTI error (written as cupti_finalize).
  void set_finalize_result(const std::string& result);
  bool captured() const;
  std::string to_json(const ProcCounters& c) const;
  // Writes $out_dir/proc-<pid>.json atomically; returns false (and says why on stderr) on failure.
  bool write(const std::string& out_dir, const ProcCounters& c) const;

 private:
  mutable std::mutex mu_;
  std::vector<ProcError> errors_;
  bool captured_ = false;
  std::vector<std::string> capture_dirs_;
  std::vector<std::pair<std::string, std::string>> sections_;
  std::string finalize_;
};

}  // namespace kc
