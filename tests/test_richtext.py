"""Answers going out (nonebot_plugin_marsho.chat.richtext): cutting long answers into chunks, finding
formulas and images in them, and drawing formulas."""

from __future__ import annotations

import io
import random
import re
from concurrent.futures import ThreadPoolExecutor

import pytest

from nonebot_plugin_marsho.chat.richtext import (
    MAX_FORMULA_CHARS,
    FormulaPart,
    ImageLinkPart,
    TextPart,
    find_rich,
    render_formula,
    split_paragraphs,
)


def visible(text: str) -> str:
    return re.sub(r"\s+", "", text)


def is_subsequence(short: str, long: str) -> bool:
    letters = iter(long)
    return all(char in letters for char in short)


def fence_lines(chunk: str) -> int:
    return sum(1 for line in chunk.splitlines() if line.lstrip().startswith("```"))


# --- split_paragraphs ---------------------------------------------------------------------------


def test_a_short_answer_is_one_chunk() -> None:
    assert split_paragraphs("Hello there.", 100) == ["Hello there."]
    assert split_paragraphs("  Hello there.\n\n", 12) == ["Hello there."]
    assert split_paragraphs(" \n\n ", 10) == []


def test_max_chars_must_be_positive() -> None:
    with pytest.raises(ValueError):
        split_paragraphs("text", 0)


def test_paragraphs_are_packed_together_and_cut_at_blank_lines() -> None:
    text = "First paragraph here.\n\nSecond one.\n\nThird paragraph, a bit longer."
    chunks = split_paragraphs(text, 40)
    assert chunks == ["First paragraph here.\n\nSecond one.", "Third paragraph, a bit longer."]


def test_a_long_paragraph_is_cut_at_line_ends_first() -> None:
    text = "- item one is here\n- item two is here\n- item three is here"
    assert split_paragraphs(text, 40) == ["- item one is here\n- item two is here", "- item three is here"]


def test_a_long_line_is_cut_at_sentence_ends() -> None:
    text = "This is one sentence. This is another one! Is this a third? Yes it is."
    chunks = split_paragraphs(text, 45)
    assert chunks == ["This is one sentence. This is another one!", "Is this a third? Yes it is."]
    # a full stop inside a number is no sentence end: cut at a space instead
    assert split_paragraphs("Pi is 3.14159 and e is 2.71828 for sure.", 30) == [
        "Pi is 3.14159 and e is 2.71828", "for sure.",
    ]


def test_cjk_sentences_are_cut_after_their_full_stops() -> None:
    text = "今天天气很好。我们去公园散步吧！你觉得怎么样？好的…那就走吧。"
    chunks = split_paragraphs(text, 16)
    assert chunks == ["今天天气很好。我们去公园散步吧！", "你觉得怎么样？好的…那就走吧。"]
    assert all(len(chunk) <= 16 for chunk in chunks)


def test_a_sentence_longer_than_a_chunk_is_cut_at_spaces_then_hard() -> None:
    words = split_paragraphs("alpha beta gamma delta epsilon zeta eta theta", 12)
    assert words == ["alpha beta", "gamma delta", "epsilon zeta", "eta theta"]
    hard = split_paragraphs("x" * 25, 10)
    assert hard == ["x" * 10, "x" * 10, "x" * 5]


def test_a_code_block_is_kept_whole_even_with_blank_lines_inside() -> None:
    code = "```python\ndef f():\n\n    return 1\n\n\nprint(f())\n```"
    text = f"Here is the code:\n\n{code}\n\nAnd that is all there is to say about it."
    chunks = split_paragraphs(text, len(code) + 5)
    assert code in chunks
    assert all(fence_lines(chunk) % 2 == 0 for chunk in chunks)


def test_a_code_block_too_long_for_a_chunk_is_cut_and_each_piece_fenced_again() -> None:
    body = "\n".join(f"value_{i} = {i} * 2" for i in range(30))
    text = f"Intro.\n\n```python\n{body}\n```\n\nOutro."
    chunks = split_paragraphs(text, 80)
    code_chunks = [chunk for chunk in chunks if "value_" in chunk]
    assert len(code_chunks) > 1
    for chunk in code_chunks:
        assert len(chunk) <= 80
        assert chunk.startswith("```python\n") and chunk.endswith("\n```")
    inner = "\n".join(chunk.removeprefix("```python\n").removesuffix("\n```") for chunk in code_chunks)
    assert inner == body  # cut at line ends, nothing lost
    assert chunks[0] == "Intro." and chunks[-1] == "Outro."


