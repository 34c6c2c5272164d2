// What both capture kinds (capture_session.cpp: one dispatch; sequence_capture.cpp: a
// window) write the same way into a manifest's provenance and log.
#pragma once

#include <ctime>
#include <string>

namespace kc {

// "2026-12-01T13:30:47Z": the log's and the manifest's timestamps.
inline std::string utc_now() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// The environment variables a capture's provenance keeps: what changes how CUDA,
// PyTorch, Triton or kerncap behave, nothing else (no secrets from the app's environment).
inline bool kept_env(const std::string& name) {
  static const char* exact[] = {"CUDA_VISIBLE_DEVICES", "CUDA_MODULE_LOADING", "PYTORCH_CUDA_ALLOC_CONF",
                                "CUDA_LAUNCH_BLOCKING", "CUDA_DEVICE_ORDER", "CUBLAS_WORKSPACE_CONFIG"};
  for (const char* e : exact)
    if (name == e) return true;
  return name.rfind("TRITON_", 0) == 0 || name.rfind("KERNCAP_", 0) == 0;
}

}  // namespace kc
