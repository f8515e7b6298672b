"""word2vec: a fast skip-gram trainer, word vectors, and their evaluation.

>>> import tapeflow as tp
>>> sorted(name for name in ("Word2Vec", "KeyedVectors", "evaluate_word_pairs") if hasattr(tp.word2vec, name))
['KeyedVectors', 'Word2Vec', 'evaluate_word_pairs']
"""

from tapeflow.word2vec.evaluation import evaluate_analogies, evaluate_word_pairs, gensim_data_file
from tapeflow.word2vec.trainer import Word2Vec
from tapeflow.word2vec.vectors import KeyedVectors

__all__ = ["KeyedVectors", "Word2Vec", "evaluate_analogies", "evaluate_word_pairs", "gensim_data_file"]