def test_an_overlong_code_line_is_hard_cut_inside_fences() -> None:
    text = "```\n" + "y" * 100 + "\n```"
    chunks = split_paragraphs(text, 30)
    assert all(len(chunk) <= 30 and chunk.startswith("```\n") and chunk.endswith("\n```") for chunk in chunks)
    assert "".join(chunk[4:-4] for chunk in chunks) == "y" * 100


def _random_text(rng: random.Random) -> tuple[str, list[str]]:
    """A markdown-ish answer, and the code blocks in it."""
    words = ["alpha", "beta", "gamma", "数学", "公式", "x=1", "hello,", "world", "a" * 30, "$5", "**bold**"]
    blocks: list[str] = []
    codes: list[str] = []
    for _ in range(rng.randint(1, 12)):
        kind = rng.random()
        if kind < 0.15:
            lines = [" " * rng.choice([0, 4]) + " ".join(rng.choices(words, k=rng.randint(1, 6)))
                     for _ in range(rng.randint(1, 8))]
            if rng.random() < 0.3:
                lines.insert(1, "")
            code = f"```{rng.choice(['', 'python', 'js'])}\n" + "\n".join(lines) + "\n```"
            codes.append(code)
            blocks.append(code)
        elif kind < 0.3:
            blocks.append("".join(rng.choice(["句子一。", "这是什么？", "太好了！", "嗯…", "没有标点的一长串中文字符"])
                                  for _ in range(rng.randint(1, 15))))
        else:
            sentences = [" ".join(rng.choices(words, k=rng.randint(1, 12))) + rng.choice([".", "!", "?", ""])
                         for _ in range(rng.randint(1, 8))]
            blocks.append(rng.choice([" ", "\n"]).join(sentences))
    separators = ["\n\n", "\n\n\n", "\n \n", "\n"]
    text = blocks[0]
    for block in blocks[1:]:
        text += rng.choice(separators) + block
    return text, codes


def test_property_chunks_fit_and_no_character_is_lost() -> None:
    rng = random.Random(20240601)
    for _ in range(400):
        text, codes = _random_text(rng)
        limit = rng.choice([12, 20, 40, 80, 150, 400, 2000])
        chunks = split_paragraphs(text, limit)
        assert chunks, text
        for chunk in chunks:
            assert chunk and chunk == chunk.strip()
            assert len(chunk) <= limit, (limit, chunk)
        joined = visible("\n\n".join(chunks))
        if any(len(code) > limit for code in codes):
            assert is_subsequence(visible(text), joined)  # re-fencing only adds
        else:
            assert joined == visible(text), (limit, text, chunks)
            for code in codes:  # a block that fits is never cut
                assert any(code in chunk for chunk in chunks), (limit, code, chunks)
        if limit >= 40:  # room for fences: every chunk is valid markdown, cut code blocks included
            for chunk in chunks:
                assert fence_lines(chunk) % 2 == 0, (limit, chunk)


# --- find_rich ----------------------------------------------------------------------------------


def roundtrip(text: str, **options: bool) -> list:
    parts = find_rich(text, **options)
    assert "".join(part.raw for part in parts) == text
    for before, after in zip(parts, parts[1:], strict=False):
        assert not (isinstance(before, TextPart) and isinstance(after, TextPart)), parts
    return parts


def test_plain_text_is_one_text_part() -> None:
    assert roundtrip("Just words, no math.") == [TextPart("Just words, no math.")]
    assert roundtrip("") == []


def test_display_formulas_in_both_notations_may_span_lines() -> None:
    text = "The area:\n$$\nA = \\pi r^2\n$$\nand \\[ E = mc^2 \\] done."
    parts = roundtrip(text)
    formulas = [part for part in parts if isinstance(part, FormulaPart)]
    assert formulas == [
        FormulaPart("A = \\pi r^2", True, "$$\nA = \\pi r^2\n$$"),
        FormulaPart("E = mc^2", True, "\\[ E = mc^2 \\]"),
    ]


def test_a_display_formula_does_not_run_past_a_blank_line() -> None:
    text = "costs $$ here\n\nand $$ there"
    assert roundtrip(text) == [TextPart(text)]


def test_inline_formulas_only_when_asked() -> None:
    text = "Let $x^2$ and \\(y_1\\) be given."
    assert roundtrip(text) == [TextPart(text)]
    parts = roundtrip(text, inline_formulas=True)
    assert [part for part in parts if isinstance(part, FormulaPart)] == [
        FormulaPart("x^2", False, "$x^2$"),
        FormulaPart("y_1", False, "\\(y_1\\)"),
    ]


@pytest.mark.parametrize(
    "text",
    ["It costs $5 and $10.", "Between $5 and $6, maybe $7", "US$5/$10", "a $ b $ c", "pay $3.50 now, $ 4 later",
     "escaped \\$x\\$ dollars", "$x $", "$ x$"],
)
def test_money_and_spaced_dollars_are_not_formulas(text: str) -> None:
    assert roundtrip(text, inline_formulas=True) == [TextPart(text)]


