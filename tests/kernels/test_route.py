"""The path runner's router (kttune.kernels.decoder.route) against each scoring's definition."""

import torch

from kttune.kernels.decoder import route
from kttune.spec.model_spec import RouterSpec


def test_sqrt_softplus_scores_pick_by_logit_and_weigh_by_their_definition():
    """DeepSeek-V4's scores sqrt(log(1 + e^x)) rise with the logit, so without a bias the top-k are the
    largest logits; the weights are those scores, renormalised."""
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(5, 16, generator=g) * 3
    ids, w = route(logits, RouterSpec(scoring="sqrtsoftplus", bias=False, renormalize=True), 4)
    assert torch.equal(ids.sort(-1).values, logits.topk(4, dim=-1).indices.sort(-1).values)
    want = torch.log1p(torch.exp(logits.double())).sqrt().gather(1, ids)
    assert torch.allclose(w.double(), want / want.sum(-1, keepdim=True), atol=1e-6)


def test_a_correction_bias_moves_the_choice_not_the_weights():
    logits = torch.zeros(1, 8)
    bias = torch.tensor([0.0, 0, 0, 0, 0, 0, 5, 5])
    ids, w = route(logits, RouterSpec(scoring="sqrtsoftplus", bias=True, renormalize=True), 2, bias)
    assert sorted(ids[0].tolist()) == [6, 7] and torch.allclose(w, torch.full((1, 2), 0.5))
