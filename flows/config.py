"""The run config of a training flow: typed sections, loaded from a YAML profile, with dotted-key overrides.

`load_run_config("if-local", {"algorithm.iterations": 3})` reads `deploy/configs/if-local.yaml` (or any YAML path),
applies the recipe's own run settings (a recipe file's `settings:`) and the overrides, and validates; the recipe is any
reference the registry loads (`rollouts.registry`: a registered name, a recipe file, `module:OBJECT`).
Unknown keys anywhere are errors naming the key, its section and the valid keys.
Component settings are the components' own configs (trainer.losses.LossConfig is `backend.loss`...), so each knob has
one default; deploy/configs/README.md lists them all (`python -m flows.config_reference`). The resolved config is what
MLflow logs as the run's params, so two runs compare key by key.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from controller.config import ControllerConfig
from controller.settings_file import read_settings
from engines import embedded
from engines.vllm import VLLMConfig
from flows.config_schema import options_model, unknown_key_error
from gateway.sampling import SamplingPolicy
from rollouts.recipe import recipe_hooks
from rollouts.registry import (
    get_recipe,
    is_file_reference,
    is_object_reference,
    recipe_names,
)
from rollouts.task_data import SPLITS_PREFIX
from rollouts.task_options import validated_options
from trainer.advantages import AdvantageConfig
from trainer.backends.torch import OptimizerConfig, TorchBackendConfig
from trainer.backends.verl import VerlBackendConfig
from trainer.dynamic_sampling import DynamicSamplingConfig
from trainer.losses import LossConfig
from trainer.samples import SampleLimits
from trainer.scheduling import ScheduleConfig

PROJECT_ROOT = Path(__file__).resolve().parents[1]
PROFILES_DIR = PROJECT_ROOT / "deploy" / "configs"
DEFAULT_TRACKING_URI = "sqlite:///mlruns/mlflow.db"


class Section(BaseModel):
    """A config section: unknown keys are errors; a component dataclass inside takes its field docstrings as docs."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)


RUN_GIVEN_BACKEND_FIELDS = ("model_path", "resume_from", "optimizer", "loss", "schedule", "initial_version")
"""Backend config fields the run sets: the model, the checkpoint resumed from, the shared sections, the version."""
TorchOptions = options_model("TorchOptions", TorchBackendConfig, RUN_GIVEN_BACKEND_FIELDS)
VerlOptions = options_model("VerlOptions", VerlBackendConfig, RUN_GIVEN_BACKEND_FIELDS)
VLLMOptions = options_model("VLLMOptions", VLLMConfig, ("model", "served_model_name", "host", "port"))


class DataSection(Section):
    source: str = Field(default="generated", description="'generated' (the recipe's generator), a local "
                        "parquet/JSONL/JSON path, or a hub dataset id.")
    train_tasks: int = Field(default=64, ge=1, description="Tasks in the training split.")
    val_tasks: int = Field(default=8, ge=0, description="Tasks held out for validation.")
    seed: int = Field(default=0, description="Seed of generation and of the split.")
    val_source: str | None = Field(default=None, description="Validation tasks of their own (a local parquet/JSONL/"
                                   "JSON path or a hub dataset id; its first val_tasks rows): source is then the "
                                   "training tasks only, not split (none: validation is split off source).")
    generator: dict[str, Any] = Field(default_factory=dict, description="Keyword options of the recipe's "
                                      "`generate` (source 'generated'), checked against the recipe's "
                                      "`generator_options` model (rollouts/task_options.py; e.g. the coding recipes' "
                                      "`levels`, their difficulty ladder's mix; most recipes take none).")


