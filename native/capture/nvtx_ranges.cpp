#include "nvtx_ranges.hpp"

#include <generated_nvtx_meta.h>  // the NVTX callbacks' parameter structs (and nvtx3/nvToolsExt.h)

#include <algorithm>
#include <cstddef>
#include <stdexcept>

#include "json_writer.hpp"

namespace kc {

namespace {

constexpr size_t kSeenCap = 512;  // range names / paths kept for the report

std::string narrow(const wchar_t* w) {
  std::string out;
  for (; w && *w; ++w) out += (*w >= 0x20 && *w < 0x7f) ? char(*w) : '?';
  return out;
}

std::string text(const char* s) { return s ? std::string(s) : std::string(); }

template <class T>
T returned(const CUpti_NvtxData* d) {
  // CUPTI passes a pointer to the NVTX call's return value.
  return d->functionReturnValue ? *static_cast<const T*>(d->functionReturnValue) : T();
}

}  // namespace

NvtxRanges::NvtxRanges(std::string pattern, bool regex) : pattern_(std::move(pattern)) {
  if (regex && !pattern_.empty()) {
    try {
      re_ = std::make_unique<std::regex>(pattern_, std::regex::ECMAScript | std::regex::optimize);
    } catch (const std::regex_error& e) {
      throw std::runtime_error("KERNCAP_NVTX '" + pattern_ + "' is not a valid regular expression (" + e.what() + ")");
    }
  }
  path_ids_.emplace(std::string(), 0);
}

NvtxRanges::Thread& NvtxRanges::me() {
  // Not on the per-launch hot path of apps that do not ask for NVTX: only NVTX
  // callbacks and launches of the target with a pattern reach it.
  thread_local Thread t;
  return t;
}

std::string NvtxRanges::display(uintptr_t domain, const std::string& name) const {
  if (!domain) return name;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = domains_.find(domain);
  return (it == domains_.end() ? std::string("domain") : it->second) + ":" + name;
}

std::string NvtxRanges::message(uintptr_t domain, const void* attributes) const {
  const auto* a = static_cast<const nvtxEventAttributes_t*>(attributes);
  if (!a || a->size < offsetof(nvtxEventAttributes_t, message) + sizeof(a->message)) return std::string();
  switch (a->messageType) {
    case NVTX_MESSAGE_TYPE_ASCII:
      return a->message.ascii ? a->message.ascii : "";
    case NVTX_MESSAGE_TYPE_UNICODE:
      return narrow(a->message.unicode);
    case NVTX_MESSAGE_TYPE_REGISTERED: {
      (void)domain;  // handles are unique across domains
      std::lock_guard<std::mutex> lock(mu_);
      auto it = strings_.find(reinterpret_cast<uintptr_t>(a->message.registered));
      return it == strings_.end() ? std::string("<registered string>") : it->second;
    }
    default:
      return std::string();
  }
}

void NvtxRanges::push(uintptr_t domain, std::string name) {
  Thread& t = me();
  t.stack.push_back(Entry{domain, display(domain, name)});
  t.stack_changed = true;
}

void NvtxRanges::pop(uintptr_t domain) {
  Thread& t = me();
  // Nesting is per thread and per domain: pop this domain's innermost range.
  for (size_t i = t.stack.size(); i-- > 0;) {
    if (t.stack[i].domain != domain) continue;
    t.stack.erase(t.stack.begin() + long(i));
    t.stack_changed = true;
    return;
  }
  // A pop without a push we saw (pushed before kerncap subscribed): nothing to close.
}

void NvtxRanges::start(uint64_t id, std::string name) {
  std::lock_guard<std::mutex> lock(mu_);
  open_[id] = {started_++, std::move(name)};
  gen_.fetch_add(1, std::memory_order_acq_rel);
}

void NvtxRanges::end(uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  if (open_.erase(id)) gen_.fetch_add(1, std::memory_order_acq_rel);
}

void NvtxRanges::on_callback(CUpti_CallbackId cbid, const CUpti_NvtxData* d) {
  if (!d) return;
  any_.store(true, std::memory_order_relaxed);
  const void* p = d->functionParams;
  switch (cbid) {
    case CUPTI_CBID_NVTX_nvtxRangePushA:
      push(0, text(static_cast<const nvtxRangePushA_params*>(p)->message));
      break;
    case CUPTI_CBID_NVTX_nvtxRangePushW:
      push(0, narrow(static_cast<const nvtxRangePushW_params*>(p)->message));
      break;
    case CUPTI_CBID_NVTX_nvtxRangePushEx:
      push(0, message(0, static_cast<const nvtxRangePushEx_params*>(p)->eventAttrib));
      break;
    case CUPTI_CBID_NVTX_nvtxRangePop:
      pop(0);
      break;
    case CUPTI_CBID_NVTX_nvtxDomainRangePushEx: {
      auto* q = static_cast<const nvtxDomainRangePushEx_params*>(p);
      const auto dom = reinterpret_cast<uintptr_t>(q->domain);
      push(dom, message(dom, q->core.eventAttrib));
      break;
    }
    case CUPTI_CBID_NVTX_nvtxDomainRangePop:
      pop(reinterpret_cast<uintptr_t>(static_cast<const nvtxDomainRangePop_params*>(p)->domain));
      break;
    case CUPTI_CBID_NVTX_nvtxRangeStartA:
      start(returned<nvtxRangeId_t>(d), text(static_cast<const nvtxRangeStartA_params*>(p)->message));
      break;
    case CUPTI_CBID_NVTX_nvtxRangeStartW:
      start(returned<nvtxRangeId_t>(d), narrow(static_cast<const nvtxRangeStartW_params*>(p)->message));
      break;
    case CUPTI_CBID_NVTX_nvtxRangeStartEx:
      start(returned<nvtxRangeId_t>(d), message(0, static_cast<const nvtxRangeStartEx_params*>(p)->eventAttrib));
      break;
    case CUPTI_CBID_NVTX_nvtxDomainRangeStartEx: {
      auto* q = static_cast<const nvtxDomainRangeStartEx_params*>(p);
      const auto dom = reinterpret_cast<uintptr_t>(q->domain);
      start(returned<nvtxRangeId_t>(d), display(dom, message(dom, q->core.eventAttrib)));
      break;
    }
    case CUPTI_CBID_NVTX_nvtxRangeEnd:
      end(static_cast<const nvtxRangeEnd_params*>(p)->id);
      break;
    case CUPTI_CBID_NVTX_nvtxDomainRangeEnd:
      end(static_cast<const nvtxDomainRangeEnd_params*>(p)->core.id);
      break;
    case CUPTI_CBID_NVTX_nvtxDomainCreateA: {
      const auto h = reinterpret_cast<uintptr_t>(returned<nvtxDomainHandle_t>(d));
      const char* name = static_cast<const nvtxDomainCreateA_params*>(p)->name;
      std::lock_guard<std::mutex> lock(mu_);
      if (h) domains_[h] = text(name);
      break;
    }
    case CUPTI_CBID_NVTX_nvtxDomainRegisterStringA: {
      const auto h = reinterpret_cast<uintptr_t>(returned<nvtxStringHandle_t>(d));
      const char* s = static_cast<const nvtxDomainRegisterStringA_params*>(p)->string;
      std::lock_guard<std::mutex> lock(mu_);
      if (h) strings_[h] = text(s);
      break;
    }
    default:
      return;  // marks, naming, sync: not ranges
  }
  if (cbid == CUPTI_CBID_NVTX_nvtxDomainCreateA || cbid == CUPTI_CBID_NVTX_nvtxDomainRegisterStringA) return;
  // Remember names and paths for the report (a pattern never seen lists them).
  Thread& t = me();
  std::lock_guard<std::mutex> lock(mu_);
  if (names_seen_.size() < kSeenCap) {
    for (const Entry& e : t.stack) names_seen_.insert(e.name);
    for (const auto& [id, r] : open_) names_seen_.insert(r.second);
  }
}

std::string NvtxRanges::path_text(const Thread& t) const {
  std::vector<std::pair<uint64_t, std::string>> ranges;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [id, r] : open_) ranges.push_back(r);
  }
  std::sort(ranges.begin(), ranges.end());
  std::string out;
  for (const auto& r : ranges) out += (out.empty() ? "" : "/") + r.second;
  for (const Entry& e : t.stack) out += (out.empty() ? "" : "/") + e.name;
  return out;
}

