"""A fitted router: a team's own scorer, learned from its outcomes, loaded from a small JSON file.

The score is a logistic model over two kinds of features of a conversation:

* dense features, one of two sets (`FEATURE_SETS`, the model file's "features"): "lean", the
  conversation's sizes and C-level counts of the instruction window (`_lean`), or "heuristic",
  what the heuristic classifier computes (`classifier.classify`): its log-odds, its task type, and
  its counts (input and requested output tokens, code blocks, formula symbols, quantities,
  constraints, questions, conversation depth); each on a log scale;
* the n-grams of the instruction window (the start and end of the last user message, the window
  the classifier reads, or with the lean set one of the model's own length): lower-cased words and
  word pairs, and for non-ASCII text (Chinese has no spaces) its character pairs.

The score estimates the large tier's expected gain on a 0-1 scale (fit.py's label: 1 only the large
answers well, 0.5 no difference, 0 only the small does), so above 0.5 the large tier is expected
to do better.

The model file keeps only the n-grams the fit gave a weight, by name, so inference is dict
lookups and a set intersection, its route reasons can name the n-grams that decided, and a file
of a few thousand features is ~100 KB of readable JSON. `router fit` (fit.py) writes it; the
`[routing] model = "router.json"` key loads it at config load; `decide()` then calls
`FittedRouter.classify` where it would call the heuristic, with the same result type, so
thresholds and `llmroute calibrate` work on its scores as on the heuristic's.

Inference is pure (no I/O, no clock, no state): `load_model` is the only function that reads a file.
"""

from __future__ import annotations

import json
import math
import operator
from itertools import chain
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from llmroute.errors import ConfigError
from llmroute.routing.classifier import (Classification, _classify, _features, _instruction_window, _numbers, _read_ask,
                         _window_tokens)

__all__ = ["FittedRouter", "load_model", "conversation_features", "FEATURE_SETS", "MODEL_FORMAT", "MODEL_VERSION"]

MODEL_FORMAT = "llmroute.router"
MODEL_VERSION = 2
"""Version 2 added the "features" and "window" keys (the lean feature set); version 1 files (heuristic
features) still load."""
FEATURE_SETS = ("heuristic", "lean")
"""What a model reads besides the n-grams: "heuristic", the whole heuristic classifier's conclusions
(its log-odds, task type and counts); "lean", only sizes and C-level counts of the instruction
window, without running the heuristic (about half the cost per call)."""

_NON_ASCII_RUN_RE = re.compile(r"[^\x00-\x7f]+")
_BMP_RE = re.compile(r"[\x80-\ud7ff\ue000-\uffff]+")  # non-ASCII characters that are one UTF-16 code unit


def _char_pair_codes(text: str) -> tuple[memoryview, memoryview]:
    """Every two adjacent UTF-16 code units of `text` as one 32-bit number: (the pairs starting at
    even units, those starting at odd ones). A pair of two non-ASCII BMP characters is a key of
    `FittedRouter._char_codes` only if those two characters are adjacent in `text`, so looking the
    numbers up finds the same character pairs as the non-ASCII runs' pairs of `_ngrams`."""
    data = text.encode("utf-16-le")
    size = len(data)
    return memoryview(data[:size - size % 4]).cast("I"), memoryview(data[2:size - (size - 2) % 4]).cast("I")


_new_tuple = tuple.__new__


def _ngrams(words: list[str], distinct: int, window: str) -> tuple[list[str], list[str], list[str], int]:
    """(words, word pairs, character pairs of the non-ASCII runs, `distinct` + all pairs) of an
    instruction window whose tokens in order are `words` (`distinct`: the heuristic features count
    its distinct words, the lean ones all of them: a set per call costs). A dict-keys view
    intersects a list by probing each item (a set it may scan from the other side)."""
    # C-level loops only (map over zip / str iteration): this runs on every routed call.
    pairs = list(map(" ".join, zip(words, words[1:])))
    chars: list[str] = []
    if not window.isascii():
        for run in _NON_ASCII_RUN_RE.findall(window):
            chars.extend(map(operator.add, run, run[1:]))
    return words, pairs, chars, distinct + len(pairs) + len(chars)


def _ngram_weight_of(distinct: int) -> float:
    """The value of each present n-gram in a window with `distinct` n-grams (distinct words, every
    word and character pair: counting pairs distinct would cost a set per call): 1/sqrt(n), scaled
    to 1 at 100 (the L2 normalisation of text classifiers)."""
    return 10.0 / math.sqrt(distinct) if distinct else 0.0


