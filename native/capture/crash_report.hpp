// KERNCAP_DEBUG=1: print a backtrace (library + offset per frame, for addr2line) when
// the captured process dies of SIGSEGV/SIGBUS/SIGABRT. Off by default: kerncap does
// not touch the app's signal handling unless asked.
#pragma once
namespace kc {
void install_crash_reporter();
}
