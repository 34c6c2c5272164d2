// What one kernel (or graph) accumulated from its sampled, timed launches
// (launch_sampler.hpp): streaming sums for the Hajek estimate of its total and the
// estimate's variance, and its largest samples, so that a sample that timed another
// context's GPU time slice can be left out.
//
// Why: a held event pair (launch_sampler.hpp) brackets everything the GPU did on the
// stream's behalf between its two events; when another process shares the GPU, the GPU
// may switch to that process's context in between, and the pair then reads its time
// slice too (the H200, with 8 test processes on one GPU: single pairs read 1.49 and 1.80
// ms around kernels whose other samples averaged 0.02 and 0.28 ms, which moved one
// kernel's share of the process's GPU time from 7 % to 26 %; docs/facts.md §35).
// CUPTI's kernel records do not see those slices, and neither should a sample.
#pragma once
#include <cstdint>

namespace kc {

struct SampleStats {
  // A sample is taken as preempted (left out) when it exceeds the mean of the kernel's
  // other kept samples by at least this much and is at least kPreemptedRatio times that
  // mean: a time slice is ~1 ms or more, longer than any sub-millisecond kernel's spread.
  static constexpr double kPreemptedExcessNs = 1'000'000;
  static constexpr double kPreemptedRatio = 4;
  static constexpr int kTop = 4;  // at most this many samples of a kernel are left out

  uint64_t timed = 0;
  double sw = 0, swt = 0, sw2 = 0, sw2t = 0, sw2t2 = 0;  // sums of w, w t, w^2, w^2 t, w^2 t^2 (t in ns)
  uint64_t min_ns = UINT64_MAX, max_ns = 0;
  unsigned grid[3] = {0, 0, 0}, block[3] = {0, 0, 0};  // of the last timed launch
  // The kTop largest samples (ns) and their weights, largest first; n_top of them.
  double top_t[kTop] = {}, top_w[kTop] = {};
  int n_top = 0;

  void add(double t_ns, double w);
  void merge(const SampleStats& other);

  // The sums without the preempted samples (the largest ones the rule above takes out,
  // one at a time, while at least two samples remain).
  struct Kept {
    uint64_t timed = 0, preempted = 0;
    double sw = 0, swt = 0, sw2 = 0, sw2t = 0, sw2t2 = 0;
  };
  Kept kept() const;
  // The total over `calls` launches and its variance (Hajek), from the kept samples; 0
  // without a timed launch.
  double total(uint64_t calls) const;
  double total_variance(uint64_t calls) const;

 private:
  void keep_top(double t, double w);
};

}  // namespace kc
