"""Checkpoints: HF directory + tokenizer + meta + optimizer, written atomically, read back, refused when broken."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from trainer import checkpoints
from trainer.checkpoints import CheckpointError, CheckpointMeta


@pytest.fixture(scope="module")
def model_and_optimizer(tiny_model_dir: Path):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.tensor([[1, 2, 3]])).logits.sum().backward()
    optimizer.step()
    return model, optimizer


def meta(step: int = 3, version: int | None = None) -> CheckpointMeta:
    return CheckpointMeta(
        policy_version=step if version is None else version, step=step, optimizer_updates=2 * step,
        base_model="/models/tiny", created_at=1.0)


def test_a_checkpoint_folder_is_numbered_by_its_policy_version(tmp_path, tiny_model_dir, model_and_optimizer):
    """One numbering with the store and the gateway's records: a backend started at version 5 names its third step's
    checkpoint step-000008."""
    model, optimizer = model_and_optimizer
    path = checkpoints.save_checkpoint(tmp_path, model, None, meta(step=3, version=8), tiny_model_dir)
    assert (path.name, checkpoints.read_meta(path).step) == ("step-000008", 3)


def test_checkpoint_is_a_loadable_hf_directory_with_state(tmp_path, tiny_model_dir, model_and_optimizer):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model, optimizer = model_and_optimizer
    path = checkpoints.save_checkpoint(tmp_path, model, optimizer, meta(), tiny_model_dir)
    assert path == tmp_path / "step-000003"
    names = {p.name for p in path.iterdir()}
    assert {
        "config.json",
        "model.safetensors",
        "generation_config.json",
        "tokenizer.json",
        "tokenizer_config.json",
        checkpoints.META_FILE,
        checkpoints.OPTIMIZER_FILE,
    } <= names
    assert sorted(p.name for p in tmp_path.iterdir()) == ["latest", "step-000003"]  # no staging left
    reloaded = AutoModelForCausalLM.from_pretrained(path)
    for name, tensor in model.state_dict().items():
        assert torch.equal(tensor, reloaded.state_dict()[name]), name
    assert AutoTokenizer.from_pretrained(path).encode("hello world") == AutoTokenizer.from_pretrained(
        tiny_model_dir
    ).encode("hello world")
    assert checkpoints.read_meta(path) == meta()
    state = checkpoints.load_optimizer_state(path)
    assert torch.equal(state["state"][0]["exp_avg"], optimizer.state_dict()["state"][0]["exp_avg"])
    assert checkpoints.latest_checkpoint(tmp_path) == path


def test_latest_follows_the_newest_save_and_existing_steps_are_refused(tmp_path, tiny_model_dir, model_and_optimizer):
    model, optimizer = model_and_optimizer
    assert checkpoints.latest_checkpoint(tmp_path) is None
    checkpoints.save_checkpoint(tmp_path, model, None, meta(step=1), tiny_model_dir)
    second = checkpoints.save_checkpoint(tmp_path, model, optimizer, meta(step=2), tiny_model_dir)
    assert checkpoints.latest_checkpoint(tmp_path) == second
    with pytest.raises(CheckpointError, match="already exists"):
        checkpoints.save_checkpoint(tmp_path, model, optimizer, meta(step=2), tiny_model_dir)
    with pytest.raises(CheckpointError, match="without optimizer state"):
        checkpoints.load_optimizer_state(tmp_path / "step-000001")


def test_a_failed_save_leaves_neither_a_checkpoint_nor_staging(
    tmp_path, tiny_model_dir, model_and_optimizer, monkeypatch
):
    model, optimizer = model_and_optimizer

    def disk_full(*_args, **_kwargs):
        raise OSError("No space left on device")

    monkeypatch.setattr(checkpoints.torch, "save", disk_full)
    with pytest.raises(OSError, match="No space left"):
        checkpoints.save_checkpoint(tmp_path, model, optimizer, meta(), tiny_model_dir)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("prepare", "call", "message"),
    [
        (lambda d: None, checkpoints.read_meta, "has no harnessrl-checkpoint.json"),
        (
            lambda d: (d / "latest").write_text("step-000009\n"),
            lambda d: checkpoints.latest_checkpoint(d),
            "not a complete checkpoint",
        ),
        (lambda d: None, lambda d: checkpoints.copy_tokenizer_files(d, d), "has no tokenizer files"),
    ],
    ids=["no-meta", "dangling-latest", "no-tokenizer"],
)
def test_broken_inputs_are_refused_with_the_fix(tmp_path, prepare, call, message):
    prepare(tmp_path)
    with pytest.raises(CheckpointError, match=message):
        call(tmp_path)


def test_step_root_of_torch_and_verl_checkpoint_paths(tmp_path):
    from trainer.checkpoints import CheckpointError, step_root

    assert step_root(tmp_path / "step-000003") == tmp_path / "step-000003"
    assert step_root(tmp_path / "step-000003" / "huggingface") == tmp_path / "step-000003"
    with pytest.raises(CheckpointError, match="not inside a step-NNNNNN"):
        step_root(tmp_path / "model")


def test_prune_keeps_the_newest_and_the_latest(tmp_path):
    from trainer.checkpoints import LATEST_FILE, META_FILE, prune_checkpoints

    for step in (1, 2, 3):
        (tmp_path / f"step-00000{step}").mkdir()
        (tmp_path / f"step-00000{step}" / META_FILE).write_text("{}")
    (tmp_path / LATEST_FILE).write_text("step-000003\n")
    removed = prune_checkpoints(tmp_path, keep=1)
    assert [p.name for p in removed] == ["step-000001", "step-000002"]
    assert sorted(p.name for p in tmp_path.glob("step-*")) == ["step-000003"]


class FakeVerlWorkers:
    """What verl's worker group writes on save: its state and the HF model under `verl/huggingface/`."""

    def save_checkpoint(self, path: str, global_step: int) -> None:
        hf = Path(path) / "huggingface"
        hf.mkdir(parents=True)
        (hf / "config.json").write_text("{}")
        (Path(path) / f"model_world_size_1_rank_0_step_{global_step}.pt").write_bytes(b"state")


def test_a_verl_checkpoint_is_published_pruned_and_served_like_a_torch_one(tmp_path):
    """The verl layout goes through the same machinery: step root with the meta file (upload, prune, resume) and the
    HF directory an engine serves."""
    from storage.checkpoint_store import CheckpointStore
    from storage.local_store import LocalStore
    from trainer.backends.verl import VerlBackend, VerlBackendConfig
    from trainer.checkpoints import model_dir, prune_checkpoints, read_meta, step_root

    backend = VerlBackend(VerlBackendConfig(model_path=tmp_path / "base"))
    backend.workers = FakeVerlWorkers()
    saved = []
    for step in (1, 2):
        backend.step, backend._version = step, step  # as a train step leaves them
        hf_dir, version = backend.save_checkpoint(tmp_path / "local")
        saved.append(hf_dir)
    assert (hf_dir / "config.json").is_file() and step_root(hf_dir) == tmp_path / "local" / "step-000002"
    assert read_meta(step_root(hf_dir)).step == 2

    uri = CheckpointStore(LocalStore(tmp_path / "store")).upload(step_root(hf_dir), "run", 2)
    downloaded = CheckpointStore(LocalStore(tmp_path / "store")).download(uri, tmp_path / "resume")
    assert model_dir(downloaded) == downloaded / "verl" / "huggingface"
    assert (model_dir(downloaded) / "config.json").is_file() and read_meta(downloaded).step == 2

    assert prune_checkpoints(tmp_path / "local", keep=1) == [step_root(saved[0])]