def _dense(result: Classification) -> list[tuple[str, float]]:
    """The classifier's conclusions as named numeric features, each on a log scale."""
    score = min(max(result.score, 1e-9), 1.0 - 1e-9)
    requested = result.requested_output_tokens
    return [
        ("heuristic", math.log(score / (1.0 - score))),
        ("category=" + result.category, 1.0),
        ("input_tokens", math.log2(1.0 + result.input_tokens) / 4.0),
        ("output_tokens", math.log2(1.0 + requested) / 4.0 if requested is not None else 0.0),
        ("code_blocks", math.log2(1.0 + result.code_blocks)),
        ("math_signals", math.log2(1.0 + result.math_signals) / 2.0),
        ("quantities", math.log2(1.0 + max(0, result.quantities)) / 2.0),
        ("constraints", math.log2(1.0 + result.constraints) / 2.0),
        ("questions", math.log2(1.0 + result.questions) / 2.0),
        ("user_turns", math.log2(float(max(1, result.user_turns)))),
    ]


_DENSE_NAMES = frozenset({"heuristic", "input_tokens", "output_tokens", "code_blocks", "math_signals", "quantities",
                          "constraints", "questions", "user_turns", "ask_tokens", "window_fences", "window_symbols",
                          "window_numbers"})


# The counts `_dense` reads after the log-odds and the task type, in its order, as
# (Classification field index, feature name, divisor of log2(1 + count)); user_turns is log2(turns).
_COUNT_FEATURES = (
    (3, "input_tokens", 4.0), (4, "output_tokens", 4.0), (5, "code_blocks", 1.0), (6, "math_signals", 2.0),
    (7, "quantities", 2.0), (8, "constraints", 2.0), (9, "questions", 2.0), (10, "user_turns", 1.0),
)


def _sigmoid(total: float) -> float:
    """The score of a log-odds total, clamped to +-60 first."""
    total = max(-60.0, min(60.0, total))
    return 1.0 / (1.0 + math.exp(-total))


_NO_WORDS: frozenset[str] = frozenset()


DEFAULT_WINDOW = 400
"""The instruction window's length for mostly-ASCII text, in characters (the classifier's)."""


def window_sizes(window: int) -> tuple[int, int, int, int]:
    """(head, tail) characters of the instruction window for mostly-ASCII text, then for the rest,
    for a window of `window` ASCII characters: the classifier's proportions (240 + 160, and
    110 + 70 for denser CJK text, at 400)."""
    head = round(window * 0.6)
    return head, window - head, round(window * 0.275), round(window * 0.175)


def _lean(messages: Sequence[Mapping[str, Any]], max_tokens: int | None,
          sizes: tuple[int, int, int, int] | None = None) -> tuple[tuple[Any, ...], list[tuple[str, float]], str, list[str]]:
    """The lean feature set, without the heuristic: (the Classification fields after score and
    reason, the dense features, the instruction window, its tokens in order). Sizes as the
    heuristic estimates them; the rest are C-level counts on the window (`sizes`: see
    `window_sizes`; None: the classifier's)."""
    ask, ask_tokens, context_tokens, ask_share, user_turns = _read_ask(messages)
    window = _instruction_window(ask, ask_share, sizes)
    words = _window_tokens(window)
    input_tokens = int(context_tokens + 0.5)
    fences = window.count("```") // 2
    symbols = window.count("^") + window.count("\\") + window.count("=")
    numbers = _numbers(window, _NO_WORDS)  # digit runs only
    questions = window.count("?") + window.count("？")
    dense = [
        ("input_tokens", math.log2(1.0 + input_tokens) / 4.0),
        ("ask_tokens", math.log2(1.0 + ask_tokens) / 4.0),
        ("output_tokens", math.log2(1.0 + max_tokens) / 4.0 if max_tokens is not None else 0.0),
        ("window_fences", math.log2(1.0 + fences)),
        ("window_symbols", math.log2(1.0 + symbols) / 2.0),
        ("window_numbers", math.log2(1.0 + numbers) / 2.0),
        ("questions", math.log2(1.0 + questions) / 2.0),
        ("user_turns", math.log2(float(max(1, user_turns)))),
    ]
    return ("fitted", input_tokens, max_tokens, fences, symbols, numbers, 0, questions, user_turns), dense, window, words


