# 2026-12-07-c: the relative RMS error of q4h's rounding (q4_0 grid, the scale searched as q4h's among 17 candidates) on
# 20,000 seeded Gaussian groups of 32, without and with a subtractive dither u in [-0.5, 0.5): 0.0815 and 0.0817.
import numpy as np
rng = np.random.default_rng(1)
def q(y, u):
    ext = y[np.argmax(np.abs(y))]
    w = ext / -8.0
    best = None
    for i in [0] + [i for i in range(-8, 9) if i != 0]:
        sc = np.float32(np.float16(w * (1 + i / 32)))
        if sc == 0 or not np.isfinite(sc): continue
        t = np.clip(np.rint(y / sc + u), -8, 7)
        v = sc * (t - u)
        e = ((v - y) ** 2).sum()
        if best is None or e < best[0]: best = (e, v)
    return best[1]
for name, dith in [('no dither', False), ('dither', True)]:
    num = den = 0.0
    for _ in range(20000):
        y = rng.standard_normal(32).astype(np.float32)
        u = rng.uniform(-0.5, 0.5, 32).astype(np.float32) if dith else np.zeros(32, np.float32)
        v = q(y, u)
        num += ((v - y) ** 2).sum(); den += (y ** 2).sum()
    print(f'{name}: relative RMS {np.sqrt(num / den):.4f}')
