// RankFirst (rank_first.h). libstdc++'s std::sort (bits/stl_algo.h, GCC
// 12) is introsort with a median-of-three pivot and an unguarded partition
// down to segments of 16 or fewer, a heap sort past 2 log2 n levels, then
// one insertion sort over all. Written out here so that only the first
// `keep` places are ranked: every segment lies wholly below the next, and
// the final insertion sort is stable, so the first places are the stable
// order of the segments that reach them.
#include "cts/rank_first.h"

#include <algorithm>
#include <bit>

namespace kmpc::cts {
namespace {

bool KeyLess(uint64_t x, uint64_t y) { return (x >> 32) < (y >> 32); }

void MedianToFirst(uint64_t* r, uint64_t* a, uint64_t* b, uint64_t* c) {
  if (KeyLess(*a, *b)) {
    std::iter_swap(r, KeyLess(*b, *c) ? b : KeyLess(*a, *c) ? c : a);
  } else {
    std::iter_swap(r, KeyLess(*a, *c) ? a : KeyLess(*b, *c) ? c : b);
  }
}

uint64_t* PartitionPivot(uint64_t* first, uint64_t* last) {
  MedianToFirst(first, first + 1, first + (last - first) / 2, last - 1);
  const uint64_t pivot = *first;  // stays at first: the scan starts past it
  for (uint64_t* lo = first + 1;; ++lo) {
    while (KeyLess(*lo, pivot)) ++lo;
    --last;
    while (KeyLess(pivot, *last)) --last;
    if (!(lo < last)) return lo;
    std::iter_swap(lo, last);
  }
}

// Introsort's partitioning of [first, last); segments from `need` on are
// left as they are, *bound the first place they take.
void Partitions(uint64_t* first, uint64_t* last, int depth, const uint64_t* need,
                uint64_t** bound) {
  while (last - first > 16) {
    if (depth == 0) {  // std::__partial_sort(first, last, last)
      std::make_heap(first, last, KeyLess);
      std::sort_heap(first, last, KeyLess);
      return;
    }
    --depth;
    uint64_t* cut = PartitionPivot(first, last);
    if (cut < need) {
      Partitions(cut, last, depth, need, bound);
    } else {
      *bound = std::min(*bound, cut);
    }
    last = cut;
  }
}

}  // namespace

size_t RankFirst(uint64_t* keys, size_t n, size_t keep, uint64_t* out) {
  if (keep == 0) return 0;
  uint64_t* bound = keys + n;
  if (n > 16) Partitions(keys, keys + n, 2 * (std::bit_width(n) - 1), keys + keep, &bound);
  size_t m = 0;  // out[0 .. m): the stable order of what was seen, cut at keep
  for (const uint64_t* x = keys; x < bound; ++x) {
    if (m == keep && !KeyLess(*x, out[m - 1])) continue;
    size_t i = m < keep ? m++ : m - 1;
    for (; i > 0 && KeyLess(*x, out[i - 1]); --i) out[i] = out[i - 1];
    out[i] = *x;
  }
  return m;
}

}  // namespace kmpc::cts