class RolloutSection(Section):
    group_size: int = Field(default=4, ge=1, description="Rollouts per task (n): one group.")
    batch_groups: int = Field(default=4, ge=1, description="Complete groups per update.")
    schedule: Literal["async", "sync"] = Field(default="async", description="async: collocated, more in flight "
                                               "than a batch, update as soon as enough groups finished; sync: wait "
                                               "for the whole batch.")
    max_inflight_groups: int = Field(default=8, ge=1, description="Groups kept in flight by the async schedule.")
    max_version_lag: int = Field(default=2, ge=0, description="Drop rollouts whose oldest call is more than this "
                                 "many policy versions behind the trainer.")
    max_attempts: int = Field(default=3, ge=1, description="Attempts per rollout (infra failures are retried).")
    task_overrides: dict[str, Any] = Field(default_factory=dict, description="Merged into every task input, "
                                           "checked against the recipe's `task_fields` model (the fields its "
                                           "harness reads: max_tokens, temperature, step_limit, ...; "
                                           "rollouts/task_options.py).")
    wait_timeout_s: float = Field(default=3600.0, gt=0, description="Longest wait for one batch of groups.")
    drain_timeout_s: float = Field(default=600.0, gt=0, description="Longest wait for in-flight calls to drain.")
    pass_threshold: float = Field(default=1.0, description="A rollout passes when its reward is at least this.")
    val_group_size: int = Field(default=1, ge=1, description="Rollouts per validation task.")
    val_seed: int | None = Field(default=0, ge=0, description="Seeds every validation call (from this, the task's id "
                                 "and the member: rollouts.feed.rollout_sampling_seed), so the same weights "
                                 "give the same answers and step-to-step differences are the policy's; none: "
                                 "unseeded.")


class EngineSection(Section):
    kind: Literal["embedded", "vllm"] = Field(default="embedded", description="Inference engine.")
    model: str = Field(default="smollm2-135m-instruct", description="A prepared model name "
                       "(`harnessrl model list`) or an HF model directory.")
    url: str | None = Field(default=None, description="Connect to an engine already serving `model` (none: start).")
    max_batch_size: int = Field(default=embedded.MAX_BATCH_SIZE, ge=1,
                                description="Embedded engine: concurrent sequences.")
    startup_timeout_s: float = Field(default=embedded.STARTUP_TIMEOUT_S, gt=0,
                                     description="Embedded engine: longest start-up "
                                     "(vLLM: engine.vllm.startup_timeout_s).")
    num_threads: int | None = Field(default=None, ge=1, description="Embedded engine: torch threads (none: one per "
                                    "core; 1 can be faster on a small machine that also runs the harnesses).")
    prefix_cache_tokens: int = Field(default=embedded.PREFIX_CACHE_TOKENS, ge=0, description="Embedded engine: "
                                     "prompts' and finished rows' KV kept (in tokens) for later prompts that start "
                                     "with them (a group's other rollouts, an agent's next call); 0: off.")
    dtype: Literal["float32", "bfloat16"] = Field(default="float32", description="Embedded engine: weights' and "
                                                  "activations' dtype (bfloat16: faster on a CPU with bf16 units, "
                                                  "20x and more slower without them, warned at start; "
                                                  "logprobs off a float32 trainer's by bf16 rounding; "
                                                  "vLLM: engine.vllm.dtype).")
    vllm: VLLMOptions = Field(default_factory=VLLMOptions, description="vLLM engine: VLLMConfig.")


class GatewaySection(Section):
    url: str | None = Field(default=None, description="Connect to a running gateway (tokens from "
                            "$HARNESSRL_ADMIN_TOKEN); none: start one on a free port.")
    model_name: str = Field(default="policy", description="Model name harnesses ask for.")
    sampling: SamplingPolicy = Field(default_factory=SamplingPolicy, description="How train calls sample "
                                     "(gateway.sampling: enforce the policy's temperature, or record the "
                                     "harness's); applies to the gateway a run starts, not to one at `url`.")
    recorded_turns: bool | None = Field(default=None, description="Give the engine the recorded tokens of an "
                                        "assistant turn a harness sends back re-serialised or reordered "
                                        "(gateway/recorded_turns.py), so that the next call continues the same "
                                        "sample; null: the recipe's choice (on for claude-code and codex). "
                                        "Applies to the gateway a run starts, not to one at `url`.")


class ControllerSection(Section):
    start: bool = Field(default=True, description="Start a controller (false: one already serves the gateway).")
    runner: Literal["local", "kubernetes"] = Field(default="local", description="Where harnesses run.")
    concurrency: int = Field(default=ControllerConfig.model_fields["concurrency"].default, ge=1,
                             description="Harness attempts at once.")
    harness_timeout_s: float = Field(default=1800.0, gt=0, description="Wall-clock limit of one attempt.")


