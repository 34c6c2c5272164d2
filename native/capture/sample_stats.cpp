#include "sample_stats.hpp"

#include <algorithm>

namespace kc {

void SampleStats::keep_top(double t, double w) {
  if (n_top == kTop && t <= top_t[kTop - 1]) return;  // not among the largest
  int i = n_top < kTop ? n_top++ : kTop - 1;          // else the smallest kept one goes
  top_t[i] = t, top_w[i] = w;
  for (; i > 0 && top_t[i] > top_t[i - 1]; --i) std::swap(top_t[i], top_t[i - 1]), std::swap(top_w[i], top_w[i - 1]);
}

void SampleStats::add(double t, double w) {
  ++timed;
  sw += w;
  swt += w * t;
  sw2 += w * w;
  sw2t += w * w * t;
  sw2t2 += w * w * t * t;
  const uint64_t ns = uint64_t(t + 0.5);
  min_ns = std::min(min_ns, ns);
  max_ns = std::max(max_ns, ns);
  keep_top(t, w);
}

void SampleStats::merge(const SampleStats& s) {
  timed += s.timed;
  sw += s.sw, swt += s.swt, sw2 += s.sw2, sw2t += s.sw2t, sw2t2 += s.sw2t2;
  min_ns = std::min(min_ns, s.min_ns);
  max_ns = std::max(max_ns, s.max_ns);
  for (int i = 0; i < s.n_top; ++i) keep_top(s.top_t[i], s.top_w[i]);
  if (s.timed) {
    std::copy(s.grid, s.grid + 3, grid);
    std::copy(s.block, s.block + 3, block);
  }
}

SampleStats::Kept SampleStats::kept() const {
  Kept k{timed, 0, sw, swt, sw2, sw2t, sw2t2};
  for (int i = 0; i < n_top && k.timed > 2; ++i) {
    const double t = top_t[i], w = top_w[i];
    const double others = (k.swt - w * t) / (k.sw - w);  // the mean of the rest
    if (!(k.sw - w > 0) || t - others < kPreemptedExcessNs || t < kPreemptedRatio * others) break;
    --k.timed, ++k.preempted;
    k.sw -= w, k.swt -= w * t, k.sw2 -= w * w, k.sw2t -= w * w * t, k.sw2t2 -= w * w * t * t;
  }
  return k;
}

double SampleStats::total(uint64_t calls) const {
  const Kept k = kept();
  return k.sw > 0 ? double(calls) * k.swt / k.sw : 0.0;
}

double SampleStats::total_variance(uint64_t calls) const {
  const Kept k = kept();
  if (k.sw <= 0 || k.timed < 2) return 0.0;
  const double mean = k.swt / k.sw;
  // Hajek's estimator of the mean, linearised: sum w^2 (t - mean)^2 / (sum w)^2.
  const double ss = std::max(0.0, k.sw2t2 - 2 * mean * k.sw2t + mean * mean * k.sw2);
  return double(calls) * double(calls) * ss / (k.sw * k.sw);
}

}  // namespace kc
