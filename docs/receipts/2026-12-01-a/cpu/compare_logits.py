#!/usr/bin/env python3
"""Compare two `hkv logits` files (fp32 [tokens][vocab], little-endian), row by row: how many rows differ, the largest
logit difference, and KL(a || b) of each row's softmax (mean, max, p99), and top-1 agreement.
usage: compare_logits.py A B [vocab (256: fixtures/trained)] [label]"""
import math
import struct
import sys


def load(path):
    b = open(path, 'rb').read()
    return struct.unpack('<%df' % (len(b) // 4), b)


def log_softmax(r):
    m = max(r)
    s = sum(math.exp(x - m) for x in r)
    return [x - m - math.log(s) for x in r]


def main():
    a, b = load(sys.argv[1]), load(sys.argv[2])
    V = int(sys.argv[3]) if len(sys.argv) > 3 else 256
    label = sys.argv[4] if len(sys.argv) > 4 else sys.argv[1] + ' -> ' + sys.argv[2]
    T = len(a) // V
    kls, mx, top, nd = [], 0.0, 0, 0
    for t in range(T):
        ra, rb = a[t * V:(t + 1) * V], b[t * V:(t + 1) * V]
        nd += ra != rb
        mx = max(mx, max(abs(x - y) for x, y in zip(ra, rb)))
        la, lb = log_softmax(ra), log_softmax(rb)
        kls.append(sum(math.exp(x) * (x - y) for x, y in zip(la, lb)))
        top += ra.index(max(ra)) == rb.index(max(rb))
    kls.sort()
    print(f"{label}: rows differing {nd}/{T}, max|dlogit| {mx:.3e}, KL mean {sum(kls) / T:.3e}, max {kls[-1]:.3e}, "
          f"p99 {kls[int(0.99 * T)]:.3e}, top1 agree {top}/{T}")


if __name__ == '__main__':
    main()
