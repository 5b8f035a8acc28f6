"""The generated world and its BM25 index: deterministic, invented names, the right documents in the top 3."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from recipes.search.corpus import WorldSize, build_world, documents
from recipes.search.retrieval import Retriever, read_corpus, write_corpus
from recipes.search.tasks import generate

DOCS = documents(build_world(0))
RETRIEVER = Retriever(DOCS)
TASKS = generate(300, seed=0)
BY_ID = {doc.doc_id: doc for doc in DOCS}


def test_world_is_deterministic_and_seed_dependent():
    assert documents(build_world(5)) == documents(build_world(5))
    assert documents(build_world(5)) != documents(build_world(6))


def test_names_are_unique():
    titles = [doc.title for doc in DOCS]
    assert len(set(titles)) == len(titles)
    assert len({doc.doc_id for doc in DOCS}) == len(DOCS)


def test_too_many_devices_is_refused():
    with pytest.raises(ValueError, match="devices=5 > people=4"):
        build_world(0, WorldSize(cities=2, companies=2, people=4, devices=5))


def test_tasks_are_deterministic_and_varied():
    assert generate(40, seed=1) == generate(40, seed=1)
    assert generate(40, seed=1) != generate(40, seed=2)
    assert Counter(task["hops"] for task in TASKS) == {1: 150, 2: 150}
    templates = {task["question"].split(" the ")[0].split(" was ")[0] for task in TASKS}
    assert len(templates) >= 5
    assert len({task["question"] for task in TASKS}) > 250


def test_gold_answers_are_in_the_evidence():
    for task in TASKS:
        assert task["answers"][0] in BY_ID[task["evidence"][-1]].text, task


def test_top3_recall_of_the_first_hop_document():
    hits = [task["evidence"][0] in {doc.doc_id for doc in RETRIEVER.search(task["question"], 3)} for task in TASKS]
    assert sum(hits) / len(hits) >= 0.95


def test_top3_recall_of_the_second_hop_by_the_bridge_entity():
    two_hop = [task for task in TASKS if task["hops"] == 2]
    hits = []
    for task in two_hop:
        bridge = BY_ID[task["evidence"][1]].title  # what a good first search reveals
        hits.append(task["evidence"][1] in {doc.doc_id for doc in RETRIEVER.search(bridge, 3)})
    assert sum(hits) / len(hits) >= 0.95


def test_search_edge_cases():
    assert RETRIEVER.search("the of and", 3) == []  # only stopwords
    assert RETRIEVER.search("qwxyzzy", 3) == []  # unknown word
    assert len(RETRIEVER.search(DOCS[0].title, 5)) <= 5
    with pytest.raises(ValueError, match="empty corpus"):
        Retriever([])


def test_corpus_round_trip_and_missing_file(tmp_path: Path):
    write_corpus(DOCS[:10], tmp_path / "corpus.jsonl")
    assert read_corpus(tmp_path / "corpus.jsonl") == DOCS[:10]
    with pytest.raises(FileNotFoundError, match="prepare_workdir"):
        read_corpus(tmp_path / "missing.jsonl")
