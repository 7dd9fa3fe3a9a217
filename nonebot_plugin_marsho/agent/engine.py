"""One chat turn, NoneBot-free: history + question + tool schemas → endpoint → tool rounds → Reply."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar
from weakref import WeakKeyDictionary

from ..exceptions import BudgetError, StoreError
from ..redaction import logger, redact
from ..store.session import History, Message, Summary, Turn
from ..tools.model import ToolCall, ToolContext, ToolResult, Toolset
from ..tools.runner import ToolRunner, clean_text
from .budget import fit_current, fit_history, history_start
from .llm import Completion, LLMClient, Route, TextHook
from .metering import OverQuota, QuotaReached, current_share
from .persona import with_turn_note
from .summary import RESERVE_MARGIN, SUMMARY_GAP_MESSAGES, Summarizer
from .tokens import TokenCounter, load_counter


@dataclass(frozen=True)
class Reply:
    """What one turn produced for the user."""

    text: str
    calls: list[tuple[ToolCall, ToolResult]] = field(default_factory=list)
    rounds: int = 0
    hit_round_limit: bool = False
    reasoning: str = ""
    cut: bool = False
    """The answer was longer than MARSHO_MAX_ANSWER_CHARS; `text` is its start."""
    save_error: StoreError | None = None
    """Why the turn could not be stored, when the answer came but the database failed."""
    declined: bool = False
    """The caller's `keep` declined to store the turn (Engine.chat): nothing of it was kept."""
    over_quota: OverQuota | None = None
    """A daily quota ran out during the turn: it ended before its next request, with the text
    said so far (metering.QuotaReached); the chat layer adds the quota's message."""

    @property
    def stored(self) -> bool:
        """Whether the turn is in the history now."""
        return self.save_error is None and not self.declined

    @property
    def images(self) -> list[bytes]:
        """Pictures the tools made for the chat (charts...), in call order."""
        return [image for _, result in self.calls for image in result.images]


Progress = Callable[[ToolCall, "ToolResult | None"], None]
"""Told of each tool call before it runs (result None) and again with its result."""

Announce = Callable[[list[ToolCall]], Awaitable[None]]
"""Told of each round's tool calls before they run (to show "marsho is using ..."); it runs
beside the calls, so a slow chat send never delays the tools, and is given at most
ANNOUNCE_GRACE seconds after them before it is dropped."""

ANNOUNCE_GRACE = 2.0

QUOTA_STOP = "[the answer stopped here: a daily token quota was used up]"
"""The final answer history keeps of a turn a quota ended after its tool rounds, when the model
had said nothing yet (the stored turn stays a valid request: every call has its result)."""

KEPT_CALLS_FACTOR = 4
"""Tool calls of one response kept (in history and the next request) per call that may run
(MARSHO_MAX_TOOL_CALLS): the rest of a response asking for thousands are dropped."""

REMEMBERED_STARTS = 4096
"""Sessions whose history start (the oldest turn their last request sent) is remembered; past
this many the memory starts over (a session then trims once more than it needed to)."""

SUMMARY_SHARE = 0.75
"""The share of MARSHO_HISTORY_TOKENS the system prompt, the tool schemas and the summary may
take together: the summary gets what the other two leave of it, so the question and some history
always have room (and the budget error stays the system prompt's and the tools' alone)."""

PROMPTS_COUNTED = 256
"""System prompts (one per group persona) whose tokens are remembered; past it they start over."""

MIN_SUMMARY_TOKENS = 32
"""A summary cut to fewer tokens than this is left out instead."""

MODEL_SETTING = "model"
"""The model chosen with `marsho.model`, kept in the database across restarts."""


@dataclass
class TurnOutcome:
    """A finished answer: the messages it added after the prompt, and the Reply."""

    added: list[Message]
    reply: Reply


