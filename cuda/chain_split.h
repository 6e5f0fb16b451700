// The balanced chain form's split of a step's rows among the grid's warps (matvec_chain_steps_kernel with BAL,
// ChainForm::Balanced), for host and device: tests/test_schedule.cpp checks it on the host.
#pragma once

#include <cstdint>

#include "reference/scalar.h"

namespace hkv::cuda {

// Warp w of T takes rows [chain_split(w, R, T), chain_split(w + 1, R, T)) of a step's R rows: the rows in order, each
// warp ⌊R/T⌋ or ⌈R/T⌉ of them.
HKV_HD int64_t chain_split(int64_t w, int64_t R, int64_t T) { return w * R / T; }
// How many of G blocks (of any number of warps each) hold rows: all G when R ≥ G, else R, one row each.
HKV_HD int64_t chain_split_blocks(int64_t R, int64_t G) { return R < G ? R : G; }

}  // namespace hkv::cuda
