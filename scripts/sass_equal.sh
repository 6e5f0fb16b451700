#!/usr/bin/env bash
# usage: scripts/sass_equal.sh OLD.cubin|OLD.o ... -- NEW.cubin|NEW.o ...
#        scripts/sass_equal.sh OLD NEW
# Whether a refactor left the machine code alone: every function of the old objects (the kernels, and any device
# function ptxas keeps apart) against the one of the same name in the new, by its SASS (cuobjdump -sass: every
# instruction, its address and its encoding) and its resource use (cuobjdump -res-usage: registers, stack, shared,
# local and constant memory). Names are compared after the anonymous namespace's per-file mangling
# (<len>_GLOBAL__N__<hash>_<len>_<file>_<hash>) is made one, in the names and in the bodies, so a kernel may move
# between files. One line a function, demangled, then "N same, N differ, N missing":
#   same NAME      the new code is the old one. nvcc's device compiler does not give every kernel the same code on
#                  every run (the q4h chunk kernels with V staged take one of two), so pass several builds of the old
#                  source: "(one of the K codes the old builds give it)" where they disagree and the new code is one
#                  of theirs; "(... and its twins ...)" where it is the code the old builds give a twin, a function
#                  that had the very same code as this one in one old object (so the same function); "(SASS the
#                  same; static shared A -> B bytes ...)" where only the end padding of the static shared memory moved
#                  within the 128-byte units the card allocates (a module with an aligned extern __shared__ array
#                  pads every kernel's static shared memory to that alignment)
#   differs NAME   (the first difference)
#   missing NAME   (only in the old | only in the new)
# Exit 0 when every function is the same, 1 otherwise, 2 on a usage or tool error. The objects: cubins (nvcc -cubin
# -gencode arch=compute_90a,code=sm_90a with the build's flags) or the build's own .o files; a name in several old
# objects is several builds of it. cuobjdump from $CUOBJDUMP, the PATH, or /usr/local/cuda/bin.
set -euo pipefail

usage() {
  sed -n '2,3p' "$0" | sed 's/^# //' >&2
  exit 2
}
old=() new=() seen_sep=0
for arg in "$@"; do
  if [ "$arg" = "--" ]; then
    seen_sep=1
  elif [ $seen_sep = 0 ]; then
    old+=("$arg")
  else
    new+=("$arg")
  fi
