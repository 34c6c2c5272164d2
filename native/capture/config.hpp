// Configuration of the interposer, read once from the environment
// (docs/capture-format.md, "Environment of the captured app"), and the kernel-name
// matcher used by both the cubin filter and the launch path.
#pragma once
#include <cstdint>
#include <memory>
#include <regex>
#include <string>
#include <vector>

namespace kc {

enum class Mode { Off, Profile, Capture, Apply };  // Apply: `kerncap apply` (apply_mode.hpp)
enum class MatchMode { Substring, Regex, Exact };
// Sequence captures (docs/sequences.md): what opens and closes the window.
enum class SeqMode { None, Nvtx, Graph, Run };

const char* mode_name(Mode m);
const char* match_mode_name(MatchMode m);
const char* seq_mode_name(SeqMode m);

// substring: on the mangled OR demangled name; regex: std::regex_search on both;
// exact: the mangled name only.
class KernelMatcher {
 public:
  // Throws std::runtime_error naming the pattern when a regex does not compile.
  KernelMatcher(std::string pattern, MatchMode mode);
  bool matches(const std::string& mangled, const std::string& demangled) const;
  // Cheap pre-filter on a mangled symbol of a cubin (demangles when needed).
  bool matches_symbol(const std::string& mangled) const;
  const std::string& pattern() const { return pattern_; }
  MatchMode mode() const { return mode_; }

 private:
  std::string pattern_;
  MatchMode mode_;
  std::unique_ptr<std::regex> re_;
};

struct Config {
  Mode mode = Mode::Off;
  std::string out_dir;                  // KERNCAP_OUT
  std::string kernel;                   // KERNCAP_KERNEL
  MatchMode match = MatchMode::Substring;
  uint64_t dispatch = 0;                // KERNCAP_DISPATCH (the first of `dispatches`)
  std::vector<uint64_t> dispatches{0};  // KERNCAP_DISPATCH: "N" or "N,M,..." (sorted, unique)
  bool set = false;                     // KERNCAP_SET=1: several captures (capture-<N>/), bucket accounting
  bool buckets = false;                 // KERNCAP_BUCKETS=1 (set mode): the first dispatch of every launch signature
  bool keep_running = false;            // KERNCAP_KEEP_RUNNING=1
  // Selection (docs/selection.md): only launches inside a matching NVTX range, in the
  // selected process (rank / pid) and on the selected device count as dispatches.
  std::string nvtx;                     // KERNCAP_NVTX (empty: no NVTX selection)
  bool nvtx_regex = false;              // KERNCAP_NVTX_MATCH=regex (default substring)
  int64_t want_rank = -1;               // KERNCAP_RANK
  int64_t want_pid = -1;                // KERNCAP_PID
  int64_t want_device = -1;             // KERNCAP_DEVICE (CUDA ordinal in the process)
  // profile mode: tag each launch (launch callbacks on) to rank time per NVTX path and per launch signature.
  bool profile_by_nvtx = false;         // KERNCAP_PROFILE_NVTX=1
  bool profile_buckets = false;         // KERNCAP_PROFILE_BUCKETS=1
  // KERNCAP_PROFILE_TIMING=sampled: count every launch through the entry points and time a
  // sample with CUDA events (sampled_profile.hpp); exact or unset: CUPTI activity records.
  bool profile_sampled = false;
  std::string command_json;             // KERNCAP_COMMAND (a JSON list), may be empty
  int64_t fault_enospc_after = -1;      // KERNCAP_FAULT_ENOSPC_AFTER
  // KERNCAP_INTERCEPT=entry: watch driver calls through libkerncap_entry.so's wrapped
  // entry points (preloaded by the engine) instead of CUPTI callbacks. The engine always
  // sets the variable (entry unless told otherwise); unset here means CUPTI callbacks.
  bool entry_requested = false;
  // KERNCAP_BENCH_PASSTHROUGH=1 (benches only): allow kerncap_bench_passthrough() to
  // bypass the dispatcher; such a process never captures (its counts may miss launches).
  bool bench_passthrough = false;
  // KERNCAP_BENCH_SKIP (with KERNCAP_BENCH_PASSTHROUGH=1 only; bench/paired.py's
  // decomposition rows): a launch's dispatcher stops early, to time its parts.
  //   callback: on_callback returns at once; launch: launch_enter returns after decoding
  //   and counting (no quiesce); quiesce: only the quiesce flag is skipped; fastpath:
  //   nothing skipped. With any of them the launch fast path stays off (every launch
  //   takes the full path, whose parts they time).
  enum class BenchSkip { None, Callback, Launch, Quiesce, FastPath } bench_skip = BenchSkip::None;
  // KERNCAP_SEQUENCE=nvtx|graph|run: capture a sequence of launches as one reproducer
  // (sequence_capture.hpp): every launch of one instance of the KERNCAP_NVTX range (the
  // KERNCAP_DISPATCH-th, from 0), the whole graph launch running dispatch N of the
  // kernel, or a run of launches from dispatch N of the kernel on.
  SeqMode seq_mode = SeqMode::None;
  uint64_t seq_count = 0;   // KERNCAP_SEQ_COUNT (run): launches in the window (0: --until decides)
  std::string seq_until;    // KERNCAP_SEQ_UNTIL (run): the window ends with the next launch of a kernel matching it
  std::string error;                    // non-empty: the configuration is unusable (why)

  static Config from_env();
  bool wants_dispatch(uint64_t index) const;
  // The last requested dispatch (dispatch lists); buckets have none.
  uint64_t last_dispatch() const { return dispatches.empty() ? 0 : dispatches.back(); }
  // Launch callbacks in profile mode: only when a launch must be tagged.
  bool profile_tags() const { return profile_by_nvtx || profile_buckets || !nvtx.empty(); }
  // Capture through interposed entry points (NVTX then comes from kerncap's own NVTX
  // tool, nvtx_tool.cpp); a set needs CUPTI's activity records and keeps the CUPTI path.
  bool entry_capable() const { return mode == Mode::Capture && entry_requested && !set; }
  bool sequence() const { return seq_mode != SeqMode::None; }
};

// abi::__cxa_demangle, or the input when it is not a C++ mangled name.
std::string demangle(const std::string& mangled);

// Parses a JSON list of strings (KERNCAP_COMMAND); false when `json` is not one.
bool parse_json_string_list(const std::string& json, std::vector<std::string>& out);
// This process's argv from /proc/self/cmdline.
std::vector<std::string> process_cmdline();

}  // namespace kc
