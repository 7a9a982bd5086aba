"""The decisions of a default schedule: MetaSchedule's sampling decisions (tiles, unroll
steps, compute locations) and the order its design spaces are tried in, chosen by formula
from the loop extents, the target's vector lanes and registers, its cores and its L1 size.
:mod:`simpletvm.compiler.default_schedules` replays a design space's trace with them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

# MetaSchedule's unroll steps for CPUs are [0, 16, 64, 512]: a middle one
UNROLL_STEP = 64
# ... but 16 for a convolution of an image with fewer channels than a 128-bit vector
# holds (an RGB stem): each of its taps does little arithmetic, and unrolled deeper the
# stem runs slower, where the other layers gain from the deeper unroll or hold
FEW_CHANNELS_UNROLL_STEP = 16
# a kernel whose largest loop nest runs fewer iterations runs on one thread: so short a
# kernel spends more on a fork-join than the other cores save it
PARALLEL_MIN_WORK = 100_000
FLOAT_BYTES = 4
# the widest kernel window: a reduction axis of at most this extent (other than the input
# channels) is a window's, kept whole inside the register tile's loop
MAX_WINDOW = 7
# rows of a register tile: the outputs of 224x224 models are 7 x 2^k wide, so 7 rows
# divide every one of their maps; 7 rows by two AVX-512 vectors ran faster than 8 rows
# or one vector
MAX_REGISTER_ROWS = 7
# a kernel waits for its busiest core: its parallel jobs are split so that no core has
# more than this times the average (an odd number of channel tiles on two cores leaves
# one core a tile more; split by rows as well, the jobs come out nearly even)
MAX_UNEVEN = 1.1


@dataclass(frozen=True)
class CpuShape:
    """What the decisions are chosen from: vector lanes (fp32), vector registers, cores,
    L1 data bytes."""

    lanes: int = 8
    cores: int = 1
    l1_bytes: int = 32 * 1024
    vector_registers: int = 16

    @staticmethod
    def of(target) -> CpuShape:
        """From a TVM target: ``vector_width`` if given, else AVX-512 for the CPUs that
        have it (``-mcpu``/``-mattr``), AVX2 width otherwise; ``num-cores``."""
        attrs = dict(target.attrs) if target.attrs else {}
        mcpu = str(attrs.get("mcpu", "") or "")
        mattr = " ".join(str(a) for a in (attrs.get("mattr") or []))
        avx512 = (
            "avx512" in mattr
            or mcpu in AVX512_CPUS
            or any(
                mcpu.startswith(p)
                for p in (
                    "znver4",
                    "znver5",
                    "sapphire",
                    "icelake",
                    "cascade",
                    "cooper",
                    "tiger",
                    "granite",
                    "emerald",
                )
            )
        )
        arm = "neon" in mattr or mcpu.startswith(("cortex", "apple", "neoverse"))
        bits = int(attrs.get("vector_width", 0) or 0) or (512 if avx512 else 128 if arm else 256)
        cores = int(attrs.get("num-cores", 0) or 0) or 1
        # AVX-512 and AArch64 have 32 vector registers, AVX2 and SSE 16
        registers = 32 if avx512 or arm else 16
        return CpuShape(lanes=max(1, bits // 32), cores=cores, vector_registers=registers)


AVX512_CPUS = {"skylake-avx512", "knl", "knm", "x86-64-v4", "rocketlake", "alderlake-avx512"}


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _largest_divisor(n: int, limit: int) -> int:
    return max(d for d in _divisors(n) if d <= max(1, limit))


def vector_width(n: int, lanes: int) -> int:
    """The innermost tile of a channel axis of extent ``n``: its largest divisor up to
    ``lanes`` that is a multiple of 4 (whole 128-bit parts: 24 channels on AVX-512 are
    one vector of 12, three quarters of a register, where 8 left half of it idle;
    1000 classes: 8, not 10), else its largest divisor up to ``lanes``."""
    whole = [d for d in _divisors(n) if d <= lanes and d % 4 == 0]
    return max(whole) if whole else _largest_divisor(n, lanes)


@dataclass
class DecisionRule:
    """Sampling decisions by formula (the ``decision_provider`` of a trace replay).

    - SamplePerfectTile, spatial axis, n levels (``SSRSRS``: 4): the channel axis (the
      output's innermost index) and the axis above it (the width) make the innermost
      level, the register tile (:func:`register_tile`): one or two vectors of channels
      (a vector: :func:`vector_width`) by up to 7 positions of a row, so that each weight
      vector loaded serves every position; a row that fills at most half the tile's
      accumulators gets a second row of the map (:func:`_rows_share_weights`); the
      outer axes' outermost levels take the parallel work: outer axes first, until their
      product reaches 4 jobs per core (at most MetaSchedule's 16 per core); what is left
      goes to the second level, the L1/L2 tile. A block with no rows (a matrix-vector
      product) moves channel tiles from the second level to the third, inside the outer
      reduction loop, so the reduction feeds several accumulators at once.
    - SamplePerfectTile, reduction axis (2 levels): the inner level is the largest
      divisor of the extent that keeps the inner reduction's weights, (inner reduction)
      x (channel tile), within half the L1; the kernel window stays whole inside.
    - SamplePerfectTile, 2 levels on a spatial axis (SimpleTVM's Winograd transforms):
      channels [rest, lanes], tiles [rest, small] with the outer product parallel.
    - SampleCategorical: the unroll step 64 of [0, 16, 64, 512] (else the first); 16
      for a convolution over fewer than 4 input channels (:data:`FEW_CHANNELS_UNROLL_STEP`).
    - SampleComputeLocation: the root (-1), always valid: the producer runs as a loop
      nest of its own, parallelized by the postprocessor.
    """

    shape: CpuShape
    plans: dict = field(default_factory=dict)  # per block: {(iter var name, n): factors}
    sch: Any = None  # the schedule the trace is replayed on
    unroll_step: int = UNROLL_STEP  # the task's: the smallest any of its blocks asks for

    def __call__(self, inst, inputs, attrs, decision):
        kind = inst.kind.name
        try:
            if kind == "SamplePerfectTile":
                return self._tile(inputs[0], int(attrs[0]), int(attrs[1]), decision)
            if kind == "SampleCategorical":
                candidates = [int(c) for c in attrs[0]]
                return _unroll_index(candidates, self.unroll_step)
            if kind == "SampleComputeLocation":
                return -1
        except Exception:  # noqa: BLE001 - a formula that cannot apply keeps the space's
            return decision
        return decision

    # -- tiles ---------------------------------------------------------------------
    def _tile(self, loop_rv, n: int, max_innermost: int, decision):
        loop = self.sch.get(loop_rv)
        extent = int(loop.extent)
        found = _block_of(loop)
        if found is None:
            return _fallback_tile(extent, n, max_innermost)
        block, var = found
        plan = self._plan(block, n)
        factors = plan.get((var, n))
        if factors is None or math.prod(factors) != extent:
            return _fallback_tile(extent, n, max_innermost)
        if factors[-1] > max_innermost:
            return _fallback_tile(extent, n, max_innermost)
        return factors

    def _plan(self, block, n: int) -> dict:
        key = (block.name_hint, n, tuple(str(v.var) for v in block.iter_vars))
        if key not in self.plans:
            self.plans[key] = self._make_plan(block, n)
        return self.plans[key]

    def _make_plan(self, block, n: int) -> dict:
        lanes, cores = self.shape.lanes, self.shape.cores
        from simpletvm.compiler.core_split import block_axes

        # names, never tirx.Var: == on a Var builds an EQ
        spatial, reduce, channel = block_axes(block)
        plan: dict = {}
        tiles = {var: [1] * n for var, _ in spatial}
        left = {var: extent for var, extent in spatial}
        if n >= 2:
            vectors = 1  # of channels in the register tile
            # the vector: innermost level of the channel axis
            if channel in left:
                vec = vector_width(left[channel], lanes)
                left[channel] //= vec
                # the register tile, innermost: rows of the axis above the channel (the
                # width) by one or two vectors of channels
                others = [var for var, _ in spatial if var != channel]
                width = others[-1] if n >= 4 and others else None
                accumulators = self.shape.vector_registers // 2
                vectors, rows = register_tile(
                    left[channel] if n >= 4 and _is_power_of_two(vec) else 1,
                    left[width] if width else 1,
                    accumulators,
                )
                tiles[channel][-1] = vec * vectors
                left[channel] //= vectors
                if width:
                    tiles[width][-1] = rows
                    left[width] //= rows
                height = others[-2] if width and len(others) >= 2 else None
                if height and _rows_share_weights(block, reduce, height, channel):
                    high = _largest_divisor(left[height], accumulators // (vectors * rows))
                    tiles[height][-1] = high
                    left[height] //= high
            elif n == 2 and spatial:
                inner = spatial[-1][0]
                small = _largest_divisor(left[inner], 8)
                tiles[inner][-1] = small
                left[inner] //= small
            # the parallel jobs: the outer levels of the axes _parallel_order gives, the
            # axis the cores split leading (:mod:`simpletvm.compiler.core_split`)
            want, most = 4 * cores, 16 * cores
            jobs = 1
            order = _parallel_order(block.name_hint, spatial, reduce, channel, left, cores)
            for var in order:
                if jobs >= want and _uneven(jobs, cores) <= MAX_UNEVEN:
                    break
                d = _job_factor(left[var], jobs, most, cores)
                tiles[var][0] = d
                left[var] //= d
                jobs *= d
            # the rest: the level below the parallel one (the L1/L2 tile)
            for var, _ in spatial:
                tiles[var][1 if n > 2 else 0] *= left[var]
            if n >= 4 and channel in tiles and all(e == 1 for v, e in spatial if v != channel):
                _accumulate_apart(tiles[channel], self.shape.vector_registers // 2 // vectors)
        for var, _ in spatial:
            plan[(var, n)] = tiles[var]
        # reductions (2 levels): inner reduction x channel tile within half the L1
        channel_tile = math.prod(tiles[channel][2:]) if channel in tiles and n >= 3 else lanes
        budget = max(1, (self.shape.l1_bytes // 2) // (FLOAT_BYTES * max(1, channel_tile)))
        inner_total = 1
        for var, extent in reversed(reduce):  # the innermost (input channel) first
            if extent <= MAX_WINDOW and var != reduce[-1][0]:
                inner = extent  # a kernel window stays whole
            else:
                inner = _largest_divisor(extent, max(1, budget // max(1, inner_total)))
            inner_total *= inner
            factors = [1] * n
            factors[-1] = inner
            factors[0] = extent // inner
            plan[(var, n)] = factors
        # a window over 2 or 3 input channels (a depthwise convolution sums over 1)
        if len(reduce) >= 3 and 1 < reduce[-1][1] < 4:
            self.unroll_step = min(self.unroll_step, FEW_CHANNELS_UNROLL_STEP)
        return plan


def _accumulate_apart(channel_tiles: list[int], register_tiles: int) -> None:
    """A matrix-vector product (no rows: a classifier's dense layer at batch 1) has one
    accumulator per register tile, and its reduction, the whole input, is one chain of
    dependent multiply-adds: the core waits on each one's latency. Move channel tiles
    from the level below the parallel one to the level inside the outer reduction loop,
    so that each step of the reduction feeds several independent register tiles, as many
    as ``register_tiles`` (half the vector registers over a tile's vectors): the core
    then overlaps their multiply-adds instead of waiting on one chain."""
    chains = _largest_divisor(channel_tiles[1], max(1, register_tiles))
    channel_tiles[1] //= chains
    channel_tiles[2] *= chains


def _is_power_of_two(n: int) -> bool:
    """Two vectors of channels make one loop of twice the vector's width, which LLVM
    splits well into whole registers only when that is a power of two (two vectors of
    12 lanes, a loop of 24, ran far slower than one vector of 12)."""
    return n & (n - 1) == 0


def _rows_share_weights(block, reduce: list[tuple[str, int]], height: str, channel: str) -> bool:
    """Whether a second row of the register tile, along ``height``, would reuse each
    weight vector loaded: the block sums over input channels (more than a kernel window)
    and reads a tensor indexed by the channels but not by ``height``. Then a tile that
    fills less than half the registers with one row takes a second (24 output channels
    on AVX-512, one vector of 12 by 7 positions, leave half the accumulators idle with
    one row). Not a depthwise convolution (its weights differ per
    channel, its window is all it sums) nor a batched product over ``height``."""
    from tvm.tirx.analysis import undefined_vars

    if not any(extent > MAX_WINDOW for _, extent in reduce):
        return False
    for read in block.reads:
        used = {str(v) for r in read.region for v in undefined_vars(r.min)}
        if channel in used and height not in used:
            return True
    return False


def _uneven(jobs: int, cores: int) -> float:
    """How much longer the busiest core works than the average, for ``jobs`` equal jobs."""
    return -(-jobs // cores) * cores / jobs


def _job_factor(extent: int, jobs: int, most: int, cores: int) -> int:
    """The parallel jobs an axis of ``extent`` adds to ``jobs``: its largest divisor
    that keeps them within ``most``, unless that leaves a core working more than
    :data:`MAX_UNEVEN` times the average (5 channel tiles on 2 cores: 3 against 2); then
    the smallest divisor that does not, if the axis has one (5 tiles by 7 rows)."""
    d = _largest_divisor(extent, most // jobs)
    if _uneven(jobs * d, cores) <= MAX_UNEVEN:
        return d
    even = [x for x in _divisors(extent) if x > d and _uneven(jobs * x, cores) <= MAX_UNEVEN]
    return min(even, default=d)


def _parallel_order(name, spatial, reduce, channel, left, cores) -> list[str]:
    """The axes whose outer levels take a block's parallel jobs, in order: the rows
    first, the channels last, unless :func:`~simpletvm.compiler.core_split.leading_axis`
    says the cores split another axis (the output channels of a layer whose weights
    outweigh its image take every job when they split evenly across the cores, and
    lead the rows otherwise)."""
    from simpletvm.compiler.core_split import leading_axis

    outer = [var for var, _ in spatial if var != channel]
    rest = [channel] if channel in left else []
    lead = leading_axis(name, spatial, reduce, channel)
    if lead is not None and lead == channel:
        return rest if left[channel] % cores == 0 else rest + outer
    if lead is not None:
        return [lead, *(var for var in outer if var != lead), *rest]
    return outer + rest


def register_tile(channel_vectors: int, width: int, accumulators: int) -> tuple[int, int]:
    """``(vectors, rows)`` of a register tile: up to two of the ``channel_vectors`` vectors
    of channels (a divisor) by ``rows``, a divisor of ``width`` up to
    :data:`MAX_REGISTER_ROWS`, the most accumulators ``vectors * rows`` that stay within
    ``accumulators`` (half the vector registers: the weights and the broadcast input
    need the rest); two vectors when that is as many."""
    best = (1, 1)
    for vectors in (2, 1):
        if channel_vectors % vectors:
            continue
        rows = _largest_divisor(width, min(MAX_REGISTER_ROWS, accumulators // vectors))
        if rows * vectors > best[0] * best[1]:
            best = (vectors, rows)
    return best


def _unroll_index(candidates: list[int], step: int = UNROLL_STEP) -> int:
    """The decision of a SampleCategorical: the unroll ``step`` (of MetaSchedule's
    [0, 16, 64, 512]), else the first candidate."""
    return candidates.index(step) if step in candidates else 0


def _fallback_tile(extent: int, n: int, max_innermost: int) -> list[int]:
    """All of the loop in the outermost level but a small innermost one."""
    inner = _largest_divisor(extent, min(8, max_innermost))
    return [extent // inner] + [1] * (n - 2) + [inner] if n >= 2 else [extent]


def _block_of(loop):
    """The first block under ``loop`` whose bindings use it directly, and the block's
    iteration variable bound to the loop variable."""
    from tvm.s_tir import SBlockRealize

    stack = [loop.body]
    while stack:
        node = stack.pop()
        if node is None:
            continue
        if isinstance(node, SBlockRealize):
            for value, iv in zip(node.iter_values, node.block.iter_vars):
                if value.same_as(loop.loop_var):
                    return node.block, str(iv.var)
            stack.append(node.block.body)
            continue
        for name in ("body", "then_case", "else_case"):
            child = getattr(node, name, None)
            if child is not None:
                stack.append(child)
        seq = getattr(node, "seq", None)
        if seq is not None:
            stack.extend(reversed(list(seq)))
    return None


def by_preference(spaces: list, *, inner_first: bool = True) -> list:
    """The design spaces in the order they are tried: those that compute the output's
    epilogue per tile (a cached output, or the consumer moved into the tile), while the
    tile is in the caches, first; then the others. MultiLevelTiling makes a space per
    level it moves the epilogue to, the outer one (the parallel job's) first; with
    ``inner_first``, the level below it leads: at the parallel level a job's whole output
    waits for its epilogue, and by then has left the L1: the epilogue reads it back from
    farther away."""

    def caches(space) -> bool:
        return any(
            inst.kind.name in ("CacheWrite", "ReverseComputeAt") for inst in space.trace.insts
        )

    caching = [s for s in spaces if caches(s)]
    return (caching[::-1] if inner_first else caching) + [s for s in spaces if not caches(s)]


def output_channels(task_mod) -> int:
    """The innermost extent of the task's output (its last argument): an epilogue per
    tile of fewer channels than a vector fuses positions and channels into one
    vectorized loop, whose index (a division and a remainder) LLVM turns into gathers,
    far slower than the epilogue per row."""
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo

    infos = ArgInfo.from_prim_func(task_mod["main"])
    shape = infos[-1].as_json()[2] if infos else []
    return int(shape[-1]) if shape else 0
