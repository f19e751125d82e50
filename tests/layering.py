#!/usr/bin/env python3
"""layering.py - `make layering`: the layers of the tree, checked over its
sources and its built objects (issue 24, parts 1 and 5).

  1. vm/ includes nothing from compiler/, and compiler/ nothing from vm/:
     the two tools are siblings over isa/ (an #include whose path goes
     through the other's folder);
  2. bin/ppc links no BLAS and no kernels/ object: `ldd bin/ppc` names no
     BLAS library, none of bin/ppc's objects (its prerequisites in the
     Makefile) has an undefined cblas_ or *gemm symbol, and none of them is
     under build/kernels/; bin/ppvm links no compiler/ object;
  3. no cycles between files: file A -> file B when an object of A has an
     undefined symbol that B's object defines (nm over build/ objects of
     isa/, compiler/, vm/ and kernels/, CUDA ones included where built);
     every strongly connected component of more than one file is a cycle;
  4. no exit, _exit, _Exit, quick_exit or abort referenced by the objects of
     isa/, compiler/ (except the ppc main, compiler/ppc.c) or kernels/:
     library code returns a status.

Every violation is one line naming the file and the symbol (or include,
or library); the exit status is 1 when there is any, 0 otherwise, 2 when
the check itself cannot run (no objects: run `make all` first).

usage: tests/layering.py [--root DIR]   (DIR: the tree, default: this
script's parent's parent; its objects are in DIR/build)
"""
import argparse
import os
import re
import subprocess
import sys

LAYERS = ("isa", "compiler", "vm", "kernels")
NO_EXIT_LAYERS = ("isa", "compiler", "kernels")
NO_EXIT_ALLOWED = {"compiler/ppc.c"}  # the ppc main may end the process
EXIT_SYMBOLS = {"exit", "_exit", "_Exit", "quick_exit", "abort"}
BLAS_LIB = re.compile(r"lib(open)?blas|libcblas|libmkl")
BLAS_SYM = re.compile(r"^(cblas_|openblas_)|^[sdcz]gemm_?$")
INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^">]+)[">]')
# generated sources: the object is built from a file under build/gen
GENERATED = {"gen/parser": "compiler/parser.y", "gen/lexer": "compiler/lexer.l"}


def die(msg):
    print("layering: " + msg, file=sys.stderr)
    sys.exit(2)


def source_of(root, build, obj):
    """The source file (relative to root) an object in build/ is built
    from, or None when there is none any more (a stale object)."""
    rel = os.path.relpath(obj, build)[:-2]  # without ".o"
    if rel in GENERATED:
        return GENERATED[rel]
    for ext in (".c", ".cu", ".cpp"):
        if os.path.exists(os.path.join(root, rel + ext)):
            return rel + ext
    return None


def nm(obj):
    """(defined globals, undefined) symbol sets of one object."""
    try:
        out = subprocess.run(["nm", "-P", obj], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        die("nm %s failed: %s" % (obj, e))
    defined, undefined = set(), set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) < 2:
            continue
        name, kind = parts[0], parts[1]
        if kind == "U":
            undefined.add(name)
        elif kind in "TDBRCVWGSI" and kind != "U":  # uppercase: global (weak included)
            defined.add(name)
    return defined, undefined


def objects(root, build):
    """{source file: (defined, undefined)} for every current object of the
    layers, CUDA objects included."""
    files = {}
    for layer in LAYERS + ("gen",):
        top = os.path.join(build, layer)
        for dirpath, _, names in os.walk(top):
            for n in sorted(names):
                if not n.endswith(".o"):
                    continue
                obj = os.path.join(dirpath, n)
                src = source_of(root, build, obj)
                if src is None:
                    continue
                d, u = nm(obj)
                pd, pu = files.get(src, (set(), set()))
                files[src] = (pd | d, pu | u)
    return files


def make_prereqs(root, target):
    """The object prerequisites of a Makefile target (make -pq prints its
    database without building anything)."""
    try:
        out = subprocess.run(["make", "-C", root, "--no-print-directory", "-pq", target],
                             capture_output=True, text=True).stdout
    except OSError as e:
        die("cannot run make: %s" % e)
    for line in out.splitlines():
        if line.startswith(target + ":") and not line.startswith(target + "::"):
            return [w for w in line.split(":", 1)[1].split() if w.endswith(".o")]
    die("the Makefile has no target %s" % target)


def check_includes(root, out):
    for layer, other in (("vm", "compiler"), ("compiler", "vm")):
        for dirpath, _, names in os.walk(os.path.join(root, layer)):
            for n in sorted(names):
                if not re.search(r"\.(c|h|cu|cuh|l|y)$", n):
                    continue
                path = os.path.join(dirpath, n)
                rel = os.path.relpath(path, root)
                with open(path, encoding="utf-8", errors="replace") as f:
                    for i, line in enumerate(f, 1):
                        m = INCLUDE.match(line)
                        if not m:
                            continue
                        inc = os.path.normpath(os.path.join(os.path.dirname(rel), m.group(1)))
                        if inc.split(os.sep)[0] == other or re.search(r"(^|/)%s/" % other,
                                                                      m.group(1)):
                            out.append("%s:%d: includes %s (%s/ and %s/ are siblings: what "
                                       "both need belongs in isa/)" % (rel, i, m.group(1),
                                                                       layer, other))


