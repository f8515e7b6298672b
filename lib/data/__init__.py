"""Input data for training: ready-made data sets (`datasets`).

>>> from tapeflow.data import datasets
>>> datasets.mnist.VARIANTS
('mnist', 'fashion')
"""

from tapeflow.data import datasets

__all__ = ["datasets"]
