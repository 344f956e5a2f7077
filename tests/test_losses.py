"""The training losses against values computed by hand (plain math, never the functions themselves).

``train.mask_teacher_positives`` is tested at the loss level (:func:`spar.model.losses.in_batch_keep_mask` +
:func:`spar.model.losses.contrastive_loss`); the Lightning module only passes its batch's rows to them.
"""

from __future__ import annotations

import math

import pytest
import torch

from spar.model.losses import contrastive_loss, in_batch_keep_mask, listwise_kl_loss, margin_mse_loss

E = math.e


def test_contrastive_loss_by_hand():
    q = torch.tensor([[1.0, 0.0], [0.0, 2.0]])
    p = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    # scores: q0 -> [1, 0, 1] (positive 0), q1 -> [0, 2, 2] (positive 1)
    q0 = -math.log(E / (E + 1 + E))
    q1 = -math.log(E**2 / (1 + E**2 + E**2))
    assert float(contrastive_loss(q, p, torch.tensor([0, 1]))) == pytest.approx((q0 + q1) / 2, rel=1e-6)
    # temperature 0.5 doubles every score
    q0_t = -math.log(E**2 / (E**2 + 1 + E**2))
    q1_t = -math.log(E**4 / (1 + E**4 + E**4))
    assert float(contrastive_loss(q, p, torch.tensor([0, 1]), temperature=0.5)) == pytest.approx(
        (q0_t + q1_t) / 2, rel=1e-6)


def test_masking_teacher_positives_changes_the_loss_by_hand():
    q = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    p = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0], [0.0, 0.0]])
    rows = torch.tensor([10, 11, 12, -1])  # the batch's corpus rows; the last passage is padding
    target = torch.tensor([0, 1])
    # The teacher labels rows 10 and 12 positive for query 0 (12 is a false negative for it); query 1 only 11.
    positives = torch.tensor([[10, 12], [11, -1]])

    plain = in_batch_keep_mask(rows, target)
    assert plain.tolist() == [[True, True, True, False], [True, True, True, False]]
    masked = in_batch_keep_mask(rows, target, positives)
    assert masked.tolist() == [[True, True, False, False], [True, True, True, False]]

    # q0 scores [1, 0, 1], q1 scores [0, 1, 0]; padding never counts.
    q1 = -math.log(E / (1 + E + 1))
    unmasked = (-math.log(E / (E + 1 + E)) + q1) / 2
    with_mask = (-math.log(E / (E + 1)) + q1) / 2
    assert float(contrastive_loss(q, p, target, mask=plain)) == pytest.approx(unmasked, rel=1e-6)
    assert float(contrastive_loss(q, p, target, mask=masked)) == pytest.approx(with_mask, rel=1e-6)
    assert with_mask < unmasked

    # A query's own positive stays a candidate even when it is also another passage's row.
    assert in_batch_keep_mask(torch.tensor([10, 10]), torch.tensor([1]), torch.tensor([[10]])).tolist() == [
        [False, True]]


def test_listwise_kl_loss_by_hand():
    student = torch.tensor([[0.0, math.log(2)], [1.0, 0.0]])
    teacher = torch.tensor([[math.log(3), 0.0], [0.0, 0.0]])
    # query 0: student [1/3, 2/3], teacher [3/4, 1/4]; query 1: student [e/(e+1), 1/(e+1)], teacher [1/2, 1/2]
    kl0 = 0.75 * math.log(0.75 / (1 / 3)) + 0.25 * math.log(0.25 / (2 / 3))
    kl1 = 0.5 * math.log(0.5 / (E / (E + 1))) + 0.5 * math.log(0.5 / (1 / (E + 1)))
    assert float(listwise_kl_loss(student, teacher)) == pytest.approx((kl0 + kl1) / 2, rel=1e-6)

    # Teacher temperature 2 halves the teacher's scores; a masked (padding) candidate takes no part.
    padded_student = torch.tensor([[0.0, math.log(2), 9.0]])
    padded_teacher = torch.tensor([[math.log(3), 0.0, -4.0]])
    mask = torch.tensor([[True, True, False]])
    t0 = math.sqrt(3) / (math.sqrt(3) + 1)
    expected = t0 * math.log(t0 / (1 / 3)) + (1 - t0) * math.log((1 - t0) / (2 / 3))
    assert float(listwise_kl_loss(padded_student, padded_teacher, mask, teacher_temperature=2.0)) == pytest.approx(
        expected, rel=1e-6)
    # Identical distributions: zero.
    assert float(listwise_kl_loss(teacher, teacher)) == pytest.approx(0.0, abs=1e-7)


def test_margin_mse_loss_by_hand():
    student = torch.tensor([[3.0, 1.0, 2.0], [0.0, 1.0, 1.0]])
    teacher = torch.tensor([[5.0, 1.0, 4.0], [0.0, 0.0, 0.0]])
    # margins (positive minus each negative): student [2, 1] / [-1, -1], teacher [4, 1] / [0, 0]
    # squared errors: [4, 0] and [1, 1]
    assert float(margin_mse_loss(student, teacher)) == pytest.approx((4 + 0 + 1 + 1) / 4)
    mask = torch.tensor([[True, True, False], [True, False, True]])  # keeps errors 4 and (second row) 1
    assert float(margin_mse_loss(student, teacher, mask)) == pytest.approx((4 + 1) / 2)
