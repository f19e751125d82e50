#!/bin/bash
# layering_selftest.sh - shows that tests/layering.py passes a tree that
# keeps the layers and fails, naming the file and symbol, each kind of
# violation: a vm/ file including compiler/, ppc linking BLAS (the library,
# a cblas_ call) or a kernels/ object, ppvm linking a compiler/ object, a
# cycle between two files, and exit or abort in library code. Each case is a tiny tree of its own built in a
# scratch directory (cc, nm, make, ldd and libopenblas needed, as for the
# project). Run: tests/layering_selftest.sh (make layering-selftest).
set -u
here=$(cd "$(dirname "$0")" && pwd)
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
fails=0

# A tree: isa/i.c (a leaf), compiler/a.c over it, compiler/ppc.c (the
# ppc main, which may exit), vm/v.c and vm/ppvm.c, kernels/k.c. Each
# case then changes one thing ($1: its name) before building.
tree() {
    local t=$scratch/$1
    mkdir -p "$t"/{isa,compiler,vm,kernels,tests}
    cp "$here/layering.py" "$t/tests/"
    cat > "$t/isa/i.h" <<'EOF'
int i_leaf(int x);
EOF
    cat > "$t/isa/i.c" <<'EOF'
#include "i.h"
int i_leaf(int x) { return x + 1; }
EOF
    cat > "$t/compiler/a.h" <<'EOF'
int a_use(int x);
EOF
    cat > "$t/compiler/a.c" <<'EOF'
#include "a.h"
#include "../isa/i.h"
int a_use(int x) { return i_leaf(x) * 2; }
EOF
    cat > "$t/compiler/ppc.c" <<'EOF'
#include <stdlib.h>
#include "a.h"
int main(int argc, char **argv) { (void)argv; if (argc > 5) exit(2); return a_use(argc) == 0; }
EOF
    cat > "$t/vm/v.c" <<'EOF'
#include "../isa/i.h"
int v_run(int x) { return i_leaf(x) - 1; }
EOF
    cat > "$t/vm/ppvm.c" <<'EOF'
int v_run(int x);
int main(int argc, char **argv) { (void)argv; return v_run(argc) == 0; }
EOF
    cat > "$t/kernels/k.c" <<'EOF'
int k_gemm(int x) { return x * x; }
EOF
    cat > "$t/Makefile" <<'EOF'
PPC_OBJ := build/compiler/ppc.o build/compiler/a.o build/isa/i.o $(EXTRA_PPC)
PPVM_OBJ := build/vm/ppvm.o build/vm/v.o build/isa/i.o build/kernels/k.o $(EXTRA_PPVM)
all: bin/ppc bin/ppvm
build/%.o: %.c
	@mkdir -p $(dir $@)
	cc -c $< -o $@
bin/ppc: $(PPC_OBJ)
	@mkdir -p bin
	cc $^ $(PPC_LIBS) -o $@
bin/ppvm: $(PPVM_OBJ)
	@mkdir -p bin
	cc $^ -o $@
EOF
    echo "$t"
}

# expect NAME STATUS PATTERN: builds the tree, runs the check, and wants
# its exit status and (for a failure) a line matching PATTERN.
expect() {
    local t=$scratch/$1 want=$2 pat=$3
    if ! make -s -C "$t" all >"$t/build.log" 2>&1; then
        echo "FAIL $1: the scratch tree does not build:"; cat "$t/build.log"; fails=$((fails + 1))
        return
    fi
    local out rc
    out=$(python3 "$t/tests/layering.py" --root "$t" 2>&1)
    rc=$?
    if [ "$rc" -ne "$want" ] || ! grep -qE -- "$pat" <<<"$out"; then
        echo "FAIL $1: exit $rc (expected $want), expected a line matching: $pat"
        sed 's/^/    /' <<<"$out"
        fails=$((fails + 1))
    else
        echo "ok   $1: exit $rc, $(grep -E -- "$pat" <<<"$out" | head -1 | sed 's/^ *//')"
    fi
}

t=$(tree clean)
expect clean 0 "^layering: no violation over 6 files"

t=$(tree vm_includes_compiler)
sed -i '1i #include "../compiler/a.h"' "$t/vm/v.c"
expect vm_includes_compiler 1 '^    vm/v.c:1: includes \.\./compiler/a\.h'

t=$(tree ppc_links_blas)
sed -i 's/^PPC_OBJ := /PPC_LIBS := -Wl,--no-as-needed -lopenblas\nPPC_OBJ := /' "$t/Makefile"
expect ppc_links_blas 1 '^    bin/ppc: links libopenblas'

t=$(tree ppc_calls_cblas)
cat >> "$t/compiler/a.c" <<'EOF'
void cblas_sgemm(void);
void a_gemm(void) { cblas_sgemm(); }
EOF
sed -i 's/^PPC_OBJ := /PPC_LIBS := -Wl,--unresolved-symbols=ignore-all\nPPC_OBJ := /' "$t/Makefile"
expect ppc_calls_cblas 1 '^    bin/ppc: compiler/a.c needs BLAS: cblas_sgemm'

t=$(tree ppc_links_kernels)
sed -i 's/^PPC_OBJ := /EXTRA_PPC := build\/kernels\/k.o\nPPC_OBJ := /' "$t/Makefile"
expect ppc_links_kernels 1 '^    bin/ppc: links build/kernels/k.o \(kernels/k.c\), a kernels/ object'

t=$(tree ppvm_links_compiler)
sed -i 's/^PPC_OBJ := /EXTRA_PPVM := build\/compiler\/a.o\nPPC_OBJ := /' "$t/Makefile"
expect ppvm_links_compiler 1 '^    bin/ppvm: links build/compiler/a.o \(compiler/a.c\), a compiler/ object'

t=$(tree cycle)
cat > "$t/compiler/b.c" <<'EOF'
int a_use(int x);
int b_back(int x) { return x > 0 ? a_use(x - 1) : 0; }
EOF
cat >> "$t/compiler/a.c" <<'EOF'
int b_back(int x);
int a_again(int x) { return b_back(x); }
EOF
sed -i 's/^PPC_OBJ := /EXTRA_PPC := build\/compiler\/b.o\nPPC_OBJ := /' "$t/Makefile"
expect cycle 1 '^    compiler/a.c <-> compiler/b.c via b_back \(compiler/a.c uses compiler/b.c.s\); a_use \(compiler/b.c uses compiler/a.c.s\)'

t=$(tree kernel_aborts)
cat >> "$t/kernels/k.c" <<'EOF'
#include <stdlib.h>
void k_fail(void) { abort(); }
EOF
expect kernel_aborts 1 '^    kernels/k.c: calls abort'

t=$(tree compiler_exits)
cat >> "$t/compiler/a.c" <<'EOF'
#include <stdlib.h>
void a_fail(void) { exit(1); }
EOF
expect compiler_exits 1 '^    compiler/a.c: calls exit'

if [ "$fails" -ne 0 ]; then
    echo "layering_selftest: $fails case(s) failed"
    exit 1
fi
echo "layering_selftest: every case as expected"
