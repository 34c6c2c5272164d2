#include "watched_calls.hpp"

#include <array>

#include "watched_list.hpp"

namespace kc {

#define W(name, proto, roles) {CUPTI_DRIVER_TRACE_CBID_##name, roles},

const WatchedCall kWatchedCalls[] = {KC_WATCHED_CALLS(W)};

#undef W

const size_t kWatchedCallCount = sizeof(kWatchedCalls) / sizeof(kWatchedCalls[0]);

namespace {
std::array<uint16_t, CUPTI_DRIVER_TRACE_CBID_SIZE> g_roles{};
}

void init_call_roles() {
  for (const WatchedCall& c : kWatchedCalls)
    if (c.id < g_roles.size()) g_roles[c.id] |= c.roles;
}

uint16_t call_roles(CUpti_CallbackId cbid) { return cbid < g_roles.size() ? g_roles[cbid] : 0; }

}  // namespace kc
