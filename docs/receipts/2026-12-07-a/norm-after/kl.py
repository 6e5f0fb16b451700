# 2026-12-07-a (CPU), after logits.sh: KL of the next-token distributions (fp32 [tokens][256], the trained model's
# vocab) between the contract as it is (main) and the norm's scale after the product (after), per checkpoint and cache,
# beside what the q4h cache itself costs (bf16 cache against q4h, main).
import numpy as np
V = 256
def load(p): return np.fromfile(p, dtype='<f4').reshape(-1, V).astype(np.float64)
def logp(a):
    a = a - a.max(1, keepdims=True)
    return a - np.log(np.exp(a).sum(1, keepdims=True))
def kl(a, b):  # KL(a || b) a row
    la, lb = logp(a), logp(b)
    return (np.exp(la) * (la - lb)).sum(1)
print('| tokens | weights | compared | KL mean | KL max | largest logit difference | same top token |')
print('|---|---|---|---|---|---|---|')
for n in ['2k', '8k']:
    for w in ['mlx', 'hf']:
        pairs = {}
        for c in ['bf16', 'q4h']:
            pairs[f'{c} cache: main against norm-after'] = (load(f'main_{w}_{c}_{n}.f32'), load(f'after_{w}_{c}_{n}.f32'))
        pairs['main: bf16 cache against q4h'] = (load(f'main_{w}_bf16_{n}.f32'), load(f'main_{w}_q4h_{n}.f32'))
        for name, (x, y) in pairs.items():
            k = kl(x, y)
            print(f'| {len(x):,} | {w} | {name} | {k.mean():.3e} | {k.max():.3e} | {np.abs(x - y).max():.4f} | '
                  f'{(x.argmax(1) == y.argmax(1)).sum():,} |')