async def answer(
    llm: LLMClient,
    runner: ToolRunner,
    prepare: Callable[[list[Message]], list[Message]],
    tools: list[dict[str, Any]],
    *,
    context: ToolContext | None = None,
    max_tool_rounds: int = 8,
    progress: Progress | None = None,
    announce: Announce | None = None,
    on_text: TextHook | None = None,
) -> TurnOutcome:
    """Ask the model until it answers in text: run each batch of tool calls and send the
    results back, at most `max_tool_rounds` times, then once more without tools.

    `prepare` turns the messages this answer has added so far into the request's messages
    (history and budget are its business). Every call gets exactly one tool message; raises
    EndpointError if the endpoint fails. `on_text` is told the answer's text as it streams in
    (each round's request carries it: agent/model/stream.py tells only a response's answer,
    never its reasoning or calls); the Reply is the whole answer all the same.
    """
    added: list[Message] = []
    calls: list[tuple[ToolCall, ToolResult]] = []
    used: set[str] = set()
    rounds = 0
    route = Route()  # the tool rounds stay on the endpoint that answered first, unless it fails
    told = _Responses(on_text) if on_text is not None else None
    while True:
        offered = tools if tools and rounds < max_tool_rounds else None
        try:
            completion = await llm.complete(prepare(added), offered, route=route, on_text=told)
        except QuotaReached as reached:
            if not added:
                raise  # nothing done yet: the question is refused, nothing is stored
            return _stopped(added, calls, rounds, reached.over)
        if not completion.tool_calls or offered is None:
            break
        if told is not None:
            told.next_response()
        rounds += 1
        completion = _kept_calls(_renamed_calls(completion, used, rounds), runner.max_calls)
        if completion.extras:  # a provider's signatures go back to it within the turn, never stored
            route.keep_extras(completion)
        results = await _run_round(completion.tool_calls, runner, context, progress, announce)
        # reasoning goes back with its tool calls within this turn (DeepSeek's thinking mode
        # requires it); later turns get the message without it
        added.append(completion.assistant_message(with_reasoning=True))
        added.extend(result.to_message() for result in results)
        calls.extend(zip(completion.tool_calls, results, strict=True))
    # calls sent although no tools were offered are dropped: unanswered calls would make the
    # stored history an invalid request
    added.append({"role": "assistant", "content": completion.content})
    hit_limit = bool(tools) and rounds > 0 and rounds >= max_tool_rounds
    return TurnOutcome(added, Reply(completion.content, calls, rounds, hit_limit, completion.reasoning,
                                    cut=completion.cut))


class _Responses:
    """`on_text` across the responses of one turn: the text of a response told after another's
    (the words before a round of tool calls, then the answer) starts a paragraph of its own, so
    the two never run together where they are shown."""

    def __init__(self, hook: TextHook) -> None:
        self.hook = hook
        self.told = False
        self.fresh = False

    def next_response(self) -> None:
        self.fresh = True

    async def __call__(self, piece: str) -> None:
        if self.fresh and self.told:
            piece = f"\n\n{piece}"
        self.fresh, self.told = False, True
        await self.hook(piece)


def _stopped(added: list[Message], calls: list[tuple[ToolCall, ToolResult]], rounds: int,
             over: OverQuota) -> TurnOutcome:
    """The turn a used-up quota ended before its next request: its rounds (each call answered)
    and what the model said beside them so far, as the answer."""
    said = "\n\n".join(str(m["content"]).strip() for m in added
                        if m.get("role") == "assistant" and m.get("content") and str(m["content"]).strip())
    added = [*added, {"role": "assistant", "content": said or QUOTA_STOP}]
    return TurnOutcome(added, Reply(said, calls, rounds, over_quota=over))


def _renamed_calls(completion: Completion, used: set[str], rounds: int) -> Completion:
    """The completion with call ids unique across the whole turn (some endpoints start at call_0
    in every response): results are matched to their calls, and to who may see them, by id.
    `used` gathers the ids."""
    renamed = [dataclasses.replace(call, id=f"{call.id}_r{rounds}") if call.id in used else call
               for call in completion.tool_calls]
    if renamed != completion.tool_calls:
        completion = dataclasses.replace(completion, tool_calls=renamed)
    used.update(call.id for call in completion.tool_calls)
    return completion


def _kept_calls(completion: Completion, max_calls: int) -> Completion:
    """The completion with at most KEPT_CALLS_FACTOR calls per call that may run: calls past
    these are dropped from the message itself (each kept one still gets its one result, the
    runner answering those past max_calls "not run"), so neither the history nor the next
    request carries thousands of them."""
    kept = max_calls * KEPT_CALLS_FACTOR
    if len(completion.tool_calls) <= kept:
        return completion
    logger.warning(f"marsho: the model asked for {len(completion.tool_calls)} tool calls in one "
                   f"response; the {len(completion.tool_calls) - kept} past {kept} were dropped")
    return dataclasses.replace(completion, tool_calls=completion.tool_calls[:kept],
                               extras=completion.extras[:kept])


