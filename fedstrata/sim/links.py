"""Link models: latency distributions, links, and time windows of degradation or outage.

Every latency model is a small frozen dataclass with
``sample(rng) -> float`` (seconds, never negative) and
``sample_many(rng, n) -> ndarray`` (the vectorised form the kernel draws in
blocks, see :class:`Sampler`). Models never own a random generator: the
simulation hands each link its own stream, derived from the seed and the
link's name, so adding a link does not shift the draws of another.

A :class:`Link` is what connects a node to its broker, in both directions:

``delay = (latency + jitter) * latency_factor + extra_latency + nbytes * 8 / bandwidth``

where the factors come from the :class:`Degradation` windows active at the
send time, and an :class:`Outage` window makes every transmission sent
inside it lost.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import NamedTuple, Protocol, runtime_checkable

import numpy as np

from fedstrata.errors import ValidationError

__all__ = [
    "Conditions",
    "Constant",
    "Degradation",
    "Empirical",
    "LatencyModel",
    "Link",
    "LogNormal",
    "Normal",
    "Outage",
    "Pareto",
    "Sampler",
    "Window",
]


def _nonneg(what: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValidationError(f"{what} must be a finite number, got {value!r}")
    if value < 0:
        raise ValidationError(f"{what} must be >= 0, got {value!r}")
    return float(value)


def _positive(what: str, value: float) -> float:
    if _nonneg(what, value) == 0:
        raise ValidationError(f"{what} must be > 0, got {value!r}")
    return float(value)


def _probability(what: str, value: float) -> float:
    if _nonneg(what, value) > 1:
        raise ValidationError(f"{what} must be a probability in [0, 1], got {value!r}")
    return float(value)


@runtime_checkable
class LatencyModel(Protocol):
    """What a link needs from a latency distribution (seconds, never negative)."""

    def sample(self, rng: np.random.Generator) -> float:
        """Draw one latency in seconds."""
        ...

    def sample_many(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """Draw ``n`` latencies in seconds as a float64 array."""
        ...


@dataclass(frozen=True, slots=True)
class Constant:
    """A fixed latency of ``value`` seconds; draws no random numbers.

    Parameters
    ----------
    value
        Latency in seconds, >= 0.

    """

    value: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "value", _nonneg("Constant.value", self.value))

    def sample(self, rng: np.random.Generator) -> float:
        """Return ``value``."""
        return self.value

    def sample_many(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """Return ``n`` copies of ``value``."""
        return np.full(n, self.value)


@dataclass(frozen=True, slots=True)
class Normal:
    """Normal latency truncated at 0: draws below 0 are rejected and redrawn.

    The result follows N(mean, std²) conditioned on being >= 0 (a true
    truncation, not clipping, so no probability mass piles up at 0). With
    ``mean >= 0`` at most half the draws are rejected.

    Parameters
    ----------
    mean
        Mean of the untruncated normal, seconds, >= 0.
    std
        Standard deviation, seconds, >= 0.

    """

    mean: float
    std: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "mean", _nonneg("Normal.mean", self.mean))
        object.__setattr__(self, "std", _nonneg("Normal.std", self.std))

    def sample(self, rng: np.random.Generator) -> float:
        """Draw one latency."""
        return float(self.sample_many(rng, 1)[0])

    def sample_many(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """Draw ``n`` latencies by vectorised rejection of negative draws."""
        out = rng.normal(self.mean, self.std, n)
        bad = out < 0
        while bad.any():
            out[bad] = rng.normal(self.mean, self.std, int(bad.sum()))
            bad = out < 0
        return out


@dataclass(frozen=True, slots=True)
class LogNormal:
    """Log-normal latency parametrised by its median.

    ``X = median * exp(sigma * Z)`` with ``Z ~ N(0, 1)``, i.e. ``log X ~
    N(log median, sigma²)``. The median is the typical latency; the mean is
    ``median * exp(sigma² / 2)`` and the 95th percentile ``median *
    exp(1.645 * sigma)``. Measured RTT distributions are often summarised
    this way.

    Parameters
    ----------
    median
        Median latency in seconds, > 0.
    sigma
        Standard deviation of ``log X``, >= 0 (0 gives a constant).

    """

    median: float
    sigma: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "median", _positive("LogNormal.median", self.median))
        object.__setattr__(self, "sigma", _nonneg("LogNormal.sigma", self.sigma))

    def sample(self, rng: np.random.Generator) -> float:
        """Draw one latency."""
        return float(rng.lognormal(math.log(self.median), self.sigma))

    def sample_many(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """Draw ``n`` latencies."""
        return rng.lognormal(math.log(self.median), self.sigma, n)


@dataclass(frozen=True, slots=True)
class Pareto:
    """Pareto (type I) latency: heavy-tailed, never below ``scale``.

    ``P(X > x) = (scale / x) ** shape`` for ``x >= scale``. The mean is
    ``shape * scale / (shape - 1)`` when ``shape > 1`` (infinite otherwise).
    Drawn as ``scale * (1 + L)`` with NumPy's Lomax ``L = rng.pareto(shape)``.

    Parameters
    ----------
    scale
        Minimum latency in seconds, > 0.
    shape
        Tail index, > 0 (smaller is heavier).

    """

    scale: float
    shape: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "scale", _positive("Pareto.scale", self.scale))
        object.__setattr__(self, "shape", _positive("Pareto.shape", self.shape))

    def sample(self, rng: np.random.Generator) -> float:
        """Draw one latency."""
        return float(self.scale * (1.0 + rng.pareto(self.shape)))

    def sample_many(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """Draw ``n`` latencies."""
        return self.scale * (1.0 + rng.pareto(self.shape, n))


@dataclass(frozen=True, slots=True)
class Empirical:
    """Latency resampled uniformly, with replacement, from a measured trace.

    Parameters
    ----------
    values
        Observed latencies in seconds (finite, >= 0, at least one).

    """

    values: tuple[float, ...]

    def __post_init__(self) -> None:
        values = tuple(_nonneg("Empirical value", v) for v in self.values)
        if not values:
            raise ValidationError("Empirical needs at least one value")
        object.__setattr__(self, "values", values)

    @classmethod
    def from_csv(cls, path: str | Path, *, column: int | str = 0) -> Empirical:
        """Read a trace from a CSV file.

        Parameters
        ----------
        path
            CSV file; blank lines and lines starting with ``#`` are skipped.
        column
            Column index, or a header name (the first row is then a header).
            With an index, a first row that does not parse as a number is
            taken as a header and skipped.

        Returns
        -------
        Empirical
            The trace as a latency model.

        Raises
        ------
        ValidationError
            If the file holds no usable value or a value is not a number >= 0.

        """
        with Path(path).open(newline="", encoding="utf-8") as fh:
            rows = [r for r in csv.reader(fh) if r and not r[0].lstrip().startswith("#")]
        if not rows:
            raise ValidationError(f"{path}: no latency values")
        if isinstance(column, str):
            header = [h.strip() for h in rows[0]]
            if column not in header:
                raise ValidationError(f"{path}: no column {column!r} in header {header}")
            index, rows = header.index(column), rows[1:]
        else:
            index = column
            try:
                float(rows[0][index])
            except (ValueError, IndexError):
                rows = rows[1:]
        values = []
        for lineno, row in enumerate(rows, start=1):
            try:
                values.append(float(row[index]))
            except (ValueError, IndexError):
                raise ValidationError(
                    f"{path}: data row {lineno}: no number in column {column!r}"
                ) from None
        return cls(tuple(values))

    def sample(self, rng: np.random.Generator) -> float:
        """Draw one value of the trace."""
        return self.values[int(rng.integers(len(self.values)))]

    def sample_many(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """Draw ``n`` values of the trace."""
        return np.asarray(self.values)[rng.integers(len(self.values), size=n)]


def _window_bounds(kind: str, start: float, end: float) -> tuple[float, float]:
    start = _nonneg(f"{kind}.start", start)
    if isinstance(end, bool) or not isinstance(end, int | float) or math.isnan(end):
        raise ValidationError(f"{kind}.end must be a number, got {end!r}")
    if end <= start:
        raise ValidationError(f"{kind}: end ({end}) must be after start ({start})")
    return start, float(end)


@dataclass(frozen=True, slots=True)
class Degradation:
    """A time window ``[start, end)`` during which a link is worse.

    Parameters
    ----------
    start, end
        Window in virtual seconds; ``end`` may be ``inf``.
    latency_factor
        Multiplies the sampled latency plus jitter (>= 0).
    extra_latency
        Seconds added to every transmission (>= 0).
    bandwidth_factor
        Multiplies the bandwidth (> 0); 0.5 halves it.
    loss
        Loss probability replacing the link's own during the window
        (``None`` keeps it). Overlapping windows keep the largest.

    """

    start: float
    end: float
    latency_factor: float = 1.0
    extra_latency: float = 0.0
    bandwidth_factor: float = 1.0
    loss: float | None = None

    def __post_init__(self) -> None:
        start, end = _window_bounds("Degradation", self.start, self.end)
        object.__setattr__(self, "start", start)
        object.__setattr__(self, "end", end)
        _nonneg("Degradation.latency_factor", self.latency_factor)
        _nonneg("Degradation.extra_latency", self.extra_latency)
        _positive("Degradation.bandwidth_factor", self.bandwidth_factor)
        if self.loss is not None:
            _probability("Degradation.loss", self.loss)


@dataclass(frozen=True, slots=True)
class Outage:
    """A time window ``[start, end)`` during which every transmission on the link is lost.

    This is a network partition between a node and its broker: traffic sent
    inside the window in either direction is dropped (QoS 1 senders keep
    retrying and get through after the window).

    Parameters
    ----------
    start, end
        Window in virtual seconds; ``end`` may be ``inf``.

    """

    start: float
    end: float

    def __post_init__(self) -> None:
        start, end = _window_bounds("Outage", self.start, self.end)
        object.__setattr__(self, "start", start)
        object.__setattr__(self, "end", end)


Window = Degradation | Outage


class Conditions(NamedTuple):
    """A link's state at one instant, after applying its windows."""

    latency_factor: float
    extra_latency: float
    bandwidth_bps: float | None
    loss: float
    down: bool


