"""Fitting a router model: a regularised logistic regression in pure Python (no numpy needed).

`fit(conversations, labels)` learns P(needs the large tier) from outcome labels in [0, 1] (1: the
large model did better than the small one on this prompt; fractions allowed) over the features of
`fitted.conversation_features`. The optimiser is SGD on the log loss with an exact L2 penalty;
n-grams seen in fewer than `min_count` training conversations are not features at all. The L2
penalty (from `l2_grid`) and the number of passes are chosen on a held-out tenth of the training
rows (seeded), so nothing is tuned on data the caller evaluates on. Afterwards only
the `max_ngrams` n-grams with the largest weights are kept, which bounds the model file and the
work per call.

Deterministic for a given seed and input order. No I/O.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from llmroute.routing.fitted import DEFAULT_WINDOW, FEATURE_SETS, FittedRouter, _ngram_weight_of, conversation_features

__all__ = ["FitOptions", "Featurized", "featurize", "fit", "fit_featurized", "fit_options_check"]

_KINDS = ("words", "pairs", "chars")


@dataclass(frozen=True)
class FitOptions:
    """Knobs of `fit`; the defaults are what `llmroute router fit` uses."""

    l2: float = 1e-4
    """L2 penalty (per example) on every weight; larger gives smaller weights and smoother scores."""
    l2_grid: tuple[float, ...] = (1e-3, 1e-2, 1e-1)
    """Penalties tried, the one with the lowest held-out log loss kept (empty: `l2` only)."""
    learning_rate: float = 0.1
    max_epochs: int = 12
    min_count: int = 3
    """An n-gram must occur in at least this many training conversations to be a feature."""
    max_ngrams: int = 4000
    """The model file keeps at most this many n-grams (by absolute weight)."""
    holdout: float = 0.1
    """Share of the training rows held out to choose the number of passes."""
    seed: int = 0
    features: str = "lean"
    """The dense features besides the n-grams (fitted.FEATURE_SETS): "lean" reads only sizes and
    counts of the window; "heuristic" runs the heuristic classifier and weighs its conclusions, at
    about twice the cost per call and, in cross-validation on RouteLLM's tables, no better
    (benchmarks/RESULTS.md)."""
    kinds: tuple[str, ...] = ("words", "pairs", "chars")
    """The n-gram kinds the model may weigh (each kind left out is one less lookup pass per call)."""
    window: int = DEFAULT_WINDOW
    """With the lean features: the instruction window's length for mostly-ASCII text, in characters
    (fitted.window_sizes; shorter reads less per call). The heuristic features read the classifier's."""


@dataclass(frozen=True)
class Featurized:
    """One conversation's features: dense (name, value) pairs and its n-grams per kind."""

    dense: tuple[tuple[str, float], ...]
    words: frozenset[str]
    pairs: frozenset[str]
    chars: frozenset[str]
    ngram_count: int


def featurize(conversations: Sequence[Sequence[Mapping[str, Any]]], max_tokens: Sequence[int | None] | None = None,
              *, features: str = FitOptions.features, window: int = DEFAULT_WINDOW) -> list[Featurized]:
    """Features of each conversation (of the `features` set), computed once so that several fits can
    share them."""
    out = []
    for index, messages in enumerate(conversations):
        _, dense, (words, pairs, chars, count) = conversation_features(
            messages, max_tokens=max_tokens[index] if max_tokens is not None else None, features=features,
            window=window,
        )
        out.append(Featurized(tuple(dense), frozenset(words), frozenset(pairs), frozenset(chars),
                              count))
    return out


def fit(
    conversations: Sequence[Sequence[Mapping[str, Any]]],
    labels: Sequence[float],
    options: FitOptions = FitOptions(),
    *,
    meta: Mapping[str, Any] | None = None,
) -> FittedRouter:
    """Fit a model on conversations and their labels (1.0: needs the large tier, 0.0: does not)."""
    return fit_featurized(featurize(conversations, features=options.features, window=options.window), labels, options,
                          meta=meta)


def fit_options_check(options: FitOptions) -> None:
    """ValueError naming the field when `options.features` or `options.kinds` is unknown."""
    if options.features not in FEATURE_SETS:
        raise ValueError(f"features must be one of {', '.join(FEATURE_SETS)}, got {options.features!r}")
    if options.window != DEFAULT_WINDOW and (options.features != "lean" or not 20 <= options.window <= 4000):
        raise ValueError(f"window must be {DEFAULT_WINDOW} with the heuristic features and 20-4000 with the lean ones, "
                         f"got {options.window!r}")
    unknown = set(options.kinds) - set(_KINDS)
    if unknown or not options.kinds:
        raise ValueError(f"unknown n-gram kinds {sorted(unknown)} (known: {', '.join(_KINDS)})" if unknown
                         else f"kinds: give at least one of {', '.join(_KINDS)}")


def _log_loss(weights: list[float], bias: float, rows: list[list[tuple[int, float]]], labels: Sequence[float], indices: Sequence[int]) -> float:
    total = 0.0
    for r in indices:
        z = bias
        for i, v in rows[r]:
            z += weights[i] * v
        z = max(-35.0, min(35.0, z))
        p = 1.0 / (1.0 + math.exp(-z))
        y = labels[r]
        total -= y * math.log(p) + (1.0 - y) * math.log(1.0 - p)
    return total / max(1, len(indices))


