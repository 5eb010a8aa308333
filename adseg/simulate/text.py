"""Advertiser names and descriptions of the simulated marketplace (the text view's input): the
vocabulary and :func:`_text`, which draws them. Cost: O(n · 18) words for n advertisers."""

from __future__ import annotations

import numpy as np
import pandas as pd

from adseg.simulate.config import MarketplaceConfig

# Text vocabulary. Verticals give the coarse topic, qualifiers the audience; a segment is one
# (vertical, qualifier) pair, so text alone tells verticals apart but mixes the segments inside one.
_VERTICALS: dict[str, list[str]] = {
    line.split(":")[0]: line.split(":")[1].split()
    for line in """
travel: travel flights hotels holidays resorts cruises tours trips airline vacation
auto: cars auto vehicles dealership tyres motors leasing garage suv parts
finance: bank loans insurance credit mortgage savings invest pension cards finance
fashion: fashion clothing shoes apparel dresses jeans accessories boutique wear bags
electronics: electronics laptops phones gadgets tv audio cameras computers tech gaming
food: food restaurant pizza grocery recipes delivery meals coffee snacks organic
health: health pharmacy clinic fitness wellness vitamins dental care medical gym
education: courses university school learning tutoring degree training online exam kids
realestate: homes apartments property rentals realty mortgage housing estate condos
entertainment: movies music streaming tickets concerts games shows events cinema tv
""".strip().splitlines()
}
_QUALIFIERS: dict[str, list[str]] = {
    "luxury": "luxury premium exclusive elite designer".split(),
    "budget": "cheap discount budget bargain affordable".split(),
    "local": "local neighbourhood city regional nearby".split(),
    "business": "enterprise business corporate b2b professional".split(),
    "family": "family kids parents children home".split(),
    "green": "eco sustainable green ethical natural".split(),
    "mobile": "app mobile smartphone digital instant".split(),
    "youth": "students young teens youth campus".split(),
}
_GENERIC = (
    "leading trusted online best quality solutions services official new brand customers "
    "worldwide award winning offers deals shop experience innovative great top store today "
    "free support your partner products since value choice easy fast"
).split()
_NAME_FIRST = (
    "North Bright Blue Silver Green Red Swift Oak Stone River Sun Star Iron Maple Cedar Nova "
    "Alpha Urban Prime Peak Müller Café Zürich São Ærø Łódź Crème Señor Björk Øre"
).split()
_NAME_SECOND = (
    "wind path field bridge line works hub point gate wave labs mark base craft view way side "
    "land port vale"
).split()
_LEGAL = ["Ltd", "GmbH", "Inc.", "S.A.", "& Co.", "LLC", "AB", "Oy", "B.V.", "plc"]


def _text(
    cfg: MarketplaceConfig, seg: pd.DataFrame, segment: np.ndarray, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Names and descriptions. Each description is 8–18 words drawn, with the probabilities of
    ``cfg.text_mix``, from the segment's vertical words, its qualifier words, generic words and the
    words of a per-advertiser misleading vertical, with commas and, for one advertiser in ten, a
    quoted slogan. Returns (names, descriptions, misleading vertical)."""
    n = segment.size
    verticals = list(_VERTICALS)
    first = np.asarray(_NAME_FIRST, dtype=object)[rng.integers(0, len(_NAME_FIRST), n)]
    second = np.asarray(_NAME_SECOND, dtype=object)[rng.integers(0, len(_NAME_SECOND), n)]
    legal = np.asarray(_LEGAL, dtype=object)[rng.integers(0, len(_LEGAL), n)]
    names = pd.Series(first) + pd.Series(second) + " " + pd.Series(legal)

    own_vi = seg["vertical_index"].to_numpy()[segment]
    own_qi = seg["qualifier_index"].to_numpy()[segment]
    mislead = (own_vi + rng.integers(1, len(verticals), n)) % len(verticals)

    max_len = 18
    length = rng.integers(8, max_len + 1, n)
    kind = rng.choice(4, size=(n, max_len), p=np.asarray(cfg.text_mix) / np.sum(cfg.text_mix))
    pick = rng.random((n, max_len))
    # Word tables padded to a rectangle so a (row, kind, pick) triple indexes one word.
    vocab_v = [_VERTICALS[v] for v in verticals]
    vocab_q = {q: _QUALIFIERS[q] for q in _QUALIFIERS}
    width = max(max(len(w) for w in vocab_v), max(len(w) for w in vocab_q.values()), len(_GENERIC))

    def table(lists: list[list[str]]) -> tuple[np.ndarray, np.ndarray]:
        arr = np.full((len(lists), width), "", dtype=object)
        sizes = np.array([len(x) for x in lists])
        for i, words in enumerate(lists):  # loop over ≤ 10 vocabularies
            arr[i, : len(words)] = words
        return arr, sizes

    vt, vsz = table(vocab_v)
    qnames = list(vocab_q)
    qt, qsz = table([vocab_q[q] for q in qnames])
    gt, gsz = table([_GENERIC])
    rows_v = np.where(kind == 3, mislead[:, None], own_vi[:, None])
    word_v = vt[rows_v, (pick * vsz[rows_v]).astype(int)]
    word_q = qt[own_qi[:, None], (pick * qsz[own_qi][:, None]).astype(int)]
    word_g = gt[0, (pick * gsz[0]).astype(int)]
    words = np.where(kind == 1, word_q, np.where(kind == 2, word_g, word_v))
    words = np.where(np.arange(max_len)[None, :] < length[:, None], words, "")

    # Punctuation: a comma after the 4th and the 8th word (when present), a full stop at the end.
    desc = pd.Series(names.to_numpy(), dtype=object) + ":"
    for j in range(max_len):  # loop over word positions (columns)
        col = pd.Series(words[:, j], dtype=object)
        sep = ", " if j in (4, 8) else " "
        present = col != ""
        desc = desc.where(~present, desc + (" " if j == 0 else sep) + col)
    slogan = rng.random(n) < 0.1
    slogan_word = gt[0, rng.integers(0, gsz[0], n)]
    desc = desc.where(~slogan, desc + ' — "' + pd.Series(slogan_word, dtype=object) + '" since 19')
    desc = desc.where(~slogan, desc + pd.Series(rng.integers(50, 100, n).astype(str)))
    desc = desc + "."
    return names.to_numpy(dtype=object), desc.to_numpy(dtype=object), mislead