def conversation_features(
    messages: Sequence[Mapping[str, Any]], *, max_tokens: int | None = None, features: str = "heuristic",
    window: int = DEFAULT_WINDOW,
) -> tuple[Classification, list[tuple[str, float]], tuple[list[str], list[str], list[str], int]]:
    """Everything a fitted model reads from one conversation: the result's fields (the heuristic's
    result; with the lean set, score 0.5 and no reason), the dense features and the window's
    n-grams, from one read of the conversation; `window` sizes the lean set's window (the heuristic
    set reads the classifier's). The fit (fit.py) and inference both go through here."""
    if features == "lean":
        sizes = None if window == DEFAULT_WINDOW else window_sizes(window)
        fields, dense, text, words = _lean(messages, max_tokens, sizes)
        return (_new_tuple(Classification, (0.5, "", *fields)), dense, _ngrams(words, len(words), text))
    f = _features(messages)
    result = _classify(f, max_tokens)
    return result, _dense(result), _ngrams(f.words, len(f.tokens), f.window)


class Featurized(Protocol):
    """What the `*_features` methods read of a precomputed `fit.Featurized` (fit.py imports this module)."""

    @property
    def dense(self) -> Iterable[tuple[str, float]]: ...
    @property
    def words(self) -> frozenset[str]: ...
    @property
    def pairs(self) -> frozenset[str]: ...
    @property
    def chars(self) -> frozenset[str]: ...
    @property
    def ngram_count(self) -> int: ...


