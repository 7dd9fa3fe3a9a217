"""The database's own full-text search as memories and the knowledge base use it: our words
(NFKC, case folded; Chinese, Japanese and Korean runs as overlapping pairs and characters, since
they are written without spaces) kept in a `terms` column, and the query that finds rows sharing a
question's words, best first: SQLite FTS5 (an external-content table kept by triggers, BM25) or
PostgreSQL (to_tsvector('simple', terms) under a GIN index, ts_rank); LIKE elsewhere.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from typing import Any

from sqlalchemy import ColumnElement, false, func, literal_column, or_, text

MAX_QUERY_TERMS = 32
"""Search terms taken from a question (the first ones): a long question is not a long query."""

_CJK = (r"\u2e80-\u2fdf\u3040-\u30ff\u3100-\u312f\u3190-\u31ff\u3400-\u4dbf\u4e00-\u9fff"
        r"\uac00-\ud7af\uf900-\ufaff\U00020000-\U0003134f")
_MARKS = (r"\u0300-\u036f\u0483-\u0489\u0591-\u05c7\u0610-\u061a\u064b-\u065f\u0670\u06d6-\u06ed"
          r"\u0900-\u0dff\u0e31-\u0e3a\u0e47-\u0e4e\u0eb1-\u0ebc\u0ec8-\u0ecd\u0f18-\u0fbc"
          r"\u102b-\u109d\u17b4-\u17d3\u1ab0-\u1aff\u1dc0-\u1dff\u20d0-\u20f0\ufe20-\ufe2f")
r"""Combining marks that belong inside words (Devanagari and the other Indic scripts, Thai, Lao,
Tibetan, Myanmar, Khmer vowel signs; Hebrew and Arabic points; accents NFKC leaves apart): `\w`
leaves them out, which would split "है" into letters that match unrelated words."""
_RUN = re.compile(rf"[{_CJK}]+|(?:[^\W_{_CJK}]|[{_MARKS}])+", re.UNICODE)
_CJK_RUN = re.compile(rf"[{_CJK}]+")

STOPWORDS = frozenset(
    "a an and are as at be but by do does did for from has have how i in is it its me my of on "
    "or our so that the their them they this to was we were what when where which who why will "
    "with you your yours can could would should about just not no yes".split()
    + "的 了 是 我 你 他 她 它 们 吗 呢 吧 啊 呀 在 有 和 就 都 也 还 这 那 个".split()
    + "一 不 人 要 会 说 想 去 来 到 上 下 很 么 什 怎 没 对 好 多 能 让 把 被 给 得 地 着 过".split()
    + "什么 怎么 一个 我们 你们 不是 我的 你的".split()
)
"""Words too common to find anything by (in questions only: the index keeps every word)."""


def words_of(text: str) -> list[str]:
    """The text's words as the index keeps them: NFKC, case folded; a run of Chinese, Japanese or
    Korean characters (written without spaces) as its overlapping pairs and its characters (a
    word of one character, 猫 or 茶, is common)."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    words: list[str] = []
    for run in _RUN.findall(folded):
        if _CJK_RUN.fullmatch(run):
            words.extend(run[i:i + 2] for i in range(len(run) - 1))
            words.extend(run)
        else:
            words.append(run)
    return words


def search_terms(text: str) -> str:
    """What the full-text index reads of a text (the `terms` column): its words, space apart."""
    return " ".join(words_of(text))


def query_terms(text: str) -> list[str]:
    """The words of a question to look rows up by: without the commonest, each once, at most
    MAX_QUERY_TERMS."""
    seen: dict[str, None] = {}
    words = words_of(text)
    # the pairs (and words) first: a long question keeps its most telling terms
    for word in sorted(words, key=lambda word: len(word) == 1 and bool(_CJK_RUN.fullmatch(word))):
        if word not in STOPWORDS and not (len(word) == 1 and word.isascii()):
            seen.setdefault(word, None)
    return list(seen)[:MAX_QUERY_TERMS]



PREFIX_CHARS = 3
"""A question's word of at least this many letters finds the indexed words it begins (neither
tokenizer stems: "meet" finds "meets", "cat" finds "cats"); Chinese, Japanese and Korean pairs
match whole."""


def _prefix(term: str) -> bool:
    return len(term) >= PREFIX_CHARS and not _CJK_RUN.match(term)


def _pg_lexeme(term: str) -> str:
    """A word as a to_tsquery operand: quoted, so no word is read as an operator."""
    return "'" + term.replace("'", "''").replace("\\", "\\\\") + "'"


def ranked_matches(dialect: str, fts_table: str, terms_column: Any, id_column: Any,
                   terms: Sequence[str]) -> tuple[Any | None, ColumnElement[bool] | None, Any]:
    """How to find the rows whose `terms_column` shares a word with `terms`, best first, as
    (a subquery of (id, rank) to join on `id_column`, or None; a WHERE clause, or None; what to
    order by). SQLite: the FTS5 table `fts_table` (external content on the rows' table, rowid
    the id); PostgreSQL: to_tsvector('simple', terms); another database: LIKE (slow, but right)."""
    if dialect == "sqlite":
        # words only: no quote inside; a word also finds longer ones it begins (meet: meets)
        match = " OR ".join(f'"{term}"*' if _prefix(term) else f'"{term}"' for term in terms)
        fts = text(f"SELECT rowid AS id, bm25({fts_table}) AS rank FROM {fts_table} "
                   f"WHERE {fts_table} MATCH :match").bindparams(match=match)
        hits = fts.columns(literal_column("id"), literal_column("rank")).subquery("hits")
        return hits, None, hits.c.rank
    if dialect == "postgresql":
        vector = func.to_tsvector(literal_column("'simple'::regconfig"), terms_column)
        query = func.to_tsquery(literal_column("'simple'::regconfig"),
                                " | ".join(_pg_lexeme(term) + (":*" if _prefix(term) else "")
                                           for term in terms))
        return None, vector.op("@@")(query), func.ts_rank(vector, query).desc()
    matches = [terms_column.like(f"%{term}%") for term in terms]
    return None, or_(*matches) if matches else false(), id_column.desc()

