"""Passages as vectors (MARSHO_EMBEDDING_MODEL, optional): the endpoint's `/v1/embeddings`, in
batches, every batch's count and dimension checked; vectors kept as float32 bytes and scored with
numpy (no database extension the user's Python may lack), fused with full-text search by
reciprocal rank fusion."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy
    import openai

BATCH = 64
"""Passages embedded per request."""
RRF_K = 60
"""Reciprocal rank fusion's constant (Cormack et al. 2009): a passage's score is the sum over the
rankings it is in of 1 / (RRF_K + its rank)."""


class EmbeddingError(Exception):
    """The embedding model failed or answered what does not fit the passages; the message names
    the model."""


class Embedder:
    """One embedding model on one OpenAI-compatible endpoint (its own client, made with the first
    request, inside the running loop)."""

    def __init__(self, model: str, *, base_url: str, api_key: str = "", timeout: float = 60.0,
                 batch: int = BATCH) -> None:
        self.model = model
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key
        self.timeout = timeout
        self.batch = batch
        self._client: openai.AsyncOpenAI | None = None

    def _sdk(self) -> openai.AsyncOpenAI:
        if self._client is None:
            import openai

            self._client = openai.AsyncOpenAI(base_url=self.base_url, api_key=self.api_key or "none",
                                              timeout=self.timeout, max_retries=1)
        return self._client

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()
            self._client = None

    async def embed(self, texts: Sequence[str]) -> numpy.ndarray:
        """The texts' vectors, one row each, of unit length (float32). EmbeddingError when a
        request fails, or a batch's count or dimension is not what was asked."""
        import numpy

        rows: list[Any] = []
        dimension = 0
        for start in range(0, len(texts), self.batch):
            batch = list(texts[start:start + self.batch])
            vectors = await self._request(batch)
            if len(vectors) != len(batch):
                raise EmbeddingError(f"the embedding model {self.model!r} at {self.base_url} answered "
                                     f"{len(vectors)} vectors for {len(batch)} passages")
            for vector in vectors:
                dimension = dimension or len(vector)
                if len(vector) != dimension or not dimension:
                    raise EmbeddingError(f"the embedding model {self.model!r} at {self.base_url} answered "
                                         f"vectors of {dimension} and of {len(vector)} numbers for one "
                                         "document")
            rows += vectors
        if not rows:
            return numpy.zeros((0, 0), dtype=numpy.float32)
        return unit(numpy.asarray(rows, dtype=numpy.float32))

    async def _request(self, batch: list[str]) -> list[list[float]]:
        import openai

        try:
            response = await self._sdk().embeddings.create(model=self.model, input=batch,
                                                           encoding_format="float")
        except openai.APIStatusError as error:
            raise EmbeddingError(f"the embedding model {self.model!r} at {self.base_url} refused: HTTP "
                                 f"{error.status_code}") from None
        except openai.OpenAIError as error:
            raise EmbeddingError(f"the embedding model {self.model!r} at {self.base_url} failed: "
                                 f"{type(error).__name__}") from None
        data = sorted(response.data or [], key=lambda item: item.index)
        return [list(item.embedding) for item in data]


def unit(matrix: numpy.ndarray) -> numpy.ndarray:
    """Each row scaled to length 1 (a zero row stays zero), so a dot product is the cosine."""
    import numpy

    norms = numpy.linalg.norm(matrix, axis=1, keepdims=True)
    return (matrix / numpy.where(norms == 0, 1, norms)).astype(numpy.float32)


def to_blob(vector: numpy.ndarray) -> bytes:
    """A vector as the database keeps it: float32, little-endian."""

    return vector.astype("<f4").tobytes()


def nearest(query: numpy.ndarray, ids: Sequence[int], matrix: numpy.ndarray, limit: int) -> list[int]:
    """The ids of the `limit` rows of `matrix` nearest `query` (cosine), nearest first."""
    import numpy

    if not len(ids) or matrix.shape[1] != query.shape[0]:
        return []
    scores = matrix @ query
    count = min(limit, len(ids))
    best = numpy.argpartition(-scores, count - 1)[:count]
    return [ids[i] for i in best[numpy.argsort(-scores[best], kind="stable")]]


def matrix_of(blobs: Sequence[bytes], dimension: int) -> tuple[list[int], numpy.ndarray]:
    """(the positions of the blobs of `dimension` float32 numbers, those vectors as one matrix)."""
    import numpy

    kept = [i for i, blob in enumerate(blobs) if len(blob) == dimension * 4]
    if not kept:
        return [], numpy.zeros((0, dimension), dtype=numpy.float32)
    return kept, numpy.frombuffer(b"".join(blobs[i] for i in kept), dtype="<f4").reshape(len(kept), dimension)


def fused(*rankings: Sequence[int]) -> list[int]:
    """Reciprocal rank fusion of rankings of ids (best first): the fused ranking, best first."""
    scores: dict[int, float] = {}
    for ranking in rankings:
        for rank, item in enumerate(ranking, start=1):
            scores[item] = scores.get(item, 0.0) + 1.0 / (RRF_K + rank)
    return sorted(scores, key=lambda item: -scores[item])
