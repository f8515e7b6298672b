"""Corpus loaders: plain-text files, the gensim-shipped Wikipedia excerpt, and text8's errors."""

import bz2
import urllib.request

import pytest

from tapeflow import _compat
from tapeflow.data.datasets import corpora

needs_gensim_data = pytest.mark.skipif(not _compat.has_gensim, reason="the gensim wheel ships the Wikipedia excerpt")


def test_text_file_lines_become_sentences(tmp_path):
    path = tmp_path / "c.txt"
    path.write_text("one two three\n\n  four five \n" + " ".join(["x"] * 25) + "\n", encoding="utf-8")
    sentences = corpora.load_text_file(path, max_sentence_length=10)
    assert sentences[:2] == [["one", "two", "three"], ["four", "five"]]
    assert [len(s) for s in sentences[2:]] == [10, 10, 5]


def test_missing_text_file_names_it(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.txt"):
        corpora.load_text_file(tmp_path / "nope.txt")


def test_wiki_markup_keeps_prose_only(tmp_path):
    page = (
        "<mediawiki><page><title>T</title><ns>0</ns><revision><text>"
        "{{Infobox|name=Ignored Box}} '''Cats''' are [[mammal|animals]] &lt;!-- hidden --&gt;"
        "[[File:Cat.jpg|thumb|a picture]] see [http://example.org the site] {| class=x\n| cell\n|}"
        "</text></revision></page>"
        "<page><title>R</title><ns>0</ns><revision><text>#REDIRECT [[Cats]]</text></revision></page>"
        "<page><title>Talk</title><ns>1</ns><revision><text>talk words</text></revision></page>"
        "</mediawiki>"
    )
    path = tmp_path / "wiki.xml.bz2"
    path.write_bytes(bz2.compress(page.encode()))
    assert corpora.load_wikipedia_excerpt(path) == [["ignored", "box", "cats", "are", "animals", "see", "the", "site"]]


@needs_gensim_data
def test_wikipedia_excerpt_is_about_600k_lowercase_words():
    sentences = corpora.load_wikipedia_excerpt()
    words = [w for s in sentences for w in s]
    assert 500_000 < len(words) < 700_000
    assert all(w.isascii() and w.isalpha() and w.islower() for w in words[::1000])
    assert max(len(s) for s in sentences) <= corpora.MAX_SENTENCE_LENGTH
    assert words.count("the") > 20_000


def test_text8_without_file_or_network_says_how_to_get_it(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("TAPEFLOW_DATA", raising=False)
    with pytest.raises(FileNotFoundError, match="download=True"):
        corpora.load_text8()


def test_text8_download_failure_leaves_nothing_behind(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("TAPEFLOW_DATA", raising=False)

    def offline(*args, **kwargs):
        raise OSError("network unreachable")

    monkeypatch.setattr(urllib.request, "urlopen", offline)
    with pytest.raises(OSError, match="could not download"):
        corpora.load_text8(download=True)
    assert not any(p.is_file() for p in tmp_path.rglob("*"))


def test_text8_reads_a_local_file(tmp_path):
    (tmp_path / "text8").write_text(" anarchism originated as a term " * 3)
    sentences = corpora.load_text8(tmp_path, max_sentence_length=4)
    assert sentences[0] == ["anarchism", "originated", "as", "a"]
    assert sum(map(len, sentences)) == 15
