"""Probes of the host: its CPU by name, its sgemm rate (``numpy.matmul`` in a fresh
interpreter), and two small C programs compiled once with ``cc`` into a scratch directory:
the cache-line round trip between the first two CPUs (the host's state of the moment) and
the float32 FMA peak (what no kernel beats).

The round trip: on the 2-core hosts this project measures on, the two CPUs sit close
(fast state) or far apart (slow state), switching within seconds to minutes; SimpleTVM's
modules and the peers feel the two states differently (``bench/diagnostics/host_states.py``),
so the benchmarks label their rounds with it. The FMA peak: cores doing nothing but
independent fused multiply-adds at the widest vector the compiler targets; a network's
GFLOP/s over it says how much room any schedule has left (``bench/peers.py`` prints both,
beside the sgemm rate, which stays below it by what a matrix product spends on loads)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

# a round trip longer than this is the slow state
SLOW_ABOVE_NS = 200

# two threads, pinned to the first two CPUs, pass a flag back and forth; prints the
# nanoseconds a round trip takes
PING_PONG = r"""
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <time.h>
static _Alignas(64) atomic_int flag;
enum { TRIPS = 200000 };
static void pin(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}
static void* answer(void* unused) {
  (void)unused;
  pin(1);
  for (int i = 0; i < TRIPS; i++) {
    while (atomic_load_explicit(&flag, memory_order_acquire) != 1) {}
    atomic_store_explicit(&flag, 0, memory_order_release);
  }
  return NULL;
}
int main(void) {
  pthread_t other;
  struct timespec start, end;
  pthread_create(&other, NULL, answer, NULL);
  pin(0);
  clock_gettime(CLOCK_MONOTONIC, &start);
  for (int i = 0; i < TRIPS; i++) {
    atomic_store_explicit(&flag, 1, memory_order_release);
    while (atomic_load_explicit(&flag, memory_order_acquire) != 0) {}
  }
  clock_gettime(CLOCK_MONOTONIC, &end);
  pthread_join(other, NULL);
  printf("%.0f\n", ((end.tv_sec - start.tv_sec) * 1e9 + (end.tv_nsec - start.tv_nsec)) / TRIPS);
  return 0;
}
"""


def ping_pong_program(scratch: Path) -> Path:
    """The round-trip probe compiled in ``scratch``."""
    source, program = scratch / "ping_pong.c", scratch / "ping_pong"
    source.write_text(PING_PONG)
    subprocess.run(["cc", "-O2", "-pthread", str(source), "-o", str(program)], check=True)
    return program


def round_trip_ns(program: Path) -> int:
    """Nanoseconds a cache line takes to go to the second CPU and back."""
    return int(subprocess.run([str(program)], capture_output=True, text=True).stdout)


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


_SGEMM = """
import json, sys, time
import numpy as np
n, repeats = int(sys.argv[1]), int(sys.argv[2])
rng = np.random.default_rng(0)
a = rng.standard_normal((n, n), dtype=np.float32)
b = rng.standard_normal((n, n), dtype=np.float32)
c = np.empty((n, n), dtype=np.float32)
np.matmul(a, b, out=c)
times = []
for _ in range(repeats):
    start = time.perf_counter()
    np.matmul(a, b, out=c)
    times.append(time.perf_counter() - start)
try:
    blas = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
    blas = f"{blas['name']} {blas.get('version', '')}".strip()
except Exception:
    blas = "unknown"
print(json.dumps({"seconds": times, "blas": blas, "numpy": np.__version__}))
"""


def sgemm_rate(threads: int, n: int = 2048, repeats: int = 10) -> dict:
    """This machine's float32 matrix-multiply rate: ``numpy.matmul`` of two n x n
    matrices on ``threads`` BLAS threads, best of ``repeats`` after one warm-up call.

    BLAS libraries read their thread count when numpy is first imported, which happened
    in this process at the top of the script, so the multiply runs in a fresh
    interpreter whose environment carries the thread count. It leaves out OpenBLAS's
    core-type and cache-size overrides, which some hosts set and which hold a current
    OpenBLAS to half its rate (``OPENBLAS_CORETYPE=Haswell``: AVX2 kernels on an
    AVX-512 core): the rate is the machine's, not a setting's."""
    env = {
        k: v for k, v in os.environ.items() if k not in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")
    }
    for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS"):
        env[name] = str(threads)
    done = subprocess.run(
        [sys.executable, "-c", _SGEMM, str(n), str(repeats)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    measured = json.loads(done.stdout.strip().splitlines()[-1])
    best = min(measured["seconds"])
    return {
        "n": n,
        "threads": threads,
        "repeats": repeats,
        "best_s": best,
        "gflops": 2 * n**3 / best / 1e9,
        "median_gflops": 2 * n**3 / float(np.median(measured["seconds"])) / 1e9,
        "blas": measured["blas"],
        "numpy": measured["numpy"],
    }
