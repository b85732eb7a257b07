"""Document masking and short documents (ProLong) in packed training sequences.

The oracle for the mask is plain transformers: each document scored ALONE by ``model(input_ids, labels=...)``; the
packed, document-masked loss summed over its scored targets must equal the sum of those per-document losses. The
negative control packs the same documents without segments (attention crosses them) and must differ.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ropectl.finetune.data import PackedExamples
from ropectl.finetune.loss import training_loss
from ropectl.finetune.packing import cut, is_short, restart_positions, short_pieces

REL = 1e-5  # fp32: the masked forward and the separate ones differ only by the order of additions
LENGTHS = (7, 12, 5)


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.helpers.checkpoints import tiny_llama

    return tiny_llama(tmp_path_factory.mktemp("packing") / "m")


def _model(folder: Path, attn: str):
    import torch
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, attn_implementation=attn).eval()


def _docs():
    import torch

    g = torch.Generator().manual_seed(3)
    return [torch.randint(3, 128, (n,), generator=g) for n in LENGTHS]


def _summed_alone(model, docs, positions=None) -> float:
    """Sum over documents of transformers' own loss x scored targets, each document in its own forward."""
    import torch

    total = 0.0
    with torch.no_grad():
        for i, doc in enumerate(docs):
            kw = {} if positions is None else {"position_ids": positions[i][None],
                                                "attention_mask": torch.ones(1, len(doc), dtype=torch.long)}
            total += model(input_ids=doc[None], labels=doc[None], **kw).loss.item() * (len(doc) - 1)
    return total


def _packed(docs, positions=None):
    import torch

    ids = torch.cat(docs)[None]
    segments = torch.cat([torch.full((len(d),), i) for i, d in enumerate(docs)])[None]
    pos = torch.cat(positions)[None] if positions is not None else torch.cat([torch.arange(len(d)) for d in docs])[None]
    return ids, segments, pos


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_masked_packed_loss_is_the_sum_of_each_documents_loss(folder: Path, attn: str) -> None:
    import torch

    model = _model(folder, attn)
    docs = _docs()
    ids, segments, positions = _packed(docs)
    with torch.no_grad():
        got = training_loss(model, model, {"input_ids": ids, "position_ids": positions, "segment_ids": segments})
    scored = sum(LENGTHS) - len(LENGTHS)  # the targets that would cross into the next document are not scored
    want = _summed_alone(model, docs)
    assert abs(got.item() * scored - want) <= REL * abs(want)

    # negative control: the same tokens packed with attention across documents (the default before --doc-mask)
    with torch.no_grad():
        crossing = training_loss(model, model, {"input_ids": ids})
    assert abs(crossing.item() * (sum(LENGTHS) - 1) - want) > 1e-3 * abs(want)


def test_masked_pose_positions_keep_the_skip_inside_a_document(folder: Path) -> None:
    """A document whose positions skip (PoSE) is scored with those positions, alone, by transformers; the packed
    sequence's positions restart at each document (restart_positions) and run on through the skip."""
    import torch

    model = _model(folder, "sdpa")
    docs = _docs()
    alone = [torch.arange(7), torch.cat([torch.arange(4), torch.arange(4, 12) + 90]), torch.arange(5)]
    # in the packed window, document 1 starts at position 7 with its skip of 90: restarted, it is `alone[1]`
    raw = torch.cat([torch.arange(11), torch.arange(11, 24) + 90]).numpy()
    segments = np.repeat([0, 1, 2], LENGTHS)
    restarted = torch.as_tensor(restart_positions(raw, segments))
    assert torch.equal(restarted, torch.cat(alone))
    ids, seg, _ = _packed(docs)
    with torch.no_grad():
        got = training_loss(model, model, {"input_ids": ids, "position_ids": restarted[None], "segment_ids": seg})
    want = _summed_alone(model, docs, alone)
    assert abs(got.item() * (sum(LENGTHS) - 3) - want) <= REL * abs(want)


def test_gradient_flows_only_within_documents(folder: Path) -> None:
    """The loss of document 2's tokens does not depend on document 1's: with the mask, changing document 0's tokens
    leaves document 2's hidden states as they were (and without it, they change)."""
    import torch

    from ropectl.finetune.loss import captured_hidden
    from ropectl.finetune.packing import document_mask

    model = _model(folder, "sdpa")
    docs = _docs()
    ids, seg, pos = _packed(docs)
    other = ids.clone()
    other[0, :7] = (other[0, :7] + 5) % 120 + 3
    outs = {}
    for name, x in (("a", ids), ("b", other)):
        for masked in (True, False):
            kw = {"attention_mask": document_mask(seg, torch.float32), "position_ids": pos} if masked else {}
            with torch.no_grad(), captured_hidden(model) as box:
                model(input_ids=x, **kw)
            outs[name, masked] = box["hidden"][0, 7:]
    assert torch.allclose(outs["a", True], outs["b", True], atol=1e-6)
    assert not torch.allclose(outs["a", False], outs["b", False], atol=1e-3)


