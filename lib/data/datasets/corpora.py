"""Text corpora for word embeddings, as lists of sentences (each a list of tokens).

- `load_text_file(path)`: any plain-text file of whitespace-separated tokens;
- `load_wikipedia_excerpt()`: the shortened English Wikipedia dump that the gensim wheel
  ships in `gensim/test/test_data/`, cleaned to lowercase words (106 articles, about
  600k words), one sentence per article;
- `load_text8(download=False)`: Matt Mahoney's text8 (100M characters of Wikipedia),
  found locally or downloaded, with a checksum, on request.

Long lines are cut into sentences of at most `max_sentence_length` tokens (10,000, as
gensim does), so a corpus on one line (text8) still has a sentence structure to stream.

>>> import os, tempfile
>>> path = os.path.join(tempfile.mkdtemp(), "tiny.txt")
>>> with open(path, "w") as f:
...     _ = f.write("the cat sat\\n\\non the mat\\n")
>>> load_text_file(path)
[['the', 'cat', 'sat'], ['on', 'the', 'mat']]
>>> load_text_file(path, max_sentence_length=2)
[['the', 'cat'], ['sat'], ['on', 'the'], ['mat']]
"""

from __future__ import annotations

import bz2
import os
import re
import xml.etree.ElementTree as ElementTree
import zipfile
from pathlib import Path

from tapeflow import _compat
from tapeflow.data.datasets._download import fetch, sha256_of

MAX_SENTENCE_LENGTH = 10_000
WIKIPEDIA_EXCERPT = "enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"
TEXT8_URL = "http://mattmahoney.net/dc/text8.zip"
TEXT8_ZIP_SHA256 = "a6640522afe85d1963ad56c05b0ede0a0c000dddc9671758a6cc09b7a38e5232"
TEXT8_SHA256 = "6e890197040d37d85beb962ae1f041ff1d9a9ca8d20c7d99c85027eebf51dca7"  # the unzipped file


def load_text_file(path, max_sentence_length: int = MAX_SENTENCE_LENGTH) -> list[list[str]]:
    """Sentences of whitespace-separated tokens, one per non-blank line (cut when longer).

    The text is read as UTF-8; tokens are kept as written (no lowercasing).
    """
    path = Path(path).expanduser()
    _check_length(max_sentence_length)
    if not path.is_file():
        raise FileNotFoundError(f"load_text_file: no such file: {path}")
    sentences: list[list[str]] = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            sentences.extend(_cut(line.split(), max_sentence_length))
    return sentences


def load_wikipedia_excerpt(path=None, max_sentence_length: int = MAX_SENTENCE_LENGTH) -> list[list[str]]:
    """The articles of the gensim-shipped Wikipedia excerpt as lowercase words, one sentence each.

    Redirects and pages outside the article namespace are skipped. Markup is stripped with
    the standard library: comments, tags, tables, file and category links, URLs and
    template names go; link texts, reference texts and template values stay. Words are runs
    of the letters a-z. `path` overrides the bz2 file (default: the one in gensim's wheel).
    """
    _check_length(max_sentence_length)
    path = Path(path) if path is not None else _compat.gensim_test_data() / WIKIPEDIA_EXCERPT
    sentences: list[list[str]] = []
    with bz2.open(path) as f:
        for _, element in ElementTree.iterparse(f):
            if not element.tag.endswith("}page") and element.tag != "page":
                continue
            namespace = element.findtext("{*}ns") or element.findtext("ns")
            text = element.findtext("{*}revision/{*}text") or element.findtext("revision/text") or ""
            if namespace == "0" and not text.lstrip().lower().startswith("#redirect"):
                sentences.extend(_cut(wiki_words(text), max_sentence_length))
            element.clear()
    return sentences


