"""The difficulty classifier: accuracy on our labelled traffic, and each feature on its own."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmroute.routing.classifier import Classification, classify, estimate_tokens, message_text

LABELLED = Path(__file__).with_name("labelled_prompts.jsonl")
THRESHOLD = 0.55  # routing.threshold's default


def _user(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


def _rows() -> list[dict]:
    return [json.loads(line) for line in LABELLED.read_text(encoding="utf-8").splitlines() if line.strip()]


def test_labelled_set_shape():
    rows = _rows()
    assert len(rows) >= 200
    chinese = [r for r in rows if any("\u4e00" <= ch <= "\u9fff" for ch in r["prompt"])]
    assert len(chinese) >= len(rows) / 2
    assert {r["tier"] for r in rows} == {"small", "large"}
    assert len({r["task"] for r in rows}) >= 12


def test_labelled_accuracy_at_default_threshold():
    rows = _rows()
    wrong = []
    for row in rows:
        result = classify(_user(row["prompt"]))
        tier = "large" if result.score >= THRESHOLD else "small"
        if tier != row["tier"]:
            wrong.append((row["tier"], round(result.score, 2), result.reason, row["prompt"][:60]))
    accuracy = 1 - len(wrong) / len(rows)
    assert accuracy >= 0.90, wrong


def test_labelled_accuracy_per_language():
    rows = _rows()
    for is_zh in (True, False):
        subset = [r for r in rows if any("\u4e00" <= ch <= "\u9fff" for ch in r["prompt"]) == is_zh]
        right = sum((classify(_user(r["prompt"])).score >= THRESHOLD) == (r["tier"] == "large") for r in subset)
        assert right / len(subset) >= 0.90


def test_result_is_frozen_and_in_range():
    result = classify(_user("Write a Python function that parses ISO dates"))
    assert isinstance(result, Classification)
    assert 0.0 <= result.score <= 1.0
    assert result.category == "code"
    assert result.reason.startswith("code request")
    with pytest.raises(AttributeError):
        result.score = 0.1  # type: ignore[misc]


def test_requested_length_in_chinese_characters():
    result = classify(_user("写一篇2000字的报告，主题是新能源汽车"))
    assert result.category == "longform"
    assert result.requested_output_tokens == 1500  # 2000 characters at 0.75 tokens each
    assert result.score >= THRESHOLD
    assert result.reason == "long-form writing, ~1500 output tokens asked"


def test_requested_length_in_words_and_chinese_numerals():
    assert classify(_user("Write about our product in 1000 words")).requested_output_tokens == 1400
    assert classify(_user("写一篇两千字的文章")).requested_output_tokens == 1500


def test_hyphenated_and_comma_word_counts():
    assert classify(_user("Write a 1500-word report on our churn")).requested_output_tokens == 2100
    assert classify(_user("Write a 1,500-word essay on remote work")).requested_output_tokens == 2100


def test_a_long_report_about_a_summary_is_long_form():
    # The first task word names the material (a summary of tickets); the deliverable is a long report.
    for text in ("以下是本周的客服工单摘要：用户反映支付失败、物流延迟、退款慢。请根据这些内容写一篇2000字的分析报告。",
                 "Here is a summary of our Q3 incidents. Write a 1500-word report analysing root causes."):
        result = classify(_user(text))
        assert result.category == "longform" and result.score >= THRESHOLD, text
    # ... while a short summary stays small.
    assert classify(_user("Summarize this in a 100-word paragraph: the app crashes on login")).score < THRESHOLD


def test_more_output_asked_raises_the_score():
    short = classify(_user("Write a product description for our water bottle in 50 words"))
    long = classify(_user("Write a product description for our water bottle in 1500 words"))
    assert long.score > short.score


def test_small_max_tokens_lowers_the_score():
    messages = _user("Explain how our refund policy works for annual plans")
    plain = classify(messages)
    capped = classify(messages, max_tokens=64)
    assert capped.score < plain.score
    assert capped.requested_output_tokens == 64


def test_code_block_makes_a_code_request():
    text = "Why does this fail?\n```python\ndef f(x):\n    return x[0]\nf([])\n```"
    result = classify(_user(text))
    assert result.code_blocks == 1
    assert result.category == "code"
    assert result.score >= THRESHOLD


def test_summary_of_code_stays_small_when_the_small_task_comes_first():
    result = classify(_user("Summarize this bug report in one sentence: the Python app crashes on login"))
    assert result.category == "summary"
    assert result.score < THRESHOLD


def test_conversation_depth_raises_the_score():
    turn = {"role": "user", "content": "And what about the second option?"}
    reply = {"role": "assistant", "content": "The second option costs more."}
    one = classify([turn])
    deep = classify([turn, reply] * 5 + [turn])
    assert deep.user_turns == 6
    assert deep.score > one.score


def test_long_context_raises_the_score_and_is_estimated_from_characters():
    doc = "The customer reported that the device overheats. " * 400
    result = classify([{"role": "system", "content": doc}, {"role": "user", "content": "What is the main issue?"}])
    assert result.input_tokens > 4000
    assert result.score > classify(_user("What is the main issue?")).score


def test_chinese_counts_more_tokens_per_character_than_english():
    zh = estimate_tokens(_user("你" * 400))
    en = estimate_tokens(_user("a" * 400))
    assert zh > 2 * en


def test_math_and_proof_are_large():
    assert classify(_user("Prove that the square root of 2 is irrational.")).score >= THRESHOLD
    assert classify(_user("证明：素数有无穷多个。")).score >= THRESHOLD
    assert classify(_user("Compute the integral of x^2 * e^(-x) from 0 to infinity")).category == "math"


def test_word_problem_steps_raise_the_score():
    easy = classify(_user("Ann has 3 apples and buys 2 more. How many apples does she have?"))
    hard = classify(_user(
        "Ann has 3 apples and buys 12 more at $2 each, then sells half of them at 20% profit and gives "
        "4 to each of her 3 friends. How much money did she make and how many apples are left?"
    ))
    assert easy.category == hard.category == "word_problem"
    assert hard.quantities > easy.quantities
    assert hard.score > easy.score


@pytest.mark.parametrize("text", [
    # one figure, the rest given as relations in words
    "There are 700 bees in a hive. There are twice as many worker bees as baby bees, and twice as many "
    "babies as queens. How many worker bees are there?",
    "仓库里有300箱货，第一天运走了一半，第二天运走了剩下的三分之一，仓库里还剩多少箱？",
    # a story naming a deliverable (articles, a comparison) that ends by asking for a quantity
    "Meredith writes blog articles; one takes 4 hours. She wrote 5 articles on Monday and twice as many "
    "on Tuesday. Calculate the total number of hours she spent writing articles.",
    "Jake's family wants to compare the cost of two parks: $26 per adult and $12 per child, or $14 and $10. "
    "With 2 adults and 2 children, how much do they save with the second park?",
])
def test_word_problems_given_in_words_or_told_as_stories_are_word_problems(text):
    result = classify(_user(text))
    assert result.category == "word_problem", result
    assert result.score >= THRESHOLD


def test_a_named_function_word_is_not_notation_and_a_length_keeps_the_report():
    tan = classify(_user("Mr. Tan sold his house for $400 000 and paid 3% in fees and a 5% brokerage fee. "
                         "How much did he get?"))
    assert tan.category == "word_problem"
    report = classify(_user("We sold 300 units in May and 450 in June. Write a 1500-word report on how "
                            "much the growth came from the new channel."))
    assert report.category == "longform"


def test_multiple_choice_with_formal_content_scores_above_plain_recall():
    recall = classify(_user("Which city is the capital of France?\nA. Paris\nB. Rome\nC. Madrid\nD. Berlin\nAnswer:"))
    formal = classify(_user(
        "Find the degree of the field extension Q(sqrt(2), sqrt(3)) over Q.\nA. 0\nB. 4\nC. 2\nD. 6\nAnswer:"
    ))
    assert recall.category == formal.category == "choice"
    assert formal.score > recall.score


def test_greetings_and_small_tasks_are_small():
    for text in ("hi", "你好", "谢谢！", "Translate to French: good morning", "提取订单号：订单20240312889还没到"):
        assert classify(_user(text)).score < THRESHOLD, text


@pytest.mark.parametrize(
    "messages",
    [
        [],
        [{"role": "user", "content": None}],
        [{"role": "user", "content": ""}],
        [{"role": "user"}],
        ["not a message", 42, None],
        [{"role": "tool", "content": "{\"ok\": true}", "tool_call_id": "1"}],
        [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}],
        [{"role": "assistant", "content": None, "tool_calls": [{"function": {"name": "f", "arguments": "{\"a\": 1}"}}]}],
    ],
)
def test_odd_message_shapes_do_not_raise(messages):
    result = classify(messages)
    assert 0.0 <= result.score <= 1.0


def test_content_parts_are_read_and_the_last_user_turn_is_judged():
    parts = [{"type": "text", "text": "Write a Go function"}, {"type": "image_url", "image_url": {"url": "x"}},
             {"type": "text", "text": "that parses this config."}]
    assert message_text({"role": "user", "content": parts}) == "Write a Go function\nthat parses this config."
    conversation = [{"role": "user", "content": "Write a Go function that parses YAML"},
                    {"role": "assistant", "content": "Here it is."}, {"role": "user", "content": "thanks!"}]
    assert classify(conversation).category != "code"


def test_tool_call_arguments_count_as_context():
    call = {"role": "assistant", "content": None,
            "tool_calls": [{"id": "1", "type": "function", "function": {"name": "f", "arguments": "x" * 4000}}]}
    assert estimate_tokens([call]) >= 1000


def test_deterministic():
    messages = _user("对比一下 React 和 Vue 在大型项目里的 trade-offs")
    assert classify(messages) == classify(messages)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=3000), st.one_of(st.none(), st.integers(min_value=1, max_value=100_000)))
def test_any_text_gives_a_score_in_range(text, max_tokens):
    result = classify(_user(text), max_tokens=max_tokens)
    assert 0.0 <= result.score <= 1.0
    assert result.reason


def test_more_material_never_lowers_the_score():
    # The same request over more and more pasted material: the material term is monotone.
    ask = "Given the notes above, what should the team do next?"
    notes = "The rollout of the billing service slipped by 3 weeks because the vendor API changed. "
    scores = [classify(_user(notes * n + ask)).score for n in (0, 1, 2, 4, 8, 16, 32)]
    assert scores == sorted(scores) and scores[-1] > scores[0]


def test_denser_content_raises_the_score_at_equal_length():
    plain = "Tell me about the history of the old town hall and the market square next to it, please."
    dense = "Tell me how 12 of 40 stalls at 35% rent and 7 more at 18 per day change the 2023 total."
    assert abs(len(plain) - len(dense)) < 10
    assert classify(_user(dense)).score > classify(_user(plain)).score


def test_multiple_choice_with_options_longer_than_any_window():
    option = "a long option that restates the facts of the case in detail, " * 6
    text = "Which holding is correct?\n" + "".join(f"{letter}. {option}\n" for letter in "ABCD") + "Answer:"
    assert len(text) > 1000
    assert classify(_user(text)).category == "choice"


def test_huge_context_is_handled_and_counted():
    doc = "今天的会议讨论了预算和排期。" * 20_000 + "The end."
    result = classify([{"role": "system", "content": doc}, {"role": "user", "content": "总结一下"}])
    assert result.category == "summary" and result.input_tokens > 150_000
