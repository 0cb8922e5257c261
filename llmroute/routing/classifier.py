"""The difficulty classifier behind `model="auto"`: a conversation in, a score in [0, 1] and a reason out.

The score estimates how likely the request needs the large tier (a 70B-class model rather than a
7B-class one). It is built from what decides difficulty in practice, not learned from any data set:

* the task type asked for: extraction, classification, intent detection, translation, rewriting,
  short summaries, short facts and greetings are within a small model's reach; proofs, derivations,
  multi-step word problems, writing or debugging code, design, in-depth comparison and long-form
  writing are not;
* how much output is asked for ("in 1000 words", "写一篇2000字的报告", `max_tokens`);
* the size of the context, code blocks and math in the prompt, the number of quantities in a word
  problem (a proxy for its number of steps), the number of constraints and questions, and the
  conversation's depth.

Each task type has a prior probability; the other features move that prior in log-odds, so the
score is continuous and every feature's effect is bounded. The main one is a single monotone term
in the log of the *material to reason over*: the ask's tokens, earlier turns at half weight, and
dense content counted as extra token-equivalents (each given quantity, formula symbol, constraint,
further question, statement to judge, technical term). Density scales the material instead of
voting on its own, so a prompt twice as long or twice as dense moves the score by the same bounded
step, in any workload. Chinese and English (and mixed text) go through the same cue tables.

This module must never do I/O, call a tokenizer, read a clock or keep state: it is a pure function
on the hot path of every `model="auto"` call (budget: p99 < 0.1 ms for a 2,000-character prompt,
see benchmarks/classifier_latency.py). Its cost is bounded whatever the input size: cues are read
in a head-and-tail window of the last user message, C-level counts in a wider bounded view, and
sizes are taken from lengths (script shares from samples), never from a pass over the whole context.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import AbstractSet, Any, NamedTuple

# The estimate every call makes lives apart, so that calls load these tables only to score `model="auto"`.
from llmroute.routing.token_estimate import _ascii_share, estimate_tokens, message_text

__all__ = ["Classification", "classify", "estimate_tokens", "message_text"]


class Classification(NamedTuple):
    """What the classifier concluded about one request.

    `score` is in [0, 1]: at or above the configured threshold the request goes to the large tier.
    `reason` is short and human-readable ("code request", "long-form writing, ~1500 output tokens
    asked"); `category` is the task type's id ("code", "translation", ...). The other fields are the
    features the score was built from, exposed so callers can log or test them.
    A NamedTuple, not a frozen dataclass: it is as immutable and builds 5x faster (the hot path).
    """

    score: float
    reason: str
    category: str
    input_tokens: int
    requested_output_tokens: int | None
    code_blocks: int
    math_signals: int
    quantities: int
    constraints: int
    questions: int
    user_turns: int


# --- Task types -------------------------------------------------------------------------------
# (prior probability of needing the large tier, reason phrase). Priors encode the common
# experience with 7B- vs 70B-class models: the small ones do pattern-level tasks well and fail on
# tasks needing several dependent reasoning steps or long coherent output.
_CATEGORIES: dict[str, tuple[float, str]] = {
    "greeting": (0.03, "greeting"),
    "intent": (0.12, "intent detection"),
    "classification": (0.14, "classification"),
    "extraction": (0.17, "extraction"),
    "translation": (0.22, "translation"),
    "rewrite": (0.22, "rewrite or proofreading"),
    "summary": (0.24, "summary"),
    "fact": (0.20, "short factual question"),
    "choice": (0.30, "multiple-choice question"),
    "general": (0.36, "general request"),
    "word_problem": (0.60, "multi-step word problem"),
    "comparison": (0.70, "in-depth comparison"),
    "longform": (0.72, "long-form writing"),
    "math": (0.78, "math or derivation"),
    "code": (0.80, "code request"),
    "design": (0.80, "design request"),
    "proof": (0.90, "proof"),
}
_QUANTITATIVE = frozenset({"word_problem", "choice", "math"})  # quantities counted over the whole ask
# Large task types that a word problem's story can name without asking for them.
_STORY_TASKS = frozenset({"longform", "comparison", "code", "design"})
# What a last sentence asking for a quantity contains.
_QUANTITY_ASKS = ("how many", "how much", "how long", "how far", "how old", "what percent", "calculate",
                  "compute", "多少", "几", "一共", "总共")
_SMALL_TASKS = frozenset({"intent", "classification", "extraction", "translation", "rewrite", "summary"})
_LARGE_TASKS = frozenset({"comparison", "longform", "math", "code", "design", "proof"})

# --- Cues -------------------------------------------------------------------------------------
# Cues are matched on a lower-cased "instruction window": the start and end of the last user
# message, where instructions sit, so a pasted document's words do not decide the task.
# Speed shapes how they are matched (a big regex alternation costs milliseconds here):
# English is split into tokens once and looked up in dicts; Chinese, which has no word breaks,
# goes through one alternation of plain literals, which the regex engine prefilters by first char.
# Kinds that are not task types: "code_hint" (mentions code but does not ask for it), "wp_ask"
# (asks for a quantity), "relation" (a step in a word problem), "constraint", "depth" (asks for
# reasoning), "brief" (asks for a short answer), "fact_q", "math_token".
_EN_WORDS: dict[str, tuple[str, ...]] = {}
_ZH_LITERALS: dict[str, tuple[str, ...]] = {}


def _cues(kind: str, en: str = "", zh: str = "") -> None:
    for word in en.split():
        _EN_WORDS[word] = _EN_WORDS.get(word, ()) + (kind,)
    for literal in zh.split():
        _ZH_LITERALS[literal] = _ZH_LITERALS.get(literal, ()) + (kind,)


_cues("intent", "intent intents", "意图 诉求")
_cues("classification", "classify categorize categorise categorization sentiment spam",
      "分类 归类 情感倾向 情感分析 属于哪 打标签 正面还是负面 垃圾邮件")
_cues("extraction", "extract extraction", "提取 抽取 抽出 识别出 找出 列出所有 整理成")
_cues("translation", "translate translation translated", "翻译 译成 翻成 译为 英文怎么说 中文怎么说 用英语 用英文")
_cues("rewrite", "rewrite rephrase paraphrase proofread polish reword",
      "改写 润色 改成 错别字 通顺 委婉 正式一点 礼貌一点")
_cues("summary", "summarize summarise summary tldr tl;dr recap", "总结 概括 摘要 归纳 要点 一句话")
_cues("proof", "prove proof", "证明 求证 试证")
_cues("math", "derive derivation integral differentiate derivative eigenvalue eigenvalues eigenvector "
      "polynomial theorem lemma probability equation equations",
      "推导 求解 积分 导数 微分 方程 矩阵 特征值 概率 期望值 极限 多项式 定理")
# "calculate"/"计算" alone is as often a lookup ("calculate my shipping fee") as math.
_cues("math_weak", "calculate compute", "计算")
_cues("code", "debug debugging refactor traceback stacktrace exception segfault outofmemoryerror oom deadlock coredump",
      "代码 调试 重构 单元测试 编译 写个程序 写一个程序 脚本 函数 段错误 内存泄漏 死锁")
# Mentions of code; with a verb that makes something or fixes something they become a code request.
_cues("code_hint", "sql python javascript typescript golang rust java kotlin c++ bash dockerfile kubernetes "
      "react regex api bug json yaml html css node.js nodejs heap leak useeffect cache", "接口 正则 报错 异常 内存 线上 缓存 并发")
_cues("code_verb", "write implement create build generate fix optimize optimise convert port",
      "写一个 写个 实现 编写 开发 解决 修复 排查 定位 优化")
_cues("write_verb", "write draft compose prepare")
_cues("design_verb", "design")
_cues("design", "architecture architect microservices monolith", "设计一个 设计一套 架构 技术方案 技术选型 高并发 高可用 迁移方案 系统设计 数据模型 表结构 微服务")
_cues("comparison", "compare comparison contrast versus vs tradeoff tradeoffs trade-off trade-offs analyze "
      "analyse analysis evaluate critique pros", "对比 比较 优缺点 利弊 深入分析 分析 评估 权衡 异同")
_cues("longform", "essay whitepaper", "写一篇 写一份 撰写 报告 论文 文章 演讲稿 策划 白皮书 小说 商业计划 求职信")
_cues("wp_ask", "", "多少 几个 几天 几岁 几元 几块 几点 多远 多长时间 多久 一共 总共")
_cues("relation", "percent twice half thrice each per every average ratio remaining rest discount profit "
      "interest total fewer fraction quarter third double triple sum difference ago older younger faster slower",
      "百分之 倍 一半 平均 每 剩下 剩余 打折 折扣 利润 利息 分之 之和 之差 年前 年后")
_cues("constraint", "must should ensure exactly required without never", "必须 需要 不要 不能 不得 至少 最多 确保 要求 务必 不超过 限制")
_cues("depth", "justify detailed", "详细 为什么 原理 深入 一步一步 逐步 推理 论证 深入分析")
_cues("brief", "briefly", "简短 一句话 只返回 只输出 只回答 一个词 简单回答 是或否")
_cues("fact_q", "", "是什么 是谁 什么时候 在哪 哪里 哪一年")
_cues("math_token", "sin cos tan log ln sqrt mod lim", "")
# In a multiple-choice question: find the exception (every option must be checked).
_cues("negation", "except", "不正确 错误的是 不属于 不包括 不是")

# Phrases: longest word -> (the phrase, its kinds), checked with `in` only when that word occurs.
# Keying on the longest word, not the first, keeps "in", "is", "how" from triggering lookups.
_EN_PHRASES: dict[str, list[tuple[str, tuple[str, ...]]]] = {}
for _phrase, _kinds in (
    ("pull out", ("extraction",)), ("fill in the", ("extraction",)), ("as json", ("extraction",)),
    ("key points", ("summary",)), ("in one sentence", ("summary", "brief")), ("show that", ("proof",)),
    ("closed form", ("math",)), ("solve for", ("math",)), ("expected value", ("math",)),
    ("stack trace", ("code",)), ("core dump", ("code",)), ("memory leak", ("code",)),
    ("system design", ("design",)), ("high availability", ("design",)), ("migration plan", ("design",)),
    ("what time", ("wp_ask",)), ("find the", ("wp_ask",)),
    ("pros and cons", ("comparison",)), ("in depth", ("comparison", "depth")), ("in-depth", ("comparison", "depth")),
    ("which is better", ("comparison",)), ("step by step", ("depth",)), ("step-by-step", ("depth",)),
    ("explain why", ("depth",)), ("explain how", ("depth",)), ("in detail", ("depth",)),
    ("walk me through", ("depth",)), ("one word", ("brief",)), ("yes or no", ("brief",)),
    ("only return", ("brief",)), ("only output", ("brief",)), ("just the", ("brief",)),
    ("short answer", ("brief",)), ("how many", ("wp_ask",)), ("how much", ("wp_ask",)),
    ("how long", ("wp_ask",)), ("how far", ("wp_ask",)), ("how old", ("wp_ask",)),
    ("what percent", ("wp_ask",)), ("more than", ("relation",)), ("less than", ("relation",)),
    ("times as", ("relation",)), ("at least", ("constraint",)), ("at most", ("constraint",)),
    ("no more than", ("constraint",)), ("make sure", ("constraint",)), ("do not", ("constraint",)),
    ("don't", ("constraint",)), ("what does the user want", ("intent",)),
    ("is not", ("negation",)), ("not true", ("negation",)), ("least likely", ("negation",)),
    ("statement 1", ("statements",)),
):
    _EN_PHRASES.setdefault(max(_phrase.split(), key=len), []).append((_phrase, _kinds))
# "." splits tokens, so a dotted name is a phrase keyed on its first part.
_EN_PHRASES.setdefault("node", []).append(("node.js", ("code_hint",)))

# A verb and an object anywhere in the window make the request: "write ... function" is code.
_CODE_OBJECTS = frozenset(
    "function script program class method module endpoint query regex test tests parser decorator "
    "component cli bug code snippet crash error".split()
)
_LONGFORM_OBJECTS = frozenset(
    "report essay article blog post whitepaper proposal story chapter speech letter release plan guide "
    "handbook manual tutorial documentation".split()
)
_DESIGN_OBJECTS = frozenset(
    "system architecture schema api service pipeline database platform backend infrastructure".split()
)

_EN_KEYS = frozenset(_EN_WORDS) | frozenset(_EN_PHRASES)
_COUNTED_KINDS = frozenset({"constraint", "relation", "math_token"})  # kinds whose number of hits matters
# Kinds whose first position is compared (which task is named first); other kinds only count.
_POSITIONAL_KINDS = frozenset(_CATEGORIES) | {"code_verb", "write_verb", "design_verb"}
# One lookup per matched token: (its kinds, whether its occurrences are counted, whether its
# position matters, phrases keyed on it with whether theirs does).
_EN_ENTRIES: dict[str, tuple[tuple[str, ...], bool, bool, list[tuple[str, tuple[str, ...], bool]] | None]] = {
    key: (
        _EN_WORDS.get(key, ()),
        len(_EN_WORDS.get(key, ())) > 1 or bool(_COUNTED_KINDS.intersection(_EN_WORDS.get(key, ()))),
        bool(_POSITIONAL_KINDS.intersection(_EN_WORDS.get(key, ()))),
        [(phrase, kinds, bool(_POSITIONAL_KINDS.intersection(kinds))) for phrase, kinds in _EN_PHRASES[key]]
        if key in _EN_PHRASES else None,
    )
    for key in _EN_KEYS
}
_FAR = float("inf")  # the position of a kind whose position is never compared


def _literal_trie(literals: Sequence[str]) -> str:
    # Alternatives grouped by first character: the engine tries each top-level branch at every
    # position, so fewer branches is what makes this pattern cheap (1.5x over a flat alternation).
    groups: dict[str, list[str]] = {}
    for literal in literals:
        groups.setdefault(literal[0], []).append(literal[1:])
    parts = []
    for head, rests in groups.items():
        tails = "|".join(re.escape(rest) for rest in sorted(rests, key=len, reverse=True) if rest)
        if not tails:
            parts.append(re.escape(head))
        else:
            parts.append(re.escape(head) + (f"(?:{tails})?" if "" in rests else f"(?:{tails})"))
    return "|".join(parts)


_ZH_RE = re.compile(_literal_trie(list(_ZH_LITERALS)))
# Punctuation (and "?", which non-ASCII characters become) turns into a space before splitting.
_PUNCT = b"!\"$%&()*:;<=>?@[\\]^_`{|}~/.,"
_PUNCT_TO_SPACE = bytes.maketrans(_PUNCT, b" " * len(_PUNCT))
_NUMBER_WORDS = frozenset(
    "two three four five six seven eight nine ten eleven twelve fifteen twenty thirty forty fifty "
    "hundred thousand million dozen".split()
)

_GREETING_RE = re.compile(
    r"^\s*(?:hi|hello|hey|thanks|thank you|good (?:morning|afternoon|evening)|你好|您好|谢谢|早上好|晚上好|在吗|哈喽|嗨)"
)
_FACT_RE = re.compile(r"^\s*(?:what|who|when|where|which|how|is|are|does|do|did|can|what's|why)\b")
_LIST_LINE_RE = re.compile(r"\n\s*(?:\d{1,2}[.)、]|[-*•])\s*\S")
# "in 1000 words", "2000字", "3 pages", "两千字". Units convert to output tokens below.
_LENGTH_ASK_RE = re.compile(
    # "2000字", "1000 words", "a 1,500-word report", "800-1000 words", "两千字"
    r"(\d{1,3}(?:,\d{3})+|\d{2,6}|[一二两三四五六七八九十]?[百千万])\s*(?:(?:-|~|到|至)\s*\d{2,6}\s*)?-?\s*"
    r"(words?|个?字|pages?|页|paragraphs?|段)"
)
_ZH_NUM = {"一": 1, "二": 2, "两": 2, "三": 3, "四": 4, "五": 5, "六": 6, "七": 7, "八": 8, "九": 9, "十": 10}
_ZH_MAG = {"百": 100, "千": 1000, "万": 10000}
_TOKENS_PER_UNIT = {"word": 1.4, "字": 0.75, "page": 700.0, "页": 700.0, "paragraph": 120.0, "段": 120.0}
_LENGTH_UNITS = ("word", "字", "page", "页", "段", "paragraph")
_AMOUNT_END = frozenset("0123456789百千万")
_UNIT_TOKENS = frozenset("word words page pages paragraph paragraphs".split())
# The wide view: an ask up to twice this long is read whole by the C-level counts, a longer one
# by its first and last this many characters.
_WIDE_CHARS = 400
_OPTIONS_CHARS = 4000  # how far back from the end the options of a multiple-choice question may start
# Every byte but digits and the separators inside numbers becomes a space.
_KEEP_NUMBERS = bytes(b if b in b"0123456789.," else 32 for b in range(256))
_SEPARATOR_RUNS = frozenset({b".", b",", b"..", b"...", b",,", b".,", b",."})
_LONG_WORD_CHARS = 11
# "I and II", "II and III only", "I, II and III": options that combine statements.
_ROMAN_OPTIONS_RE = re.compile(r"\bI{1,3}V?\b,? (?:and|or) I{1,3}V?\b")
# The material term: reference size of an ask (tokens), log-odds per doubling above it (pattern
# tasks scale with length far better), and its bounds.
_MATERIAL_REF_TOKENS = 60.0
_MATERIAL_WEIGHT = 0.6
_MATERIAL_WEIGHT_PATTERN = 0.15
_MATERIAL_MIN = -0.5
_MATERIAL_MAX = 2.5
# Dense content as extra material, in token-equivalents (see classify).
_UNITS_QUANTITY = 6.0
_UNITS_SYMBOL = 4.0
_UNITS_CONSTRAINT = 6.0
_UNITS_PART = 20.0

# The window is sized in characters per script, for about 100 + 60 tokens of instructions: an ask
# up to (head + tail) long is searched whole; a longer one by its first `head` characters and its
# last `tail` ones (where "Question: ..." or "Answer:" sit after a pasted text).
_WINDOW_ASCII = (240, 160)
_WINDOW_CJK = (110, 70)
# Script shares of longer texts are estimated from `_SAMPLE_CHARS` characters at each end (token_estimate.py).

_new_tuple = tuple.__new__


def _requested_length(text: str) -> int | None:
    """Output tokens the prompt asks for in words ("in 1000 words", "2000字"), or None.

    The pattern runs only on short slices ending at each unit word (a regex over the whole
    window costs more than the rest of the classifier here)."""
    best: float | None = None
    matches: list[re.Match[str]] = []
    for unit in _LENGTH_UNITS:
        at = text.find(unit)
        while at >= 0:
            # Only a unit right after an amount ("2000字", "1000 words", "两千个字") is worth the
            # regex; "字" alone is common in Chinese (文字, 数字, 名字).
            before = text[max(0, at - 3):at].rstrip(" 个-~到至")
            if before and (before[-1] in _AMOUNT_END):
                matches.extend(_LENGTH_ASK_RE.finditer(text, max(0, at - 16), at + len(unit) + 1))
            at = text.find(unit, at + 1)
    for match in matches:
        raw, unit = match.group(1), match.group(2)
        if raw[0].isdigit():
            amount = float(raw.replace(",", ""))
        else:
            amount = float(_ZH_NUM.get(raw[:-1], 1) if raw[:-1] else 1) * _ZH_MAG[raw[-1]]
        key = unit.rstrip("s") if unit[0].isascii() else unit[-1]
        tokens = amount * _TOKENS_PER_UNIT.get(key, 1.0)
        if best is None or tokens > best:
            best = tokens
    return None if best is None else int(best)


def _logit(p: float) -> float:
    return math.log(p / (1.0 - p))


_LOGIT = {name: _logit(prior) for name, (prior, _) in _CATEGORIES.items()}


def _window_tokens(window: str) -> list[str]:
    """The window's tokens in order: bytes are the fast path, so non-ASCII becomes "?" and
    punctuation (with "." and ",": numbers are counted by _numbers) a space (bytes.translate is a
    table lookup), then split on whitespace."""
    return window.encode("ascii", "replace").translate(_PUNCT_TO_SPACE).decode("ascii").split()


def _scan(window: str) -> tuple[dict[str, float], dict[str, int], set[str], list[str]]:
    """Cue kinds in the window: (first position of each kind, count of each kind, distinct tokens,
    the tokens in order).

    Positions are in characters (English ones approximated from the token index) so that "which
    task is named first" can be compared across scripts.
    Written for speed: set intersections and C-level str methods instead of a loop per token.
    """
    first: dict[str, float] = {}
    count: dict[str, int] = {}
    tokens = _window_tokens(window)
    if not window.isascii():
        for match in _ZH_RE.finditer(window):
            for kind in _ZH_LITERALS[match.group()]:
                count[kind] = count.get(kind, 0) + 1
                if kind not in first:
                    first[kind] = match.start()
    token_set = set(tokens)
    joined = ""  # " tok1  tok2 ... ": exact token counts at C speed (list.count compares each)
    for token in token_set & _EN_KEYS:
        kinds, counted, positional, phrases = _EN_ENTRIES[token]
        # Positions matter only for task kinds (which is named first); list.index costs ~20 ns
        # a token here, so other kinds are placed "far" and never looked up.
        position = tokens.index(token) * 6.0 if positional else _FAR
        if kinds:
            if counted:
                if not joined:
                    joined = " " + "  ".join(tokens) + " "  # two spaces: matches never overlap
                occurrences = joined.count(" " + token + " ")
            else:
                occurrences = 1
            for kind in kinds:
                count[kind] = count.get(kind, 0) + occurrences
                placed = first.get(kind)
                if placed is None or placed > position:
                    first[kind] = position
        if phrases:
            for phrase, phrase_kinds, phrase_positional in phrases:
                if phrase in window:
                    if phrase_positional and position == _FAR:
                        position = tokens.index(token) * 6.0
                    for kind in phrase_kinds:
                        count[kind] = count.get(kind, 0) + 1
                        placed = first.get(kind)
                        if placed is None or placed > position:
                            first[kind] = position
    return first, count, token_set, tokens


def _asks_quantity_last(window: str) -> bool:
    """Whether the window's last sentence asks for a quantity ("... how many does Bobby have?",
    "Calculate the total number of hours", "……一共多少元？"). A few C-level `rfind`s, no regex."""
    end = window.rstrip()
    cut = max(end.rfind(". ", 0, len(end) - 1), end.rfind("\n"), end.rfind("。", 0, len(end) - 1),
              end.rfind("! ", 0, len(end) - 1), end.rfind("；"))
    last = end[cut + 1:]
    return any(ask in last for ask in _QUANTITY_ASKS)


def _numbers(ask: str, tokens: AbstractSet[str]) -> int:
    """Distinct quantities in `ask` (the wide view or the window, both bounded): its digit runs,
    plus the number words among the window's tokens. Bytes (UTF-8 never puts an ASCII byte inside a
    multi-byte character): a regex over 2,000 characters costs ~40 us here, translate and split ~5 us."""
    runs = set(ask.encode().translate(_KEEP_NUMBERS).split())
    # Separators outside numbers are runs of their own; "3." and "3" count twice (rare, harmless).
    return len(runs) - len(runs & _SEPARATOR_RUNS) + len(tokens & _NUMBER_WORDS)


class _Features:
    """What the features phase read from one conversation (mutable only inside `_features`)."""

    __slots__ = ("ask", "ask_tokens", "context_tokens", "input_tokens", "user_turns", "window", "wide", "ascii_ask",
                 "first", "count", "tokens", "fences", "code_blocks", "math_signals", "constraints", "questions",
                 "text_length", "choice", "words")
    ask: str
    ask_tokens: float
    context_tokens: float
    input_tokens: int
    user_turns: int
    window: str
    wide: str
    ascii_ask: bool
    first: dict[str, float]
    count: dict[str, int]
    tokens: set[str]
    fences: int
    code_blocks: int
    math_signals: int
    constraints: int
    questions: int
    text_length: int | None
    choice: bool
    words: list[str]


def _read_ask(messages: Sequence[Mapping[str, Any]]) -> tuple[str, float, float, float, int]:
    """(the last user message's text, or the last text when no user turn has one; its estimated
    tokens; the conversation's estimated tokens; its ASCII share; the user turns with text)."""
    ask = ""
    user_turns = 0
    context_tokens = 0.0
    ask_tokens = 0.0
    ask_share = 1.0
    fallback = ""
    fallback_tokens = 0.0
    fallback_share = 1.0
    for message in messages:
        if type(message) is not dict and not isinstance(message, Mapping):
            continue
        content = message.get("content")
        # The common shape (a string, no tool calls) skips message_text's checks.
        text = content if type(content) is str and "tool_calls" not in message else message_text(message)
        if not text:
            continue
        share = 1.0 if text.isascii() else _ascii_share(text)
        tokens = len(text) * (share * 0.25 + (1.0 - share) * 0.75)  # as _text_tokens
        context_tokens += tokens + 4
        fallback, fallback_tokens, fallback_share = text, tokens, share
        if message.get("role") == "user":
            user_turns += 1
            ask, ask_tokens, ask_share = text, tokens, share
    if not ask:
        # No user turn: judge the last message that has text.
        ask, ask_tokens, ask_share = fallback, fallback_tokens, fallback_share
    return ask, ask_tokens, context_tokens, ask_share, user_turns


def _instruction_window(ask: str, ask_share: float, sizes: tuple[int, int, int, int] | None = None) -> str:
    """The lower-cased instruction window: the whole ask when short, else its head and tail, sized
    by script (mostly-CJK text is denser; a stray curly quote must not shrink it). `sizes`:
    (head, tail) for mostly-ASCII text, then for the rest; default _WINDOW_ASCII and _WINDOW_CJK."""
    if sizes is None:
        head, tail = _WINDOW_ASCII if ask_share >= 0.8 else _WINDOW_CJK
    elif ask_share >= 0.8:
        head, tail = sizes[0], sizes[1]
    else:
        head, tail = sizes[2], sizes[3]
    if len(ask) > head + tail:
        return (ask[:head] + "\n" + ask[-tail:]).lower()
    return ask.lower()


def _features(messages: Sequence[Mapping[str, Any]]) -> _Features:
    """Phase 1: the conversation's sizes, the instruction window and wide view, and every cue and
    count read from them."""
    ask, ask_tokens, context_tokens, ask_share, user_turns = _read_ask(messages)
    input_tokens = int(context_tokens + 0.5)
    ascii_ask = ask_share == 1.0 and ask.isascii()
    window = _instruction_window(ask, ask_share)

    # A wider, still bounded view for C-level counts that must not depend on where the narrow
    # window cuts: code fences, the options of a multiple-choice question, a problem's quantities.
    # Each pass over text costs ~1 ns a character here, so even these stop at 2 x _WIDE_CHARS.
    wide = ask if len(ask) <= 2 * _WIDE_CHARS else ask[:_WIDE_CHARS] + "\n" + ask[-_WIDE_CHARS:]

    # --- features (on the window; only C-level counts read the wide view) --------------------
    first, count, tokens, words = _scan(window)
    fences = wide.count("```") // 2
    code_blocks = fences
    if not fences and "\n" in window and (
        window.count("\n    ") + window.count(";\n") + window.count("{\n") + window.count("def ")
    ) >= 3:
        code_blocks = 1  # unfenced code pasted as text
    math_signals = window.count("^") + window.count("\\") + count.get("math_token", 0)
    if not fences:
        math_signals += window.count("=")
    if not ascii_ask:
        math_signals += window.count("√") + window.count("∫") + window.count("∑") + window.count("≤") + window.count("≥")
    # List lines are requirements, except inside fenced code (where the regex would also cost most).
    constraints = count.get("constraint", 0) + (
        len(_LIST_LINE_RE.findall(window)) if not fences and "\n" in window else 0
    )
    questions = window.count("?") + window.count("？")
    # The unit must be there before any number is parsed: English units are tokens (a set
    # lookup), Chinese ones three `in` checks.
    text_length = (
        _requested_length(window)
        if not _UNIT_TOKENS.isdisjoint(tokens)
        or "-word" in window or "-page" in window  # "a 1,500-word report" is one token
        or (not ascii_ask and ("字" in window or "页" in window or "段" in window))
        else None
    )
    # Multiple choice ends with its options, so the last option ("\nB", "\nD", "\n(C)") sits in the
    # tail of the wide view; only then are "A" and "B" options looked for, up to _OPTIONS_CHARS
    # from the end (long options must not hide them: whether a question is multiple-choice must
    # not depend on where a window cuts).
    tail = wide[-_WIDE_CHARS:]
    choice = False
    if "\n" in tail and ("\nB" in tail or "\nC" in tail or "\nD" in tail or "\n(B" in tail or "\n(D" in tail):
        start = max(0, len(ask) - _OPTIONS_CHARS)
        choice = "\nB" in ask[start:] or "\n(B" in ask[start:]
        if choice:
            options = ask[start:]
            choice = ("\nA." in options or "\nA)" in options or "\n(A)" in options or "\nA、" in options) and (
                "\nB." in options or "\nB)" in options or "\n(B)" in options or "\nB、" in options
            )

    # Verb-object pairs turn mentions into requests ("write ... function", "写一个正则", "fix ... bug");
    # the request is placed where its verb is.
    if "code_verb" in first and ("code_hint" in first or tokens & _CODE_OBJECTS):
        first.setdefault("code", first["code_verb"])
    if "write_verb" in first and tokens & _LONGFORM_OBJECTS:
        first.setdefault("longform", first["write_verb"])
    if "design_verb" in first and tokens & _DESIGN_OBJECTS:
        first.setdefault("design", first["design_verb"])
    if code_blocks and "code" not in first:
        first["code"] = float(len(window))

    f = _Features()
    f.ask, f.ask_tokens, f.context_tokens, f.input_tokens, f.user_turns = ask, ask_tokens, context_tokens, input_tokens, user_turns
    f.window, f.wide, f.ascii_ask, f.first, f.count, f.tokens = window, wide, ascii_ask, first, count, tokens
    f.fences, f.code_blocks, f.math_signals, f.constraints, f.questions = fences, code_blocks, math_signals, constraints, questions
    f.text_length, f.choice, f.words = text_length, choice, words
    return f


def _category(f: _Features) -> tuple[str, int, int, int, AbstractSet[str]]:
    """Phase 2: the task type, with what it decides about counting: (category, formal kinds in a
    multiple-choice question, quantities, formula symbols, large task kinds named)."""
    ask, ask_tokens, window, wide = f.ask, f.ask_tokens, f.window, f.wide
    first, count, tokens = f.first, f.count, f.tokens
    code_blocks, math_signals, questions, text_length, choice = f.code_blocks, f.math_signals, f.questions, f.text_length, f.choice
    # --- task type --------------------------------------------------------------------------
    # Sets, with ties broken by position and then name: iteration order must not decide.
    large = _LARGE_TASKS.intersection(first)
    small = _SMALL_TASKS.intersection(first)
    formal = 0  # distinct kinds of formal content (math, proof, code, analysis) in an exam question
    numbers = -1  # counted on demand
    if not ask or ask.isspace():
        category = "general"
    elif len(ask) <= 40 and not large and not small and _GREETING_RE.match(window):
        category = "greeting"
    elif choice and not code_blocks:
        # Multiple choice: the answer is one option, so task words in the question ("translate
        # into predicate logic", "which proof...") describe its content, not a deliverable.
        category = "choice"
        formal = len(large)
    else:
        category = ""
        first_small = min(small, key=lambda name: (first[name], name)) if small else None
        first_large = min(large, key=lambda name: (first[name], name)) if large else None
        # A small task named first ("Summarize this bug report", "把这段代码的注释翻译成英文")
        # stays small: the large cue is then what it operates on, not what it asks for. Unless
        # long-form writing is asked for at an explicit length ("…工单摘要…请写一篇2000字的分析
        # 报告"): then the first task word names the material, and the deliverable is the report.
        long_deliverable = "longform" in large and text_length is not None and text_length >= 700
        if first_small is not None and not long_deliverable and (
            first_large is None or first[first_small] < min(first[first_large], 40.0)
        ):
            category = first_small
        elif large:
            category = max(large, key=lambda name: (_CATEGORIES[name][0], -first[name], name))
            # A story that names a deliverable ("she wrote 5 articles", "Jake's family wants to
            # compare the cost...") but ends by asking for a quantity asks for that quantity: the
            # last sentence states the deliverable. Not when a length is asked or code is shown.
            if (
                category in _STORY_TASKS
                and text_length is None
                and not code_blocks
                and not math_signals
                and _asks_quantity_last(window)
            ):
                numbers = _numbers(wide, tokens)
                if numbers >= 2:
                    category = "word_problem"
        elif first_small is not None:
            category = first_small
        if not category or category == "general":
            numbers = _numbers(wide, tokens)
            # A question about quantities, without formal notation, is a word problem
            # ("calculate" in it does not make it a derivation). Three or more quantities and a
            # question are one, whatever words the question uses. A relation given in words
            # ("twice as many", "half of", "each") is a given quantity too: "700 bees, twice as
            # many workers as babies: how many workers?" gives two.
            given = numbers + count.get("relation", 0)
            # Notation, not a word that names a function: "Mr. Tan" or "a log cabin" is no formula.
            notation = math_signals - count.get("math_token", 0)
            if (
                not notation
                and numbers >= 1
                and given >= 2
                and ("wp_ask" in count or "math_weak" in count
                     or (questions and ("relation" in count or "%" in window or numbers >= 3)))
            ):
                category = "word_problem"
            elif "math_weak" in first and (math_signals or numbers >= 2):
                category = "math"
            elif ask_tokens <= 40 and ("fact_q" in count or _FACT_RE.match(window)):
                category = "fact"
            else:
                category = "general"
    pattern_task = category in _SMALL_TASKS or category == "greeting"
    if pattern_task:
        numbers = 0  # quantities in a text to translate or classify are not steps
    elif numbers >= 0:
        pass  # counted on the wide view to tell a word problem
    elif category in _QUANTITATIVE:
        numbers = _numbers(wide, tokens)  # a problem's quantities sit anywhere in it
    else:
        numbers = _numbers(window, tokens)
    if category == "choice":
        math_signals = wide.count("^") + wide.count("\\") + wide.count("=") + count.get("math_token", 0)
    return category, formal, numbers, math_signals, large


def _effects(f: _Features, category: str, formal: int, numbers: int, math_signals: int, large: AbstractSet[str],
             max_tokens: int | None) -> tuple[list[tuple[float, str, object]], int | None]:
    """Phase 3: each feature's bounded effect in log-odds (delta, reason template, value), and the
    output tokens asked for."""
    ask, ask_tokens, context_tokens, input_tokens, window, wide = (
        f.ask, f.ask_tokens, f.context_tokens, f.input_tokens, f.window, f.wide)
    first, count, tokens, text_length = f.first, f.count, f.tokens, f.text_length
    code_blocks, constraints, questions, user_turns = f.code_blocks, f.constraints, f.questions, f.user_turns
    pattern_task = category in _SMALL_TASKS or category == "greeting"
    # Each effect is (log-odds delta, reason template, value); only the reported one is formatted.
    effects: list[tuple[float, str, object]] = []

    # How much output is asked for: long coherent output is where small models drift.
    requested = text_length
    if text_length is not None:
        if text_length >= 1500:
            effects.append((1.4, "~{} output tokens asked", text_length))
        elif text_length >= 700:
            effects.append((0.9, "~{} output tokens asked", text_length))
        elif text_length >= 300:
            effects.append((0.4, "~{} output tokens asked", text_length))
        elif text_length < 120:
            effects.append((-0.4, "short output asked", None))
    if max_tokens is not None:
        requested = max_tokens if requested is None else min(requested, max_tokens)
        if max_tokens <= 256:
            effects.append((-0.6, "max_tokens={}", max_tokens))
        elif max_tokens >= 4000 and text_length is None:
            effects.append((0.3, "max_tokens={}", max_tokens))

    # The material to reason over, whatever the task, as one monotone term in log size: the ask,
    # earlier turns and documents at half weight (consulted, not all reasoned over), and content
    # that is denser than prose counted as extra units of it, in token-equivalents: a given
    # quantity or a constraint is a clause to combine or respect, a formula symbol a few tokens, a
    # further question or a statement to judge a short paragraph, a technical term one more token.
    # Density thus scales the material rather than adding votes of its own: doubling a prompt's
    # density moves the score as much as doubling its length, and no more.
    options_at = wide.find("\nA") if category == "choice" else -1
    extra = _UNITS_QUANTITY * numbers + _UNITS_SYMBOL * math_signals + _UNITS_CONSTRAINT * constraints
    if questions > 1:
        extra += _UNITS_PART * (questions - 1)
    if category == "word_problem":
        # Relations ("twice", "per", "20% off") are steps beyond the quantities themselves.
        extra += _UNITS_CONSTRAINT * (count.get("relation", 0) + window.count("%"))
    if category == "choice":
        # Formal content, finding the exception or judging statements: each is one more thing to
        # check against every option.
        extra += _UNITS_PART * (formal + ("negation" in count)
                                + ("statements" in count or bool(_ROMAN_OPTIONS_RE.search(wide, max(0, options_at)))))
    if not pattern_task and len(tokens) >= 12:
        extra += len([t for t in tokens if len(t) >= _LONG_WORD_CHARS]) * (len(ask) / max(1, len(window)))
    material = ask_tokens + 0.5 * (context_tokens - ask_tokens) + extra
    # A doubling of the material adds the weight in log-odds above the reference size; below it
    # a quarter of that, since a short ask can still name a hard task ("Prove that ..."). Bounded
    # so that no single feature decides alone. (Inline: a call costs ~0.4 us on this hot path.)
    weight = _MATERIAL_WEIGHT_PATTERN if pattern_task else _MATERIAL_WEIGHT
    doublings = math.log2(material / _MATERIAL_REF_TOKENS) if material > 0.0 else -99.0
    material_effect = weight * doublings if doublings >= 0.0 else 0.25 * weight * doublings
    material_effect = max(_MATERIAL_MIN, min(_MATERIAL_MAX, material_effect))
    if material_effect:
        effects.append((material_effect, "long context (~{} tokens)" if input_tokens >= 1000 else
                        ("much material" if material_effect > 0 else "short prompt"), input_tokens))

    if code_blocks and category != "code":
        effects.append((min(0.8, 0.5 * code_blocks), "code in the prompt", None))
    elif code_blocks > 1:
        effects.append((min(0.5, 0.2 * (code_blocks - 1)), "{} code blocks", code_blocks))
    if "code_hint" in count and category not in ("code", "design"):
        effects.append((0.3, "mentions code", None))
    if user_turns > 1:
        effects.append((min(0.6, 0.12 * (user_turns - 1)), "turn {} of a conversation", user_turns))
    if "depth" in count:
        effects.append((0.5, "asks for reasoning", None))
    if "brief" in count:
        effects.append((-0.5, "brief answer asked", None))
    if large and category in _SMALL_TASKS:
        effects.append((0.3, "on {} material", min(large, key=lambda name: (first[name], name))))

    return effects, requested


def _score(category: str, effects: list[tuple[float, str, object]]) -> tuple[float, str]:
    """Phase 4: the task type's prior moved by the effects, and the reason naming the strongest."""
    logit = _LOGIT[category]
    for effect in effects:
        logit += effect[0]
    # The reason names the strongest effect that pushed the way the score ended up.
    top = None
    for effect in effects:
        if (effect[0] > 0) == (logit >= 0) and (top is None or abs(effect[0]) > abs(top[0])):
            top = effect
    score = 1.0 / (1.0 + math.exp(-logit))
    reason = _CATEGORIES[category][1]
    if top is not None and abs(top[0]) >= 0.4:
        reason = f"{reason}, {top[1].format(top[2])}"
    return score, reason


def classify(messages: Sequence[Mapping[str, Any]], *, max_tokens: int | None = None) -> Classification:
    """Score how likely this conversation needs the large tier. Pure, deterministic, no I/O.

    Four phases: features (`_features`) -> task type (`_category`) -> effects (`_effects`) -> score
    (`_score`)."""
    return _classify(_features(messages), max_tokens)


def _classify(f: _Features, max_tokens: int | None) -> Classification:
    """Phases 2-4 on features already read (a fitted router reads them once for both scorers)."""
    category, formal, numbers, math_signals, large = _category(f)
    effects, requested = _effects(f, category, formal, numbers, math_signals, large, max_tokens)
    score, reason = _score(category, effects)
    # Positional, through tuple.__new__: keyword arguments to a NamedTuple cost ~2 us here.
    return _new_tuple(Classification, (
        score, reason, category, f.input_tokens, requested, f.code_blocks, math_signals, numbers,
        f.constraints, f.questions, f.user_turns,
    ))
