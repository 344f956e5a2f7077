"""Mixed precision that clips gradients of a fused optimizer: the precision plugin :mod:`spar.train.training` uses.

Lightning's own ``MixedPrecision`` refuses gradient clipping for any optimizer that "unscales inside its step"
(``_step_supports_amp_scaling``: the fused AdamW spar trains with), and it refuses for ``bf16-mixed`` as well, where
nothing is ever scaled — so the paper's Λ (``train.kind=transformer``) died at its first GPU step with the defaults
(``precision=auto`` → bf16-mixed, ``gradient_clip=2.0``, fused AdamW). torch itself supports the combination: after
``GradScaler.unscale_(optimizer)`` the scaler's ``step`` hands a fused optimizer no ``grad_scale`` (its state is
``UNSCALED``) and still skips the step on inf/NaN. This plugin does exactly that:

- ``bf16-mixed``: no scaler, gradients are true gradients: clip them;
- ``16-mixed``: unscale every optimizer's gradients (fused or not) before the clipping hook, then step through the
  scaler as Lightning does.

Kept rather than giving up the fused kernel: on the CPU, fused AdamW's step is 5.9–9.7× the per-tensor loop's speed
(``bench/train_overheads.py``).

Example::

    >>> import torch
    >>> from spar.train.precision import precision_plugins
    >>> [type(p).__name__ for p in precision_plugins("bf16-mixed", "cpu")], precision_plugins("32-true", "cpu")
    (['ClippingMixedPrecision'], [])
"""

from __future__ import annotations

from typing import Any, Callable

import torch
from lightning.pytorch.plugins.precision import MixedPrecision, Precision
from torch.optim import LBFGS


class ClippingMixedPrecision(MixedPrecision):
    """Lightning's ``MixedPrecision`` with gradient clipping for optimizers that handle unscaling in their step."""

    def optimizer_step(self, optimizer, model, closure: Callable[[], Any], **kwargs: Any) -> Any:
        if self.scaler is None:  # bf16: no scaler, nothing to unscale
            return super().optimizer_step(optimizer, model=model, closure=closure, **kwargs)
        if isinstance(optimizer, LBFGS):
            return super().optimizer_step(optimizer, model=model, closure=closure, **kwargs)
        closure_result = closure()
        skip_unscaling = closure_result is None and model.automatic_optimization
        if not skip_unscaling:
            # Every optimizer, fused ones included: the clipping hook below must see true gradients; the scaler's
            # step then passes a fused optimizer no grad_scale (already unscaled) and still skips inf/NaN steps.
            self.scaler.unscale_(optimizer)
        self._after_closure(model, optimizer)
        if skip_unscaling:
            return closure_result
        step_output = self.scaler.step(optimizer, **kwargs)
        self.scaler.update()
        return step_output

    def clip_gradients(self, optimizer, clip_val: int | float = 0.0, gradient_clip_algorithm=None) -> None:
        # The gradients are unscaled here (bf16 never scales; optimizer_step unscaled 16-mixed's): clip them as
        # full precision does, without MixedPrecision's refusal of fused optimizers.
        from lightning.pytorch.utilities import GradClipAlgorithmType

        Precision.clip_gradients(self, optimizer, clip_val,
                                 gradient_clip_algorithm or GradClipAlgorithmType.NORM)


def lightning_device(accelerator: str) -> str:
    """The device type Lightning's precision plugins take for ``train.accelerator``."""
    acc = accelerator.lower()
    if acc in ("gpu", "cuda") or (acc == "auto" and torch.cuda.is_available()):
        return "cuda"
    if acc == "mps" or (acc == "auto" and torch.backends.mps.is_available()):
        return "mps"
    return "cpu"


def precision_plugins(precision: str, device: str) -> list[Precision]:
    """The plugins list for ``pl.Trainer``: the clipping plugin for a mixed precision, none for full precision
    (the Trainer's ``precision`` argument then stays as it is)."""
    if precision not in ("bf16-mixed", "16-mixed"):
        return []
    return [ClippingMixedPrecision(precision, device)]
