// kerncap as NVTX's tool, for capture through interposed entry points (no CUPTI, so no
// CUPTI NVTX domain): NVTX hands this library its function table (the engine points
// NVTX_INJECTION64_PATH here), and the range calls kerncap follows land in these
// functions, which give NvtxRanges the same CUpti_NvtxData CUPTI would (nvtx_ranges.hpp).
// Being the tool, kerncap also hands out what NVTX returns: range ids, push depths,
// domain and string handles. Calls it does not follow keep NVTX's no-op stubs.
#include "nvtx_tool.hpp"

#include "config.hpp"

#include <generated_nvtx_meta.h>
#include <nvtx3/nvToolsExt.h>

#include <atomic>
#include <map>
#include <mutex>
#include <string>
#include <utility>

namespace kc {
namespace {

std::atomic<uint64_t> g_next_range{1};
thread_local int tl_depth = 0;  // push/pop nesting of this thread (NVTX returns it)

// Domain and string handles: stable, distinct, never freed (NVTX may use them late).
std::mutex g_handles_mu;
std::map<std::string, nvtxDomainHandle_t>* g_domains = nullptr;
std::map<std::pair<nvtxDomainHandle_t, std::string>, nvtxStringHandle_t>* g_strings = nullptr;
uintptr_t g_next_handle = 0x10;

template <class R, class P>
R deliver(CUpti_CallbackId cbid, const char* name, const P& params, R ret) {
  CUpti_NvtxData d{};
  d.functionName = name;
  d.functionParams = &params;
  d.functionReturnValue = &ret;
  nvtx_event(cbid, &d);
  return ret;
}

int push_depth() { return tl_depth++; }
int pop_depth() { return tl_depth > 0 ? --tl_depth : -1; }

nvtxRangeId_t NVTX_API range_start_a(const char* message) {
  return deliver(CUPTI_CBID_NVTX_nvtxRangeStartA, "nvtxRangeStartA", nvtxRangeStartA_params{message},
                 nvtxRangeId_t(g_next_range++));
}
nvtxRangeId_t NVTX_API range_start_w(const wchar_t* message) {
  return deliver(CUPTI_CBID_NVTX_nvtxRangeStartW, "nvtxRangeStartW", nvtxRangeStartW_params{message},
                 nvtxRangeId_t(g_next_range++));
}
nvtxRangeId_t NVTX_API range_start_ex(const nvtxEventAttributes_t* attr) {
  return deliver(CUPTI_CBID_NVTX_nvtxRangeStartEx, "nvtxRangeStartEx", nvtxRangeStartEx_params{attr},
                 nvtxRangeId_t(g_next_range++));
}
void NVTX_API range_end(nvtxRangeId_t id) {
  deliver(CUPTI_CBID_NVTX_nvtxRangeEnd, "nvtxRangeEnd", nvtxRangeEnd_params{id}, 0);
}
int NVTX_API range_push_a(const char* message) {
  return deliver(CUPTI_CBID_NVTX_nvtxRangePushA, "nvtxRangePushA", nvtxRangePushA_params{message}, push_depth());
}
int NVTX_API range_push_w(const wchar_t* message) {
  return deliver(CUPTI_CBID_NVTX_nvtxRangePushW, "nvtxRangePushW", nvtxRangePushW_params{message}, push_depth());
}
int NVTX_API range_push_ex(const nvtxEventAttributes_t* attr) {
  return deliver(CUPTI_CBID_NVTX_nvtxRangePushEx, "nvtxRangePushEx", nvtxRangePushEx_params{attr}, push_depth());
}
int NVTX_API range_pop() {
  return deliver(CUPTI_CBID_NVTX_nvtxRangePop, "nvtxRangePop", nvtxRangePop_params{nullptr}, pop_depth());
}
nvtxRangeId_t NVTX_API domain_range_start_ex(nvtxDomainHandle_t domain, const nvtxEventAttributes_t* attr) {
  return deliver(CUPTI_CBID_NVTX_nvtxDomainRangeStartEx, "nvtxDomainRangeStartEx",
                 nvtxDomainRangeStartEx_params{domain, {attr}}, nvtxRangeId_t(g_next_range++));
}
void NVTX_API domain_range_end(nvtxDomainHandle_t domain, nvtxRangeId_t id) {
  deliver(CUPTI_CBID_NVTX_nvtxDomainRangeEnd, "nvtxDomainRangeEnd", nvtxDomainRangeEnd_params{domain, {id}}, 0);
}
int NVTX_API domain_range_push_ex(nvtxDomainHandle_t domain, const nvtxEventAttributes_t* attr) {
  return deliver(CUPTI_CBID_NVTX_nvtxDomainRangePushEx, "nvtxDomainRangePushEx",
                 nvtxDomainRangePushEx_params{domain, {attr}}, push_depth());
}
int NVTX_API domain_range_pop(nvtxDomainHandle_t domain) {
  return deliver(CUPTI_CBID_NVTX_nvtxDomainRangePop, "nvtxDomainRangePop", nvtxDomainRangePop_params{domain},
                 pop_depth());
}
nvtxDomainHandle_t NVTX_API domain_create_a(const char* name) {
  nvtxDomainHandle_t h;
  {
    std::lock_guard<std::mutex> lock(g_handles_mu);
    if (!g_domains) g_domains = new std::map<std::string, nvtxDomainHandle_t>;
    auto& slot = (*g_domains)[name ? name : ""];
    if (!slot) slot = reinterpret_cast<nvtxDomainHandle_t>(g_next_handle++);
    h = slot;
  }
  return deliver(CUPTI_CBID_NVTX_nvtxDomainCreateA, "nvtxDomainCreateA", nvtxDomainCreateA_params{name}, h);
}
nvtxStringHandle_t NVTX_API domain_register_string_a(nvtxDomainHandle_t domain, const char* string) {
  nvtxStringHandle_t h;
  {
    std::lock_guard<std::mutex> lock(g_handles_mu);
    if (!g_strings) g_strings = new std::map<std::pair<nvtxDomainHandle_t, std::string>, nvtxStringHandle_t>;
    auto& slot = (*g_strings)[{domain, string ? string : ""}];
    if (!slot) slot = reinterpret_cast<nvtxStringHandle_t>(g_next_handle++);
    h = slot;
  }
  return deliver(CUPTI_CBID_NVTX_nvtxDomainRegisterStringA, "nvtxDomainRegisterStringA",
                 nvtxDomainRegisterStringA_params{domain, string}, h);
}

// Points NVTX's slot `id` of `table` at `fn` (a table shorter than the id: left alone).
template <class F>
void set_slot(NvtxFunctionTable table, unsigned size, unsigned id, F fn) {
  if (table && id < size && table[id]) *table[id] = reinterpret_cast<NvtxFunctionPointer>(fn);
}

}  // namespace

bool own_nvtx_tool_wanted() {
  // The interposer's own rule (a set keeps CUPTI for its activity records): NVTX may
  // initialise before cuInit has configured anything, so it is read here from the
  // environment it will be configured from.
  return Config::from_env().entry_capable();
}

int install_nvtx_tool(NvtxGetExportTableFunc_t get_export_table) {
  auto* callbacks = get_export_table
                        ? static_cast<const NvtxExportTableCallbacks*>(get_export_table(NVTX_ETID_CALLBACKS))
                        : nullptr;
  if (!callbacks || !callbacks->GetModuleFunctionTable) return 0;  // 0: NVTX runs without a tool
  NvtxFunctionTable core = nullptr, core2 = nullptr;
  unsigned core_n = 0, core2_n = 0;
  if (!callbacks->GetModuleFunctionTable(NVTX_CB_MODULE_CORE, &core, &core_n) ||
      !callbacks->GetModuleFunctionTable(NVTX_CB_MODULE_CORE2, &core2, &core2_n))
    return 0;
  set_slot(core, core_n, NVTX_CBID_CORE_RangeStartEx, &range_start_ex);
  set_slot(core, core_n, NVTX_CBID_CORE_RangeStartA, &range_start_a);
  set_slot(core, core_n, NVTX_CBID_CORE_RangeStartW, &range_start_w);
  set_slot(core, core_n, NVTX_CBID_CORE_RangeEnd, &range_end);
  set_slot(core, core_n, NVTX_CBID_CORE_RangePushEx, &range_push_ex);
  set_slot(core, core_n, NVTX_CBID_CORE_RangePushA, &range_push_a);
  set_slot(core, core_n, NVTX_CBID_CORE_RangePushW, &range_push_w);
  set_slot(core, core_n, NVTX_CBID_CORE_RangePop, &range_pop);
  set_slot(core2, core2_n, NVTX_CBID_CORE2_DomainRangeStartEx, &domain_range_start_ex);
  set_slot(core2, core2_n, NVTX_CBID_CORE2_DomainRangeEnd, &domain_range_end);
  set_slot(core2, core2_n, NVTX_CBID_CORE2_DomainRangePushEx, &domain_range_push_ex);
  set_slot(core2, core2_n, NVTX_CBID_CORE2_DomainRangePop, &domain_range_pop);
  set_slot(core2, core2_n, NVTX_CBID_CORE2_DomainRegisterStringA, &domain_register_string_a);
  set_slot(core2, core2_n, NVTX_CBID_CORE2_DomainCreateA, &domain_create_a);
  return 1;
}

}  // namespace kc
