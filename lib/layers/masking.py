"""Masking: skip the time steps whose features all equal a padding value.

>>> import tapeflow as tp
>>> x = tp.tensor([[[1.0, 2.0], [0.0, 0.0], [3.0, 0.0]]])
>>> tp.layers.Masking().compute_mask(x).numpy().tolist()
[[True, False, True]]
"""

from __future__ import annotations

from tapeflow.layers.base import Layer
from tapeflow.ops.math import cast, greater, not_equal
from tapeflow.ops.reduce import max as reduce_max


class Masking(Layer):
    """Mark a time step as padding when every feature equals `mask_value`: such steps become
    zeros and the mask (one bool per step, True for a real step) goes with the output to the
    layers after it in a model, e.g. an LSTM, which then skips them (as Keras' `Masking`).

    Args:
        mask_value: the padding value. Default 0.0.
        **kwargs: the base layer's arguments: `name`, `trainable`, `dtype` and `input_shape`.

    >>> import numpy as np
    >>> import tapeflow as tp
    >>> x = tp.Input((3, 2))
    >>> model = tp.Model(x, tp.layers.LSTM(4)(tp.layers.Masking(mask_value=-1.0)(x)))
    >>> steps = np.array([[[1.0, 2.0], [3.0, 4.0], [-1.0, -1.0]]], "float32")
    >>> bool(np.allclose(model.predict(steps), model.predict(steps[:, :2])))
    True
    """

    def __init__(self, mask_value=0.0, **kwargs):
        super().__init__(**kwargs)
        if not isinstance(mask_value, int | float) or isinstance(mask_value, bool):
            raise TypeError(f"{self.name}: mask_value must be a number, got {mask_value!r}")
        self.mask_value = float(mask_value)
        self.supports_masking = True

    def _real_steps(self, inputs, keepdims: bool):
        differs = cast(not_equal(inputs, self.mask_value), inputs.dtype)
        return greater(reduce_max(differs, axis=-1, keepdims=keepdims), 0.0)

    def call(self, inputs):
        return inputs * cast(self._real_steps(inputs, keepdims=True), inputs.dtype)

    def compute_mask(self, inputs, mask=None):
        return self._real_steps(inputs, keepdims=False)

    def get_config(self):
        return {**super().get_config(), "mask_value": self.mask_value}
