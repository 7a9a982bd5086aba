"""Cost-model updates that train only when the training can change a prediction.

MetaSchedule's XGBoost model predicts at random until it holds ``num_warmup_samples``
measurements, yet retrains on every early update (about half a second each on 2 cores). A
cold job's first round, one update per task, spent a third of a short budget on trainings
whose boosters were never asked. Below the warm-up count the measurements are kept and the
training is left for the update that reaches it.
"""

from __future__ import annotations

import sys
from typing import Any


def update_cost_model(model: Any, context: Any, candidates: list, results: list) -> None:
    """``model.update(context, candidates, results)``, without training an XGBoost model
    that would still predict at random afterwards."""
    warmup = getattr(model, "num_warmup_samples", None)
    adaptive = getattr(model, "adaptive_training", False)  # the skip below needs it
    if warmup is None or not adaptive or model.data_size + len(candidates) >= warmup:
        model.update(context, candidates, results)
        return
    last_train_size = model.last_train_size
    # XGBModel's adaptive training skips a retraining while the data grew by less than a
    # fifth since the last one: an unreachable last size keeps it from training now
    model.last_train_size = sys.maxsize
    try:
        model.update(context, candidates, results)
    finally:
        model.last_train_size = last_train_size
