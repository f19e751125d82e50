# blas_env.sh - sourced (with $root set) by the CPU benchmarks that start
# ranks with a plain mpirun: one OpenBLAS thread per rank, and the kernels
# bin/pprun gives ranks on this CPU (OPENBLAS_CORETYPE: yours when set; else
# what `bin/pprun --blas-coretype` prints, vm/blas_core.h says why), so the
# figures are the ones a pprun run sees. Without it Debian's OpenBLAS ran
# SSE3 kernels on the AVX-512 Xeon and predict_bench.sh's steps took 3-4x
# as long.
export OPENBLAS_NUM_THREADS=1
if [ -z "${OPENBLAS_CORETYPE:-}" ]; then
  blas_core=$("$root/bin/pprun" --blas-coretype 2>/dev/null || true)
  if [ -n "$blas_core" ]; then export OPENBLAS_CORETYPE=$blas_core; fi
fi