def test_short_pieces_and_cut() -> None:
    docs = [np.arange(10), np.arange(3), np.arange(7)]
    pieces = short_pieces(docs, 4)
    assert [len(p) for p in pieces] == [4, 4, 2, 3, 4, 3]
    spans, segments, total = cut(pieces, 6)
    assert total == 20 and len(spans) == 3
    assert segments[0].tolist() == [0, 0, 0, 0, 1, 1] and segments[1].tolist() == [1, 1, 2, 2, 3, 3]


@pytest.mark.parametrize("fraction", [0.0, 0.25, 0.4, 0.5, 0.9])
def test_is_short_mixes_exactly_the_fraction(fraction: float) -> None:
    for n in (10, 37, 100):
        shorts = sum(is_short(j, fraction) for j in range(n))
        assert shorts == int(np.floor(n * fraction + 1e-9))


def _examples(pose: bool, short_mix: float, doc_mask: bool) -> PackedExamples:
    from ropectl.finetune.data import split
    from ropectl.finetune.positions import span_length
    from tests.helpers.token_docs import Doc

    docs = [Doc(f"d{i}", np.full(n, 10 + i)) for i, n in enumerate([30, 100, 50, 120, 40, 9, 25])]
    window, target, trained = 16, 64, 16
    span = span_length(window, target) if pose else target
    seq = window if pose else target
    parts = split(docs, span, 0, 0, 0, 1, 2, short=(trained, seq) if short_mix else None)
    return PackedExamples(parts.spans, 40, 0, window, target, pose, segments=parts.segments,
                          short_spans=parts.short_spans, short_segments=parts.short_segments, short_mix=short_mix,
                          doc_mask=doc_mask)


@pytest.mark.parametrize("pose", [True, False])
def test_doc_mask_examples_restart_positions_at_each_document(pose: bool) -> None:
    ex = _examples(pose, 0.0, True)
    for j in range(len(ex)):
        row = ex[j]
        ids, pos, seg = row["input_ids"], row["position_ids"], row["segment_ids"]
        # each document is one token value (test_data's documents) bookended by 1 and 2: a segment is one document
        for s in np.unique(seg):
            inside = ids[seg == s]
            assert len(set(inside.tolist()) - {1, 2}) <= 1
            assert pos[seg == s][0] == 0 and (np.diff(pos[seg == s]) >= 1).all()
        assert pos.max() < 64


@pytest.mark.parametrize("pose", [True, False])
def test_short_examples_stay_inside_the_trained_context(pose: bool) -> None:
    ex = _examples(pose, 0.4, False)
    shorts = [j for j in range(len(ex)) if is_short(j, 0.4)]
    assert len(shorts) == 16
    for j in shorts:
        row = ex[j]
        assert row["position_ids"].max() < 16  # the trained context
        for s in np.unique(row["segment_ids"]):
            assert row["position_ids"][row["segment_ids"] == s].tolist() == list(range((row["segment_ids"] == s).sum()))
    # a long example without --doc-mask is one segment, positions as before
    long = ex[0]
    assert not is_short(0, 0.4) and (long["segment_ids"] == 0).all()
    # example j is a pure function of (seed, j)
    again = _examples(pose, 0.4, False)
    assert all(np.array_equal(ex[j]["input_ids"], again[j]["input_ids"]) for j in range(len(ex)))


def test_without_either_option_examples_are_as_before() -> None:
    """No segment ids (so the loss and the mask are exactly the pre-option ones)."""
    assert set(_examples(True, 0.0, False)[3]) == {"input_ids", "position_ids"}
    assert set(_examples(False, 0.0, False)[3]) == {"input_ids"}


def test_one_document_per_row_takes_the_plain_path(folder: Path) -> None:
    """No boundary in the batch: the loss is the pre-option one (PoSE positions, one sequence), exactly."""
    import torch

    model = _model(folder, "sdpa")
    ids = torch.randint(3, 128, (2, 30), generator=torch.Generator().manual_seed(4))
    pos = torch.cat([torch.arange(10), torch.arange(10, 30) + 70])[None].repeat(2, 1)
    with torch.no_grad():
        one = training_loss(model, model, {"input_ids": ids, "position_ids": pos,
                                           "segment_ids": torch.zeros_like(ids)})
        plain = training_loss(model, model, {"input_ids": ids, "position_ids": pos})
    assert one.item() == plain.item()
