// The work list of a persistent decode kernel, on the host: what a decode token's launches become when one launch runs
// them all. A token is a list of ops in dependency order (a layer's input norm with its projections, the DeltaNet
// heads or the attention chunks and their merge, the output projection, the MLP, and the head at the end), each cut
// into items (a tile of a matvec's rows, a DeltaNet value head, an attention chunk of one KV head). Resident blocks
// take items in list order from one ticket counter; an item waits until the ops it reads have completed the items it
// needs, counted per op in global memory, and while it waits its block already streams the item's weights (they never
// depend on the token). Because every item waits only on items before it in the list, and an item is taken only after
// every earlier item has been taken by a block that is running, the list finishes for any number of blocks: a block
// waits only on items already taken by running blocks.
//
// simulate() runs a list on the host with a number of blocks, random item times and a bandwidth model: each ticket goes
// to the block free first, and its item completes no earlier than the items it reads. A list that Schedule::check()
// refuses (a wait on a later op) is reported as unable to finish. Its time is a model, not a measurement.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "reference/config.h"

namespace hkv::cuda::sched {

enum class OpKind { NormMatvec, Matvec, DeltaNetHead, AttnPrep, AttnChunk, AttnMerge, Elementwise, Argmax };
const char* op_kind_name(OpKind k);

// One op's dependency: `need` items of op `op` complete, counting from the op's first (needs of a part: a DeltaNet head
// needs the tiles holding its rows, which the list builder states as the whole op, the safe choice).
struct Dep {
  int op = 0;
  int need = 0;
};

struct Op {
  OpKind kind = OpKind::Matvec;
  std::string name;  // "layer 3 down", "head lm_head", ...
  int layer = -1;
  int items = 0;              // parts the op is cut into
  double bytes_per_item = 0;  // weight and cache bytes an item reads from memory (its share of the floor)
  std::vector<Dep> deps;      // ops whose items must be complete before any item of this op starts
};

struct Schedule {
  std::vector<Op> ops;          // in list order: every dep names an earlier op
  std::vector<int> first_item;  // ops.size() + 1 entries: op k's items are [first_item[k], first_item[k + 1])
  int items() const { return first_item.empty() ? 0 : first_item.back(); }
  double bytes() const;       // every item's bytes: the token's floor in bytes
  std::string check() const;  // "" when every dep names an earlier op and asks for at most its items
};

struct Shape {
  int64_t depth = 1024;          // cache positions read by each attention layer
  int rows_per_tile = 64;        // a matvec item's output rows
  double weight_bits = 4.5;      // bits a weight element takes (MLX4 with a bf16 scale and bias a group of 64: 4.5)
  double cache_row_bytes = 144;  // one (position, KV head) row of K or of V (q4h at head_dim 256: 144)
};

// The decode token of config c (one row, batch 1) as a list.
Schedule decode_schedule(const Config& c, const Shape& s);

struct SimConfig {
  int blocks = 132;                 // resident blocks (one a multiprocessor)
  double bandwidth = 3.0e12;        // bytes a second the whole card moves
  double item_overhead_s = 0.5e-6;  // an item's fixed cost: taking the ticket, its counters, its reduction
  double jitter = 0.3;              // each item's streaming time times a uniform factor in [1 − jitter, 1 + jitter]
  bool prefetch = true;             // a waiting block streams its item's weights while it waits
  uint64_t seed = 1;
};

struct SimResult {
  bool finished = false;
  std::string error;         // why the list cannot finish (which op waits on which)
  double seconds = 0;        // the modelled token
  double floor_seconds = 0;  // bytes / bandwidth
  double wait_seconds = 0;   // blocks' time waiting on counters, summed over blocks
  int64_t items_run = 0;
};

SimResult simulate(const Schedule& s, const SimConfig& cfg);

}  // namespace hkv::cuda::sched
