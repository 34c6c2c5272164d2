#include "config.hpp"

#include <cxxabi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>

namespace kc {

const char* mode_name(Mode m) {
  switch (m) {
    case Mode::Profile: return "profile";
    case Mode::Capture: return "capture";
    case Mode::Apply: return "apply";
    default: return "off";
  }
}

const char* match_mode_name(MatchMode m) {
  switch (m) {
    case MatchMode::Regex: return "regex";
    case MatchMode::Exact: return "exact";
    default: return "substring";
  }
}

const char* seq_mode_name(SeqMode m) {
  switch (m) {
    case SeqMode::Nvtx: return "nvtx";
    case SeqMode::Graph: return "graph";
    case SeqMode::Run: return "run";
    default: return "none";
  }
}

std::string demangle(const std::string& mangled) {
  if (mangled.size() < 2 || mangled[0] != '_' || mangled[1] != 'Z') return mangled;
  int status = 0;
  char* d = abi::__cxa_demangle(mangled.c_str(), nullptr, nullptr, &status);
  if (status != 0 || !d) return mangled;
  std::string out(d);
  std::free(d);
  return out;
}

KernelMatcher::KernelMatcher(std::string pattern, MatchMode mode) : pattern_(std::move(pattern)), mode_(mode) {
  if (mode_ == MatchMode::Regex) {
    try {
      re_ = std::make_unique<std::regex>(pattern_, std::regex::ECMAScript | std::regex::optimize);
    } catch (const std::regex_error& e) {
      throw std::runtime_error("KERNCAP_KERNEL '" + pattern_ + "' is not a valid regular expression (" +
                               e.what() + ")");
    }
  }
}

bool KernelMatcher::matches(const std::string& mangled, const std::string& demangled) const {
  switch (mode_) {
    case MatchMode::Exact: return mangled == pattern_;
    case MatchMode::Regex: return std::regex_search(mangled, *re_) || std::regex_search(demangled, *re_);
    default:
      return mangled.find(pattern_) != std::string::npos || demangled.find(pattern_) != std::string::npos;
  }
}

bool KernelMatcher::matches_symbol(const std::string& mangled) const {
  if (mode_ == MatchMode::Exact) return mangled == pattern_;
  if (mode_ == MatchMode::Substring && mangled.find(pattern_) != std::string::npos) return true;
  return matches(mangled, demangle(mangled));
}

bool parse_json_string_list(const std::string& s, std::vector<std::string>& out) {
  out.clear();
  size_t i = 0;
  auto ws = [&] { while (i < s.size() && (s[i] == ' ' || s[i] == '\n' || s[i] == '\t' || s[i] == '\r')) ++i; };
  auto hex4 = [&](size_t at, unsigned& v) {
    if (at + 4 > s.size()) return false;
    v = 0;
    for (size_t k = at; k < at + 4; ++k) {
      char c = s[k];
      v <<= 4;
      if (c >= '0' && c <= '9') v |= unsigned(c - '0');
      else if (c >= 'a' && c <= 'f') v |= unsigned(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F') v |= unsigned(c - 'A' + 10);
      else return false;
    }
    return true;
  };
  auto put_utf8 = [](std::string& o, unsigned cp) {
    if (cp < 0x80) o += char(cp);
    else if (cp < 0x800) { o += char(0xc0 | (cp >> 6)); o += char(0x80 | (cp & 0x3f)); }
    else if (cp < 0x10000) { o += char(0xe0 | (cp >> 12)); o += char(0x80 | ((cp >> 6) & 0x3f)); o += char(0x80 | (cp & 0x3f)); }
    else { o += char(0xf0 | (cp >> 18)); o += char(0x80 | ((cp >> 12) & 0x3f)); o += char(0x80 | ((cp >> 6) & 0x3f)); o += char(0x80 | (cp & 0x3f)); }
  };
  ws();
  if (i >= s.size() || s[i++] != '[') return false;
  ws();
  if (i < s.size() && s[i] == ']') { ++i; ws(); return i == s.size(); }
  for (;;) {
    ws();
    if (i >= s.size() || s[i++] != '"') return false;
    std::string item;
    for (;;) {
      if (i >= s.size()) return false;
      char c = s[i++];
      if (c == '"') break;
      if (c != '\\') { item += c; continue; }
      if (i >= s.size()) return false;
      char e = s[i++];
      switch (e) {
        case '"': item += '"'; break;
        case '\\': item += '\\'; break;
        case '/': item += '/'; break;
        case 'b': item += '\b'; break;
        case 'f': item += '\f'; break;
        case 'n': item += '\n'; break;
        case 'r': item += '\r'; break;
        case 't': item += '\t'; break;
        case 'u': {
          unsigned cp;
          if (!hex4(i, cp)) return false;
          i += 4;
          if (cp >= 0xd800 && cp < 0xdc00 && i + 6 <= s.size() && s[i] == '\\' && s[i + 1] == 'u') {
            unsigned lo;
            if (hex4(i + 2, lo) && lo >= 0xdc00 && lo < 0xe000) {
              cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
              i += 6;
            }
          }
          put_utf8(item, cp);
          break;
        }
        default: return false;
      }
    }
    out.push_back(std::move(item));
    ws();
    if (i >= s.size()) return false;
    if (s[i] == ',') { ++i; continue; }
    if (s[i] == ']') { ++i; ws(); return i == s.size(); }
    return false;
  }
}

std::vector<std::string> process_cmdline() {
  std::vector<std::string> out;
  FILE* f = std::fopen("/proc/self/cmdline", "rb");
  if (!f) return out;
  std::string cur;
  int c;
  while ((c = std::fgetc(f)) != EOF) {
    if (c == 0) { out.push_back(cur); cur.clear(); }
    else cur += char(c);
  }
  if (!cur.empty()) out.push_back(cur);
  std::fclose(f);
  return out;
}

namespace {
std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

// A non-negative decimal integer; false for anything else.
bool parse_count(const std::string& text, uint64_t& out) {
  if (text.empty() || text.size() > 19) return false;
  for (char c : text)
    if (c < '0' || c > '9') return false;
  out = std::strtoull(text.c_str(), nullptr, 10);
  return true;
}

// KERNCAP_RANK / _PID / _DEVICE: unset -> -1.
void parse_selector(const char* name, int64_t& out, std::string& error) {
  const std::string v = env(name);
  if (v.empty()) return;
  uint64_t n = 0;
  if (!parse_count(v, n)) error = std::string(name) + "='" + v + "' is not a non-negative integer";
  else out = int64_t(n);
}

// KERNCAP_SEQUENCE and its bounds (docs/sequences.md).
void parse_sequence(Config& c) {
  const std::string mode = env("KERNCAP_SEQUENCE");
  if (mode.empty()) return;
  if (mode == "nvtx") c.seq_mode = SeqMode::Nvtx;
  else if (mode == "graph") c.seq_mode = SeqMode::Graph;
  else if (mode == "run") c.seq_mode = SeqMode::Run;
  else {
    c.error = "KERNCAP_SEQUENCE='" + mode + "' is not nvtx, graph or run";
    return;
  }
  const std::string count = env("KERNCAP_SEQ_COUNT");
  if (!count.empty() && (!parse_count(count, c.seq_count) || c.seq_count == 0)) {
    c.error = "KERNCAP_SEQ_COUNT='" + count + "' is not a positive integer";
    return;
  }
  c.seq_until = env("KERNCAP_SEQ_UNTIL");
  if (c.set) c.error = "KERNCAP_SEQUENCE and KERNCAP_SET cannot be combined: a sequence is one capture";
  if (c.seq_mode == SeqMode::Nvtx && c.nvtx.empty()) c.error = "KERNCAP_SEQUENCE=nvtx needs KERNCAP_NVTX (the range)";
  if (c.seq_mode == SeqMode::Run && !c.seq_count && c.seq_until.empty())
    c.error = "KERNCAP_SEQUENCE=run needs KERNCAP_SEQ_COUNT or KERNCAP_SEQ_UNTIL (where the run ends)";
  if (c.seq_mode != SeqMode::Run && (c.seq_count || !c.seq_until.empty()))
    c.error = "KERNCAP_SEQ_COUNT and KERNCAP_SEQ_UNTIL bound a run (KERNCAP_SEQUENCE=run) only";
}
}  // namespace

bool Config::wants_dispatch(uint64_t index) const {
  return std::binary_search(dispatches.begin(), dispatches.end(), index);
}

Config Config::from_env() {
  Config c;
  const std::string mode = env("KERNCAP_MODE");
  if (mode == "profile") c.mode = Mode::Profile;
  else if (mode == "capture") c.mode = Mode::Capture;
  else if (mode == "apply") c.mode = Mode::Apply;  // the rest of its settings: ApplyConfig::from_env
  else {
    c.mode = Mode::Off;
    if (!mode.empty()) c.error = "KERNCAP_MODE='" + mode + "' is not 'profile', 'capture' or 'apply'";
    return c;
  }
  c.out_dir = env("KERNCAP_OUT");
  if (c.out_dir.empty()) {
    c.error = "KERNCAP_OUT is not set";
    c.mode = Mode::Off;
    return c;
  }
  c.kernel = env("KERNCAP_KERNEL");
  const std::string match = env("KERNCAP_MATCH");
  if (match == "regex") c.match = MatchMode::Regex;
  else if (match == "exact") c.match = MatchMode::Exact;
  else if (match.empty() || match == "substring") c.match = MatchMode::Substring;
  else c.error = "KERNCAP_MATCH='" + match + "' is not substring, regex or exact";
  const std::string dispatch = env("KERNCAP_DISPATCH");
  if (!dispatch.empty()) {
    c.dispatches.clear();
    size_t at = 0;
    while (at <= dispatch.size()) {
      size_t comma = dispatch.find(',', at);
      if (comma == std::string::npos) comma = dispatch.size();
      uint64_t n = 0;
      if (!parse_count(dispatch.substr(at, comma - at), n)) {
        c.error = "KERNCAP_DISPATCH='" + dispatch + "' is not a number or a comma-separated list of numbers";
        break;
      }
      c.dispatches.push_back(n);
      at = comma + 1;
    }
    std::sort(c.dispatches.begin(), c.dispatches.end());
    c.dispatches.erase(std::unique(c.dispatches.begin(), c.dispatches.end()), c.dispatches.end());
    if (c.dispatches.empty()) c.dispatches.push_back(0);
    c.dispatch = c.dispatches.front();
  }
  c.set = env("KERNCAP_SET") == "1";
  c.buckets = env("KERNCAP_BUCKETS") == "1";
  if (c.buckets) c.set = true;
  if (c.dispatches.size() > 1 && !c.set) c.error = "KERNCAP_DISPATCH lists several dispatches: set KERNCAP_SET=1";
  c.keep_running = env("KERNCAP_KEEP_RUNNING") == "1" || c.buckets;  // every bucket: the app runs to its end
  c.nvtx = env("KERNCAP_NVTX");
  const std::string nvtx_match = env("KERNCAP_NVTX_MATCH");
  if (nvtx_match == "regex") c.nvtx_regex = true;
  else if (!nvtx_match.empty() && nvtx_match != "substring")
    c.error = "KERNCAP_NVTX_MATCH='" + nvtx_match + "' is not substring or regex";
  parse_selector("KERNCAP_RANK", c.want_rank, c.error);
  parse_selector("KERNCAP_PID", c.want_pid, c.error);
  parse_selector("KERNCAP_DEVICE", c.want_device, c.error);
  c.profile_by_nvtx = env("KERNCAP_PROFILE_NVTX") == "1";
  c.profile_buckets = env("KERNCAP_PROFILE_BUCKETS") == "1";
  const std::string timing = env("KERNCAP_PROFILE_TIMING");
  if (timing == "sampled") c.profile_sampled = true;
  else if (!timing.empty() && timing != "exact") c.error = "KERNCAP_PROFILE_TIMING='" + timing + "' is not sampled or exact";
  c.command_json = env("KERNCAP_COMMAND");
  c.entry_requested = env("KERNCAP_INTERCEPT") == "entry";
  c.bench_passthrough = env("KERNCAP_BENCH_PASSTHROUGH") == "1";
  if (c.bench_passthrough) {
    const std::string skip = env("KERNCAP_BENCH_SKIP");
    c.bench_skip = skip == "callback" ? Config::BenchSkip::Callback
                   : skip == "launch" ? Config::BenchSkip::Launch
                   : skip == "quiesce" ? Config::BenchSkip::Quiesce
                   : skip == "fastpath" ? Config::BenchSkip::FastPath
                                        : Config::BenchSkip::None;
  }
  const std::string fault = env("KERNCAP_FAULT_ENOSPC_AFTER");
  if (!fault.empty()) c.fault_enospc_after = std::strtoll(fault.c_str(), nullptr, 10);
  parse_sequence(c);
  if (c.mode == Mode::Capture && c.kernel.empty() && c.seq_mode != SeqMode::Nvtx)
    c.error = "KERNCAP_MODE=capture needs KERNCAP_KERNEL";
  return c;
}

}  // namespace kc