def _sgd(
    rows: list[list[tuple[int, float]]],
    labels: Sequence[float],
    train: list[int],
    holdout: list[int],
    size: int,
    l2: float,
    options: FitOptions,
    rng: random.Random,
) -> tuple[float, list[float], float, int]:
    """Plain SGD with an exact L2 penalty (Bottou's scaled weights: w = scale * v, so decaying every
    weight is one multiplication) and the step size eta0 / (1 + eta0 * l2 * t). Returns the weights
    after the pass with the lowest held-out log loss: (loss, weights, bias, passes)."""
    v = [0.0] * size
    scale = 1.0
    bias = 0.0
    t = 0
    eta0 = options.learning_rate
    best: tuple[float, list[float], float, int] = (math.inf, [0.0] * size, 0.0, 0)
    train = list(train)
    for epoch in range(1, options.max_epochs + 1):
        rng.shuffle(train)
        for r in train:
            row = rows[r]
            eta = eta0 / (1.0 + eta0 * l2 * t)
            t += 1
            z = 0.0
            for i, x in row:
                z += v[i] * x
            z = max(-35.0, min(35.0, z * scale + bias))
            g = 1.0 / (1.0 + math.exp(-z)) - labels[r]
            scale *= 1.0 - eta * l2
            step = eta * g / scale
            for i, x in row:
                v[i] -= step * x
            bias -= eta * g
            if scale < 1e-6:  # fold the scale back in before it underflows
                v = [w * scale for w in v]
                scale = 1.0
        weights = [w * scale for w in v]
        if not holdout:
            best = (0.0, weights, bias, epoch)
            continue
        loss = _log_loss(weights, bias, rows, labels, holdout)
        if loss < best[0]:
            best = (loss, weights, bias, epoch)
        elif epoch >= best[3] + 2:
            break  # two passes without improvement on the held-out rows
    return best


def fit_featurized(
    examples: Sequence[Featurized],
    labels: Sequence[float],
    options: FitOptions = FitOptions(),
    *,
    meta: Mapping[str, Any] | None = None,
) -> FittedRouter:
    """`fit` on precomputed features (cross-validation featurizes once and fits many times), which
    must be of `options.features`' set."""
    if len(examples) != len(labels):
        raise ValueError(f"{len(examples)} examples but {len(labels)} labels")
    if len(examples) < 2:
        raise ValueError("at least 2 labelled conversations are needed to fit a router")
    for y in labels:
        if not 0.0 <= y <= 1.0:
            raise ValueError(f"labels must be in [0, 1], got {y!r}")
    fit_options_check(options)
    weighed = [kind in options.kinds for kind in _KINDS]
    # Vocabulary: n-grams by the number of training conversations they occur in.
    counts: dict[tuple[int, str], int] = {}
    for example in examples:
        for kind, grams in enumerate((example.words, example.pairs, example.chars)):
            if not weighed[kind]:
                continue
            for gram in grams:
                key = (kind, gram)
                counts[key] = counts.get(key, 0) + 1
    index: dict[Any, int] = {}
    names: list[Any] = []
    for example in examples:
        for name, _ in example.dense:
            if name not in index:
                index[name] = len(names)
                names.append(name)
    for key, count in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
        if count >= options.min_count:
            index[key] = len(names)
            names.append(key)
    rows: list[list[tuple[int, float]]] = []
    for example in examples:
        row = [(index[name], value) for name, value in example.dense if value]
        norm = _ngram_weight_of(example.ngram_count)
        for kind, grams in enumerate((example.words, example.pairs, example.chars)):
            for gram in grams:
                at = index.get((kind, gram))
                if at is not None:
                    row.append((at, norm))
        rows.append(row)

    order = list(range(len(rows)))
    rng = random.Random(options.seed)
    rng.shuffle(order)
    held = max(1, int(len(order) * options.holdout)) if len(order) >= 20 else 0
    holdout, train = order[:held], order[held:]
    best = (math.inf, [0.0] * len(names), 0.0, 0, options.l2)
    for l2 in options.l2_grid or (options.l2,):
        loss, weights, bias, epochs = _sgd(rows, labels, train, holdout, len(names), l2, options, random.Random(options.seed))
        if best[3] == 0 or loss < best[0]:
            best = (loss, weights, bias, epochs, l2)
    loss, weights, bias, epochs, l2 = best

    dense: dict[str, float] = {}
    tables: dict[str, dict[str, float]] = {kind: {} for kind in _KINDS}
    kept = sorted(
        ((abs(weights[i]), i) for i, name in enumerate(names) if isinstance(name, tuple) and weights[i]),
        reverse=True,
    )[: options.max_ngrams]
    for _, i in sorted(kept, key=lambda t: t[1]):
        kind, gram = names[i]
        tables[_KINDS[kind]][gram] = round(weights[i], 5)
    for i, name in enumerate(names):
        if isinstance(name, str):
            dense[name] = round(weights[i], 5)
    info = {
        "rows": len(examples),
        "positives": round(sum(labels), 3),
        "features_seen": len(names),
        "ngrams_kept": len(kept),
        "epochs": epochs,
        "l2": l2,
        "holdout_rows": held,
        "holdout_log_loss": None if not holdout else round(loss, 5),
        "options": {k: getattr(options, k) for k in options.__dataclass_fields__},
        **(meta or {}),
    }
    return FittedRouter(bias=round(bias, 5), dense=dense, words=tables["words"], pairs=tables["pairs"],
                        chars=tables["chars"], meta=info, features=options.features, window=options.window)