class FittedRouter:
    """A loaded model file: `classify(messages, max_tokens=)` gives a `Classification` whose score is
    the fitted estimate of the large tier's gain (above 0.5: the large tier expected to do better),
    whose reason names the two features that weighed most, and whose other fields are the
    heuristic's (with the lean features: category "fitted", the sizes and the window's counts it
    read, constraints 0). Not to be mutated after construction."""

    __slots__ = ("name", "bias", "dense", "words", "pairs", "chars", "meta", "features", "window", "_sizes", "ngrams",
                 "_keys", "_plan", "_category", "_char_codes", "_char_names", "_pair_codes", "_pair_names")

    def __init__(
        self,
        *,
        bias: float,
        dense: Mapping[str, float],
        words: Mapping[str, float],
        pairs: Mapping[str, float],
        chars: Mapping[str, float],
        meta: Mapping[str, Any] | None = None,
        name: str = "fitted",
        features: str = "heuristic",
        window: int = DEFAULT_WINDOW,
    ) -> None:
        if features not in FEATURE_SETS:
            raise ValueError(f"features must be one of {FEATURE_SETS}, got {features!r}")
        if window != DEFAULT_WINDOW and (features != "lean" or not 20 <= window <= 4000):
            raise ValueError(f"window must be {DEFAULT_WINDOW} with the heuristic features and 20-4000 with the lean "
                             f"ones, got {window!r}")
        self.name = name
        self.features = features
        self.window = window
        self._sizes = None if window == DEFAULT_WINDOW else window_sizes(window)
        self.bias = float(bias)
        self.dense = dict(dense)
        self.words = dict(words)
        self.pairs = dict(pairs)
        self.chars = dict(chars)
        self.meta = dict(meta or {})
        # One table for the lookups: the kinds never share a key (a word is ASCII without spaces, a
        # pair has a space, a character n-gram is non-ASCII).
        self.ngrams = {**self.words, **self.pairs, **self.chars}
        self._keys = self.ngrams.keys()
        # The character pairs keyed by their two UTF-16 code units read as one 32-bit number, the
        # way `_add_ngrams` reads the window (`_char_pair_codes`): ints built and hashed in C instead
        # of a new two-character string per pair. Only when every pair is two BMP characters (no
        # surrogates); otherwise, or without character pairs, None.
        self._char_codes: dict[int, float] | None = None
        self._char_names: dict[int, str] = {}
        if self.chars and all(len(gram) == 2 and _BMP_RE.fullmatch(gram) for gram in self.chars):
            self._char_names = {_char_pair_codes(gram)[0][0]: gram for gram in self.chars}
            self._char_codes = {code: self.chars[gram] for code, gram in self._char_names.items()}
        # The word pairs keyed by their (first, second) tuple, the way `_add_ngrams` reads the
        # window's words (`zip`): a tuple's hash combines its words' hashes, which the word lookups
        # have already computed, so no pair is joined into a string. Only when every pair is two
        # words; otherwise, or without pairs, None.
        self._pair_codes: dict[tuple[str, ...], float] | None = None
        self._pair_names: dict[tuple[str, ...], str] = {}
        if self.pairs:
            split = {gram: tuple(gram.split(" ")) for gram in self.pairs}
            if all(len(parts) == 2 and all(parts) for parts in split.values()):
                self._pair_names = {parts: gram for gram, parts in split.items()}
                self._pair_codes = {parts: self.pairs[gram] for gram, parts in split.items()}
        # `classify`'s precompiled lookups: the weighted counts as (Classification field, name,
        # weight, scale of log2(1 + count)), in `_dense` order; the task types' weights by type.
        self._plan = tuple(
            (field, name, self.dense[name], scale) for field, name, scale in _COUNT_FEATURES if name in self.dense
        )
        self._category = {
            name[len("category="):]: weight for name, weight in self.dense.items() if name.startswith("category=")
        }

    def _dense_sum(self, dense: Iterable[tuple[str, float]]) -> tuple[float, list[tuple[float, str]]]:
        """(the bias plus the dense features' part of the log-odds, each weighed feature's contribution)."""
        total = self.bias
        named: list[tuple[float, str]] = []
        weights = self.dense
        for name, value in dense:
            weight = weights.get(name)
            if weight is not None and value:
                contribution = weight * value
                total += contribution
                named.append((contribution, name))
        return total, named

    def _sum(
        self, dense: Iterable[tuple[str, float]], words: Iterable[str], pairs: Iterable[str], chars: Iterable[str],
        ngram_count: int,
    ) -> tuple[float, list[tuple[float, str]], set[str], float]:
        """(log-odds, each dense feature's contribution, the n-grams found in the table, their scale)."""
        total, named = self._dense_sum(dense)
        hits: set[str] = set()
        norm = 0.0
        if ngram_count:
            # Presence, not counts: each n-gram in the table contributes once, scaled so that a
            # window's n-grams weigh the same in total whatever its length. The intersections
            # iterate the window's side in C (dict-keys views check membership by hash), and so do
            # sum(map(...)) and max(..., key=...) below.
            keys = self._keys
            hits = keys & words
            if pairs:
                hits |= keys & pairs
            if chars:
                hits |= keys & chars
            if hits:
                norm = _ngram_weight_of(ngram_count)
                total += norm * math.fsum(map(self.ngrams.__getitem__, hits))
        return total, named, hits, norm

    def logit(self, messages: Sequence[Mapping[str, Any]], *, max_tokens: int | None = None) -> tuple[float, list[tuple[float, str]], Classification]:
        """(log-odds, the contributions that weighed most, the heuristic's result): every dense
        feature's, and the two n-grams that pushed hardest the way the log-odds ended up."""
        result, dense, (words, pairs, chars, count) = conversation_features(messages, max_tokens=max_tokens,
                                                                             features=self.features, window=self.window)
        total, named, hits, norm = self._sum(dense, words, pairs, chars, count)
        if hits:
            weight = self.ngrams.__getitem__
            pick = max if total >= 0 else min
            for _ in range(min(2, len(hits))):
                value = pick(map(weight, hits))
                strongest = min(gram for gram in hits if weight(gram) == value)  # of equals, the first by name
                named.append((value * norm, strongest))
                hits.discard(strongest)
        return total, named, result

    def logit_features(self, features: Featurized) -> float:
        """The log-odds of precomputed features (fit.Featurized), before the sigmoid."""
        return self._sum(features.dense, features.words, features.pairs, features.chars, features.ngram_count)[0]

    def score_features(self, features: Featurized) -> float:
        """The score of precomputed features (fit.Featurized): what `classify` returns as `.score`."""
        return _sigmoid(self.logit_features(features))

    def coverage_features(self, features: Featurized) -> float:
        """The share of precomputed features' n-grams (fit.Featurized) that this model weighs."""
        if not features.ngram_count:
            return 0.0
        keys = self._keys
        return len((keys & features.words) | (keys & features.pairs) | (keys & features.chars)) / features.ngram_count

    def classify(self, messages: Sequence[Mapping[str, Any]], *, max_tokens: int | None = None) -> Classification:
        """Score this conversation with the fitted model. Pure, deterministic, no I/O.

        The same arithmetic, in the same order, as `logit` (which fit.py's path shares), fused into
        one pass: the dense features through the lookups precompiled at construction, the n-gram
        count without building the pair lists' totals twice (tests/routing/test_fitted_fast.py
        checks both give bit-identical results)."""
        if self.features == "lean":
            fields, dense, window, words = _lean(messages, max_tokens, self._sizes)
            total, named = self._dense_sum(dense)
            total = self._add_ngrams(total, named, words, len(words), window)
            return _new_tuple(Classification, (_sigmoid(total), self._reason(total, named), *fields))
        f = _features(messages)
        heuristic = _classify(f, max_tokens)
        total = self.bias
        named = []
        weights = self.dense
        weight = weights.get("heuristic")
        if weight is not None:
            score = min(max(heuristic[0], 1e-9), 1.0 - 1e-9)
            value = math.log(score / (1.0 - score))
            if value:
                contribution = weight * value
                total += contribution
                named.append((contribution, "heuristic"))
        category = heuristic[2]
        weight = self._category.get(category)
        if weight is not None:
            contribution = weight * 1.0
            total += contribution
            named.append((contribution, "category=" + category))
        counts: tuple[int | None, ...] = heuristic[3:]  # the count fields, input_tokens to user_turns
        for field, name, weight, scale in self._plan:
            count = counts[field - 3]
            if count is None:  # requested output tokens, when the request does not say
                continue
            if field == 10:  # conversation depth: log2 of the user turns, at least one
                value = math.log2(float(max(1, count)))
            else:  # quantities floor at 0
                value = math.log2(1.0 + (max(0, count) if field == 7 else count))
                if scale != 1.0:
                    value /= scale
            if value:
                contribution = weight * value
                total += contribution
                named.append((contribution, name))
        total = self._add_ngrams(total, named, f.words, len(f.tokens), f.window)
        return _new_tuple(Classification, (_sigmoid(total), self._reason(total, named), *heuristic[2:]))

    def _add_ngrams(self, total: float, named: list[tuple[float, str]], words: list[str], distinct: int,
                    window: str) -> float:
        """`total` plus the window's n-grams' part (the sum `_sum` makes, to the bit), the two
        strongest n-grams appended to `named`."""
        # `_ngrams`, building only the kinds this model has weights for (the count covers all).
        ngram_count = distinct
        pairs: Any = ()
        found: list[Any] = []
        values: list[float] = []
        if len(words) > 1:
            ngram_count += len(words) - 1
            pair_codes = self._pair_codes
            if pair_codes is not None:
                pair_hits = pair_codes.keys() & zip(words, words[1:])
                if pair_hits:
                    found.extend(map(self._pair_names.__getitem__, pair_hits))
                    values.extend(map(pair_codes.__getitem__, pair_hits))
            elif self.pairs:
                pairs = list(map(" ".join, zip(words, words[1:])))
        codes = self._char_codes
        chars: Any = None
        if not window.isascii():
            runs = _NON_ASCII_RUN_RE.findall(window)
            ngram_count += sum(map(len, runs)) - len(runs)
            if codes is not None:  # the same hits as `_ngrams`' pairs: see `_char_pair_codes`
                even, odd = _char_pair_codes(window)
                code_hits = codes.keys() & even
                code_hits |= codes.keys() & odd
                found.extend(code_hits)
                values.extend(map(codes.__getitem__, code_hits))
            elif self.chars:  # the same sequence as `_ngrams`' list, without building it
                chars = chain.from_iterable([map(operator.add, run, run[1:]) for run in runs])
        if ngram_count:
            keys = self._keys
            hits = keys & words
            if pairs:
                hits |= keys & pairs
            if chars is not None:
                hits |= keys & chars
            if hits:
                found.extend(hits)
                values.extend(map(self.ngrams.__getitem__, hits))
            if found:
                norm = _ngram_weight_of(ngram_count)
                # fsum is exact whatever the order, so the total is `_sum`'s to the bit; the strongest
                # two are then found by value, the first by name of equals winning as in `logit`.
                total += norm * math.fsum(values)
                pick = max if total >= 0 else min
                names = self._char_names
                for _ in range(min(2, len(found))):
                    value = pick(values)
                    at = values.index(value)
                    strongest = names.get(found[at], found[at])
                    if values.count(value) > 1:
                        tied = [i for i, v in enumerate(values) if v == value]
                        at = min(tied, key=lambda i: names.get(found[i], found[i]))
                        strongest = names.get(found[at], found[at])
                    named.append((value * norm, strongest))
                    del found[at], values[at]
        return total

    def classify_reference(self, messages: Sequence[Mapping[str, Any]], *, max_tokens: int | None = None) -> Classification:
        """`classify` through the general path (`logit`: `conversation_features`, then the sums):
        slower, kept as the reference the fast path is tested against."""
        total, named, heuristic = self.logit(messages, max_tokens=max_tokens)
        return _new_tuple(Classification, (_sigmoid(total), self._reason(total, named), *heuristic[2:]))

    def _reason(self, total: float, named: list[tuple[float, str]]) -> str:
        """The route reason: the two features that pushed hardest the way the score ended up."""
        total = max(-60.0, min(60.0, total))
        if total >= 0:
            pushing = sorted([c for c in named if c[0] > 0], reverse=True)[:2]
        else:
            pushing = sorted([c for c in named if c[0] < 0])[:2]
        if pushing:
            return self.name + ": " + ", ".join(f"{_label(name)} {value:+.2f}" for value, name in pushing)
        return self.name + ": no strong feature"

    def to_json(self) -> dict[str, Any]:
        """The model file's content (see `docs/routing.md` for the format)."""
        return {
            "format": MODEL_FORMAT,
            "version": MODEL_VERSION,
            "features": self.features,
            "window": self.window,
            "meta": self.meta,
            "bias": self.bias,
            "dense": self.dense,
            "ngrams": {"words": self.words, "word_pairs": self.pairs, "chars": self.chars},
        }

    @classmethod
    def from_json(cls, data: Any, *, name: str = "fitted", source: str | None = None) -> FittedRouter:
        """Build from a parsed model file; ConfigError naming `source` on anything malformed."""
        def bad(detail: str) -> ConfigError:
            return ConfigError(f"router model: {detail}", path=source, key="routing.model")

        if not isinstance(data, Mapping) or data.get("format") != MODEL_FORMAT:
            raise bad(f"not a router model file (expected \"format\": \"{MODEL_FORMAT}\")")
        version = data.get("version")
        if version not in (1, MODEL_VERSION):
            raise bad(f"model version {version!r} is not supported (this llmroute reads versions 1-{MODEL_VERSION}); "
                      "refit it")
        features = data.get("features", "heuristic") if version >= 2 else "heuristic"
        if features not in FEATURE_SETS:
            raise bad(f"\"features\" must be one of {', '.join(FEATURE_SETS)}, got {features!r}")
        window = data.get("window", DEFAULT_WINDOW) if version >= 2 else DEFAULT_WINDOW
        if isinstance(window, bool) or not isinstance(window, int) or (
                window != DEFAULT_WINDOW and (features != "lean" or not 20 <= window <= 4000)):
            raise bad(f"\"window\" must be {DEFAULT_WINDOW}, or 20-4000 with the lean features, got {window!r}")
        bias = data.get("bias")
        if isinstance(bias, bool) or not isinstance(bias, (int, float)) or not math.isfinite(bias):
            raise bad("\"bias\" must be a finite number")
        ngrams = data.get("ngrams")
        if not isinstance(ngrams, Mapping):
            raise bad("\"ngrams\" must be an object with words, word_pairs and chars")
        tables = {}
        for key, table in (("dense", data.get("dense")), ("words", ngrams.get("words")),
                           ("word_pairs", ngrams.get("word_pairs")), ("chars", ngrams.get("chars"))):
            if not isinstance(table, Mapping):
                raise bad(f"\"{key}\" must be an object of feature -> weight")
            for feature, weight in table.items():
                if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not math.isfinite(weight):
                    raise bad(f"{key}[{feature!r}] must be a finite number")
            tables[key] = {str(k): float(v) for k, v in table.items()}
        meta = data.get("meta") if isinstance(data.get("meta"), Mapping) else {}
        return cls(bias=float(bias), dense=tables["dense"], words=tables["words"], pairs=tables["word_pairs"],
                   chars=tables["chars"], meta=meta, name=name, features=features, window=window)


def _label(name: str) -> str:
    """How a feature is named in a route reason: n-grams quoted, the heuristic's task type plain."""
    if name.startswith("category="):
        return name[len("category="):]
    if name in _DENSE_NAMES:
        return name
    return repr(name)


def load_model(path: str | Path, *, base: str | Path | None = None) -> FittedRouter:
    """Read a model file (a path relative to `base`, the config file's folder, when given).

    Raises ConfigError naming the file on a missing, unreadable or malformed model."""
    path = Path(path)
    if base is not None and not path.is_absolute():
        path = Path(base) / path
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read router model: {exc.strerror}", path=str(path), key="routing.model") from None
    except UnicodeDecodeError:
        raise ConfigError("router model is not UTF-8 JSON", path=str(path), key="routing.model") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"router model is not JSON ({exc.msg}, line {exc.lineno})", path=str(path),
                          key="routing.model") from None
    return FittedRouter.from_json(data, name=f"fitted {path.name}", source=str(path))
