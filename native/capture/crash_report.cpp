#include "crash_report.hpp"

#include <dlfcn.h>
#include <execinfo.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <initializer_list>

namespace kc {
namespace {

void on_fatal(int sig) {
  void* frames[64];
  int n = backtrace(frames, 64);
  char line[512];
  int len = std::snprintf(line, sizeof line, "kerncap: fatal signal %d in pid %d; backtrace (object+offset):\n", sig,
                          static_cast<int>(getpid()));
  if (len > 0) (void)!write(2, line, static_cast<size_t>(len));
  for (int i = 0; i < n; ++i) {
    Dl_info info{};
    if (dladdr(frames[i], &info) && info.dli_fname) {
      len = std::snprintf(line, sizeof line, "  #%d %s+0x%lx\n", i, info.dli_fname,
                          static_cast<unsigned long>(static_cast<char*>(frames[i]) - static_cast<char*>(info.dli_fbase)));
    } else {
      len = std::snprintf(line, sizeof line, "  #%d %p\n", i, frames[i]);
    }
    if (len > 0) (void)!write(2, line, static_cast<size_t>(len));
  }
  signal(sig, SIG_DFL);
  raise(sig);
}

}  // namespace

void install_crash_reporter() {
  const char* v = std::getenv("KERNCAP_DEBUG");
  if (!v || v[0] != '1') return;
  for (int sig : {SIGSEGV, SIGBUS, SIGABRT, SIGFPE}) signal(sig, on_fatal);
}

}  // namespace kc