@dataclass(frozen=True, slots=True)
class Link:
    """A node-to-broker connection, used in both directions.

    Parameters
    ----------
    latency
        One-way propagation latency: a :class:`LatencyModel` or a number of
        seconds (taken as :class:`Constant`).
    bandwidth_bps
        Bits per second for serialisation delay; ``None`` means unlimited.
    loss
        Probability that one transmission is lost.
    jitter
        Optional extra latency model added to every transmission.
    windows
        :class:`Degradation` and :class:`Outage` windows.

    """

    latency: LatencyModel | float = 0.0
    bandwidth_bps: float | None = None
    loss: float = 0.0
    jitter: LatencyModel | None = None
    windows: tuple[Window, ...] = field(default=())

    def __post_init__(self) -> None:
        if isinstance(self.latency, int | float) and not isinstance(self.latency, bool):
            object.__setattr__(self, "latency", Constant(self.latency))
        if not isinstance(self.latency, LatencyModel):
            raise ValidationError(f"latency must be a latency model, got {self.latency!r}")
        if self.jitter is not None and not isinstance(self.jitter, LatencyModel):
            raise ValidationError(f"jitter must be a latency model or None, got {self.jitter!r}")
        if self.bandwidth_bps is not None:
            _positive("bandwidth_bps", self.bandwidth_bps)
        _probability("loss", self.loss)
        windows = tuple(self.windows)
        for w in windows:
            if not isinstance(w, Degradation | Outage):
                raise ValidationError(f"windows must be Degradation or Outage, got {w!r}")
        object.__setattr__(self, "windows", windows)

    def with_windows(self, *windows: Window) -> Link:
        """Return a copy of this link with ``windows`` added."""
        return replace(self, windows=(*self.windows, *windows))

    def conditions(self, now: float) -> Conditions:
        """Return the link's factors and loss at time ``now`` (windows active at ``now`` applied).

        Overlapping degradations multiply their factors, add their extra
        latencies and keep the largest loss override; any active outage
        makes the link ``down``.
        """
        factor, extra, bw, loss, down = 1.0, 0.0, self.bandwidth_bps, self.loss, False
        override: float | None = None
        for w in self.windows:
            if w.start <= now < w.end:
                if isinstance(w, Outage):
                    down = True
                else:
                    factor *= w.latency_factor
                    extra += w.extra_latency
                    if bw is not None:
                        bw *= w.bandwidth_factor
                    if w.loss is not None:
                        override = w.loss if override is None else max(override, w.loss)
        if override is not None:
            loss = override
        return Conditions(factor, extra, bw, loss, down)

    def up_at(self, now: float) -> float:
        """Return when the outage covering ``now`` ends (``now`` itself if none does).

        Overlapping or back-to-back outages count as one; ``inf`` if the link
        never comes back.
        """
        t, moved = now, True
        while moved:
            moved = False
            for w in self.windows:
                if isinstance(w, Outage) and w.start <= t < w.end:
                    t, moved = w.end, True
        return t

    def transmit_delay(self, nbytes: int, rng: np.random.Generator, now: float) -> float:
        """Return the one-way delay of ``nbytes`` sent at ``now``, in seconds.

        ``(latency + jitter) * latency_factor + extra_latency + nbytes * 8 /
        bandwidth``, with the windows active at ``now``.
        """
        c = self.conditions(now)
        d = self.latency.sample(rng)  # type: ignore[union-attr]
        if self.jitter is not None:
            d += self.jitter.sample(rng)
        d = d * c.latency_factor + c.extra_latency
        if c.bandwidth_bps is not None:
            d += nbytes * 8 / c.bandwidth_bps
        return d

    def is_lost(self, rng: np.random.Generator, now: float) -> bool:
        """Return whether one transmission sent at ``now`` is lost (always during an outage)."""
        c = self.conditions(now)
        if c.down:
            return True
        return c.loss > 0 and float(rng.random()) < c.loss


class Sampler:
    """Draws from a model in blocks and hands them out one by one.

    A NumPy call costs microseconds whatever its size, so the kernel draws
    a block at a time: block sizes grow 8, 16, ... up to ``max_block``, so
    a link used twice costs little memory and a busy one amortises the call.
    The sequence depends only on the generator and the number of draws, so
    it is deterministic.

    Parameters
    ----------
    draw
        ``draw(n)`` returns an array of ``n`` values.
    max_block
        Largest block drawn at once.

    """

    __slots__ = ("_block", "_buf", "_draw", "_max_block")

    def __init__(self, draw: _Draw, *, max_block: int = 128) -> None:
        self._draw = draw
        self._buf: list[float] = []
        self._block = 8
        self._max_block = max_block

    def __call__(self) -> float:
        """Return the next value."""
        buf = self._buf
        if not buf:
            # Reversed so that pop() hands out values in draw order.
            buf.extend(reversed(self._draw(self._block).tolist()))
            self._block = min(self._block * 2, self._max_block)
        return buf.pop()


class _Draw(Protocol):
    def __call__(self, n: int, /) -> np.ndarray: ...