def test_markdown_images_with_http_urls_and_optional_titles() -> None:
    text = ('See ![a cat](https://example.com/cat.png "A cat") and ![](http://x.test/p_(1).jpg) '
            "but not ![local](file:///etc/passwd) or ![rel](img.png).")
    parts = roundtrip(text)
    images = [part for part in parts if isinstance(part, ImageLinkPart)]
    assert images == [
        ImageLinkPart("a cat", "https://example.com/cat.png", '![a cat](https://example.com/cat.png "A cat")'),
        ImageLinkPart("", "http://x.test/p_(1).jpg", "![](http://x.test/p_(1).jpg)"),
    ]


def test_code_blocks_and_inline_code_are_left_alone() -> None:
    text = ("Use `$$x$$` or ``a ` $y$ b``.\n\n```latex\n$$\\frac{1}{2}$$\n![i](https://e.com/i.png)\n```\n"
            "~~~\n\\[ z \\]\n~~~\nAfter: $$w$$")
    parts = roundtrip(text, inline_formulas=True)
    rich = [part for part in parts if not isinstance(part, TextPart)]
    assert rich == [FormulaPart("w", True, "$$w$$")]


def test_an_unclosed_code_fence_protects_the_rest() -> None:
    text = "Code:\n```\n$$x$$ never closed"
    assert roundtrip(text) == [TextPart(text)]


def test_find_rich_round_trips_random_texts() -> None:
    rng = random.Random(7)
    pieces = ["$$a^2$$", "$", "$$", "\\[", "\\]", "\\(", "\\)", "`", "```\n", "\n", "\n\n", "![x](https://e.com/a.png)",
              "![", "](", ")", "text ", "数学 ", "\\", "$x$", " ", "5", "~~~\n"]
    for _ in range(500):
        text = "".join(rng.choices(pieces, k=rng.randint(0, 30)))
        roundtrip(text, inline_formulas=rng.random() < 0.5)


# --- render_formula -----------------------------------------------------------------------------


def png_size(data: bytes) -> tuple[int, int]:
    from PIL import Image

    with Image.open(io.BytesIO(data)) as image:
        assert image.format == "PNG"
        return image.size


def test_renders_a_formula_as_a_png_wider_than_tall() -> None:
    data = render_formula(r"\frac{a}{b}+\sqrt{x^2}")
    assert data is not None and data.startswith(b"\x89PNG\r\n\x1a\n")
    width, height = png_size(data)
    assert width > height > 20


def test_the_background_is_white_and_the_ink_dark() -> None:
    from PIL import Image

    data = render_formula(r"x^2")
    assert data is not None
    with Image.open(io.BytesIO(data)) as image:
        grey = image.convert("L")
        assert grey.getpixel((0, 0)) == 255
        assert grey.getextrema()[0] < 64


def test_common_tex_that_mathtext_lacks_is_rewritten() -> None:
    for source in [r"a \le b \ge c", r"\tfrac12 + \dfrac{1}{2}", r"\displaystyle\sum_{i=1}^n i",
                   r"\big( x \big) \implies y", r"\textbf{v} \iff \lvert x \rvert", r"7 \equiv 1 \pmod{3}"]:
        assert render_formula(source) is not None, source


def test_line_breaks_are_drawn_as_stacked_lines() -> None:
    one = render_formula(r"a + b = c")
    two = render_formula(r"a + b = c \\ d + e = f")
    assert one is not None and two is not None
    assert png_size(two)[1] > 1.5 * png_size(one)[1]


@pytest.mark.parametrize(
    "source",
    [r"\begin{align}x\end{align}", r"\frac{1}{", "x^{2", r"\unknowncommand{x}", "", "   ",
     "x" * 3000, "a" * (MAX_FORMULA_CHARS + 1), r"\text{速度}"],
)
def test_what_mathtext_cannot_draw_gives_none(source: str) -> None:
    assert render_formula(source) is None


def test_render_formula_never_raises() -> None:
    for source in [None, 42, "\\", "{" * 500, r"\sqrt{" * 300 + "}" * 300, "$$", "\x00"]:
        render_formula(source)  # type: ignore[arg-type]
    assert render_formula("x", fontsize=0) is None
    assert render_formula("x", dpi=-1) is None


def test_renders_from_many_threads_at_once() -> None:
    sources = [rf"\frac{{{i}}}{{b_{i}}} + \sqrt{{x^{i}}}" for i in range(8)]
    expected = [render_formula(source) for source in sources]
    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(render_formula, sources * 3))
    assert all(result is not None for result in results)
    assert results == expected * 3  # the same pictures as drawn one at a time
