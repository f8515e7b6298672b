"""Loaders for standard data sets, read from local files (downloaded only on request).

>>> from tapeflow.data.datasets import mnist
>>> callable(mnist.load_data)
True
"""

from tapeflow.data.datasets import corpora, mnist

__all__ = ["corpora", "mnist"]
