"""Documents longer than ``max_document_bytes``: tokenized in pieces, never whole (docs/loader.md, "Memory")."""

from __future__ import annotations

import itertools

import pytest

from lakehouse.errors import LoaderConfigError
from streaming_loader.tokenize import encode, load_tokenizer_spec, split_document
from tests.streaming_loader.test_loader import component_text, loader, same, take

LONG = "def f(x):\n    return x + 1\n" * 300 + "naïve café 東京 🙂" * 200  # lines, then none (multi-byte)


def test_a_long_document_is_cut_in_pieces_within_the_bound_at_line_ends():
    pieces = list(split_document(LONG, 1000))
    assert "".join(pieces) == LONG
    assert len(pieces) > 8 and all(len(p.encode()) <= 1000 for p in pieces)
    lined = [p for p in pieces[:-1] if "naïve" not in p]
    assert lined and all(p.endswith("\n") for p in lined)  # cut after a line where there is one
    assert list(split_document("short\n", 1000)) == ["short\n"]


def test_a_long_document_is_tokenized_piece_by_piece(mixture):
    tokenizer = load_tokenizer_spec(mixture.tokenizer).load()
    texts = ["a short one\n", LONG, ""]
    flat, offsets = encode(tokenizer, texts, max_document_bytes=1000)
    docs = [flat[a:b].tolist() for a, b in itertools.pairwise(offsets)]
    expected = [e.ids for e in tokenizer.encode_batch(list(split_document(LONG, 1000)), add_special_tokens=False)]
    assert docs[1] == list(itertools.chain.from_iterable(expected))  # one document: its pieces' ids run on
    assert docs[0] == tokenizer.encode(texts[0], add_special_tokens=False).ids and docs[2] == []
    whole, bounds = encode(tokenizer, texts)  # without a bound: the whole document's ids
    assert tokenizer.decode(docs[1]) == tokenizer.decode(whole[bounds[1] : bounds[2]].tolist()) == LONG
    assert encode(tokenizer, texts, max_document_bytes=10**6)[0].tolist() == whole.tolist()
    # A reader hands a long document over as its UTF-8 bytes, decoded a piece at a time: the same ids.
    as_bytes = encode(tokenizer, [texts[0], LONG.encode(), ""], max_document_bytes=1000)
    assert as_bytes[0].tolist() == flat.tolist() and as_bytes[1].tolist() == offsets.tolist()


def test_the_stream_with_split_documents_is_deterministic_and_loses_no_text(mixture):
    bound = {"max_document_bytes": 120}  # the test corpus's documents are a few hundred bytes
    one = {"num_shards": 1, **bound}  # one sub-stream per component: its windows are its text in order
    with (
        loader(mixture, **one) as a,
        loader(mixture, local_prefetch=0, **one) as b,
        loader(mixture, num_shards=1) as whole,
    ):
        split_batches, again, unsplit = take(a, 20), take(b, 20), take(whole, 20)
    assert same(split_batches, again)  # same inputs and settings: the same batches, however it is read
    assert not same(split_batches, unsplit)  # the bound changed the tokens at the cuts...
    for component in (0, 1):  # ...and nothing else: the same text, in the same order
        cut, full = component_text(mixture, split_batches, component), component_text(mixture, unsplit, component)
        n = min(len(cut), len(full)) - 200
        assert n > 1000 and cut[:n] == full[:n]


def test_a_bad_bound_is_refused_naming_the_setting(mixture):
    with pytest.raises(LoaderConfigError, match="max_document_bytes"):
        loader(mixture, max_document_bytes=0)
    # Below the widest UTF-8 character a cut could not advance past one: next() never returned.
    with pytest.raises(LoaderConfigError, match="max_document_bytes must be at least 4"):
        loader(mixture, max_document_bytes=3)
