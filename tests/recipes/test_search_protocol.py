"""The Search-R1 text protocol (parsing, replies, information), EM normalisation, the grader and the turn loop."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.recipe import GradeInput
from recipes.search.actions import (
    INVALID_REPLY,
    STOP_STRINGS,
    Action,
    ActionKind,
    completed_reply,
    information_message,
    parse_action,
)
from recipes.search.answers import exact_match, normalize_answer
from recipes.search.corpus import Document
from recipes.search.grader import grade, score_reply
from recipes.search.harness import run_episode
from recipes.search.retrieval import Retriever
from tests.recipes.support import call_record


@pytest.mark.parametrize(("text", "action"), [
    ("I should look. <search>Merlin press inventor</search>", Action(ActionKind.SEARCH, "Merlin press inventor")),
    ("<search>\n Merlin press \n", Action(ActionKind.SEARCH, "Merlin press")),  # cut by the stop string
    ("<answer>Bellinquo</answer>", Action(ActionKind.ANSWER, "Bellinquo")),
    ("<answer> Bellinquo", Action(ActionKind.ANSWER, "Bellinquo")),
    ("<search>a</search> then <answer>b</answer>", Action(ActionKind.SEARCH, "a")),
    ("<answer>b</answer><search>a</search>", Action(ActionKind.ANSWER, "b")),
    ("<search></search>", Action(ActionKind.INVALID, "")),
    ("I think it is Paris.", Action(ActionKind.INVALID, "")),
    ("<information>x</information>", Action(ActionKind.INVALID, "")),
    ("", Action(ActionKind.INVALID, "")),
])
def test_parse_action(text, action):
    assert parse_action(text) == action


@pytest.mark.parametrize(("text", "kept"), [
    ("think <search>q</search> trailing", "think <search>q</search>"),
    ("think <search>q", "think <search>q</search>"),
    ("no tags", "no tags"),
])
def test_completed_reply(text, kept):
    assert completed_reply(text, parse_action(text)) == kept


def test_information_message_ranks_documents():
    docs = [Document("d1", "Alpha", "Alpha is first."), Document("d2", "Beta", "Beta is second.")]
    message = information_message(docs)
    assert message.startswith("<information>") and message.endswith("</information>")
    assert message.index("Doc 1 (Alpha): Alpha is first.") < message.index("Doc 2 (Beta): Beta is second.")
    assert "No entry" in information_message([])


@pytest.mark.parametrize(("text", "normalized"), [
    ("The Merlin Press", "merlin press"),
    ("  Bellinquo. ", "bellinquo"),
    ("an Apple, a day!", "apple day"),
    ("Theatre", "theatre"),
    ("1877", "1877"),
    ("Zotuphi   Foundry\n", "zotuphi foundry"),
    ("O'Neil-Smith", "oneilsmith"),
])
def test_normalize_answer(text, normalized):
    assert normalize_answer(text) == normalized


def test_exact_match():
    assert exact_match("the bellinquo.", ["Bellinquo"])
    assert exact_match("Kates", ["Bellinquo", "kates"])
    assert not exact_match("Bellinquo city", ["Bellinquo"])
    with pytest.raises(ValueError, match="gold answer"):
        exact_match("x", [])


@pytest.mark.parametrize(("reply", "reward"), [
    ("<answer>The Bellinquo</answer>", 1.0),
    ("<answer>Kates</answer>", 0.0),
    ("<search>Bellinquo</search>", 0.0),
    ("Bellinquo", 0.0),
])
def test_score_reply(reply, reward):
    assert score_reply(reply, ["Bellinquo"]).reward == reward


def test_grade_uses_the_last_successful_call(tmp_path: Path):
    task = {"answers": ["Bellinquo"]}
    calls = [call_record(0, "<search>x</search>"), call_record(1, "<answer>Bellinquo</answer>"),
             call_record(2, None, "error")]
    graded = grade(GradeInput(task=task, workdir=tmp_path, calls=calls, exit_code=0))
    assert graded.reward == 1.0 and graded.details["calls"] == 3 and graded.details["answer"] == "Bellinquo"


class ScriptedClient:
    """An OpenAI-client stand-in that replies from a list and keeps every request (unit tests of the loop only)."""

    def __init__(self, replies: list[str]) -> None:
        self.replies = list(replies)
        self.requests: list[dict] = []
        self.chat = SimpleNamespace(completions=SimpleNamespace(create=self._create))

    def _create(self, **request):
        self.requests.append({**request, "messages": list(request["messages"])})
        message = SimpleNamespace(content=self.replies.pop(0))
        return SimpleNamespace(choices=[SimpleNamespace(message=message)])


RETRIEVER = Retriever([Document("d1", "Merlin press", "The Merlin press was invented by Ulzo Ketkaru."),
                       Document("d2", "Ulzo Ketkaru", "Ulzo Ketkaru was born in Bellinquo.")])


def test_loop_searches_then_answers():
    client = ScriptedClient(["<search>Merlin press</search>", "<search>Ulzo Ketkaru", "<answer>Bellinquo</answer>"])
    task = {"question": "Where was the inventor of the Merlin press born?", "top_k": 1, "model": "m"}
    assert run_episode(client, RETRIEVER, task) == "Bellinquo"
    last = client.requests[-1]
    assert last["model"] == "m" and last["stop"] == STOP_STRINGS
    roles = [m["role"] for m in last["messages"]]
    assert roles == ["user", "assistant", "user", "assistant", "user"]
    assert "Merlin press was invented by Ulzo Ketkaru" in last["messages"][2]["content"]
    assert last["messages"][3]["content"] == "<search>Ulzo Ketkaru</search>"
    assert "born in Bellinquo" in last["messages"][4]["content"]
    assert "Ulzo Ketkaru was" not in last["messages"][2]["content"]  # top_k=1


def test_loop_reminds_on_invalid_replies_and_stops_at_max_turns():
    client = ScriptedClient(["I do not know.", "Still no.", "<answer>never asked</answer>"])
    assert run_episode(client, RETRIEVER, {"question": "q", "max_turns": 2}) is None
    assert len(client.requests) == 2
    assert client.requests[1]["messages"][-1] == {"role": "user", "content": INVALID_REPLY}



@settings(max_examples=200, deadline=None)
@given(text=st.text(max_size=200))
def test_normalisation_is_idempotent_and_rewards_are_binary(text):
    assert normalize_answer(normalize_answer(text)) == normalize_answer(text)
    assert score_reply(text, ["Bellinquo"]).reward in (0.0, 1.0)


@settings(max_examples=200, deadline=None)
@given(gold=st.text(alphabet=st.characters(blacklist_characters="<>"), min_size=1, max_size=60).filter(str.strip))
def test_an_answer_equal_to_the_gold_scores_one(gold):
    assert score_reply(f"<answer>{gold}</answer>", [gold]).reward == 1.0
