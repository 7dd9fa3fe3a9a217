"""Fitting a request into its budget: the newest whole turns of history within MARSHO_MAX_HISTORY
messages and MARSHO_HISTORY_TOKENS tokens, trimmed in steps so the request's start stays still,
and the running turn cut down (never dropped) to fit."""

from __future__ import annotations

from ..redaction import logger
from ..store.session import Message, Turn
from .tokens import TokenCounter


def without_reasoning(message: Message) -> Message:
    """The message as later turns send it: reasoning is passed back only within its own turn."""
    if "reasoning_content" not in message:
        return message
    return {k: v for k, v in message.items() if k != "reasoning_content"}


def _shrink_turn(turn: Turn) -> Turn:
    """A turn without its tool exchanges: the question and the final answer."""
    kept = Turn([turn.messages[0]], [turn.tokens[0]])
    last = turn.messages[-1]
    if len(turn.messages) > 1 and last.get("role") == "assistant" and not last.get("tool_calls"):
        kept.messages.append(last)
        kept.tokens.append(turn.tokens[-1])
    return kept


def fit_history(turns: list[Turn], *, max_messages: int, max_tokens: int) -> list[Message]:
    """The newest whole turns within both bounds, oldest first.

    A turn is never cut inside, so an assistant message with `tool_calls` keeps all its `tool`
    answers; a newest turn too big to fit is sent as just its question and answer.
    """
    chosen: list[Turn] = []
    used_messages = used_tokens = 0
    for turn in reversed(turns):
        messages, tokens = len(turn.messages), sum(turn.tokens)
        if used_messages + messages > max_messages or used_tokens + tokens > max_tokens:
            if not chosen:
                small = _shrink_turn(turn)
                if len(small.messages) <= max_messages and small.total_tokens <= max_tokens:
                    chosen.append(small)
            break
        chosen.append(turn)
        used_messages += messages
        used_tokens += tokens
    return [without_reasoning(m) for turn in reversed(chosen) for m in turn.messages]


TRIM_KEEP = 0.5
"""When the history sent no longer fits, the share of its bounds (MARSHO_MAX_HISTORY messages, the
tokens left for history) it is trimmed down to, at once. Providers bill the part of a prompt that
repeats an earlier request's start at a fraction of the price: dropping the oldest turn on every
turn would change the request right after the system prompt each time, while a trim by half
leaves the start the same for the many turns that fill the room again (measured by
bench/prompt_cache.py)."""


def _oldest_fitting(turns: list[Turn], max_messages: int, max_tokens: int) -> int:
    """The index of the oldest turn of the newest run of whole turns within both bounds
    (len(turns) when not even the newest fits)."""
    used_messages = used_tokens = 0
    for index in range(len(turns) - 1, -1, -1):
        turn = turns[index]
        used_messages += len(turn.messages)
        used_tokens += sum(turn.tokens)
        if used_messages > max_messages or used_tokens > max_tokens:
            return index + 1
    return 0


def history_start(turns: list[Turn], start: int | None, *, max_messages: int, max_tokens: int,
                  keep: float = TRIM_KEEP) -> int:
    """Where the history sent begins: at `start` (where the previous request's began; None when
    that turn is no longer among `turns`, the store having left it out) while all the turns
    from there fit both bounds; else at once at the newest turns within `keep` of each bound,
    or, when the newest turn alone is bigger than that, the newest that fit whole. Always a
    turn's start: `fit_history(turns[result:], ...)` sends whole turns only."""
    if start is not None and _oldest_fitting(turns[start:], max_messages, max_tokens) == 0:
        return start
    stepped = _oldest_fitting(turns, int(max_messages * keep), int(max_tokens * keep))
    if stepped >= len(turns):
        stepped = _oldest_fitting(turns, max_messages, max_tokens)
    return max(0, min(stepped, len(turns) - 1))


KEPT_TEXT_TOKENS = 256
"""Tokens of a text that pictures give way to: a text is cut down to this before the running
turn's pictures are left out, and below it only once they are."""


def fit_current(
    messages: list[Message], counter: TokenCounter, max_tokens: int, *, placeholder: str = "[picture]"
) -> list[Message]:
    """The running turn's messages within `max_tokens`: the biggest contents are cut (with a
    note) down to KEPT_TEXT_TOKENS, then pictures give way (the last first, each to a
    placeholder), then contents are cut further; no message is dropped, so every tool call
    keeps its answer and a question never loses its words to its pictures."""
    fitted = list(messages)
    sizes = [counter.count_message(m) for m in fitted]
    _cut(fitted, sizes, counter, max_tokens, floor=KEPT_TEXT_TOKENS)
    for index in range(len(fitted)):
        while sum(sizes) > max_tokens and _has_picture(fitted[index]):
            fitted[index] = _without_last_picture(fitted[index], placeholder)
            sizes[index] = counter.count_message(fitted[index])
            logger.warning("marsho: a picture was left out to fit MARSHO_HISTORY_TOKENS")
    _cut(fitted, sizes, counter, max_tokens, floor=0)
    return fitted


def _cut(fitted: list[Message], sizes: list[int], counter: TokenCounter, max_tokens: int,
         *, floor: int) -> None:
    """Cut the biggest texts (in place) until the messages fit or none can go below `floor`."""
    stuck: set[int] = set()  # messages that cannot shrink any further
    while sum(sizes) > max_tokens:
        candidates = [i for i, m in enumerate(fitted) if i not in stuck and _longest_text(m)[1]]
        if not candidates:
            return
        index = max(candidates, key=sizes.__getitem__)
        part, content = _longest_text(fitted[index])
        overflow = sum(sizes) - max_tokens
        keep = max(floor, counter.count_text(content) - overflow - 16)
        shorter = _with_text(fitted[index], part, counter.truncate(content, keep))
        new_size = counter.count_message(shorter)
        if new_size >= sizes[index]:
            stuck.add(index)
            continue
        fitted[index], sizes[index] = shorter, new_size


def _has_picture(message: Message) -> bool:
    content = message.get("content")
    return isinstance(content, list) and any(
        isinstance(p, dict) and p.get("type") == "image_url" for p in content)


def _without_last_picture(message: Message, placeholder: str) -> Message:
    content = list(message["content"])
    last = max(i for i, p in enumerate(content) if isinstance(p, dict) and p.get("type") == "image_url")
    content[last] = {"type": "text", "text": placeholder}
    return {**message, "content": content}


def _longest_text(message: Message) -> tuple[int | None, str]:
    """The text that can be cut: the content, or the longest text part of content parts (the
    pictures of a question stay whole); (its part index or None, the text)."""
    content = message.get("content")
    if isinstance(content, str):
        return None, content
    if not isinstance(content, list):
        return None, ""
    texts = [(i, p.get("text") or "") for i, p in enumerate(content)
             if isinstance(p, dict) and p.get("type") == "text"]
    return max(texts, key=lambda item: len(item[1]), default=(None, ""))


def _with_text(message: Message, part: int | None, text: str) -> Message:
    if part is None:
        return {**message, "content": text}
    content = list(message["content"])
    content[part] = {**content[part], "text": text}
    return {**message, "content": content}