done
if [ $seen_sep = 0 ]; then
  [ ${#old[@]} = 2 ] || usage
  new=("${old[1]}") old=("${old[0]}")
fi
if [ ${#old[@]} = 0 ] || [ ${#new[@]} = 0 ]; then usage; fi
for f in "${old[@]}" "${new[@]}"; do
  [ -f "$f" ] || { echo "sass_equal: no such file: $f" >&2; exit 2; }
done
cuobjdump=${CUOBJDUMP:-$(command -v cuobjdump || echo /usr/local/cuda/bin/cuobjdump)}
[ -x "$cuobjdump" ] || { echo "sass_equal: cuobjdump not found (set CUOBJDUMP, or put the CUDA toolkit's bin on PATH)" >&2; exit 2; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
dump() {  # side files...: the SASS and the resource use of each file of one side
  local side=$1 i=0
  shift
  for f in "$@"; do
    i=$((i + 1))
    "$cuobjdump" -sass "$f" > "$tmp/$side.$(printf %04d $i).sass"
    "$cuobjdump" -res-usage "$f" > "$tmp/$side.$(printf %04d $i).res"
  done
}
dump old "${old[@]}"
dump new "${new[@]}"

python3 - "$tmp" << 'EOF'
import glob, re, subprocess, sys

tmp = sys.argv[1]
ANON = re.compile(r"(\d+)(_GLOBAL__N__)")

def norm(s):
    """The anonymous namespace's mangling <len>_GLOBAL__N__<hash>_<len>_<file>_<hash> as GCC's 12_GLOBAL__N_1."""
    out, at = [], 0
    for m in ANON.finditer(s):
        if m.start() < at:
            continue
        digits = m.group(1)
        for k in range(len(digits)):  # the length prefix is a suffix of the digits before the name
            n = int(digits[k:])
            ident = s[m.start(2):m.start(2) + n]
            if re.fullmatch(r"_GLOBAL__N__[0-9a-f]+_\d+_\w+_[0-9a-f]+", ident):
                out.append(s[at:m.start(1) + k] + "12_GLOBAL__N_1")
                at = m.start(2) + n
                break
    out.append(s[at:])
    return "".join(out)

def functions(side):
    """name -> its codes, each (SASS lines, resource line), one a build where the side's objects hold several."""
    fns = {}
    for sass, res in zip(sorted(glob.glob(f"{tmp}/{side}.*.sass")), sorted(glob.glob(f"{tmp}/{side}.*.res"))):
        code, cur = {}, None
        for line in open(sass):
            m = re.match(r"\s*Function : (\S+)", line)
            if m:
                cur = norm(m.group(1))
                code[cur] = [[], ""]
            elif cur is not None and line.strip().startswith(".........."):
                cur = None  # the function's end
            elif cur is not None and line.strip():
                code[cur][0].append(norm(" ".join(line.split())))
        cur = None
        for line in open(res):
            m = re.match(r"\s*Function (\S+):", line)
            if m:
                cur = norm(m.group(1))
            elif cur is not None and "REG:" in line:
                if cur in code:
                    code[cur][1] = " ".join(line.split())
                cur = None
        by_code = {}
        for name, (lines, r) in code.items():
            fns.setdefault(name, [])
            if (lines, r) not in fns[name]:
                fns[name].append((lines, r))
            by_code.setdefault(("\n".join(lines), r), []).append(name)
        for group in by_code.values():  # functions with one code in one object: twins
            for name in group:
                twins.setdefault(name, set()).update(group)
    return fns

twins = {}

def demangle(names):
    try:
        r = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True, check=True)
        out = r.stdout.split("\n")[: len(names)]
    except (OSError, subprocess.CalledProcessError):
        return {n: n for n in names}
    short = {}
    for n, d in zip(names, out):
        d = d.replace("(anonymous namespace)::", "").replace("hkv::cuda::", "").replace("hkv::", "")
        d = re.sub(r"^void ", "", d)
        d = re.sub(r"\((?:[^()]|\([^()]*\))*\)$", "", d)  # the parameter list
        short[n] = d or n
    return short

def shared_units(res):
    """The resource line with its static shared bytes as the card allocates them: 128-byte units."""
    return re.sub(r"SHARED:(\d+)", lambda m: f"SHARED:{(int(m.group(1)) + 127) // 128}x128", res)

def first_difference(o, n):
    (oa, orr), (na, nr) = o, n
    if oa == na:
        return f"resources: {orr} | {nr}"
    i = next((i for i, (a, b) in enumerate(zip(oa, na)) if a != b), min(len(oa), len(na)))
    a = oa[i] if i < len(oa) else "(end)"
    b = na[i] if i < len(na) else "(end)"
    return f"{len(oa)} | {len(na)} lines, first at {i}: {a[:80]} | {b[:80]}"

old = functions("old")
old_twins, twins = twins, {}
new = functions("new")

def allowed(n):
    """The codes the old builds give n or a twin of it (a function whose code is n's in one of the old objects)."""
    seen, todo, codes = {n}, [n], []
    while todo:
        for t in old_twins.get(todo.pop(), ()):
            if t not in seen:
                seen.add(t)
                todo.append(t)
    for t in sorted(seen):
        codes += [c for c in old.get(t, []) if c not in codes]
    return codes, sorted(seen - {n})

names = sorted(set(old) | set(new))
shown = demangle(names)
names.sort(key=lambda n: shown[n])
same = differ = missing = 0
for n in names:
    if n not in new or n not in old:
        print(f"missing {shown[n]} (only in the {'old' if n in old else 'new'})")
        missing += 1
    elif all(c in old[n] for c in new[n]):
        k = len(old[n])
        print(f"same {shown[n]}" + (f" (one of the {k} codes the old builds give it)" if k > 1 else ""))
        same += 1
    elif all(c in allowed(n)[0] for c in new[n]):
        codes, tw = allowed(n)
        print(f"same {shown[n]} (one of the {len(codes)} codes the old builds give it and its twins, the functions "
              f"that had its code in one old build: {', '.join(shown[t] for t in tw)})")
        same += 1
    elif all(any(c[0] == o[0] and shared_units(c[1]) == shared_units(o[1]) for o in old[n]) for c in new[n]):
        o_sh = re.search(r"SHARED:(\d+)", old[n][0][1]).group(1)
        n_sh = re.search(r"SHARED:(\d+)", new[n][0][1]).group(1)
        print(f"same {shown[n]} (SASS the same; static shared {o_sh} -> {n_sh} bytes, the same 128-byte units)")
        same += 1
    else:
        print(f"differs {shown[n]} ({first_difference(old[n][0], next(c for c in new[n] if c not in old[n]))})")
        differ += 1
print(f"{same} same, {differ} differ, {missing} missing")
sys.exit(0 if differ == 0 and missing == 0 else 1)
EOF
