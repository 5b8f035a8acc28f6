"""BM25 retrieval over the corpus file in the working directory (bm25s, English stopwords, no stemming)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

import bm25s

from recipes.search.corpus import Document

CORPUS_FILE = "corpus.jsonl"


def write_corpus(docs: Sequence[Document], path: Path) -> None:
    """One JSON document per line: doc_id, title, text."""
    path.write_text("".join(json.dumps(asdict(doc)) + "\n" for doc in docs))


def read_corpus(path: Path) -> list[Document]:
    """The documents written by `write_corpus`."""
    if not path.exists():
        raise FileNotFoundError(f"no corpus at {path}; the recipe's prepare_workdir writes {CORPUS_FILE} there")
    return [Document(**json.loads(line)) for line in path.read_text().splitlines() if line.strip()]


def _tokens(texts: list[str]):
    return bm25s.tokenize(texts, stopwords="en", show_progress=False)


class Retriever:
    """A BM25 index of documents (title + text)."""

    def __init__(self, docs: Sequence[Document]) -> None:
        if not docs:
            raise ValueError("cannot index an empty corpus; write documents with write_corpus first")
        self.docs = list(docs)
        self.index = bm25s.BM25()
        self.index.index(_tokens([f"{doc.title}. {doc.text}" for doc in self.docs]), show_progress=False)

    def search(self, query: str, k: int) -> list[Document]:
        """The `k` best documents for `query`, best first (fewer when fewer share a term with it)."""
        tokenized = _tokens([query])
        if not tokenized.ids or not tokenized.ids[0]:
            return []
        k = min(k, len(self.docs))
        indices, scores = self.index.retrieve(tokenized, k=k, show_progress=False)
        return [self.docs[int(i)] for i, score in zip(indices[0], scores[0], strict=True) if score > 0]
