// kerncap as NVTX's tool when it captures through interposed entry points (no CUPTI
// NVTX domain then): nvtx_tool.cpp. nvtx_injection.cpp decides which tool NVTX gets.
#pragma once
#include <cupti.h>
#include <nvtx3/nvToolsExt.h>

namespace kc {

// KERNCAP_MODE=capture with KERNCAP_INTERCEPT=entry (and no set): kerncap is the tool.
bool own_nvtx_tool_wanted();
// Fills NVTX's function table with kerncap's range functions; 1 on success, as
// InitializeInjectionNvtx2 returns it.
int install_nvtx_tool(NvtxGetExportTableFunc_t get_export_table);
// Where the range calls go (inject.cpp: to NvtxRanges, as CUPTI's NVTX callbacks do).
void nvtx_event(CUpti_CallbackId cbid, const CUpti_NvtxData* data);

}  // namespace kc
