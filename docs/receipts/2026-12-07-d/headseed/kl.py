# 2026-12-07-d (CPU), after run.sh: KL of each seeded q4h's next-token distribution from main's bf16 cache.
# sharedK: q4h-seedK, one ±1 diagonal for every head; headK: HKV_STUDY_HEADSEED=1 q4h-seedK, a diagonal per
# attention layer and KV head (seed K·4096 + layer·64 + head). The trained model, fixtures/trained/mlx.
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
print('| tokens | rotation | seed 1 | seed 2 | seed 3 | seed 4 | mean of the seeds | worst row, largest of the seeds |')
print('|---|---|---|---|---|---|---|---|')
for n in ['2k', '8k']:
    if not os.path.exists(f'main_bf16_{n}.f32'): continue
    ref = load(f'main_bf16_{n}.f32')
    for kind, label in [('shared', 'one diagonal for every head'), ('head', 'a diagonal per layer and head')]:
        means, worst = [], 0.0
        for k in [1, 2, 3, 4]:
            f = f'{kind}{k}_{n}.f32'
            if not os.path.exists(f): means.append(None); continue
            x = kl(ref, load(f)); means.append(x.mean()); worst = max(worst, x.max())
        got = [m for m in means if m is not None]
        if not got: continue
        cells = ' | '.join(f'{m:.3e}' if m is not None else '' for m in means)
        print(f'| {len(ref):,} | {label} | {cells} | {np.mean(got):.3e} | {worst:.3e} |')
    print(f'| {len(ref):,} | q4h (no seed: the Hadamard transform alone) | {kl(ref, load(f"main_q4h_{n}.f32")).mean():.3e} | | | | | {kl(ref, load(f"main_q4h_{n}.f32")).max():.3e} |')
