// Drafted greedy decoding: k tokens drafted by prompt lookup, verified in one forward pass, the rejected
// ones rolled back exactly. The tokens and the sequence's state equal those of plain greedy decoding
// (tests/test_draft.cpp on the oracle; the engine's snapshot/rollback is checked on the GPU).
#pragma once

#include <cstdint>
#include <vector>

#include "reference/model.h"

namespace hkv {

// A sequence on some backend, as drafted decoding needs it.
class DraftTarget {
 public:
  virtual ~DraftTarget() = default;
  // Feeds tokens in order; returns logits [tokens][vocab].
  virtual std::vector<float> feed(const std::vector<int32_t>& tokens) = 0;
  // Remembers the state (DeltaNet, conv, position); rollback() returns to it. Cache rows written after
  // the mark are left in place: they sit past the position and are overwritten before anything reads them.
  virtual void mark() = 0;
  virtual void rollback() = 0;
  virtual int64_t vocab() const = 0;
};

// The oracle as a draft target: mark() copies the conv and DeltaNet states and the position.
class OracleDraftTarget : public DraftTarget {
 public:
  OracleDraftTarget(const Model& m, SequenceState& s) : m_(m), s_(s) {}
  std::vector<float> feed(const std::vector<int32_t>& tokens) override { return forward(m_, s_, tokens); }
  void mark() override {
    pos_ = s_.pos;
    conv_ = s_.conv;
    S_ = s_.S;
  }
  void rollback() override {
    s_.pos = pos_;
    s_.conv = conv_;
    s_.S = S_;
  }
  int64_t vocab() const override { return m_.config.vocab_size; }

 private:
  const Model& m_;
  SequenceState& s_;
  int64_t pos_ = 0;
  std::vector<std::vector<float>> conv_, S_;
};

// The draft: the tokens that followed the most recent earlier occurrence of the history's last n tokens
// (n from `ngram` down to 1), at most k of them. Empty when nothing matches.
std::vector<int32_t> prompt_lookup_draft(const std::vector<int32_t>& history, int k, int ngram = 3);

struct DraftStats {
  int64_t rounds = 0, drafted = 0, accepted = 0;
};

// Greedy decoding of n_new tokens after `prompt` with up to k drafted tokens a round.
std::vector<int32_t> generate_drafted(DraftTarget& seq, const std::vector<int32_t>& prompt, int n_new, int k,
                                      DraftStats* stats = nullptr);

}  // namespace hkv