class BackendSection(Section):
    kind: Literal["torch", "verl"] = Field(default="torch", description="Training backend.")
    optimizer: OptimizerConfig = Field(default_factory=OptimizerConfig, description="AdamW, clipping, warm-up.")
    loss: LossConfig = Field(default_factory=LossConfig, description="Policy loss (trainer.losses).")
    schedule: ScheduleConfig = Field(default_factory=ScheduleConfig, description="Micro-batching "
                                     "(trainer.scheduling); num_workers is the backend's data-parallel size.")
    torch: TorchOptions = Field(default_factory=TorchOptions, description="torch backend: TorchBackendConfig.")
    verl: VerlOptions = Field(default_factory=VerlOptions, description="verl backend: VerlBackendConfig.")


class AlgorithmSection(Section):
    iterations: int = Field(default=10, ge=1, description="Training iterations (one update each).")
    advantage: AdvantageConfig = Field(default_factory=AdvantageConfig, description="Advantages "
                                       "(trainer.advantages).")
    samples: SampleLimits = Field(default_factory=SampleLimits, description="Per-call sample limits "
                                  "(trainer.samples).")
    dynamic_sampling: DynamicSamplingConfig = Field(default_factory=DynamicSamplingConfig, description="Refill "
                                                    "the batch with groups that have signal "
                                                    "(trainer.dynamic_sampling).")
    val_every: int = Field(default=0, ge=0, description="Validate every this many iterations (0: only at the end).")
    step0_file: Path | None = Field(default=None, description="A JSON file of step-0 validation metrics shared by "
                                    "runs with the same weights and validation (relative: project root; the "
                                    "ablation flow sets it): logged at step 0 when an earlier run recorded them, "
                                    "else recorded after this run's step-0 validation (flows/baseline.py).")


class TracesSection(Section):
    train_per_iteration: int = Field(default=2, ge=0, description="Training rollouts logged as MLflow traces per "
                                     "iteration (a reward-spread sample; 0: none).")
    validation: Literal["all", "none"] = Field(default="all", description="Validation rollouts logged as MLflow "
                                               "traces: all or none.")


class TrackingSection(Section):
    tracking_uri: str | None = Field(default=None, description="MLflow tracking URI (relative sqlite paths "
                                     "resolve against the project root); none: $MLFLOW_TRACKING_URI, else "
                                     f"{DEFAULT_TRACKING_URI}.")
    experiment: str = Field(default="harnessrl", description="MLflow experiment.")
    trajectories_per_step: int = Field(default=4, ge=0, description="Rendered trajectories logged per iteration.")
    traces: TracesSection = Field(default_factory=TracesSection, description="Rollouts logged as MLflow traces "
                                  "(a span per recorded call; the reward as feedback; the group as the session).")


class CheckpointSection(Section):
    store: str = Field(default="file://checkpoints", description="file://DIR (relative: project root) or "
                       "s3://BUCKET/PREFIX (endpoint from the s3_* fields or $HARNESSRL_S3_*).")
    s3_endpoint: str | None = Field(default=None, description="host:port of the S3 API (none: $HARNESSRL_S3_ENDPOINT).")
    s3_secure: bool = Field(default=False, description="HTTPS to the S3 endpoint (false: plain HTTP, a local MinIO).")
    every: int = Field(default=1, ge=1, description="Upload a checkpoint every this many updates (and the last).")
    keep_local: int = Field(default=2, ge=1, description="Checkpoints kept on the trainer's disk.")


