// Small helpers shared by the capture interposer and the replay core.
#pragma once
#include <cuda.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>

namespace kc {

// The CUfunction attributes recorded in a capture (manifest kernel.attributes) and
// reported for a replayed variant, by their manifest names.
inline constexpr std::pair<const char*, CUfunction_attribute> kFuncAttributes[] = {
    {"num_regs", CU_FUNC_ATTRIBUTE_NUM_REGS},
    {"shared_size_bytes", CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES},
    {"const_size_bytes", CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES},
    {"local_size_bytes", CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES},
    {"max_threads_per_block", CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK},
    {"max_dynamic_shared_size_bytes", CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES},
    {"ptx_version", CU_FUNC_ATTRIBUTE_PTX_VERSION},
    {"binary_version", CU_FUNC_ATTRIBUTE_BINARY_VERSION},
    {"required_cluster_width", CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH},
    {"required_cluster_height", CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT},
    {"required_cluster_depth", CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH},
    {"non_portable_cluster_size_allowed", CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED},
};

// "0x7f3a00000000": how addresses appear in messages and logs.
inline std::string hex_addr(uint64_t a) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(a));
  return buf;
}

}  // namespace kc
