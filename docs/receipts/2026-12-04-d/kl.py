# 2026-12-04-d (CPU), after logits.sh: KL of the next-token distributions between hkv logits files (fp32 [tokens][256], the trained model's vocab):
# bf16 cache against q4h before 2026-12-04-c's values change (old) and after (new), and old against new.
import numpy as np
V = 256
def load(p): return np.fromfile(p, dtype='<f4').reshape(-1, V).astype(np.float64)
def logp(a):
    a = a - a.max(1, keepdims=True)
    return a - np.log(np.exp(a).sum(1, keepdims=True))
def kl(a, b):  # KL(a || b) a row
    la, lb = logp(a), logp(b)
    return (np.exp(la) * (la - lb)).sum(1)
for n in ['2k', '8k']:
    bf, old, new = load(f'new_bf16_{n}.f32'), load(f'old_q4h_{n}.f32'), load(f'new_q4h_{n}.f32')
    pairs = {'bf16 vs q4h fp32 values (old)': (bf, old), 'bf16 vs q4h integer values (new)': (bf, new),
             'q4h fp32 vs integer values': (old, new)}
    for name, (x, y) in pairs.items():
        k = kl(x, y)
        print(f'| {len(x):,} | {name} | {k.mean():.3e} | {k.max():.3e} | {np.abs(x - y).max():.3f} | '
              f'{(x.argmax(1) == y.argmax(1)).sum():,} |')
