// The kernel launch calls kerncap decodes, declared once: X(call, params struct, form,
// per-thread default stream, cooperative). `form`: classic (grid and block as scalars,
// cuLaunchKernel's) or ex (a CUlaunchConfig, cuLaunchKernelEx's). Expanded by the decoder
// (launch_record.cpp), apply mode's function swap (apply_mode.cpp) and the entry points'
// fast path (entry_hooks.cpp, which also checks that exactly these calls have the kLaunch
// role in watched_list.hpp). A new launch kind is a line here (and its watched call).
#pragma once

#define KC_LAUNCH_KINDS(X)                                                                   \
  X(cuLaunchKernel, cuLaunchKernel_params, classic, false, false)                             \
  X(cuLaunchKernel_ptsz, cuLaunchKernel_ptsz_params, classic, true, false)                    \
  X(cuLaunchKernelEx, cuLaunchKernelEx_params, ex, false, false)                              \
  X(cuLaunchKernelEx_ptsz, cuLaunchKernelEx_ptsz_params, ex, true, false)                     \
  X(cuLaunchCooperativeKernel, cuLaunchCooperativeKernel_params, classic, false, true)        \
  X(cuLaunchCooperativeKernel_ptsz, cuLaunchCooperativeKernel_ptsz_params, classic, true, true)