async def _run_round(calls: list[ToolCall], runner: ToolRunner, context: ToolContext | None,
                     progress: Progress | None, announce: Announce | None) -> list[ToolResult]:
    """Run one round's calls (announced beside them), each result redacted and logged."""
    if progress:
        for call in calls:
            progress(call, None)
    told = asyncio.ensure_future(_announced(announce, calls)) if announce else None
    try:
        results = await runner.run(calls, context, on_result=progress)
        if told is not None:  # said before the answer comes, unless the chat is that slow
            await asyncio.wait({told}, timeout=ANNOUNCE_GRACE)
    finally:
        if told is not None and not told.done():
            told.cancel()
    # a tool may echo a secret (a web service reflecting its headers): hidden before the
    # result is stored, sent to the model or shown
    results = [dataclasses.replace(result, content=redact(result.content)) for result in results]
    for result in results[:runner.max_calls]:  # the runner logs the ones it did not run
        log = logger.info if result.ok else logger.warning
        log(f"marsho: tool {result.name} → {result.status} in {result.seconds:.2f} s")
    return results


async def _announced(announce: Announce, calls: list[ToolCall]) -> None:
    try:
        await announce(calls)
    except Exception as error:  # telling the chat is a courtesy; the tools run regardless
        logger.warning(f"marsho: could not announce the tool calls: {error}")


def without_pictures(message: Message, placeholder: str = "[picture]") -> Message:
    """The message as history keeps it: pictures replaced by a short placeholder (their base64
    would fill the database and every later request; they are sent in their own turn only)."""
    content = message.get("content")
    if not isinstance(content, list):
        return message
    texts = [str(part.get("text", "")) if part.get("type") == "text" else placeholder
             for part in content if isinstance(part, dict)]
    return {**message, "content": "\n".join(text for text in texts if text)}


def redacted(message: Message) -> Message:
    """The message without any of the bot's secrets: its text, its content parts' text and its
    tool calls' arguments."""
    content = message.get("content")
    changed: Message = dict(message)
    if isinstance(content, str):
        changed["content"] = redact(content)
    elif isinstance(content, list):
        changed["content"] = [{**part, "text": redact(str(part["text"]))}
                              if isinstance(part, dict) and "text" in part else part for part in content]
    if message.get("tool_calls"):
        changed["tool_calls"] = [_redacted_call(call) for call in message["tool_calls"]]
    if isinstance(message.get("reasoning_content"), str):
        changed["reasoning_content"] = redact(message["reasoning_content"])
    return changed


def _redacted_call(call: Any) -> Any:
    function = call.get("function") if isinstance(call, dict) else None
    if not isinstance(function, dict):
        return call
    return {**call, "function": {**function, "arguments": redact(str(function.get("arguments", "")))}}


def _earlier_tokens(messages: list[Message], history: list[Turn], current: int,
                   summary: Summary | None) -> int:
    """Tokens of the earlier conversation in a request of `messages` (the summary and the turns
    before this one; `current`: the messages of this turn at its end), from the counts history
    keeps: no counting per request."""
    earlier = len(messages) - current - (1 if messages and messages[0].get("role") == "system" else 0)
    counts = [count for turn in history for count in turn.tokens]
    kept = sum(counts[-earlier:]) if earlier > 0 else 0
    return kept + (summary.tokens if summary is not None else 0)


def _index_of(history: list[Turn], turn_id: str) -> int | None:
    """Where the turn with this id is in `history`, if it is."""
    return next((i for i, turn in enumerate(history) if turn.id and turn.id == turn_id), None)


def hidden_result(name: str) -> str:
    """What the model reads in place of a result the asker may not see."""
    return (f"[the result of {name} is hidden: the person asking now may not use that tool; "
            "do not guess or repeat it]")


NOT_KEPT = "[a result for that question only (memories recalled for its asker); not kept]"
"""What history keeps of the result of a tool whose `keeps_result` is False."""


