# 2026-12-07-c (CPU), after logits.sh: KL of each variant's next-token distribution from main's bf16 cache (fp32
# [tokens][256], the trained model's vocab). dN: HKV_STUDY_DITHER=N (1: K and V dithered, 2: V alone, 3: K alone, 4:
# neither: q4h's rounding), read back through the bf16 cache.
import os
import numpy as np
V = 256
def load(p): return np.fromfile(p, dtype='<f4').reshape(-1, V).astype(np.float64)
def logp(a):
    a = a - a.max(1, keepdims=True)
    return a - np.log(np.exp(a).sum(1, keepdims=True))
def kl(a, b):  # KL(a || b) a row
    la, lb = logp(a), logp(b)
    return (np.exp(la) * (la - lb)).sum(1)
names = [('main_q4h', 'q4h (the cache)'), ('d4', 'q4h rounding, no dither (4)'), ('d1', 'K and V dithered (1)'),
         ('d2', 'V dithered (2)'), ('d3', 'K dithered (3)')]
print('| tokens | variant | KL mean | KL max | same top token |')
print('|---|---|---|---|---|')
for n in ['2k', '8k']:
    if not os.path.exists(f'main_bf16_{n}.f32'):
        continue
    ref = load(f'main_bf16_{n}.f32')
    for f, label in names:
        if not os.path.exists(f'{f}_{n}.f32'):
            continue
        y = load(f'{f}_{n}.f32')
        k = kl(ref, y)
        same = int((ref.argmax(1) == y.argmax(1)).sum())
        print(f'| {len(ref):,} | {label} | {k.mean():.3e} | {k.max():.3e} | {same:,} |')
