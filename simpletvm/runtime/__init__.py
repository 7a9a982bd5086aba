"""Loaded modules and how they run and are timed: threads, the fork-join pool and its C source, whole-model timing, side-by-side comparisons."""
