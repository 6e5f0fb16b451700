import numpy as np, sys
V=256
def load(p): return np.fromfile(p,dtype='<f4').reshape(-1,V).astype(np.float64)
def kl(a,b):  # KL(a||b) per row, a and b logits
    la=a-a.max(1,keepdims=True); la-=np.log(np.exp(la).sum(1,keepdims=True))
    lb=b-b.max(1,keepdims=True); lb-=np.log(np.exp(lb).sum(1,keepdims=True))
    return (np.exp(la)*(la-lb)).sum(1)
for n in ['2k','8k']:
    bf,old,new=load(f'bf16_{n}.f32'),load(f'old_q4h_{n}.f32'),load(f'new_q4h_{n}.f32')
    for name,(x,y) in {'bf16 vs q4h fp32 scores':(bf,old),'bf16 vs q4h integer scores':(bf,new),'q4h fp32 vs integer scores':(old,new)}.items():
        k=kl(x,y); d=np.abs(x-y).max(1)
        top=(x.argmax(1)==y.argmax(1)).sum()
        print(f'{n} | {name} | {k.mean():.3e} | {k.max():.3e} | {d.max():.3e} | {top}/{len(x)}')