def kept_results(messages: list[Message], toolset: Toolset) -> list[Message]:
    """The turn's messages as history keeps them: the results of tools that keep none (memories
    recalled for one asker) replaced by NOT_KEPT, so a later asker's request never carries them."""
    names = {call.get("id"): (call.get("function") or {}).get("name", "")
             for message in messages if message.get("role") == "assistant"
             for call in message.get("tool_calls") or [] if isinstance(call, dict)}
    kept: list[Message] = []
    for message in messages:
        name = names.get(message.get("tool_call_id"), "") if message.get("role") == "tool" else ""
        tool = toolset.get(name) if name else None
        kept.append(message if tool is None or tool.keeps_result else {**message, "content": NOT_KEPT})
    return kept


def visible_to(turns: list[Turn], toolset: Toolset, context: ToolContext | None) -> list[Turn]:
    """The history as this asker's request may carry it: in a shared conversation, the results of
    tools the asker may not use (a superuser's database query...) become a short placeholder, so
    they reach neither the model on the member's behalf nor the member through its answer."""
    if context is not None and context.role == "superuser":
        return turns
    seen: list[Turn] = []
    for turn in turns:
        for message in turn.messages:
            if message.get("tool_calls"):
                break
        else:  # no tool was called (most turns): nothing to hide
            seen.append(turn)
            continue
        names = {call.get("id"): (call.get("function") or {}).get("name", "")
                 for message in turn.messages if message.get("role") == "assistant"
                 for call in message.get("tool_calls") or [] if isinstance(call, dict)}
        if not names or all(toolset.may_see(name, context) for name in names.values()):
            seen.append(turn)
            continue
        messages = [
            {**message, "content": hidden_result(names.get(message.get("tool_call_id"), "?"))}
            if message.get("role") == "tool"
            and not toolset.may_see(names.get(message.get("tool_call_id"), ""), context) else message
            for message in turn.messages
        ]
        seen.append(Turn(messages, turn.tokens, turn.id))
    return seen


@dataclass(frozen=True)
class _Plan:
    """A request's layout (Engine.request_messages): its system message, the running turn cut to
    fit, the tokens left for history, and where the history sent starts."""

    system: list[Message]
    current: list[Message]
    room: int
    start: int


_K = TypeVar("_K")
_V = TypeVar("_V")


def _kept(cache: dict[_K, _V], key: _K, make: Callable[[], _V]) -> _V:
    """`cache[key]`, made by `make` the first time; a cache of PROMPTS_COUNTED entries starts over."""
    value = cache.get(key)
    if value is None:
        if len(cache) >= PROMPTS_COUNTED:
            cache.clear()
        value = cache[key] = make()
    return value


