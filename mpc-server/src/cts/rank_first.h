// The first places of a ranking in the order GCC's std::sort gives, without
// sorting the rest: the cut mapping (cts/lut_map.cc) ranks each node's
// candidate cuts by (arrival, leaf count) and keeps the first few, and the
// mapping's figures are those of std::sort's tie order (a stable sort
// ranks ties otherwise and changes them).
#ifndef KMPC_CTS_RANK_FIRST_H_
#define KMPC_CTS_RANK_FIRST_H_

#include <cstddef>
#include <cstdint>

namespace kmpc::cts {

// Keys compare by their bits 32 and up (the rank); bits 0-31 ride along
// (the candidate's index) and tell ties apart in the result only by where
// std::sort leaves them. Writes the first `keep` of keys[0 .. n) in the
// order std::sort(keys, keys + n, less on bits 32 and up) gives, as
// libstdc++ (GCC 12, bits/stl_algo.h) implements it, to out[0 ..
// min(n, keep)); returns that count. Reorders keys.
size_t RankFirst(uint64_t* keys, size_t n, size_t keep, uint64_t* out);

}  // namespace kmpc::cts

#endif  // KMPC_CTS_RANK_FIRST_H_