_COMMENT = re.compile(r"<!--.*?-->", re.S)
_TABLE = re.compile(r"\{\|.*?\|\}", re.S)
_HIDDEN_LINK = re.compile(
    r"\[\[(?:file|image|category|[a-z]{2,3}(?:-[a-z]+)?):[^\[\]]*(?:\[\[[^\]]*\]\][^\[\]]*)*\]\]", re.I
)
_LINK = re.compile(r"\[\[(?:[^\]|]*\|)?([^\]]*)\]\]")
_EXTERNAL_LINK = re.compile(r"\[(?:https?|ftp)://\S+\s*([^\]]*)\]")
_URL = re.compile(r"(?:https?|ftp)://\S+")
_TEMPLATE_NAME = re.compile(r"\{\{\s*[^|{}]*")
_PARAMETER_NAME = re.compile(r"\|\s*[\w\- ]+=")
_TAG_OR_ENTITY = re.compile(r"<[^>]*>|&\w+;")
_WORD = re.compile(r"[a-z]+")


def wiki_words(markup: str) -> list[str]:
    """The lowercase words (runs of a-z) of a page of MediaWiki markup.

    >>> wiki_words("'''Anarchism''' is a [[political philosophy|philosophy]]<ref>{{cite book|title=On It}}</ref>.")
    ['anarchism', 'is', 'a', 'philosophy', 'on', 'it']
    """
    text = _COMMENT.sub(" ", markup)
    text = _TABLE.sub(" ", text)
    text = _HIDDEN_LINK.sub(" ", text)
    text = _LINK.sub(r"\1", text)
    text = _EXTERNAL_LINK.sub(r"\1", text)
    text = _URL.sub(" ", text)
    text = _TEMPLATE_NAME.sub(" ", text)
    text = _PARAMETER_NAME.sub(" ", text)
    text = _TAG_OR_ENTITY.sub(" ", text)
    return _WORD.findall(text.lower())


def load_text8(path=None, download: bool = False, max_sentence_length: int = MAX_SENTENCE_LENGTH) -> list[list[str]]:
    """text8 (17M words on one line), cut into sentences of `max_sentence_length` words.

    Looks for a file named `text8` (or `text8.zip`) at `path` (a file or a directory),
    else in `$TAPEFLOW_DATA` and `~/.tapeflow/datasets/text8`. With `download=True` a
    missing file is fetched from mattmahoney.net into the latter and its sha256 checked.
    """
    _check_length(max_sentence_length)
    found = _find_text8(path)
    if found is None:
        if path is not None or not download:
            raise FileNotFoundError(_text8_missing(path))
        cache = _text8_cache()
        cache.mkdir(parents=True, exist_ok=True)
        found = cache / "text8.zip"
        fetch(TEXT8_URL, found, TEXT8_ZIP_SHA256, "load_text8")
    if found.suffix == ".zip":
        with zipfile.ZipFile(found) as archive:
            data = archive.read("text8")
    else:
        data = found.read_bytes()
    return _cut(data.decode("ascii").split(), max_sentence_length)


def _text8_cache() -> Path:
    return Path.home() / ".tapeflow" / "datasets" / "text8"


def _text8_places(path) -> list[Path]:
    if path is not None:
        path = Path(path).expanduser()
        return [path] if path.is_file() else [path / "text8", path / "text8.zip"]
    places = []
    root = os.environ.get("TAPEFLOW_DATA")
    if root:
        places += [Path(root).expanduser() / "text8", Path(root).expanduser() / "text8.zip"]
    return places + [_text8_cache() / "text8", _text8_cache() / "text8.zip"]


def _find_text8(path) -> Path | None:
    for place in _text8_places(path):
        if place.is_file():
            if place.name == "text8" and place.stat().st_size == 100_000_000 and sha256_of(place) != TEXT8_SHA256:
                raise ValueError(f"load_text8: {place} is not text8: its sha256 is not {TEXT8_SHA256}")
            return place
    return None


def _text8_missing(path) -> str:
    looked = "\n".join(f"  {place}" for place in _text8_places(path))
    return (
        f"load_text8: text8 not found. Looked in:\n{looked}\n"
        f"Call load_text8(download=True) to fetch {TEXT8_URL} (needs a network), or download and "
        "unzip it yourself and pass path= or set TAPEFLOW_DATA."
    )


def _check_length(max_sentence_length) -> None:
    if isinstance(max_sentence_length, bool) or not isinstance(max_sentence_length, int) or max_sentence_length < 1:
        raise ValueError(f"max_sentence_length must be a positive integer, got {max_sentence_length!r}")


def _cut(tokens: list[str], length: int) -> list[list[str]]:
    return [tokens[i : i + length] for i in range(0, len(tokens), length)]