def check_links(root, build, files, out):
    ppc = os.path.join(root, "bin", "ppc")
    if not os.path.exists(ppc):
        die("no bin/ppc: run make all first")
    ldd = subprocess.run(["ldd", ppc], capture_output=True, text=True).stdout
    for line in ldd.splitlines():
        lib = line.strip().split()[0] if line.strip() else ""
        if BLAS_LIB.search(lib):
            out.append("bin/ppc: links %s (ldd): the compiler computes no tensor" % lib)
    for obj in make_prereqs(root, "bin/ppc"):
        path = os.path.join(root, obj)
        src = source_of(root, build, path) or obj
        if os.path.relpath(path, build).split(os.sep)[0] == "kernels":
            out.append("bin/ppc: links %s (%s), a kernels/ object" % (obj, src))
        if not os.path.exists(path):
            continue
        _, undefined = nm(path)
        blas = sorted(s for s in undefined if BLAS_SYM.search(s))
        if blas:
            out.append("bin/ppc: %s needs BLAS: %s" % (src, ", ".join(blas)))
    for obj in make_prereqs(root, "bin/ppvm"):
        path = os.path.join(root, obj)
        if os.path.relpath(path, build).split(os.sep)[0] == "compiler":
            out.append("bin/ppvm: links %s (%s), a compiler/ object" %
                       (obj, source_of(root, build, path) or obj))


def sccs(nodes, edges):
    """Tarjan's strongly connected components (iterative)."""
    index, low, on, stack, comps = {}, {}, set(), [], []
    counter = [0]
    for root in nodes:
        if root in index:
            continue
        work = [(root, iter(sorted(edges.get(root, ()))))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(edges.get(w, ())))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                comps.append(sorted(comp))
    return comps


def check_cycles(files, out):
    definers = {}
    for src, (defined, _) in files.items():
        for s in defined:
            definers.setdefault(s, set()).add(src)
    via = {}  # (a, b) -> symbols a uses from b
    for a, (_, undefined) in files.items():
        for s in undefined:
            for b in definers.get(s, ()):
                if b != a:
                    via.setdefault((a, b), set()).add(s)
    edges = {}
    for a, b in via:
        edges.setdefault(a, set()).add(b)
    for comp in sccs(sorted(files), edges):
        if len(comp) < 2:
            continue
        members = set(comp)
        if len(comp) > 2:
            out.append("cycle among %d files: %s" % (len(comp), ", ".join(comp)))
        done = set()
        for a in comp:
            for b in sorted(edges.get(a, ())):
                if b not in members or (b, a) in done:
                    continue
                ab = sorted(via[(a, b)])
                ba = sorted(via.get((b, a), ()))
                if ba:
                    done.add((a, b))
                    out.append("%s <-> %s via %s (%s uses %s's); %s (%s uses %s's)" %
                               (a, b, ", ".join(ab), a, b, ", ".join(ba), b, a))
                else:
                    out.append("  %s -> %s via %s" % (a, b, ", ".join(ab)))


def check_exits(files, out):
    for src in sorted(files):
        if src.split("/")[0] not in NO_EXIT_LAYERS or src in NO_EXIT_ALLOWED:
            continue
        bad = sorted(files[src][1] & EXIT_SYMBOLS)
        if bad:
            out.append("%s: calls %s (library code returns a status; only a main may end "
                       "the process)" % (src, ", ".join(bad)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    root = os.path.abspath(ap.parse_args().root)
    build = os.path.join(root, "build")
    files = objects(root, build)
    if not files:
        die("no objects under %s: run make all first" % build)
    sections = [
        ("vm/ and compiler/ include nothing of each other", check_includes, (root,)),
        ("bin/ppc links no BLAS and no kernels/ object; bin/ppvm no compiler/ object",
         check_links, (root, build, files)),
        ("no cycles between files", check_cycles, (files,)),
        ("no exit or abort in isa/, compiler/ (but ppc.c) or kernels/", check_exits, (files,)),
    ]
    total = 0
    for title, fn, args in sections:
        found = []
        fn(*args, found)
        total += sum(1 for f in found if not f.startswith("  "))
        print("%s %s" % ("FAIL" if found else "ok  ", title))
        for f in found:
            print("    " + f)
    if total:
        print("layering: %d violation%s over %d files" % (total, "" if total == 1 else "s",
                                                          len(files)))
        return 1
    print("layering: no violation over %d files" % len(files))
    return 0


if __name__ == "__main__":
    sys.exit(main())
