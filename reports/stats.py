"""Small statistics for the reports, exact and without a numerical library."""

from __future__ import annotations

import math


def poisson_sf(k: int, mu: float) -> float:
    """P(X >= k) for X ~ Poisson(mu): the chance of at least k events when mu are expected.

    Summed as 1 - P(X < k) in log space for small k, and as the upper tail
    itself (which converges quickly past the mean) when k is above the mean,
    so that tiny p-values keep their digits instead of rounding to 0.
    """
    if k <= 0:
        return 1.0
    if mu <= 0:
        return 0.0
    if k > mu:
        term = math.exp(k * math.log(mu) - mu - math.lgamma(k + 1))
        total, index = 0.0, k
        while term > total * 1e-17 and index < k + 10_000:
            total += term
            index += 1
            term *= mu / index
        return min(1.0, total)
    term = math.exp(-mu)
    below = 0.0
    for index in range(k):
        below += term
        term *= mu / (index + 1)
    return max(0.0, 1.0 - below)


def binomial_sf(k: int, n: int, p: float) -> float:
    """P(X >= k) for X ~ Binomial(n, p), summed exactly from the upper side."""
    if k <= 0:
        return 1.0
    if k > n or p <= 0:
        return 0.0
    if p >= 1:
        return 1.0
    log_p, log_q = math.log(p), math.log1p(-p)
    total = 0.0
    for index in range(k, n + 1):
        term = math.exp(
            math.lgamma(n + 1) - math.lgamma(index + 1) - math.lgamma(n - index + 1)
            + index * log_p + (n - index) * log_q
        )  # fmt: skip
        total += term
        if index > n * p and term < total * 1e-17:
            break
    return min(1.0, total)
