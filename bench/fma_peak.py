"""The host's float32 peak: how many floating-point operations per second its cores do when
they do nothing but independent fused multiply-adds at the widest vector the compiler
targets (a C probe compiled once with ``cc -march=native``). No kernel beats it; a
network's GFLOP/s over it says how much room any schedule has left (``bench/peers.py``
prints both, beside the sgemm rate, which stays below it by what a matrix product spends
on loads)."""

from __future__ import annotations

import subprocess
from pathlib import Path

# each thread, pinned to its own CPU, runs ACCUMULATORS independent chains of vector FMAs
# (enough to cover the FMA latency on every unit); prints the best GFLOP/s of all threads
# together over REPEATS timed passes
FMA_PEAK = r"""
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#ifdef __AVX512F__
enum { LANES = 16, ACCUMULATORS = 12 };
#else
enum { LANES = 8, ACCUMULATORS = 10 };
#endif
typedef float vec __attribute__((vector_size(LANES * sizeof(float))));
enum { ITERATIONS = 20000000, REPEATS = 5, MAX_THREADS = 256 };
static pthread_barrier_t start;
static double began[REPEATS][MAX_THREADS], ended[REPEATS][MAX_THREADS];
static volatile float sink;
static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}
/* each worker clocks its own passes: a main thread waiting on a barrier may not get a
   CPU back until a busy worker yields one */
static void* work(void* index) {
  int cpu = (int)(long)index;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  pthread_setaffinity_np(pthread_self(), sizeof set, &set);
  vec a[ACCUMULATORS], b, c;
  for (int j = 0; j < LANES; j++) { b[j] = 1.0000001f; c[j] = 1e-7f; }
  for (int repeat = 0; repeat < REPEATS; repeat++) {
    for (int i = 0; i < ACCUMULATORS; i++)
      for (int j = 0; j < LANES; j++) a[i][j] = (float)i;
    pthread_barrier_wait(&start);
    began[repeat][cpu] = now();
    for (long n = 0; n < ITERATIONS; n++)
      for (int i = 0; i < ACCUMULATORS; i++) a[i] = a[i] * b + c;
    ended[repeat][cpu] = now();
    for (int i = 0; i < ACCUMULATORS; i++) sink += a[i][0];
  }
  return NULL;
}
int main(int argc, char** argv) {
  int threads = argc > 1 ? atoi(argv[1]) : 1;
  if (threads < 1 || threads > MAX_THREADS) return 2;
  pthread_t workers[MAX_THREADS];
  pthread_barrier_init(&start, NULL, threads);
  for (long cpu = 0; cpu < threads; cpu++) pthread_create(&workers[cpu], NULL, work, (void*)cpu);
  for (int cpu = 0; cpu < threads; cpu++) pthread_join(workers[cpu], NULL);
  double best = 0;
  for (int repeat = 0; repeat < REPEATS; repeat++) {
    double first = began[repeat][0], last = ended[repeat][0];
    for (int cpu = 1; cpu < threads; cpu++) {
      if (began[repeat][cpu] < first) first = began[repeat][cpu];
      if (ended[repeat][cpu] > last) last = ended[repeat][cpu];
    }
    double rate = 2.0 * LANES * ACCUMULATORS * ITERATIONS * threads / (last - first) / 1e9;
    if (rate > best) best = rate;
  }
  printf("%.1f %d\n", best, LANES);
  return 0;
}
"""


def fma_peak_program(scratch: Path) -> Path:
    """The probe compiled in ``scratch``, or the one compiled there before."""
    source, program = scratch / "fma_peak.c", scratch / "fma_peak"
    if program.exists():
        return program
    source.write_text(FMA_PEAK)
    # -ffp-contract=fast: a * b + c becomes one FMA instruction
    subprocess.run(
        [
            "cc",
            "-O3",
            "-march=native",
            "-ffp-contract=fast",
            "-pthread",
            str(source),
            "-o",
            str(program),
        ],
        check=True,
    )
    return program


def fma_peak(program: Path, threads: int) -> dict:
    """GFLOP/s of ``threads`` cores doing FMAs alone, best of five passes, and the vector
    width in float32 lanes the probe was compiled for."""
    rate, lanes = subprocess.run(
        [str(program), str(threads)], capture_output=True, text=True, check=True
    ).stdout.split()
    return {"threads": threads, "gflops": float(rate), "lanes": int(lanes)}
