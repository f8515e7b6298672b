"""Models: a Layer that can be trained. Build one by subclassing `Model` and writing
`call`, by calling `Model(inputs, outputs)` on symbolic tensors (a `Functional` model),
or by stacking layers with `Sequential`.

>>> import tapeflow as tp
>>> model = tp.Sequential([tp.layers.Dense(4, activation="relu"), tp.layers.Dense(2)])
>>> model(tp.ones((3, 5))).shape
(3, 2)
>>> model.count_params()
34
"""

from tapeflow.models.cloning import clone_model, model_from_json
from tapeflow.models.model import Functional, Model
from tapeflow.models.sequential import Sequential
from tapeflow.saving.model_file import load_model

__all__ = ["Functional", "Model", "Sequential", "clone_model", "load_model", "model_from_json"]