class RunConfig(Section):
    """Everything a training run is, as logged to MLflow."""

    recipe: str = Field(description="The recipe trained on: a registered name (`harnessrl train --help` lists "
                        "them), a recipe file (my_recipe.yaml; relative: to the current directory) or "
                        "module:OBJECT from your own folder ($HARNESSRL_RECIPE_PATH).")
    name: str | None = Field(default=None, pattern=r"^[A-Za-z0-9._-]+$", description="Run name; also the "
                             "resume key (same name: continue from its last checkpoint). None: generated.")
    work_dir: Path = Field(default=Path("runs"), description="Run directories (relative: project root).")
    data: DataSection = Field(default_factory=DataSection)
    rollout: RolloutSection = Field(default_factory=RolloutSection)
    engine: EngineSection = Field(default_factory=EngineSection)
    gateway: GatewaySection = Field(default_factory=GatewaySection)
    controller: ControllerSection = Field(default_factory=ControllerSection)
    backend: BackendSection = Field(default_factory=BackendSection)
    algorithm: AlgorithmSection = Field(default_factory=AlgorithmSection)
    tracking: TrackingSection = Field(default_factory=TrackingSection)
    checkpoints: CheckpointSection = Field(default_factory=CheckpointSection)

    @model_validator(mode="before")
    @classmethod
    def _known_keys(cls, data: Any) -> Any:
        error = unknown_key_error(cls, data)
        if error:
            raise ValueError(error)
        return data

    @field_validator("recipe")
    @classmethod
    def _known_recipe(cls, value: str) -> str:
        """A registered name, or a recipe file / module:OBJECT that loads (its own errors named)."""
        if is_file_reference(value):
            value = str(Path(value).expanduser().resolve())
        elif not is_object_reference(value):
            if value not in recipe_names():
                raise ValueError(f"unknown recipe {value!r}; registered recipes: {', '.join(recipe_names())}, or a "
                                 "recipe file (my_recipe.yaml), or module:OBJECT from your own folder")
            return value  # loaded when the run needs it (a recipe may need packages the config does not)
        try:
            get_recipe(value)
        except (KeyError, ImportError, ValueError) as error:
            raise ValueError(str(error)) from error
        return value

    @model_validator(mode="after")
    def _check(self) -> RunConfig:
        if self.rollout.schedule == "async" and self.rollout.max_inflight_groups < self.rollout.batch_groups:
            raise ValueError(f"rollout.max_inflight_groups={self.rollout.max_inflight_groups} is below "
                             f"rollout.batch_groups={self.rollout.batch_groups}; the async schedule keeps more "
                             "groups in flight than one batch (or use schedule: sync)")
        if self.backend.schedule.num_workers != 1:
            raise ValueError(f"backend.schedule.num_workers={self.backend.schedule.num_workers}: the backend sets it "
                             "(torch: 1; verl: backend.verl.n_gpus_per_node x backend.verl.nnodes); leave it out")
        if self.algorithm.advantage.format_reward and recipe_hooks(get_recipe(self.recipe)).shaping_shares is None:
            raise ValueError(f"algorithm.advantage.format_reward={self.algorithm.advantage.format_reward} with recipe "
                             f"{self.recipe!r}: the recipe defines no shaping term (no `shaping_shares` hook, "
                             "rollouts/recipe.py); set it to 0")
        self._check_recipe_options()
        if self.controller.runner == "kubernetes" and is_file_reference(self.recipe):
            raise ValueError(f"recipe file {self.recipe}: recipe files run on the local runner (an agent image does "
                             "not hold your folder); set controller.runner: local")
        if self.data.val_source is not None and self.data.source.startswith(SPLITS_PREFIX):
            raise ValueError(f"data.val_source={self.data.val_source!r} with the versioned split "
                             f"{self.data.source!r}, which holds its own validation rows; leave data.val_source out")
        if self.backend.verl.temperature is not None:
            raise ValueError("backend.verl.temperature is removed: verl trains at the temperature the calls were "
                             "sampled at (recorded by the gateway); set gateway sampling.temperature instead")
        return self

    def _check_recipe_options(self) -> None:
        """data.generator and rollout.task_overrides checked against the recipe's own models (coerced in place); a
        recipe whose module does not import here is checked when the run loads it."""
        if not (self.data.generator or self.rollout.task_overrides):
            return
        try:
            hooks = recipe_hooks(get_recipe(self.recipe))
        except ImportError:
            return
        label = self.recipe_label()
        errors = []
        for key, model, section, field in (("data.generator", hooks.generator_options, self.data, "generator"),
                                           ("rollout.task_overrides", hooks.task_fields, self.rollout,
                                            "task_overrides")):
            try:
                setattr(section, field, validated_options(model, getattr(section, field), key, label))
            except ValueError as error:
                errors.append(str(error))
        if errors:
            raise ValueError("; ".join(errors))

    def recipe_label(self) -> str:
        """The recipe's own name (a recipe file's `name`), for run names and tags."""
        return str(getattr(get_recipe(self.recipe), "name", self.recipe))

    def tracking_uri(self) -> str:
        """tracking.tracking_uri with a relative sqlite path resolved against the project root."""
        uri = self.tracking.tracking_uri or os.environ.get("MLFLOW_TRACKING_URI") or DEFAULT_TRACKING_URI
        if uri.startswith("sqlite:///") and not uri.startswith("sqlite:////"):
            return f"sqlite:///{self.resolve(Path(uri.removeprefix('sqlite:///')))}"
        return uri

    def resolve(self, path: Path) -> Path:
        """`path` against the project root when relative."""
        return path if path.is_absolute() else PROJECT_ROOT / path


