#include "compare/draft.h"

#include "reference/model.h"

namespace hkv {

std::vector<int32_t> prompt_lookup_draft(const std::vector<int32_t>& history, int k, int ngram) {
  const int64_t H = int64_t(history.size());
  for (int n = std::min<int64_t>(ngram, H - 1); n >= 1; n--) {
    // the latest start s < H − n whose n tokens equal the last n
    for (int64_t s = H - n - 1; s >= 0; s--) {
      bool match = true;
      for (int i = 0; i < n && match; i++) match = history[size_t(s + i)] == history[size_t(H - n + i)];
      if (!match) continue;
      std::vector<int32_t> d;
      for (int64_t j = s + n; j < H && int(d.size()) < k; j++) d.push_back(history[size_t(j)]);
      if (!d.empty()) return d;
    }
  }
  return {};
}

std::vector<int32_t> generate_drafted(DraftTarget& seq, const std::vector<int32_t>& prompt, int n_new, int k,
                                      DraftStats* stats) {
  const int64_t V = seq.vocab();
  std::vector<int32_t> history = prompt, out;
  std::vector<float> logits = seq.feed(prompt);
  int32_t next = argmax(logits.data() + (prompt.size() - 1) * size_t(V), V);
  while (int(out.size()) < n_new) {
    out.push_back(next);
    history.push_back(next);
    if (int(out.size()) == n_new) break;
    // draft, then feed `next` and the drafts in one pass
    std::vector<int32_t> draft = prompt_lookup_draft(history, std::min(k, n_new - int(out.size())));
    std::vector<int32_t> round = {next};
    round.insert(round.end(), draft.begin(), draft.end());
    if (!draft.empty()) seq.mark();
    logits = seq.feed(round);
    // accept drafts while each is the greedy choice after the tokens before it
    size_t j = 0;
    while (j < draft.size() && argmax(logits.data() + j * size_t(V), V) == draft[j]) j++;
    if (stats) stats->rounds++, stats->drafted += int64_t(draft.size()), stats->accepted += int64_t(j);
    for (size_t i = 0; i < j && int(out.size()) < n_new; i++) {
      out.push_back(draft[i]);
      history.push_back(draft[i]);
    }
    if (j < draft.size()) {
      // roll back the rejected drafts: back to before the round, then feed what was accepted again
      seq.rollback();
      std::vector<int32_t> kept(round.begin(), round.begin() + long(j + 1));
      logits = seq.feed(kept);
    }
    next = argmax(logits.data() + j * size_t(V), V);
  }
  return out;
}

}  // namespace hkv
