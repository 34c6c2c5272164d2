// The native unit tests' one check: a failed condition is named on stderr and counted;
// each test's main() returns non-zero when `failures` is.
#pragma once
#include <cstdio>

static int failures = 0;
#define CHECK(cond)                                                                 \
  do {                                                                              \
    if (!(cond)) {                                                                  \
      std::fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      ++failures;                                                                   \
    }                                                                               \
  } while (0)