def profile_path(profile: str | Path) -> Path:
    """A profile name (`deploy/configs/NAME.yaml`) or a YAML path."""
    path = Path(profile)
    if path.suffix in (".yaml", ".yml"):
        return path
    candidate = PROFILES_DIR / f"{profile}.yaml"
    if not candidate.is_file():
        known = sorted(p.stem for p in PROFILES_DIR.glob("*.yaml"))
        raise FileNotFoundError(f"no profile {profile!r} in {PROFILES_DIR}; known profiles: {known}, or pass a path")
    return candidate


def apply_overrides(data: dict[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of `data` with dotted keys set (`{"rollout.group_size": 8}`)."""
    result = yaml.safe_load(yaml.safe_dump(data)) or {}
    for dotted, value in overrides.items():
        node = result
        *parents, leaf = dotted.split(".")
        for key in parents:
            child = node.setdefault(key, {})
            if not isinstance(child, dict):
                raise ValueError(f"override {dotted!r}: {key!r} is a value, not a section")
            node = child
        node[leaf] = value
    return result


def load_run_config(profile: str | Path | None, overrides: Mapping[str, Any] | None = None,
                    recipe: str | None = None) -> RunConfig:
    """Reads a profile (None: every setting at its default), sets `recipe` (when given: the profile must name the same
    one or none), applies the recipe's own run settings (its optional `run_settings` mapping, e.g. a recipe file's
    `settings:`), then `overrides` (dotted keys), and validates."""
    data = read_settings(profile_path(profile), {}, "run settings") if profile is not None else {}
    if recipe is not None:
        if data.get("recipe", recipe) != recipe:
            raise ValueError(f"profile {profile_path(profile).name} is for recipe {data['recipe']!r}, not {recipe!r}; "
                             f"pick a profile of this recipe, or leave the recipe out to train {data['recipe']!r}")
        data["recipe"] = recipe
    data = apply_overrides(data, dotted(recipe_settings(data.get("recipe"))))
    return RunConfig.model_validate(apply_overrides(data, overrides or {}))


def dotted(settings: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested sections as dotted keys (`{"a": {"b": 1}}` -> `{"a.b": 1}`), so that they merge into a profile key by
    key; a mapping-valued setting (rollout.task_overrides, data.generator) is merged key by key too."""
    flat: dict[str, Any] = {}
    for key, value in settings.items():
        if isinstance(value, Mapping) and value:
            flat.update(dotted(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def recipe_settings(recipe: Any) -> Mapping[str, Any]:
    """The run settings a recipe brings (dotted keys or sections; its optional `run_settings` attribute); {} for a
    name the registry does not know (validation names it)."""
    if not isinstance(recipe, str) or not (is_file_reference(recipe) or is_object_reference(recipe)
                                            or recipe in recipe_names()):
        return {}
    try:
        settings = getattr(get_recipe(recipe), "run_settings", None) or {}
    except (KeyError, ImportError, ValueError):
        return {}  # the recipe field's validator names the error
    if "recipe" in settings:
        raise ValueError(f"recipe {recipe!r}: its run settings set `recipe`; leave it out")
    return settings
