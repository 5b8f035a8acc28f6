"""fp32 master weights for a model held in a low-precision dtype (bf16): what the optimizer steps.

A bf16 weight of magnitude 0.02 moves only in steps of about 1.2e-4, so an AdamW update of about lr per step at
lr 1e-6 rounds back to the same value and is lost (98.5% of the weights never changed over 10 steps). Here the
optimizer steps fp32 copies of the parameters; each micro-batch's bf16 gradients are added into fp32 gradients of
the copies (so accumulation is in fp32 too), and after each step the model's parameters are refreshed from the
copies. Small updates accumulate in the copies and reach the served weights once they add up to a bf16 step.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch


class MasterWeights:
    """fp32 copies of `model`'s parameters, in `model.parameters()` order."""

    def __init__(self, model: torch.nn.Module) -> None:
        self._model_params = [p for p in model.parameters() if p.requires_grad]
        self.params = [torch.nn.Parameter(p.detach().float().clone()) for p in self._model_params]

    def accumulate_grads(self) -> None:
        """Adds the model's gradients into the copies' fp32 gradients and clears the model's."""
        for master, param in zip(self.params, self._model_params, strict=True):
            if param.grad is None:
                continue
            grad = param.grad.detach().float()
            master.grad = grad if master.grad is None else master.grad.add_(grad)
            param.grad = None

    def zero_grad(self) -> None:
        """Clears the gradients of the copies and of the model."""
        for master, param in zip(self.params, self._model_params, strict=True):
            master.grad = None
            param.grad = None

    @torch.no_grad()
    def copy_to_model(self) -> None:
        """Refreshes the model's parameters from the copies (rounded to the model's dtype)."""
        for master, param in zip(self.params, self._model_params, strict=True):
            param.copy_(master)

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The copies by position, for a checkpoint."""
        return {str(i): p.detach().clone() for i, p in enumerate(self.params)}

    @torch.no_grad()
    def load_state_dict(self, state: Mapping[str, torch.Tensor]) -> None:
        """Restores the copies saved by `state_dict` and refreshes the model from them."""
        if len(state) != len(self.params):
            raise ValueError(
                f"master weights hold {len(state)} tensors but the model has {len(self.params)} parameters; "
                "resume with the model the checkpoint was trained from"
            )
        for i, master in enumerate(self.params):
            master.copy_(state[str(i)])
        self.copy_to_model()
