#include "proc_report.hpp"

#include <unistd.h>

#include <cstdio>

#include "config.hpp"
#include "fsutil.hpp"
#include "json_writer.hpp"

namespace kc {

void ProcReport::add_error(const std::string& kind, const std::string& message) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const ProcError& e : errors_)
    if (e.kind == kind && e.message == message) return;
  if (errors_.size() < 100) errors_.push_back(ProcError{kind, message});
}

void ProcReport::set_captured(const std::string& dir) {
  std::lock_guard<std::mutex> lock(mu_);
  captured_ = true;
  capture_dirs_.push_back(dir);
}

void ProcReport::set_section(const std::string& key, const std::string& json) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [k, v] : sections_)
    if (k == key) {
      v = json;
      return;
    }
  sections_.emplace_back(key, json);
}

void ProcReport::set_finalize_result(const std::string& result) {
  std::lock_guard<std::mutex> lock(mu_);
  finalize_ = result;
}

bool ProcReport::captured() const {
  std::lock_guard<std::mutex> lock(mu_);
  return captured_;
}

std::string ProcReport::to_json(const ProcCounters& c) const {
  JsonWriter w;
  w.begin_object().field("pid", int(getpid())).field("ppid", int(getppid()));
  w.key("command").begin_array();
  for (const std::string& a : process_cmdline()) w.value(a);
  w.end_array();
  w.field("mode", c.mode);
  std::lock_guard<std::mutex> lock(mu_);
  w.key("errors").begin_array();
  for (const ProcError& e : errors_) w.begin_object().field("kind", e.kind).field("message", e.message).end_object();
  w.end_array();
  w.field("launches", c.launches);
  w.key("kernels_seen").begin_object();
  for (const auto& [name, n] : c.kernels_seen) w.field(name, n);
  w.end_object();
  w.field("target_matches", c.target_matches);
  w.key("refused_kernels").begin_array();
  for (const std::string& n : c.refused_kernels) w.value(n);
  w.end_array();
  w.field("captured", captured_);
  w.key("capture_dir");
  if (captured_) w.value(capture_dirs_.front());
  else w.null();
  w.key("capture_dirs").begin_array();
  for (const std::string& d : capture_dirs_) w.value(d);
  w.end_array();
  for (const auto& [k, v] : sections_) w.key(k).raw(v);
  w.key("cupti_finalize");
  if (finalize_.empty()) w.null();
  else w.value(finalize_);
  w.end_object();
  return w.str();
}

bool ProcReport::write(const std::string& out_dir, const ProcCounters& c) const {
  const std::string path = path_join(out_dir, "proc-" + std::to_string(getpid()) + ".json");
  try {
    write_file_atomic(path, to_json(c));
    return true;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kerncap: %s\n", e.what());
    return false;
  }
}

}  // namespace kc