uint32_t NvtxRanges::intern(const std::string& path) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = path_ids_.find(path);
  if (it != path_ids_.end()) return it->second;
  const auto id = uint32_t(paths_.size());
  paths_.push_back(path);
  path_ids_.emplace(path, id);
  if (paths_seen_.size() < kSeenCap) paths_seen_.insert(path);
  return id;
}

void NvtxRanges::refresh(Thread& t) {
  const uint64_t gen = gen_.load(std::memory_order_acquire);
  if (t.gen == gen && !t.stack_changed) return;
  const std::string path = path_text(t);
  t.path_id = intern(path);
  if (pattern_.empty()) t.match = true;
  else if (re_) t.match = std::regex_search(path, *re_);
  else t.match = path.find(pattern_) != std::string::npos;
  t.gen = gen;
  t.stack_changed = false;
}

bool NvtxRanges::matches() {
  Thread& t = me();
  refresh(t);
  return t.match;
}

uint32_t NvtxRanges::path_id() {
  Thread& t = me();
  refresh(t);
  return t.path_id;
}

const std::string& NvtxRanges::path_of(uint32_t id) const {
  std::lock_guard<std::mutex> lock(mu_);
  return id < paths_.size() ? paths_[id] : paths_[0];  // paths_ only grows: references stay valid
}

NvtxContext NvtxRanges::context() {
  Thread& t = me();
  NvtxContext c;
  c.path = path_text(t);
  for (const Entry& e : t.stack) c.stack.push_back(e.name);
  std::vector<std::pair<uint64_t, std::string>> ranges;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [id, r] : open_) ranges.push_back(r);
  }
  std::sort(ranges.begin(), ranges.end());
  for (const auto& r : ranges) c.ranges.push_back(r.second);
  return c;
}

std::string NvtxRanges::report_json(uint64_t target_in, uint64_t target_outside) const {
  JsonWriter w;
  w.begin_object().field("pattern", pattern_).field("match", re_ ? "regex" : "substring");
  w.field("calls_seen", any_.load()).field("target_in_range", target_in).field("target_outside", target_outside);
  std::lock_guard<std::mutex> lock(mu_);
  w.key("names").begin_array();
  for (const std::string& n : names_seen_) w.value(n);
  w.end_array();
  w.key("paths").begin_array();
  for (const std::string& p : paths_seen_)
    if (!p.empty()) w.value(p);
  w.end_array();
  w.end_object();
  return w.str();
}

}  // namespace kc
