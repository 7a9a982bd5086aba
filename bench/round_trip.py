"""The host's state of the moment: how long its first two CPUs take to pass a cache line
back and forth (a C probe compiled once with ``cc``). On the 2-core hosts this project
measures on, about 0.05 us when the cores sit close and about 0.4 when they sit far apart,
switching within seconds to minutes; SimpleTVM's modules and the peers feel the two
states differently (``bench/host_states.py``), so the benchmarks label their rounds."""

from __future__ import annotations

import subprocess
from pathlib import Path

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
    source, program = scratch / "ping_pong.c", scratch / "ping_pong"
    source.write_text(PING_PONG)
    subprocess.run(["cc", "-O2", "-pthread", str(source), "-o", str(program)], check=True)
    return program


def round_trip_ns(program: Path) -> int:
    return int(subprocess.run([str(program)], capture_output=True, text=True).stdout)
