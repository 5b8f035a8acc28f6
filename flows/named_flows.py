"""The training flow under the names its deployments had when each recipe had a flow of its own.

A Prefect deployment is named `<flow name>/<deployment name>`, so `prefect deployment run train-swe/default` needs a
flow named `train-swe`. Each name here is the one `train` flow (flows/train.py) renamed with Prefect's
`Flow.with_options(name=...)`: the same function and parameters (profile, overrides, recipe, recipe_file); the
deployment's parameters (prefect.yaml) pick the recipe and profile. These are names users type, not recipe code: a new
recipe needs none (deploy `flows/named_flows.py:train`, as `train/NAME`, with its recipe as a parameter).
"""

from __future__ import annotations

from flows.train import train_flow

train = train_flow  # `train/NAME` deployments of any recipe (make services names a flow after its entrypoint)
train_swe = train_flow.with_options(name="train-swe")
train_if = train_flow.with_options(name="train-if")
train_search = train_flow.with_options(name="train-search")
train_calculator = train_flow.with_options(name="train-calculator")