class Engine:
    """Runs chat turns: one at a time per session, every loop and the request's size bounded,
    history kept valid."""

    def __init__(
        self,
        llm: LLMClient,
        toolset: Toolset,
        history: History,
        runner: ToolRunner,
        *,
        system_prompt: str = "",
        max_tool_rounds: int = 8,
        max_history: int = 40,
        max_tokens: int = 8000,
        counter: TokenCounter | None = None,
        picture_placeholder: str = "[picture]",
        summarizer: Summarizer | None = None,
    ) -> None:
        self.llm = llm
        self.toolset = toolset
        self.history = history
        self.runner = runner
        self.system_prompt = system_prompt
        self.max_tool_rounds = max_tool_rounds
        self.max_history = max_history
        self.max_tokens = max_tokens
        self.counter = counter or TokenCounter()
        self.picture_placeholder = picture_placeholder
        """What history keeps of a picture, and what a picture that does not fit becomes."""
        self.summarizer = summarizer
        """Folds the turns a trim leaves out into the session's summary (MARSHO_SUMMARY); None: off."""
        self._tools_token_cache: WeakKeyDictionary[TokenCounter, dict[tuple[str, ...], int]] = (
            WeakKeyDictionary())
        """Per counter (the model's: `marsho.model` changes it), the tokens of each set of tools."""
        self._system_cache: WeakKeyDictionary[TokenCounter, dict[tuple[Any, ...], str]] = WeakKeyDictionary()
        """Per counter, the system message's text of a prompt with a session's summary (`_system`),
        by what it is built from: made once per summary, not twice per turn."""
        self._prompt_token_cache: WeakKeyDictionary[TokenCounter, dict[str, int]] = WeakKeyDictionary()
        """Per counter, the tokens of each system message's text (a persona's prompt, with a
        session's summary after it or not): counted once per change, not once per request."""
        self._starts: dict[str, str] = {}
        """Per session, the id of the oldest turn its last request sent: the history is trimmed
        in steps from there (budget.history_start), so the request's start stays still."""
        self._summaries: dict[str, Summary | None] = {}
        """Per session, its summary as last read or written, when this process is the history's
        only writer (SQLite): a question costs no read of it. On a store several bot processes
        share (PostgreSQL) it is read each turn, since another may have changed it."""
        self._summaries_of: object = history

    def _tools_tokens(self, tools: list[dict[str, Any]]) -> int:
        """Tokens of the tool schemas, counted once per set of tools (they rarely change) and
        counter."""
        return _kept(self._tools_token_cache.setdefault(self.counter, {}), self._tool_names(tools),
                     lambda: self.counter.count_tools(tools))

    @staticmethod
    def _tool_names(tools: list[dict[str, Any]]) -> tuple[str, ...]:
        return tuple(tool["function"]["name"] for tool in tools)

    def _summary_room(self, prompt: str, tools: list[dict[str, Any]]) -> int:
        """Tokens the summary's block may take beside the system prompt and the tool schemas:
        whatever they leave of SUMMARY_SHARE of the budget (a big persona, a superuser's many
        tools), so a summary never makes a question fail for want of room."""
        fixed = self._prompt_tokens(prompt) + self._tools_tokens(tools)
        return max(0, int(self.max_tokens * SUMMARY_SHARE) - fixed)

    def _prompt_tokens(self, prompt: str) -> int:
        """Tokens of a system message of `prompt`, counted once per prompt (they rarely change)
        and counter."""
        return _kept(self._prompt_token_cache.setdefault(self.counter, {}), prompt,
                     lambda: self.counter.count_message({"role": "system", "content": prompt})
                     if prompt else 0)

    def _system_tokens(self, system: list[Message]) -> int:
        """Tokens of the request's system message (`_system`'s), counted once per text."""
        return sum(self._prompt_tokens(str(message.get("content", ""))) if message.get("role") == "system"
                   and isinstance(message.get("content"), str) else self.counter.count_message(message)
                   for message in system)

    def _system(self, prompt: str, summary: str, tools: list[dict[str, Any]]) -> list[Message]:
        """The request's one system message (some providers refuse a second): the system prompt,
        then the session's summary, cut to the room it has (left out when that is too little)."""
        content = prompt
        summarizer = self.summarizer
        if summary and summarizer is not None:
            # what the text is made of: the room comes from the budget, the prompt's and the tools'
            # tokens (the counter's), the block's frame from the summarizer and its language
            key = (prompt, summary, self._tool_names(tools), self.max_tokens, summarizer, summarizer.language)
            content = _kept(self._system_cache.setdefault(self.counter, {}), key,
                            lambda: self._with_summary(prompt, summary, tools, summarizer))
        return [{"role": "system", "content": content}] if content else []

    def _with_summary(self, prompt: str, summary: str, tools: list[dict[str, Any]],
                      summarizer: Summarizer) -> str:
        block = summarizer.block(summary)
        room = self._summary_room(prompt, tools)
        if self.counter.count_text(block) > room:
            label = self.counter.count_text(summarizer.block("")) + RESERVE_MARGIN
            block = (summarizer.block(self.counter.truncate(summary, room - label))
                     if room - label >= MIN_SUMMARY_TOKENS else "")
        return "\n\n".join(part for part in (prompt, block) if part)

    def _layout(self, system: list[Message], current: list[Message],
                tools: list[dict[str, Any]]) -> tuple[list[Message], int]:
        """The running turn cut to fit beside the fixed part (system message, tool schemas), and
        the tokens left for history."""
        fixed = self._system_tokens(system) + self._tools_tokens(tools)
        if fixed >= self.max_tokens * 0.9:
            raise BudgetError(code="budget.fixed", tokens=fixed, budget=self.max_tokens)
        current = fit_current(current, self.counter, self.max_tokens - fixed,
                              placeholder=self.picture_placeholder)
        return current, max(0, self.max_tokens - fixed - sum(map(self.counter.count_message, current)))

    def _start(self, history: list[Turn], key: str, room: int, summary: Summary | None) -> int:
        """Where the session's history sent begins (budget.history_start from where its previous
        request's began), not remembered yet. Never at or before the summary's newest turn: those
        are in the summary (this also keeps the start across a restart)."""
        remembered = self._starts.get(key)
        # not found: the store already left that turn out (MARSHO_MAX_HISTORY), so trim
        found = next((i for i, turn in enumerate(history) if turn.id and turn.id == remembered),
                     0 if remembered is None else None)
        folded = _index_of(history, summary.through_turn) if summary is not None else None
        # a start not remembered, or gone from the window (another process trimmed, the window
        # slid): right after the summary, not trimmed again from scratch into what it holds
        if folded is not None and (found is None or remembered is None or found <= folded):
            found = folded + 1
        return history_start(history, found, max_messages=self.max_history, max_tokens=room)

    def _remember(self, key: str, history: list[Turn], start: int) -> None:
        if start < len(history) and history[start].id:
            if len(self._starts) >= REMEMBERED_STARTS and key not in self._starts:
                self._starts.clear()
            self._starts[key] = history[start].id
        else:  # nothing to keep it by (a store without turn ids): as if never trimmed
            self._starts.pop(key, None)

    def request_messages(
        self,
        history: list[Turn],
        current: list[Message],
        tools: list[dict[str, Any]],
        system_prompt: str | None = None,
        key: str | None = None,
        summary: Summary | None = None,
        *,
        remember: bool = True,
    ) -> list[Message]:
        """System prompt (and the session's `summary` after it), the history that fits, and the
        running turn, within MARSHO_MAX_HISTORY messages and MARSHO_HISTORY_TOKENS tokens (tool
        schemas counted too); with the session's `key`, the history starts where its previous
        request's did until it must be trimmed, and is then trimmed by a step (budget.TRIM_KEEP).
        `remember` False (a turn's later tool rounds): a trim for this request only, the next turn
        starts from where this turn's first request did (and summarises what it must leave out)."""
        prompt = self.system_prompt if system_prompt is None else system_prompt
        system = self._system(prompt, summary.text if summary is not None else "", tools)
        current, room = self._layout(system, current, tools)
        start = self._start(history, key, room, summary) if key is not None else 0
        return self._assembled(history, key, _Plan(system, current, room, start), remember=remember)

    def _assembled(self, history: list[Turn], key: str | None, plan: _Plan, *,
                   remember: bool) -> list[Message]:
        """The request of `plan` (request_messages' layout of it), its start remembered."""
        if key is not None and remember:
            self._remember(key, history, plan.start)
        earlier = fit_history(history[plan.start:], max_messages=self.max_history, max_tokens=plan.room)
        return [*plan.system, *earlier, *plan.current]

    async def _summary_for_turn(self, key: str, history: list[Turn], asked: Message,
                                tools: list[dict[str, Any]], system_prompt: str | None
                                ) -> tuple[Summary | None, _Plan | None]:
        """The session's summary for this turn's requests. When the turn's first request would
        trim the history, the turns it leaves out (with any left out before that the summary has
        not folded) are folded into it first, so the trimming request already carries it: the
        request's start changes once per trim. A failed summary leaves them out, as without
        summaries, and is not retried; it never fails the question. With it, when nothing was
        folded, the layout of the turn's first request (request_messages' for `[asked]`), made
        on the way; None: none made."""
        get_summary = getattr(self.history, "get_summary", None)
        if self.summarizer is None or get_summary is None or not history or not history[-1].id:
            return None, None
        summary = await self._summary_of(key, get_summary)
        prompt = self.system_prompt if system_prompt is None else system_prompt
        system = self._system(prompt, summary.text if summary is not None else "", tools)
        current, room = self._layout(system, [asked], tools)
        first, gap = self._unfolded(key, history, summary)
        if gap is None and (start := self._start(history, key, room, summary)) <= first:
            # no trim: the common case costs the summary's read alone
            return summary, _Plan(system, current, room, start)
        # the new summary may be longer than the one sent so far: trim as if it were as long as
        # it may be, so the turn's requests carry it without trimming again
        block = self._system_tokens(system) - self._prompt_tokens(prompt)
        longest = min(self.summarizer.reserve(), self._summary_room(prompt, tools))
        room = max(0, room - max(0, longest - block))
        start = self._start(history, key, room, summary)
        turns = history[first:start]
        if gap is not None:
            turns = [*await self._gap(key, gap, history[0].id, with_first=summary is None), *turns]
        if not turns:
            return summary, None
        previous = summary.text if summary is not None else ""
        covered = summary.turns if summary is not None else 0
        try:
            text = await self.summarizer.fold(previous, turns)
            covered += len(turns)
        except QuotaReached:
            raise  # the turn's own request would be refused as well: the question is
        except Exception as error:  # the turns are left out, as without summaries
            logger.warning(f"marsho: session {key}: {len(turns)} trimmed turns were left out without a "
                           f"summary: {error}")
            text = previous
        new = Summary(text, turns[-1].id, covered, self.counter.count_text(text))
        try:
            await self.history.save_summary(key, new.text, through_turn=new.through_turn,
                                            turns=new.turns, tokens=new.tokens)
            self._keep_summary(key, new)
        except StoreError as error:  # this turn still carries it; the next one folds them again
            self._summaries.pop(key, None)
            logger.warning(f"marsho: session {key}: the summary could not be saved: {error}")
        return new, None

    async def _summary_of(self, key: str, get_summary: Callable[[str], Awaitable[Summary | None]]
                          ) -> Summary | None:
        if self._summaries_of is not self.history:  # another store (a test's own): nothing known
            self._summaries, self._summaries_of = {}, self.history
        if key in self._summaries:
            return self._summaries[key]
        summary = await get_summary(key)
        self._keep_summary(key, summary)
        return summary

    def _keep_summary(self, key: str, summary: Summary | None) -> None:
        if getattr(self.history, "shared", True):  # another process may change it: read each time
            return
        if len(self._summaries) >= REMEMBERED_STARTS and key not in self._summaries:
            self._summaries.clear()
        self._summaries[key] = summary

    def _unfolded(self, key: str, history: list[Turn], summary: Summary | None) -> tuple[int, str | None]:
        """(first, gap): the window's turns from `first` on are not in the summary, nor, when
        `gap` is a turn's id, the stored turns from there to the window (the summary's newest
        turn, not included; with no summary yet, the oldest turn the session's last request
        sent, included): a big turn can push several turns out of the store's window at once."""
        remembered = self._starts.get(key)
        at = _index_of(history, remembered) if remembered else None
        if summary is None:
            # turns older than a start not remembered (a restart) were left out before summaries
            return 0, remembered if remembered and at is None else None
        folded = _index_of(history, summary.through_turn)
        if folded is not None:
            return folded + 1, None
        if at is not None:
            # the summary's newest turn has left the window, but the start this process placed
            # after it is still there: each trim folds what it leaves out, so what comes before
            # that start is in the summary (no read of the turns between)
            return at, None
        return 0, summary.through_turn

    async def _gap(self, key: str, after: str, before: str, *, with_first: bool) -> list[Turn]:
        """The stored turns between `after` (included `with_first`) and the window's oldest."""
        between = getattr(self.history, "turns_between", None)
        if between is None:
            return []
        try:
            return list(await between(key, after, before, max_messages=SUMMARY_GAP_MESSAGES,
                                      with_after=with_first))
        except StoreError as error:
            logger.warning(f"marsho: session {key}: could not read the turns to summarise: {error}")
            return []

    async def chat(
        self,
        key: str,
        text: str | list[dict[str, Any]],
        context: ToolContext | None = None,
        *,
        system_prompt: str | None = None,
        note: str = "",
        progress: Progress | None = None,
        announce: Announce | None = None,
        keep: Callable[[Reply], bool] | None = None,
        on_text: TextHook | None = None,
    ) -> Reply:
        """Answer `text` in session `key` with the tools the asker may use; the turn is stored
        only if it completes, in one transaction (and, with `keep`, only if `keep(reply)` says so:
        an answer that will not be sent is not remembered either).

        `text` may be OpenAI content parts (text and `image_url` pictures); history keeps the
        pictures as a placeholder. `system_prompt` replaces the engine's for this turn; `note`
        (the time, the asker's nickname: persona.turn_note) goes after the question in this
        turn's requests only, never into history, so later requests repeat this one's start.
        `on_text` is told the answer's text as it streams in (see `answer`).

        Raises EndpointError when the endpoint fails (the history is then unchanged), and
        StoreError when the database fails before the model is asked; an answer that could not
        be stored comes back with `save_error` set.
        """
        async with self.history.lock(key):
            history = visible_to(await self.history.recent_turns(
                key, max_messages=self.max_history, max_tokens=self.max_tokens
            ), self.toolset, context)
            # a lone surrogate (a crafted message) could be neither sent nor stored
            content = clean_text(text) if isinstance(text, str) else text
            question: Message = {"role": "user", "content": content}
            asked: Message = {"role": "user", "content": with_turn_note(content, note)}
            tools = self.toolset.schemas(context)
            summary, planned = await self._summary_for_turn(key, history, asked, tools, system_prompt)
            share = current_share()

            def prepare(added: list[Message]) -> list[Message]:
                # only the first request places the history's start: a trim a tool round needs is
                # for that request, and the next turn summarises what it must leave out
                if not added and planned is not None:  # laid out already, nothing changed since
                    messages = self._assembled(history, key, planned, remember=True)
                else:
                    messages = self.request_messages(history, [asked, *added], tools, system_prompt, key,
                                                     summary, remember=not added)
                if share is not None:  # what of it the group pays (metering.Share)
                    share.history = _earlier_tokens(messages, history, len(added) + 1, summary)
                return messages

            outcome = await answer(
                self.llm, self.runner, prepare, tools, context=context,
                max_tool_rounds=self.max_tool_rounds, progress=progress, announce=announce,
                on_text=on_text,
            )
            # nothing stored holds a secret, whoever wrote it (the model echoing one, a question)
            turn = [redacted(m) for m in (without_pictures(question, self.picture_placeholder),
                                          *kept_results(outcome.added, self.toolset))]
            if keep is not None and not keep(outcome.reply):
                return dataclasses.replace(outcome.reply, declined=True)
            try:
                await self.history.append_turn(key, turn, [self.counter.count_message(m) for m in turn])
            except StoreError as error:
                return dataclasses.replace(outcome.reply, save_error=error)
            if outcome.reply.hit_round_limit:
                logger.warning(f"marsho: session {key} used all {self.max_tool_rounds} tool "
                               "rounds (MARSHO_MAX_TOOL_ROUNDS)")
            return outcome.reply

    async def restore_model(self) -> bool:
        """Use the model chosen with `marsho.model` before a restart, if any, and count its tokens;
        whether there was one (it wins over MARSHO_MODEL)."""
        chosen = await self.history.get_setting(MODEL_SETTING)
        # and what the models' refusals taught before the restart (streams only, an effort refused)
        restore = getattr(self.llm, "restore_learned", None)
        if restore is not None:
            await restore(self.history)
        self.llm.model = chosen or self.llm.model
        self.counter = await load_counter(self.llm.model)
        return bool(chosen)

    async def switch_model(self, name: str) -> str:
        """Use `name` from now on, kept across restarts; returns the previous model."""
        await self.history.set_setting(MODEL_SETTING, name)
        counter = await load_counter(name)
        previous, self.llm.model, self.counter = self.llm.model, name, counter
        return previous

    async def close(self) -> None:
        """Close the endpoint's connections, the tool threads and the history."""
        await self.llm.close()
        self.runner.close()
        close = getattr(self.history, "close", None)
        if close is not None:
            await close()

    async def summary(self, key: str) -> Summary | None:
        """The session's summary of its trimmed turns; None when it has none or summaries are off."""
        get_summary = getattr(self.history, "get_summary", None)
        if self.summarizer is None or get_summary is None:
            return None
        summary: Summary | None = await get_summary(key)
        return summary

    async def reset(self, key: str) -> int:
        """Forget the session's history and its summary (after any turn that is running)."""
        async with self.history.lock(key):
            self._summaries.pop(key, None)
            return await self.history.clear(key)

    async def last_calls(self, key: str, context: ToolContext | None = None) -> list[dict[str, Any]]:
        """The last turn's tool calls as an OpenAI-style JSON array, each with the result it got;
        a call of a tool the asker may not use keeps only its name, and `hidden` says who may see
        it (the tool's permission)."""
        turn = await self.history.last_turn(key)
        if turn is None:
            return []
        results = {m.get("tool_call_id"): m.get("content", "") for m in turn.messages
                   if m.get("role") == "tool"}
        calls = []
        for message in turn.messages:
            if message.get("role") != "assistant":
                continue
            for call in message.get("tool_calls") or []:
                name = str((call.get("function") or {}).get("name", ""))
                if self.toolset.may_see(name, context):
                    calls.append({**{k: call[k] for k in ("id", "type", "function") if k in call},
                                  "result": results.get(call.get("id"), "")})
                else:
                    tool = self.toolset.get(name)
                    calls.append({"id": call.get("id"), "type": "function", "function": {"name": name},
                                  "hidden": tool.permission if tool is not None else "superuser"})
        return calls
