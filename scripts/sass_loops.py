#!/usr/bin/env python3
"""The loops of a kernel's machine code and what they issue: one line per loop (a backward branch), with its
start and end address, its instruction count and its most frequent opcodes. This is how docs/RESULTS.md
counts instructions a weight (the MLX4 matvec) or a key (the attention's value loop).

usage: scripts/sass_loops.py FILE.sass KERNEL [--min N]
  FILE.sass  the output of `cuobjdump -sass OBJECT` (an object or cubin built for sm_90)
  KERNEL     a substring of the mangled name, e.g. matvec_mlx4_smem_kernelILi1ELi2ELi4ELb1E
  --min N    only loops of at least N instructions (default 1)
Every function whose name contains KERNEL is listed. A loop's count includes both sides of any branch
inside it, so it is what the loop holds, not what one pass executes.
"""
import argparse
import collections
import re
import signal
import sys

INSN = re.compile(r"\s+/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")
BRANCH = re.compile(r"\bBRA\s+(?:`\()?0x([0-9a-f]+)")
PREDICATE = re.compile(r"^@!?U?P[T0-9]+\s+")


def functions(lines):
    """[(name, [(address, text)])] of a cuobjdump listing."""
    out = []
    for line in lines:
        if "Function :" in line:
            out.append((line.split("Function :", 1)[1].strip(), []))
            continue
        m = INSN.match(line)
        if m and out:
            out[-1][1].append((int(m.group(1), 16), m.group(2)))
    return out


def loops(insns):
    """(start, end, [texts]) for each backward branch: the instructions from its target to it."""
    for addr, text in insns:
        m = BRANCH.search(text)
        if m and int(m.group(1), 16) <= addr:
            start = int(m.group(1), 16)
            yield start, addr, [t for a, t in insns if start <= a <= addr]


def opcode(text):
    return PREDICATE.sub("", text).split()[0]


def main():
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # piped into head: stop quietly
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("sass")
    ap.add_argument("kernel")
    ap.add_argument("--min", type=int, default=1)
    args = ap.parse_args()
    found = False
    with open(args.sass, encoding="utf-8", errors="replace") as f:
        for name, insns in functions(f.read().split("\n")):
            if args.kernel not in name:
                continue
            found = True
            print(f"{name}: {len(insns)} instructions")
            for start, end, body in loops(insns):
                if len(body) < args.min:
                    continue
                ops = collections.Counter(opcode(t) for t in body).most_common(10)
                print(f"  loop {start:#06x}-{end:#06x}: {len(body)} instructions: " +
                      ", ".join(f"{o} {n}" for o, n in ops))
    if not found:
        sys.exit(f"{args.sass}: no function whose name contains {args.kernel!r}")


if __name__ == "__main__":
    main()
