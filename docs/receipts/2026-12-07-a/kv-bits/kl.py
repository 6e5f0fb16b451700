# 2026-12-07-a (CPU), after logits.sh: KL of each variant's next-token distribution from main's bf16 cache (fp32
# [tokens][256], the trained model's vocab). kKvV: K rows at K bits, V rows at V bits (0: not rounded, bf16), each at
# q4h's group, rotation and searched scale; k4v4 is q4h's rounding read back through the bf16 cache.
import numpy as np
V = 256
def load(p): return np.fromfile(p, dtype='<f4').reshape(-1, V).astype(np.float64)
def logp(a):
    a = a - a.max(1, keepdims=True)
    return a - np.log(np.exp(a).sum(1, keepdims=True))
def kl(a, b):  # KL(a || b) a row
    la, lb = logp(a), logp(b)
    return (np.exp(la) * (la - lb)).sum(1)
print('| tokens | variant | K + V bytes a (position, KV head) | KL mean | KL max | same top token |')
print('|---|---|---|---|---|---|')
for n in ['2k', '8k']:
    ref = load(f'main_bf16_{n}.f32')
    for name, size in [('main_q4h', '144 + 144'), ('k4v4', '144 + 144'), ('k4v0', '144 + 512'), ('k0v4', '512 + 144'),
                       ('k5v3', '176 + 112'), ('k6v2', '208 + 80'), ('k3v5', '112 + 176')]:
        try:
            y = load(f'{name}_{n}.f32' if name != 'main_q4h' else f'main_q4h_{n}.f32')
        except FileNotFoundError:
            continue
        k = kl(ref, y)
        label = 'q4h (the cache)' if name == 'main_q4h' else name
        print(f'| {len(ref):,} | {label} | {size} | {k.mean():.3e} | {k.max():.3e} | '
              f'{(ref.argmax(1) == y.argmax(1)).sum():,} |')
