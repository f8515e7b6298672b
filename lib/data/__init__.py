"""Input data for training: the `Dataset` pipeline and ready-made data sets (`datasets`).

>>> import tapeflow as tp
>>> [b.tolist() for b in tp.data.Dataset.from_tensor_slices([1, 2, 3]).batch(2)]
[[1, 2], [3]]
>>> from tapeflow.data import datasets
>>> datasets.mnist.VARIANTS
('mnist', 'fashion')
>>> tp.data.text.tokenize("Hello world", lowercase=True)
['hello', 'world']
"""

from tapeflow.data import datasets, text
from tapeflow.data.dataset import AUTOTUNE, INFINITE_CARDINALITY, UNKNOWN_CARDINALITY, Dataset

__all__ = ["AUTOTUNE", "INFINITE_CARDINALITY", "UNKNOWN_CARDINALITY", "Dataset", "datasets", "text"]
