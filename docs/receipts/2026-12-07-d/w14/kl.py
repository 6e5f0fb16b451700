# KL of each variant's next-token distribution: against main's bf16 cache (q4h's cost) and against main's q4h (the
# contract change's own cost). wK: HKV_STUDY_WBITS=K, W held as round_even(e·s·2^(K−E)); 21 is the contract before.
import os
import numpy as np
V = 256
def load(p): return np.fromfile(p, dtype='<f4').reshape(-1, V).astype(np.float64)
def logp(a):
    a = a - a.max(1, keepdims=True)
    return a - np.log(np.exp(a).sum(1, keepdims=True))
def kl(a, b):
    la, lb = logp(a), logp(b)
    return (np.exp(la) * (la - lb)).sum(1)
print('| tokens | W | KL from bf16: mean | max | KL from q4h (W 22 bits): mean | max | top token as q4h |')
print('|---|---|---|---|---|---|---|')
for n in ['2k', '8k']:
    if not os.path.exists(f'main_bf16_{n}.f32'): continue
    ref, q = load(f'main_bf16_{n}.f32'), load(f'main_q4h_{n}.f32')
    for k in [21, 13, 9]:
        if not os.path.exists(f'w{k}_{n}.f32'): continue
        y = load(f'w{k}_{n}.f32')
        a, b = kl(ref, y), kl(q, y)
        same = int((q.argmax(1) == y.argmax(1)).sum())
        print(f'| {len(ref):,} | {k + 1} bits | {a.mean():.3e} | {a.max():.3e} | {b.mean():.3e} | {b.max():.3e} | {same:,} of {len(ref):,} |')
