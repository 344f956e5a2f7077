"""Training objectives for Λ.

- :func:`contrastive_loss`: DPR's loss, cross-entropy of each query over every passage in the (gathered) batch;
  :func:`in_batch_keep_mask` drops padding and, optionally, the teacher's other positives from the negatives.
- :func:`listwise_kl_loss`: KL between the teacher's score distribution over a query's labelled passages and Λ's.
- :func:`margin_mse_loss`: MSE between Λ's and the teacher's score margins (positive minus each hard negative).

Example::

    >>> import torch
    >>> from spar.model.losses import contrastive_loss
    >>> q = torch.eye(2); p = torch.eye(4)[:, :2]   # passages 0,1 match queries 0,1
    >>> round(float(contrastive_loss(q, p, torch.tensor([0, 1]))), 4)
    0.7437
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def contrastive_loss(q: torch.Tensor, p: torch.Tensor, positive_index: torch.Tensor | None = None,
                     temperature: float = 1.0, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Mean cross-entropy over ``q @ p.T / temperature``; by default query i's positive is passage i.

    ``mask`` ([n_q, n_p], True = keep) drops candidates from a query's softmax: padding, or in-batch passages the
    teacher also labels positive for that query (false negatives). A query's own positive must stay unmasked.
    """
    scores = (q @ p.T).float() / temperature
    if positive_index is None:
        positive_index = torch.arange(q.shape[0], device=q.device)
    if mask is not None:
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    return F.cross_entropy(scores, positive_index)


def in_batch_keep_mask(passage_rows: torch.Tensor, target: torch.Tensor, positive_rows: torch.Tensor | None = None
                       ) -> torch.Tensor:
    """The ``mask`` of :func:`contrastive_loss` for in-batch negatives ([n_q, n_p], True = keep).

    ``passage_rows`` [n_p]: each batch passage's corpus row (-1 = padding, dropped). ``positive_rows`` [n_q, n_pos]
    (-1 = padding), given when ``train.mask_teacher_positives`` is on: a passage the teacher also labels positive
    for a query is not a negative of that query (a false negative). Each query's own ``target`` is always kept.
    """
    keep = (passage_rows >= 0)[None, :].expand(target.shape[0], -1)
    if positive_rows is not None:
        labelled = (passage_rows[None, :, None] == positive_rows[:, None, :]) & (positive_rows[:, None, :] >= 0)
        keep = keep & ~labelled.any(-1)
    keep = keep.clone()
    keep[torch.arange(target.shape[0], device=target.device), target] = True
    return keep


def listwise_kl_loss(student_scores: torch.Tensor, teacher_scores: torch.Tensor, mask: torch.Tensor | None = None,
                     teacher_temperature: float = 1.0, temperature: float = 1.0) -> torch.Tensor:
    """KL(teacher || student) over each query's candidate list ([n_q, n_c] scores; ``mask`` False = padding)."""
    s = student_scores.float() / temperature
    t = teacher_scores.float() / teacher_temperature
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
        t = t.masked_fill(~mask, float("-inf"))
    log_p_student = F.log_softmax(s, dim=-1)
    p_teacher = F.softmax(t, dim=-1)
    terms = p_teacher * (torch.log(p_teacher.clamp_min(1e-12)) - log_p_student)
    if mask is not None:
        terms = terms.masked_fill(~mask, 0.0)
    return terms.sum(-1).mean()


def margin_mse_loss(student_scores: torch.Tensor, teacher_scores: torch.Tensor,
                    mask: torch.Tensor | None = None) -> torch.Tensor:
    """Margin-MSE (Hofstätter et al.): column 0 is the positive, columns 1.. hard negatives ([n_q, n_c] scores).

    Λ's margins ``s_pos - s_neg`` regress onto the teacher's ``t_pos - t_neg``; ``mask`` False = padding.
    """
    s = student_scores.float()
    t = teacher_scores.float()
    errors = ((s[:, :1] - s[:, 1:]) - (t[:, :1] - t[:, 1:])) ** 2
    if mask is not None:
        keep = mask[:, 1:] & mask[:, :1]
        return (errors * keep).sum() / keep.sum().clamp_min(1)
    return errors.mean()
